// Command-line parsing for the sgrt tool: positionals and --flags, each flag
// declared with whether it takes a value; anything else is an error.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sgrt/status.h"

namespace sgrt::tool {

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;     // last value wins
  std::vector<std::pair<std::string, std::string>> sets;  // every --set k=v

  bool has(const std::string& f) const { return flags.count(f) > 0; }
  std::string get(const std::string& f, const std::string& def = "") const {
    auto it = flags.find(f);
    return it == flags.end() ? def : it->second;
  }
  Status get_int(const std::string& f, int64_t def, int64_t* out) const;
  // A finite number in [lo, hi] (def when the flag is absent).
  Status get_double(const std::string& f, double def, double lo, double hi, double* out) const;
};

// valued: flags that take a value ("--steps 10" or "--steps=10"); bare: switches.
Status parse_args(int argc, char** argv, int first, const std::set<std::string>& valued,
                  const std::set<std::string>& bare, Args* out);
// The flags of `sgrt argv[1]` as its help (help.h) lists them.
Status parse_command(int argc, char** argv, Args* out);
// --threads N: the CPU kernels' thread count for this process.
Status apply_threads(const Args& a);

}  // namespace sgrt::tool
