// Status: how library code reports failure. No exceptions cross a library
// boundary and nothing here exits; tools map codes to exit statuses.
#pragma once
#include <string>
#include <utility>

namespace sgrt {

enum class StatusCode { ok = 0, invalid_input, runtime_error, io_error, unsupported };

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Invalid(std::string msg) { return Status(StatusCode::invalid_input, std::move(msg)); }
  static Status Runtime(std::string msg) { return Status(StatusCode::runtime_error, std::move(msg)); }
  static Status Io(std::string msg) { return Status(StatusCode::io_error, std::move(msg)); }
  static Status Unsupported(std::string msg) { return Status(StatusCode::unsupported, std::move(msg)); }

  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return msg_; }
  // Prefixes the message with context ("file.sg: ...").
  Status with_context(const std::string& ctx) const {
    return ok() ? *this : Status(code_, ctx + ": " + msg_);
  }
  // Exit status for tools: 2 for bad input, 1 for failures at run time.
  int exit_code() const {
    switch (code_) {
      case StatusCode::ok: return 0;
      case StatusCode::invalid_input: case StatusCode::unsupported: case StatusCode::io_error: return 2;
      case StatusCode::runtime_error: return 1;
    }
    return 1;
  }

 private:
  Status(StatusCode c, std::string m) : code_(c), msg_(std::move(m)) {}
  StatusCode code_ = StatusCode::ok;
  std::string msg_;
};

#define SG_TRY(expr)                          \
  do {                                        \
    ::sgrt::Status sg_try_status_ = (expr);   \
    if (!sg_try_status_.ok()) return sg_try_status_; \
  } while (0)

}  // namespace sgrt
