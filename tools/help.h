// Every command's flags, with what each does: the one table `sgrt COMMAND
// --help` prints and each command's parser accepts, so the two cannot drift.
#pragma once
#include <set>
#include <string>
#include <vector>

namespace sgrt::tool {

struct FlagHelp {
  const char* name;   // "--steps"
  const char* value;  // "N"; nullptr for a switch
  const char* text;
};

struct CommandHelp {
  const char* name;
  const char* operands;  // "MODEL.lua|MODEL.sg"
  const char* summary;
  std::vector<FlagHelp> flags;
};

const std::vector<CommandHelp>& commands();
const CommandHelp* find_command(const std::string& name);
// The flags `cmd` accepts that take a value, and its switches.
std::set<std::string> valued_flags(const CommandHelp& cmd);
std::set<std::string> bare_flags(const CommandHelp& cmd);
// `sgrt COMMAND --help`: the synopsis, then one line per flag.
std::string command_help(const CommandHelp& cmd);
// `sgrt --help`: one synopsis per command.
std::string usage();
std::string version();

}  // namespace sgrt::tool
