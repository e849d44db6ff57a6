#include "help.h"

#include <algorithm>

#include "sgrt/backend.h"
#include "sgrt/checkpoint.h"
#include "sgrt/model_file.h"

namespace sgrt::tool {
namespace {

// How a .lua script is compiled (every command that takes one).
const std::vector<FlagHelp> kCompileFlags = {
    {"--recipe", "R", "precision recipe: fp32 bf16 fp8 fp8-delayed mxfp8 fp8-row fp8-block fp8-static fp4 nvfp4 nvfp4-train (docs/recipes.md)"},
    {"--no-plan", nullptr, "no compile-time scale plan: every quantization uses its current amax"},
    {"--opt-level", "L", "optimizer state precision: fp32, O1, O2 or O3 (docs/optimizer.md)"},
    {"--set", "k=v", "override key k of the script's sg.config{...} (repeatable)"},
    {"--unsafe-lua", nullptr, "run the script without the sandbox (only for scripts you trust; docs/dsl.md)"},
};

const FlagHelp kCheckpointModel = {"--checkpoint", "DIR",
                                   "checkpoint folder from sgrt train; its model.sg is used when MODEL is omitted, and "
                                   "the compile flags it was trained with apply unless given (a different value is an error)"};
const FlagHelp kBackend = {"--backend", "B", "cpu (default), vulkan or cuda, where built in"};
const FlagHelp kThreads = {"--threads", "N",
                           "CPU threads (default: the cores this process may use, by its affinity mask and cgroup "
                           "CPU quota; or the environment's SGRT_NUM_THREADS)"};
const FlagHelp kData = {"--data", "PATH", "data set location (a Fashion-MNIST or image folder, a text, CSV or .npy file) instead of the model's"};
const FlagHelp kMaxMemory = {"--max-memory", "BYTES", "refuse a model whose arena needs more (suffix K, M or G)"};
const FlagHelp kOutput = {"--output", "FILE", "output file (also -o FILE)"};
// export and export-weights of a GGUF's model instead of a checkpoint's.
const FlagHelp kGgufModel = {"--init-weights", "FILE.gguf",
                             "without --checkpoint: MODEL.lua's weights and config from a llama GGUF (also the default "
                             "tokenizer or GGUF base)"};
const FlagHelp kGgufAdapter = {"--adapter", "A.safetensors|DIR",
                               "with --init-weights: LoRA adapters on it, from export-weights --trained (rank from the file) or "
                               "a PEFT folder (rank, alpha, targets from its config; docs/lora.md)"};

std::vector<FlagHelp> with_compile_flags(std::vector<FlagHelp> flags) {
  flags.insert(flags.end(), kCompileFlags.begin(), kCompileFlags.end());
  return flags;
}

}  // namespace

const std::vector<CommandHelp>& commands() {
  static const std::vector<CommandHelp> all = {
      {"compile", "MODEL.lua", "compile a model script to a .sg file (default: next to the script)",
       with_compile_flags({kOutput})},
      {"info", "MODEL.sg|MODEL.lua|FILE.gguf|DIR",
       "tensors, dtypes, scales, memory plan and programs of a model; a GGUF file's metadata and tensors; a checkpoint "
       "folder's step, seed, data position, the file its run started from and its model",
       with_compile_flags({
           {"--json", nullptr, "print JSON instead of tables"},
           {"--dot", "FILE.dot", "write the training step as a Graphviz graph"},
           {"--backend", "B", "list the model's ops that backend B has no kernel for, before anything runs"},
           {"--ranks", "N", "bytes each of N data-parallel ranks holds (weights, gradients, optimizer state, arena), "
                            "without ZeRO and per rank under ZeRO-1 (sgrt train --zero 1)"},
       })},
      {"train", "MODEL.lua|MODEL.sg", "train a model; the MODEL may be omitted with --checkpoint DIR --resume",
       with_compile_flags({
           kBackend,
           {"--steps", "N", "the run's total steps (default: the model's epochs); the lr schedule spans them"},
           kData,
           {"--checkpoint", "DIR", "save checkpoints and the compiled model here (locked while the run lasts)"},
           {"--checkpoint-every", "K", "also save a checkpoint every K steps"},
           {"--resume", nullptr, "continue the run saved in --checkpoint DIR (repeat the original flags or omit them; "
                                 "on another number of ranks, a script with the --set batch that keeps ranks x batch)"},
           {"--overwrite", nullptr, "start afresh even though --checkpoint DIR holds a checkpoint"},
           {"--stop-after", "K", "end after step K as if interrupted (a checkpoint is written)"},
           {"--log", "FILE.jsonl", "JSON lines: logged steps, eval and done events (locked while the run lasts)"},
           {"--log-every", "N", "log and report every N steps (default: the model's, else 50)"},
           {"--eval-every", "N", "evaluate on held-out data every N steps (also after every epoch)"},
           {"--val-split", "F", "hold out fraction F of the training data for evaluation during training"},
           {"--seed", "S", "initialization and shuffling seed (default 1)"},
           {"--init-weights", "W.safetensors|W.gguf", "start from these parameters (matched by name; a GGUF's metadata also sets the model's config); with --resume, only the GGUF whose tokenizer reads an instruct data set"},
           {"--adapter", "A.safetensors|DIR", "with --init-weights: start from a LoRA run's adapters (export-weights --trained; "
                                              "rank from the file) or a PEFT folder (rank, alpha, targets from its config) with a "
                                              "fresh optimizer and schedule; ignored with --resume (docs/lora.md)"},
           kMaxMemory,
           kThreads,
           {"--quiet", nullptr, "no header, progress or eval lines on stderr"},
           {"--profile", nullptr, "time every op and print, at the end, where each program's time went (docs/profiling.md)"},
           {"--grad-comm", "M", "under mpirun -np N: how gradients travel between ranks: fp32 (default), bf16, or fp8 "
                                "(one shared scale per tensor; E4M3 where the recipe's gradients are E4M3, as fp8-row and "
                                "fp8-block, else E5M2; docs/distributed.md)"},
           {"--zero", "1", "under mpirun -np N: ZeRO stage 1, each rank keeps and updates the optimizer moments of 1/N of the "
                          "parameters and the updated weights are all-gathered (default 0: every rank keeps all)"},
           {"--comm-timeout", "SECONDS", "under mpirun: give up when the other ranks are silent this long (default 300)"},
           {"--final-recipe", "R", "train the last --final-steps steps under recipe R instead (MODEL.lua compiled again; "
                                   "weights, optimizer state and data order carry over; docs/recipes.md, \"Ending in higher precision\")"},
           {"--final-steps", "N", "how many of the run's last steps --final-recipe trains"},
       })},
      {"eval", "[MODEL.sg|MODEL.lua]", "test loss and metrics of a trained model (an exported DEPLOY.sg needs no --checkpoint)",
       with_compile_flags({kCheckpointModel, kData,
                           {"--init-weights", "FILE.gguf", "with --checkpoint (or an exported file): the GGUF whose tokenizer "
                                                           "reads an instruct data set (default: the one the checkpoint's run "
                                                           "started from); without, MODEL.lua's weights, config and tokenizer"},
                           kGgufAdapter, kBackend, kMaxMemory, kThreads})},
      {"predict", "[MODEL.sg|MODEL.lua]",
       "a trained classifier's class and its probability for each example of a file (one line each)",
       with_compile_flags({
           kCheckpointModel,
           {"--input", "FILE", "the examples: a .csv/.tsv or .npy file, a PNG or JPEG image, or a folder of images"},
           {"--json", nullptr, "JSON lines {example, class, name, probability} instead of tab-separated text"},
           kBackend,
           kThreads,
       })},
      {"export", "[MODEL.sg|MODEL.lua]", "a deployable .sg with the checkpoint's weights folded in",
       with_compile_flags({
           kCheckpointModel,
           kOutput,
           {"--infer-only", nullptr, "keep only the programs that do not train (eval, infer, prefill, ...)"},
           {"--quantize", "Q", "store weights as fp8, fp8-channel, fp4 or nvfp4 (with --infer-only)"},
           {"--merge", nullptr, "fold the LoRA adapters into their base weights (implies --infer-only; docs/lora.md)"},
           {"--tokenizer", "FILE.gguf", "store the GGUF's tokenizer in the file, so sgrt run FILE.sg takes text (default: the "
                                        "GGUF the checkpoint's run started from, if any); with MODEL.lua, --set batch=1 --set "
                                        "block=N --set kv_cache=true --set prefill_chunk=64 make a model for generation (batch, "
                                        "block and kv_cache may differ from the checkpoint's)"},
           {"--no-tokenizer", nullptr, "store no tokenizer, not even that of the GGUF the run started from"},
           kGgufModel,
           kGgufAdapter,
       })},
      {"run", "[MODEL.sg|MODEL.lua]",
       "sample text from a trained language model (--checkpoint DIR), from a pretrained GGUF model "
       "(MODEL.lua --init-weights FILE.gguf; docs/llama.md), or from an export that carries its tokenizer (docs/lora.md)",
       with_compile_flags({
           kCheckpointModel,
           {"--init-weights", "FILE.gguf", "a pretrained llama-architecture GGUF: its weights, config and tokenizer"},
           {"--tokenizer", "FILE.gguf", "with MODEL.lua --checkpoint DIR: the GGUF whose tokenizer reads the prompt (default: "
                                        "the one the run started from, if any; the model is compiled for generation)"},
           {"--prompt", "TEXT", "the text to continue (default: a newline)"},
           {"--chat", nullptr, "with a tokenizer: wrap the prompt in the model's chat template as a user turn"},
           {"--system", "TEXT", "with --chat: a system message before the prompt"},
           {"--adapter", "A.safetensors|DIR", "with a GGUF: LoRA adapters from export-weights --trained (rank from the file; "
                                              "--set lora_alpha, lora_targets as trained) or a PEFT folder (all three from its "
                                              "config)"},
           {"--tokens", "N", "tokens to generate (default 200; bytes for a byte-level model)"},
           {"--temperature", "T", "softmax temperature (default 1; 0 with a tokenizer: greedy)"},
           {"--top-k", "K", "sample among the K most likely tokens (default: all)"},
           {"--top-p", "P", "with a tokenizer: sample within the smallest set of probability P (default 1)"},
           {"--seed", "S", "sampling seed (default 1)"},
           kBackend,
           kThreads,
       })},
      {"export-weights", "[MODEL.sg|MODEL.lua]",
       "the parameters (from a checkpoint, or as initialized) to safetensors, or with -o FILE.gguf a llama GGUF",
       with_compile_flags({
           {"--checkpoint", "DIR", kCheckpointModel.text},
           kOutput,
           {"--dtype", "D", "f32 (default), f16 or bf16; a GGUF's matrices also q8_0"},
           {"--gguf-base", "FILE.gguf", "with -o FILE.gguf: the GGUF the model came from, whose metadata (tokenizer, chat template) "
                                        "and tensor list the output keeps (default: the GGUF the checkpoint's run started from; "
                                        "docs/gguf.md)"},
           {"--merge", nullptr, "with -o FILE.gguf: fold the LoRA adapters into their base weights"},
           {"--seed", "S", "initialization seed when no checkpoint is given (default 1)"},
           {"--trained", nullptr, "only the trained parameters (a LoRA run's adapters, for run --adapter)"},
           {"--peft", nullptr, "only the LoRA adapters, as a PEFT adapter folder -o DIR (docs/lora.md)"},
           {"--base-model", "NAME", "with --peft: adapter_config.json's base_model_name_or_path"},
           kGgufModel,
           kGgufAdapter,
       })},
      {"ops", "", "the op table (core/include/sgrt/ops.def) as Markdown: kinds, gradients, scale rules, backends (docs/ops.md)",
       {}},
  };
  return all;
}

const CommandHelp* find_command(const std::string& name) {
  for (const CommandHelp& c : commands())
    if (name == c.name) return &c;
  return nullptr;
}

std::set<std::string> valued_flags(const CommandHelp& cmd) {
  std::set<std::string> r;
  for (const FlagHelp& f : cmd.flags)
    if (f.value) r.insert(f.name);
  return r;
}

std::set<std::string> bare_flags(const CommandHelp& cmd) {
  std::set<std::string> r = {"--help"};
  for (const FlagHelp& f : cmd.flags)
    if (!f.value) r.insert(f.name);
  return r;
}

namespace {

std::string synopsis(const CommandHelp& c) {
  std::string s = std::string("sgrt ") + c.name + " " + c.operands;
  for (const FlagHelp& f : c.flags) s += std::string(" [") + f.name + (f.value ? std::string(" ") + f.value : "") + "]";
  return s;
}

}  // namespace

std::string command_help(const CommandHelp& c) {
  std::string s = "usage: " + synopsis(c) + "\n" + c.summary + "\n\n";
  for (const FlagHelp& f : c.flags) {
    std::string left = std::string("  ") + f.name + (f.value ? std::string(" ") + f.value : "");
    left.resize(std::max<size_t>(left.size() + 2, 30), ' ');
    s += left + f.text + "\n";
  }
  s += "  --help                      this text\n";
  return s;
}

std::string usage() {
  std::string s = "usage: sgrt COMMAND ... (sgrt COMMAND --help explains each flag; sgrt --version)\n";
  for (const CommandHelp& c : commands()) s += "  " + synopsis(c).substr(5) + "\n";
  s += "Exit status: 0 ok, 1 failure at run time, 2 bad input, 130/143 interrupted (SIGINT/SIGTERM).\n";
  return s;
}

std::string version() {
  return std::string("sgrt ") + SGRT_VERSION + " (model schema v" + std::to_string(kSchemaVersion) +
         ", checkpoint format v" + std::to_string(kCheckpointFormat) + ", backends: " + built_in_backends() + ")\n";
}

}  // namespace sgrt::tool
