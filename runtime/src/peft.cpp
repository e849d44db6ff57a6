#include "sgrt/peft.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "sgrt/file_io.h"
#include "sgrt/params.h"
#include "sgrt/safetensors.h"

namespace sgrt {
namespace {

constexpr const char* kSuffixA = ".lora_A";
constexpr const char* kSuffixB = ".lora_B";

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The op of the eval program that reads `tensor` as input `slot` (-1: any) and has code `code`.
const OpInfoLoaded* reader(const Model& m, int tensor, OpCode code, int slot = -1) {
  int p = m.find_program("eval");
  if (p < 0) return nullptr;
  for (const OpInfoLoaded& op : m.programs()[p].ops) {
    if (op.code != code) continue;
    for (size_t i = 0; i < op.in.size(); ++i)
      if (op.in[i] == tensor && (slot < 0 || static_cast<int>(i) == slot)) return &op;
  }
  return nullptr;
}

// The producer of `tensor` in the eval program, or null.
const OpInfoLoaded* producer(const Model& m, int tensor) {
  int p = m.find_program("eval");
  if (p < 0) return nullptr;
  for (const OpInfoLoaded& op : m.programs()[p].ops)
    for (int o : op.out) if (o == tensor) return &op;
  return nullptr;
}

// nn.lora's graph around A: dropout(x) @ A^T, then scale alpha / rank.
Status lora_scale(const Model& m, int a, double* scale, double* dropout) {
  const OpInfoLoaded* mm = reader(m, a, OpCode::MatMul, 1);
  const OpInfoLoaded* sc = mm ? reader(m, mm->out[0], OpCode::Scale, 0) : nullptr;
  if (!sc) return Status::Invalid(m.tensors()[a].name + ": not an nn.lora adapter (no x A^T scaled by alpha / rank)");
  *scale = sc->attrs.f("alpha");
  const OpInfoLoaded* drop = producer(m, mm->in[0]);
  *dropout = drop && drop->code == OpCode::Dropout ? drop->attrs.f("p") : 0.0;
  return Status::Ok();
}

// n_head of the interleaved rope that B's projection feeds, or 0.
int64_t interleaved_heads(const Model& m, int b) {
  const OpInfoLoaded* mm = reader(m, b, OpCode::MatMul, 1);
  const OpInfoLoaded* add = mm ? reader(m, mm->out[0], OpCode::Add) : nullptr;
  const OpInfoLoaded* rope = add ? reader(m, add->out[0], OpCode::Rope, 0) : nullptr;
  return rope && rope->attrs.i("interleaved") ? rope->attrs.i("n_head") : 0;
}

// GGUF's rope permutation undone on B's rows [n_head * dh, rank]: within a head,
// GGUF row 2i + e is Hugging Face row e * dh/2 + i (e in {0, 1}).
std::vector<float> unpermute_rows(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t n_head) {
  std::vector<float> out(v.size());
  const int64_t dh = rows / n_head;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < dh / 2; ++i)
      for (int64_t e = 0; e < 2; ++e)
        std::memcpy(&out[static_cast<size_t>((h * dh + e * dh / 2 + i) * cols)], &v[static_cast<size_t>((h * dh + 2 * i + e) * cols)],
                    sizeof(float) * static_cast<size_t>(cols));
  return out;
}

std::string json_string(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      r += b;
    } else {
      r += static_cast<char>(c);
    }
  }
  return r + "\"";
}

std::string number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

}  // namespace

std::string peft_module_name(const std::string& module) {
  static const std::pair<const char*, const char*> kLlama[] = {
      {"attn_q", "self_attn.q_proj"},    {"attn_k", "self_attn.k_proj"}, {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"}, {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  size_t dot = module.find('.', 4);
  if (module.rfind("blk.", 0) != 0 || dot == std::string::npos) return module;
  std::string layer = module.substr(4, dot - 4), proj = module.substr(dot + 1);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return module;
  for (auto& [gguf, hf] : kLlama)
    if (proj == gguf) return "model.layers." + layer + "." + hf;
  return module;
}

Status export_peft_adapter(const Session& s, const std::string& dir, const std::string& base_model) {
  const Model& m = s.model();
  std::vector<SafeTensor> out;
  std::set<std::string> targets;
  int64_t rank = 0;
  double scale = 0, dropout = 0;
  for (size_t id = 0; id < m.tensors().size(); ++id) {
    const TensorInfo& p = m.tensors()[id];
    bool is_a = ends_with(p.name, kSuffixA), is_b = ends_with(p.name, kSuffixB);
    if (p.role != Role::param || (!is_a && !is_b)) continue;
    std::string module = p.name.substr(0, p.name.size() - std::strlen(kSuffixA));
    std::string hf = peft_module_name(module);
    SafeTensor t;
    t.name = "base_model.model." + hf + (is_a ? ".lora_A.weight" : ".lora_B.weight");
    t.shape = p.type.shape;
    SG_TRY(read_param(s, static_cast<int>(id), &t.values));
    if (is_a) {
      double sc = 0, dr = 0;
      SG_TRY(lora_scale(m, static_cast<int>(id), &sc, &dr));
      if (rank != 0 && (rank != p.type.shape[0] || sc != scale))
        return Status::Invalid(p.name + ": PEFT needs one rank and alpha for every adapter (rank " + std::to_string(p.type.shape[0]) +
                               ", alpha/rank " + number(sc) + " after rank " + std::to_string(rank) + ", alpha/rank " + number(scale) + ")");
      rank = p.type.shape[0];
      scale = sc;
      dropout = dr;
    } else if (int64_t heads = interleaved_heads(m, static_cast<int>(id)); heads > 0) {
      t.values = unpermute_rows(t.values, p.type.shape[0], p.type.shape[1], heads);
    }
    targets.insert(hf.substr(hf.rfind('.') + 1));
    out.push_back(std::move(t));
  }
  if (out.empty()) return Status::Invalid(m.label() + ": has no LoRA adapters (params NAME.lora_A, NAME.lora_B)");
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Status::Io(dir + ": cannot create the folder: " + std::strerror(errno));
  SG_TRY(write_safetensors(dir + "/adapter_model.safetensors", out));
  std::string list;
  for (const std::string& t : targets) list += (list.empty() ? "" : ", ") + json_string(t);
  std::string config = "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n  \"base_model_name_or_path\": " +
                       json_string(base_model) + ",\n  \"r\": " + std::to_string(rank) + ",\n  \"lora_alpha\": " +
                       number(scale * static_cast<double>(rank)) + ",\n  \"lora_dropout\": " + number(dropout) +
                       ",\n  \"target_modules\": [" + list + "],\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": false,\n" +
                       "  \"inference_mode\": true,\n  \"init_lora_weights\": true\n}\n";
  return write_file_atomic(dir + "/adapter_config.json", config.data(), config.size());
}

}  // namespace sgrt
