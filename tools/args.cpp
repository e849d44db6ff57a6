#include "args.h"

#include <cstdio>
#include <cstdlib>

#include "cpu/core_affinity.h"
#include "cpu/parallel.h"
#include "help.h"

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

Status Args::get_double(const std::string& f, double def, double lo, double hi, double* out) const {
  auto it = flags.find(f);
  if (it == flags.end()) { *out = def; return Status::Ok(); }
  char* end = nullptr;
  *out = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end || !(*out >= lo && *out <= hi))
    return Status::Invalid(f + " expects a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
                           it->second + "'");
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

Status parse_command(int argc, char** argv, Args* out) {
  const CommandHelp* c = find_command(argv[1]);
  if (!c) return Status::Invalid(std::string("unknown command '") + argv[1] + "'");
  return parse_args(argc, argv, 2, valued_flags(*c), bare_flags(*c), out);
}

Status apply_threads(const Args& a) {
  if (!a.has("--threads")) return Status::Ok();
  int64_t n;
  SG_TRY(a.get_int("--threads", 0, &n));
  if (n < 1 || n > 4096) return Status::Invalid("--threads expects a count from 1 to 4096, got '" + a.get("--threads") + "'");
  cpu::set_num_threads(static_cast<int>(n));
  if (const int cores = cpu::usable_cores(); n > cores)
    std::fprintf(stderr,
                 "sgrt: warning: --threads %lld is more than the %d core%s this process may use (its affinity mask "
                 "and CPU quota): the threads will take turns and wait on each other\n",
                 static_cast<long long>(n), cores, cores == 1 ? "" : "s");
  return Status::Ok();
}

}  // namespace sgrt::tool
