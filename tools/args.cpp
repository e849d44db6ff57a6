#include "args.h"

#include <cstdlib>

namespace sgrt::tool {

Status Args::get_int(const std::string& f, int64_t def, int64_t* out) const {
  auto it = flags.find(f);
  if (it == flags.end()) { *out = def; return Status::Ok(); }
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end || v < 0) return Status::Invalid(f + " expects a non-negative integer, got '" + it->second + "'");
  *out = v;
  return Status::Ok();
}

Status parse_args(int argc, char** argv, int first, const std::set<std::string>& valued,
                  const std::set<std::string>& bare, Args* out) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-o") a = "--output";
    if (a.rfind("--", 0) != 0 || a == "--") {
      out->positional.push_back(a);
      continue;
    }
    std::string name = a, value;
    bool inline_value = false;
    if (size_t eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    if (bare.count(name)) {
      if (inline_value) return Status::Invalid(name + " takes no value");
      out->flags[name] = "1";
    } else if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) return Status::Invalid(name + " needs a value");
        value = argv[++i];
      }
      if (name == "--set") {
        size_t eq = value.find('=');
        if (eq == std::string::npos || eq == 0) return Status::Invalid("--set expects key=value, got '" + value + "'");
        out->sets.push_back({value.substr(0, eq), value.substr(eq + 1)});
      }
      out->flags[name] = value;
    } else {
      return Status::Invalid("unknown flag " + name + " (see sgrt --help)");
    }
  }
  return Status::Ok();
}

}  // namespace sgrt::tool
