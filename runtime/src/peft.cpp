#include "sgrt/peft.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "lora_merge.h"
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

// n_head of the interleaved rope that reads `y` (an adapted projection's
// output) in program p, or 0.
int64_t interleaved_heads(const ProgramInfo& p, int y) {
  for (const OpInfoLoaded& op : p.ops)
    if (op.code == OpCode::Rope && op.in[0] == y && op.attrs.i("interleaved")) return op.attrs.i("n_head");
  return 0;
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
  // Each adapter's scale, dropout and output as the merge traces them (matmuls
  // in any recipe's form), in the eval program.
  std::map<int, LoraJoin> by_weight;
  std::set<int> adapters;
  SG_TRY(joins_by_weight(m, &by_weight, &adapters, "eval"));
  std::map<int, const LoraJoin*> join;  // by lora_A and lora_B
  for (const auto& [w, j] : by_weight) join[j.a] = join[j.b] = &j;
  const ProgramInfo& eval = m.programs()[m.find_program("eval")];
  std::vector<SafeTensor> out;
  std::set<std::string> targets;
  int64_t rank = 0;
  double scale = 0, dropout = 0;
  for (size_t id = 0; id < m.tensors().size(); ++id) {
    const TensorInfo& p = m.tensors()[id];
    bool is_a = ends_with(p.name, kSuffixA), is_b = ends_with(p.name, kSuffixB);
    if (p.role != Role::param || (!is_a && !is_b)) continue;
    if (!join.count(static_cast<int>(id))) return Status::Invalid(p.name + ": not an nn.lora adapter");
    const LoraJoin& j = *join[static_cast<int>(id)];
    std::string module = p.name.substr(0, p.name.size() - std::strlen(kSuffixA));
    std::string hf = peft_module_name(module);
    SafeTensor t;
    t.name = "base_model.model." + hf + (is_a ? ".lora_A.weight" : ".lora_B.weight");
    t.shape = p.type.shape;
    SG_TRY(read_param(s, static_cast<int>(id), &t.values));
    if (is_a) {
      if (rank != 0 && (rank != p.type.shape[0] || j.scale != scale))
        return Status::Invalid(p.name + ": PEFT needs one rank and alpha for every adapter (rank " + std::to_string(p.type.shape[0]) +
                               ", alpha/rank " + number(j.scale) + " after rank " + std::to_string(rank) + ", alpha/rank " +
                               number(scale) + ")");
      rank = p.type.shape[0];
      scale = j.scale;
      dropout = j.dropout;
    } else if (int64_t heads = interleaved_heads(eval, j.y); heads > 0) {
      t.values = unpermute_rows(t.values, p.type.shape[0], p.type.shape[1], heads);
    }
    targets.insert(hf.substr(hf.rfind('.') + 1));
    out.push_back(std::move(t));
  }
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
