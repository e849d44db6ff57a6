// LoRA adapters out as a PEFT adapter folder (sgrt/peft.h), from
// models/llama.lua shaped small: PEFT's key names for LlamaForCausalLM, A as
// is, B of q and k back in Hugging Face's row order (checked by applying
// llama.cpp's convert permute, written from its numpy definition, to the
// exported B: it must give sgrt's B back), the other B as is, and
// adapter_config.json's r, lora_alpha, dropout and target modules; the same
// under --recipe fp8, whose adapter matmuls are qmatmuls on quantized operands.
// And a folder written here in PEFT's layout back in (import_peft_adapter): A
// as is, q and k's B through the same permute into GGUF's order, the others as
// is, under fp32 and O2 (f16 masters); every config or file PEFT can write that
// nn.lora is not, or that misses, adds or misshapes a tensor, refused whole.
#include <filesystem>
#include <fstream>
#include <tuple>

#include "harness.h"
#include "sgrt/params.h"
#include "sgrt/peft.h"
#include "sgrt/safetensors.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

std::shared_ptr<const Model> tiny_lora(const std::string& targets, const std::string& recipe = "",
                                       const std::string& opt_level = "") {
  return test::compile_model_file(
      "models/llama.lua", {{"n_layer", "2"}, {"n_embd", "16"}, {"n_head", "2"}, {"n_kv_head", "1"}, {"ffn", "24"},
                           {"vocab", "40"}, {"block", "8"}, {"context", "8"}, {"lora_rank", "4"}, {"lora_alpha", "6"},
                           {"lora_dropout", "0.25"}, {"lora_targets", targets}}, false, recipe, opt_level);
}

// convert_hf_to_gguf.py's permute(w, n_head): w.reshape(n_head, 2, rows // n_head // 2, cols)
// .swapaxes(1, 2).reshape(rows, cols): HF row (h, e, i) goes to (h, i, e).
std::vector<float> hf_to_gguf(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t n_head) {
  const int64_t half = rows / n_head / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t e = 0; e < 2; ++e)
      for (int64_t i = 0; i < half; ++i)
        for (int64_t c = 0; c < cols; ++c)
          out[((h * half + i) * 2 + e) * cols + c] = w[((h * 2 + e) * half + i) * cols + c];
  return out;
}

}  // namespace

TEST_CASE("llama GGUF module names map to transformers' LlamaForCausalLM names") {
  CHECK(peft_module_name("blk.0.attn_q") == "model.layers.0.self_attn.q_proj");
  CHECK(peft_module_name("blk.12.attn_k") == "model.layers.12.self_attn.k_proj");
  CHECK(peft_module_name("blk.3.attn_v") == "model.layers.3.self_attn.v_proj");
  CHECK(peft_module_name("blk.3.attn_output") == "model.layers.3.self_attn.o_proj");
  CHECK(peft_module_name("blk.3.ffn_gate") == "model.layers.3.mlp.gate_proj");
  CHECK(peft_module_name("blk.3.ffn_up") == "model.layers.3.mlp.up_proj");
  CHECK(peft_module_name("blk.29.ffn_down") == "model.layers.29.mlp.down_proj");
  CHECK(peft_module_name("mlp.fc1") == "mlp.fc1");
  CHECK(peft_module_name("blk.x.attn_q") == "blk.x.attn_q");
  CHECK(peft_module_name("blk.1.attn_norm") == "blk.1.attn_norm");
}

