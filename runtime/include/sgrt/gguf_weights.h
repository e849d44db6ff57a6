// Parameters from a GGUF llama file (docs/llama.md), by name: the model's
// parameters are named as the file's tensors (token_embd.weight,
// blk.N.attn_q.weight, ...), and a tensor of ggml shape ne = [n0, n1] binds to
// the sgrt shape [n1, n0] (ne[0] varies fastest: ggml's dimension order
// reversed is the row-major shape). Every tensor is dequantized to f32.
#pragma once
#include <map>
#include <string>

#include "sgrt/gguf.h"
#include "sgrt/session.h"

namespace sgrt {

// The architecture import_gguf() takes.
inline constexpr const char* kGgufArchitecture = "llama";

// Fails with "PATH: architecture 'X' is not supported (llama)" for another one.
Status check_gguf_architecture(const GgufFile& f);

// Every parameter of the session's model from the file. Names, shapes and
// tensor types are all checked before any parameter is written: a missing,
// extra or misshapen tensor leaves the session unchanged.
Status import_gguf(Session& s, const std::string& path);

// --init-weights: a .gguf file through import_gguf, anything else through
// import_safetensors (sgrt/safetensors.h).
Status import_weights(Session& s, const std::string& path);

// The tensors (by id) that import_weights(s, path) writes into a session of
// m, or fails: each weight the file names, or its master (sgrt/params.h).
// Reads the file's header only. Session::init's `supplied` when the file is
// imported next.
Status weights_file_tensors(const Model& m, const std::string& path, std::vector<bool>* out);

// A weights file's identity, for finding the same file again (a checkpoint
// records the --init-weights file's, sgrt/checkpoint.h): FNV-1a of its header,
// a GGUF's metadata and tensor table or a safetensors file's JSON header, so
// another model, tokenizer or tensor type changes it and a copy keeps it.
Status weights_file_identity(const std::string& path, uint64_t* id);

// The model configuration the file's metadata gives, as DSL config values for
// models/llama.lua: n_layer, n_embd, n_head, n_kv_head, ffn, rope_base, eps,
// vocab, context, tie (1 when the file has no output.weight: the head is the
// embedding).
Status llama_config(const GgufFile& f, std::map<std::string, std::string>* out);

}  // namespace sgrt
