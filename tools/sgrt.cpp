// sgrt: compile, inspect, train and evaluate scaled-graph models.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"

namespace {

const char kUsage[] =
    "usage: sgrt COMMAND ...\n"
    "  compile MODEL.lua [-o MODEL.sg] [--recipe R] [--no-plan] [--opt-level L] [--set k=v]...\n"
    "  info    MODEL.sg|MODEL.lua|FILE.gguf [--json] [--dot FILE.dot] [--recipe R] [--no-plan] [--opt-level L] [--backend B]\n"
    "  train   MODEL.lua|MODEL.sg [--backend cpu|vulkan|cuda] [--steps N] [--data PATH] [--checkpoint DIR]\n"
    "          [--log FILE.jsonl] [--seed S] [--log-every N] [--recipe R] [--no-plan] [--set k=v]... [--quiet]\n"
    "          [--opt-level fp32|O1|O2|O3] [--checkpoint-every K] [--stop-after K] [--resume]\n"
    "          [--init-weights W.safetensors|W.gguf] [--max-memory BYTES[K|M|G]]\n"
    "  eval    MODEL.sg|MODEL.lua --checkpoint DIR [--data PATH] [--backend B] [--max-memory BYTES]\n"
    "          (an exported DEPLOY.sg needs no --checkpoint)\n"
    "  export  MODEL.sg --checkpoint DIR -o DEPLOY.sg [--infer-only] [--quantize fp8|fp8-channel|fp4|nvfp4]\n"
    "  run     MODEL.sg|MODEL.lua --checkpoint DIR [--prompt TEXT] [--tokens N] [--temperature T]\n"
    "          [--top-k K] [--seed S] [--backend B]\n"
    "  run     MODEL.lua --init-weights FILE.gguf --prompt TEXT [--chat] [--tokens N] [--temperature T]\n"
    "          [--top-k K] [--top-p P] [--seed S] [--set k=v]...   (a pretrained llama, docs/llama.md)\n"
    "  export-weights MODEL.sg|MODEL.lua [--checkpoint DIR] -o W.safetensors [--dtype f32|f16|bf16]\n"
    "recipes: fp32 bf16 fp8 fp8-delayed mxfp8 fp4 nvfp4 (docs/recipes.md)\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace sgrt::tool;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  sgrt::Status st;
  if (cmd == "compile") st = cmd_compile(argc, argv);
  else if (cmd == "info") st = cmd_info(argc, argv);
  else if (cmd == "train") st = cmd_train(argc, argv);
  else if (cmd == "eval") st = cmd_eval(argc, argv);
  else if (cmd == "export") st = cmd_export(argc, argv);
  else if (cmd == "run") st = cmd_run(argc, argv);
  else if (cmd == "export-weights") st = cmd_export_weights(argc, argv);
  else st = sgrt::Status::Invalid("unknown command '" + cmd + "' (compile, info, train, eval, export, run, export-weights; see sgrt --help)");
  if (!st.ok()) {
    std::fprintf(stderr, "sgrt %s: error: %s\n", cmd.c_str(), st.message().c_str());
    return st.exit_code();
  }
  return 0;
}
