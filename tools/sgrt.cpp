// sgrt: compile, inspect, train and evaluate scaled-graph models.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "help.h"
#include "stop_signal.h"

int main(int argc, char** argv) {
  using namespace sgrt::tool;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage().c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::fputs(version().c_str(), stdout);
    return 0;
  }
  std::string cmd = argv[1];
  if (const CommandHelp* c = find_command(cmd))
    for (int i = 2; i < argc; ++i)
      if (!std::strcmp(argv[i], "--help")) {
        std::fputs(command_help(*c).c_str(), stdout);
        return 0;
      }
  sgrt::Status st;
  if (cmd == "compile") st = cmd_compile(argc, argv);
  else if (cmd == "info") st = cmd_info(argc, argv);
  else if (cmd == "train") st = cmd_train(argc, argv);
  else if (cmd == "eval") st = cmd_eval(argc, argv);
  else if (cmd == "export") st = cmd_export(argc, argv);
  else if (cmd == "run") st = cmd_run(argc, argv);
  else if (cmd == "export-weights") st = cmd_export_weights(argc, argv);
  else if (cmd == "ops") st = cmd_ops(argc, argv);
  else if (cmd == "predict") st = cmd_predict(argc, argv);
  else st = sgrt::Status::Invalid("unknown command '" + cmd + "' (compile, info, train, eval, predict, export, run, export-weights, ops; see sgrt --help)");
  if (!st.ok()) {
    std::fprintf(stderr, "sgrt %s: error: %s\n", cmd.c_str(), st.message().c_str());
    return st.exit_code();
  }
  return stop_exit_code();
}