namespace {

void check_peft_export(const std::string& recipe) {
  auto m = tiny_lora("q,k,v,down", recipe);
  auto s = test::open_session(m);
  std::map<std::string, std::vector<float>> sg;  // sgrt's adapters, given distinct values
  float next = 0.5f;
  for (const TensorInfo& t : m->tensors()) {
    if (t.role != Role::param || t.name.find(".lora_") == std::string::npos) continue;
    std::vector<float> v(static_cast<size_t>(numel(t.type.shape)));
    for (float& x : v) x = next += 0.25f;
    test::write_vec(*s, t.name, v);
    sg[t.name] = v;
  }
  test::TempDir dir;
  const std::string out = dir.path + "/adapter";
  Status st = export_peft_adapter(*s, out, "HuggingFaceTB/SmolLM2-135M-Instruct");
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<SafeTensor> file;
  st = read_safetensors(out + "/adapter_model.safetensors", &file);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::map<std::string, const SafeTensor*> by_name;
  for (const SafeTensor& t : file) by_name[t.name] = &t;
  CHECK(file.size() == sg.size());
  const std::pair<const char*, const char*> modules[] = {{"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
                                                         {"attn_v", "self_attn.v_proj"}, {"ffn_down", "mlp.down_proj"}};
  for (int layer = 0; layer < 2; ++layer)
    for (auto& [gguf, hf] : modules) {
      const std::string ours = "blk." + std::to_string(layer) + "." + gguf, key = "base_model.model.model.layers." +
                                                                                   std::to_string(layer) + "." + hf;
      CAPTURE(key);
      REQUIRE(by_name.count(key + ".lora_A.weight"));
      REQUIRE(by_name.count(key + ".lora_B.weight"));
      const SafeTensor& a = *by_name[key + ".lora_A.weight"];
      const SafeTensor& b = *by_name[key + ".lora_B.weight"];
      CHECK(a.values == sg[ours + ".lora_A"]);
      CHECK(a.shape == m->tensors()[m->find_tensor(ours + ".lora_A")].type.shape);
      CHECK(b.shape == m->tensors()[m->find_tensor(ours + ".lora_B")].type.shape);
      const int64_t heads = std::string(gguf) == "attn_q" ? 2 : std::string(gguf) == "attn_k" ? 1 : 0;
      if (heads) {
        CHECK(b.values != sg[ours + ".lora_B"]);  // a real permutation at these sizes
        CHECK(hf_to_gguf(b.values, b.shape[0], b.shape[1], heads) == sg[ours + ".lora_B"]);
      } else {
        CHECK(b.values == sg[ours + ".lora_B"]);
      }
    }
  const std::string config = test::slurp(out + "/adapter_config.json");
  INFO(config);
  CHECK(config.find("\"peft_type\": \"LORA\"") != std::string::npos);
  CHECK(config.find("\"r\": 4,") != std::string::npos);
  CHECK(config.find("\"lora_alpha\": 6,") != std::string::npos);
  CHECK(config.find("\"lora_dropout\": 0.25,") != std::string::npos);
  CHECK(config.find("\"target_modules\": [\"down_proj\", \"k_proj\", \"q_proj\", \"v_proj\"]") != std::string::npos);
  CHECK(config.find("\"base_model_name_or_path\": \"HuggingFaceTB/SmolLM2-135M-Instruct\"") != std::string::npos);
}

}  // namespace

TEST_CASE("export_peft_adapter: PEFT names, q/k rows in Hugging Face order, the config") {
  for (const char* recipe : {"fp32", "fp8"}) {
    CAPTURE(recipe);
    check_peft_export(recipe);
  }
}

TEST_CASE("a model without adapters has nothing to export") {
  std::shared_ptr<const Model> m;
  REQUIRE(test::compile_lua("local sg = require 'sg'\nlocal w = sg.param('w', {2}, 'ones')\n"
                            "sg.loss(sg.sum(w * w))\nsg.optimizer.sgd{ lr = 0.1 }\n", &m).ok());
  auto s = test::open_session(m);
  test::TempDir dir;
  Status st = export_peft_adapter(*s, dir.path + "/a", "");
  CHECK(st.message().find("has no LoRA adapters") != std::string::npos);
}

TEST_CASE("sgrt export-weights --peft writes the folder") {
  test::TempDir dir;
  test::ToolResult r = test::run_tool({"export-weights", "models/llama.lua", "--set", "n_layer=1", "--set", "n_embd=8",
                                       "--set", "n_head=2", "--set", "n_kv_head=1", "--set", "ffn=8", "--set", "vocab=16",
                                       "--set", "block=4", "--set", "context=4", "--set", "lora_rank=2", "--peft", "-o",
                                       dir.path + "/ad"});
  CHECK_MESSAGE(r.code == 0, r.err);
  const std::string config = test::slurp(dir.path + "/ad/adapter_config.json");
  CHECK(config.find("\"r\": 2,") != std::string::npos);
  CHECK(config.find("\"base_model_name_or_path\": null,") != std::string::npos);  // no --base-model: PEFT's None
  std::vector<SafeTensor> file;
  CHECK(read_safetensors(dir.path + "/ad/adapter_model.safetensors", &file).ok());
  CHECK(file.size() == 14);  // 7 projections x {A, B}
}

namespace {

// A PEFT folder for tiny_lora("q,k,v,down"): HF keys, values cycling through
// 64 (so a B of q or k, [16, 4] or [8, 4], has distinct rows), B of q and k in
// Hugging Face's row order; `config` is adapter_config.json.
struct PeftFolder {
  std::map<std::string, SafeTensor> tensors;  // by PEFT key
  std::string config = R"({"peft_type": "LORA", "r": 4, "lora_alpha": 6.0, "lora_dropout": 0.05,
    "target_modules": ["q_proj", "k_proj", "v_proj", "down_proj"], "bias": "none", "use_dora": false,
    "use_rslora": false, "fan_in_fan_out": false, "modules_to_save": null, "rank_pattern": {}, "alpha_pattern": {},
    "layers_to_transform": null, "task_type": "CAUSAL_LM", "base_model_name_or_path": "x"})";
  void write(const std::string& dir) const {
    std::filesystem::create_directories(dir);
    std::vector<SafeTensor> list;
    for (auto& [k, t] : tensors) list.push_back(t);
    REQUIRE(write_safetensors(dir + "/adapter_model.safetensors", list).ok());
    std::ofstream(dir + "/adapter_config.json") << config;
  }
};

