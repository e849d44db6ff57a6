// The sgrt subcommands; each returns a Status the entry point turns into one
// line on stderr and an exit code (2 bad input, 1 runtime failure).
#pragma once
#include <memory>

#include "args.h"
#include "sgrt/model.h"

namespace sgrt::tool {

Status cmd_compile(int argc, char** argv);
Status cmd_info(int argc, char** argv);
Status print_gguf_info(const std::string& path);  // cmd_info_gguf.cpp: `sgrt info FILE.gguf`
Status print_checkpoint_info(const std::string& dir);  // cmd_info_checkpoint.cpp: `sgrt info DIR`
Status cmd_train(int argc, char** argv);
Status cmd_eval(int argc, char** argv);
Status cmd_export(int argc, char** argv);  // cmd_export.cpp: deployable graph, weights folded in
Status cmd_run(int argc, char** argv);  // cmd_run.cpp: sample text from a language model
Status cmd_generate(int argc, char** argv);  // cmd_generate.cpp: `run --init-weights FILE.gguf`, a pretrained llama
// cmd_generate.cpp: `run FILE.sg` of a model that carries its tokenizer (sgrt export --tokenizer)
Status run_tokenized(const Args& a, std::shared_ptr<const Model> m);
// cmd_generate.cpp: `run MODEL.lua --checkpoint DIR` of a run that started from a GGUF (run_gguf.h), with its tokenizer
Status run_checkpoint_tokenized(Args a, const std::string& gguf);
Status cmd_export_weights(int argc, char** argv);  // cmd_weights.cpp: parameters to safetensors
Status cmd_ops(int argc, char** argv);  // cmd_ops.cpp: the op table as Markdown (docs/ops.md)
Status cmd_predict(int argc, char** argv);  // cmd_predict.cpp: a classifier's classes for a file's examples

}  // namespace sgrt::tool