PeftFolder peft_folder(const Model& m) {
  PeftFolder f;
  int next = 0;
  for (const TensorInfo& t : m.tensors()) {
    if (t.role != Role::param || t.name.find(".lora_") == std::string::npos) continue;
    const bool is_a = t.name.ends_with(".lora_A");
    const std::string module = t.name.substr(0, t.name.size() - 7);
    SafeTensor st;
    st.name = "base_model.model." + peft_module_name(module) + (is_a ? ".lora_A.weight" : ".lora_B.weight");
    st.dtype = DType::bf16;  // PEFT's usual; these values are exact in it
    st.shape = t.type.shape;
    st.values.resize(static_cast<size_t>(numel(t.type.shape)));
    for (float& v : st.values) v = 0.125f * static_cast<float>(next++ % 64 - 32);  // exact in bf16 and f16
    f.tensors[st.name] = st;
  }
  return f;
}

void check_import(const std::string& opt_level) {
  auto m = tiny_lora("q,k,v,down", "", opt_level);
  const PeftFolder f = peft_folder(*m);
  test::TempDir dir;
  f.write(dir.path + "/a");
  auto s = test::open_session(m);
  Status st = import_peft_adapter(*s, dir.path + "/a");
  REQUIRE_MESSAGE(st.ok(), st.message());
  for (int layer = 0; layer < 2; ++layer)
    for (auto [gguf, hf, heads] : {std::tuple{"attn_q", "self_attn.q_proj", 2}, {"attn_k", "self_attn.k_proj", 1},
                                   {"attn_v", "self_attn.v_proj", 0}, {"ffn_down", "mlp.down_proj", 0}}) {
      const std::string ours = "blk." + std::to_string(layer) + "." + gguf,
                        key = "base_model.model.model.layers." + std::to_string(layer) + "." + hf;
      CAPTURE(ours);
      std::vector<float> a, b;
      REQUIRE(read_param(*s, m->find_tensor(ours + ".lora_A"), &a).ok());
      REQUIRE(read_param(*s, m->find_tensor(ours + ".lora_B"), &b).ok());
      CHECK(a == f.tensors.at(key + ".lora_A.weight").values);
      const SafeTensor& hb = f.tensors.at(key + ".lora_B.weight");
      CHECK(b == (heads ? hf_to_gguf(hb.values, hb.shape[0], hb.shape[1], heads) : hb.values));
    }
}

// The import's error for `f` written as a folder (nothing written: A of layer 0's q keeps its initial values).
std::string import_error(const PeftFolder& f) {
  auto m = tiny_lora("q,k,v,down");
  test::TempDir dir;
  f.write(dir.path + "/a");
  auto s = test::open_session(m);
  const std::vector<float> before = test::read_f32(*s, "blk.0.attn_q.lora_A");
  Status st = import_peft_adapter(*s, dir.path + "/a");
  CHECK_FALSE(st.ok());
  CHECK(test::read_f32(*s, "blk.0.attn_q.lora_A") == before);
  return st.message();
}

}  // namespace

TEST_CASE("import_peft_adapter: PEFT keys back to sgrt's params, q/k rows in GGUF's order") {
  check_import("fp32");
  check_import("O2");  // f16 masters: the values above are exact in f16
}

TEST_CASE("a PEFT folder nn.lora cannot take is refused whole, naming what") {
  auto m = tiny_lora("q,k,v,down");
  const PeftFolder good = peft_folder(*m);
  auto with_config = [&](const std::string& from, const std::string& to) {
    PeftFolder f = good;
    const size_t at = f.config.find(from);
    REQUIRE(at != std::string::npos);
    f.config.replace(at, from.size(), to);
    return import_error(f);
  };
  CHECK(with_config("\"use_dora\": false", "\"use_dora\": true").find("use_dora is true, which sgrt's LoRA") != std::string::npos);
  CHECK(with_config("\"use_rslora\": false", "\"use_rslora\": true").find("use_rslora is true") != std::string::npos);
  CHECK(with_config("\"bias\": \"none\"", "\"bias\": \"all\"").find("bias is \"all\"") != std::string::npos);
  CHECK(with_config("\"modules_to_save\": null", "\"modules_to_save\": [\"lm_head\"]").find("modules_to_save is a list") !=
        std::string::npos);
  CHECK(with_config("\"rank_pattern\": {}", "\"rank_pattern\": {\"q_proj\": 8}").find("rank_pattern is an object") !=
        std::string::npos);
  CHECK(with_config("\"target_modules\": [\"q_proj\", \"k_proj\", \"v_proj\", \"down_proj\"]",
                    "\"target_modules\": \"all-linear\"").find("target_modules is not a list") != std::string::npos);
  CHECK(with_config("\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\"").find("peft_type is IA3") != std::string::npos);
  CHECK(with_config("\"lora_alpha\": 6.0", "\"lora_alpha\": 8").find("lora_alpha / r is 2, ") != std::string::npos);
  CHECK(with_config("\"r\": 4, ", "").find("needs r, lora_alpha and target_modules") != std::string::npos);
  CHECK(with_config("\"lora_alpha\": 6.0", "\"lora_alpha\": 6.0.1").find("adapter_config.json: expected a number") !=
        std::string::npos);
  PeftFolder f = good;
  f.tensors.erase("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  CHECK(import_error(f).find("has no tensor 'base_model.model.model.layers.1.mlp.down_proj.lora_B.weight' "
                             "(blk.1.ffn_down.lora_B of ") != std::string::npos);
  f = good;
  SafeTensor extra = f.tensors.begin()->second;
  extra.name = "base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight";
  f.tensors[extra.name] = extra;
  CHECK(import_error(f).find("tensor 'base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight' is not an adapter of") !=
        std::string::npos);
  f = good;
  SafeTensor& b = f.tensors.at("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight");
  b.shape = {b.shape[1], b.shape[0]};
  const std::string shape_error = import_error(f);
  CHECK_MESSAGE(shape_error.find("is [4, 8], blk.1.attn_v.lora_B of ") != std::string::npos, shape_error);
}
