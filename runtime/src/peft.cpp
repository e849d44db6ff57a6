#include "sgrt/peft.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <set>

#include "json_reader.h"
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

// GGUF's rope permutation on B's rows [n_head * dh, rank]: within a head,
// GGUF row 2i + e is Hugging Face row e * dh/2 + i (e in {0, 1}). to_hf undoes
// it (export); otherwise it is applied (import).
std::vector<float> permute_rows(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t n_head, bool to_hf) {
  std::vector<float> out(v.size());
  const int64_t dh = rows / n_head;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < dh / 2; ++i)
      for (int64_t e = 0; e < 2; ++e) {
        const int64_t hf = h * dh + e * dh / 2 + i, gguf = h * dh + 2 * i + e;
        std::memcpy(&out[static_cast<size_t>((to_hf ? hf : gguf) * cols)], &v[static_cast<size_t>((to_hf ? gguf : hf) * cols)],
                    sizeof(float) * static_cast<size_t>(cols));
      }
  return out;
}

// PEFT's key of an adapter param NAME.lora_A / NAME.lora_B, or "" for another param.
std::string peft_key(const std::string& name) {
  const bool is_a = ends_with(name, kSuffixA), is_b = ends_with(name, kSuffixB);
  if (!is_a && !is_b) return "";
  const std::string module = name.substr(0, name.size() - std::strlen(kSuffixA));
  return "base_model.model." + peft_module_name(module) + (is_a ? ".lora_A.weight" : ".lora_B.weight");
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
    std::string hf = peft_module_name(p.name.substr(0, p.name.size() - std::strlen(kSuffixA)));
    SafeTensor t;
    t.name = peft_key(p.name);
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
      t.values = permute_rows(t.values, p.type.shape[0], p.type.shape[1], heads, /*to_hf=*/true);
    }
    targets.insert(hf.substr(hf.rfind('.') + 1));
    out.push_back(std::move(t));
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Status::Io(dir + ": cannot create the folder: " + std::strerror(errno));
  SG_TRY(write_safetensors(dir + "/adapter_model.safetensors", out));
  std::string list;
  for (const std::string& t : targets) list += (list.empty() ? "" : ", ") + json_string(t);
  std::string config = "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n  \"base_model_name_or_path\": " +
                       (base_model.empty() ? std::string("null") : json_string(base_model)) + ",\n  \"r\": " + std::to_string(rank) + ",\n  \"lora_alpha\": " +
                       number(scale * static_cast<double>(rank)) + ",\n  \"lora_dropout\": " + number(dropout) +
                       ",\n  \"target_modules\": [" + list + "],\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": false,\n" +
                       "  \"inference_mode\": true,\n  \"init_lora_weights\": true\n}\n";
  return write_file_atomic(dir + "/adapter_config.json", config.data(), config.size());
}

namespace {

// One key of adapter_config.json that must hold what nn.lora is: `ok` says
// whether the value read is; else the error says what sgrt's LoRA lacks.
Status refuse_unless(bool ok, const std::string& path, const std::string& key, const std::string& value) {
  if (ok) return Status::Ok();
  return Status::Invalid(path + ": " + key + " is " + value + ", which sgrt's LoRA (x W^T + alpha/r x A^T B^T) does not do");
}

// A value that must be null, false, an empty list or an empty object; *shown is what it was.
bool empty_value(JsonReader& j, std::string* shown) {
  const char c = j.peek();
  if (c == '{' || c == '[') {
    j.eat(c);
    *shown = c == '{' ? "an object" : "a list";
    if (j.eat(c == '{' ? '}' : ']')) return true;
    return false;
  }
  if (c == '"') {
    j.string(shown);
    *shown = "\"" + *shown + "\"";
    return false;
  }
  if (c >= 'a' && c <= 'z') return j.literal(shown) && (*shown == "null" || *shown == "false");
  double v = 0;
  j.number(&v);
  *shown = "a number";
  return false;
}

}  // namespace

Status read_peft_config(const std::string& dir, PeftConfig* out) {
  const std::string path = dir + "/adapter_config.json";
  std::vector<uint8_t> bytes;
  SG_TRY(read_file(path, &bytes));
  JsonReader j(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  *out = PeftConfig{};
  bool has_r = false, has_alpha = false, has_targets = false;
  auto bad = [&](const char* what = nullptr) {  // the reader's error, or `what` at its position
    if (what) j.fail(what);
    return Status::Invalid(path + ": " + j.error());
  };
  if (!j.eat('{')) return bad("expected an object");
  if (!j.eat('}')) {
    do {
      std::string key, text;
      if (!j.string(&key) || !j.eat(':')) return bad("expected \"key\":");
      if (key == "peft_type" || key == "bias") {
        if (!j.string(&text)) return bad();
        if (key == "peft_type" && text != "LORA") return Status::Invalid(path + ": peft_type is " + text + ", not LORA");
        SG_TRY(refuse_unless(key != "bias" || text == "none", path, key, "\"" + text + "\""));
      } else if (key == "r") {
        uint64_t r = 0;
        if (!j.integer(&r)) return bad();
        if (r == 0 || r > (1u << 20)) return Status::Invalid(path + ": r is " + std::to_string(r));
        out->rank = static_cast<int64_t>(r), has_r = true;
      } else if (key == "lora_alpha") {
        if (!j.number(&out->alpha)) return bad();
        if (!(out->alpha > 0) || !std::isfinite(out->alpha)) return Status::Invalid(path + ": lora_alpha must be positive");
        has_alpha = true;
      } else if (key == "target_modules") {
        if (j.peek() != '[')
          return Status::Invalid(path + ": target_modules is not a list of module names (null, a pattern or "
                                 "\"all-linear\"): name the modules");
        j.eat('[');
        if (!j.eat(']')) {
          do {
            if (!j.string(&text)) return bad();
            out->target_modules.push_back(text);
          } while (j.eat(','));
          if (!j.eat(']')) return bad("expected ']'");
        }
        std::sort(out->target_modules.begin(), out->target_modules.end());
        has_targets = !out->target_modules.empty();
      } else if (key == "use_dora" || key == "use_rslora" || key == "lora_bias" || key == "fan_in_fan_out" ||
                 key == "modules_to_save" || key == "layers_to_transform" || key == "rank_pattern" || key == "alpha_pattern") {
        const bool empty = empty_value(j, &text);
        if (!j.error().empty()) return bad();
        SG_TRY(refuse_unless(empty, path, key, text));
      } else if (!j.skip_value()) {
        return bad();
      }
    } while (j.eat(','));
    if (!j.eat('}')) return bad("expected '}'");
  }
  if (!has_r || !has_alpha || !has_targets)
    return Status::Invalid(path + ": needs r, lora_alpha and target_modules (a PEFT LoRA adapter's config)");
  return Status::Ok();
}

Status import_peft_adapter(Session& s, const std::string& dir) {
  PeftConfig config;
  SG_TRY(read_peft_config(dir, &config));
  const std::string path = dir + "/adapter_model.safetensors";
  std::vector<SafeTensor> file;
  SG_TRY(read_safetensors(path, &file));
  std::map<std::string, SafeTensor*> by_key;
  for (SafeTensor& t : file) by_key[t.name] = &t;
  const Model& m = s.model();
  std::map<int, LoraJoin> by_weight;
  std::set<int> adapters;
  SG_TRY(joins_by_weight(m, &by_weight, &adapters, "eval"));
  const ProgramInfo& eval = m.programs()[m.find_program("eval")];
  const double scale = config.alpha / static_cast<double>(config.rank);
  std::vector<ParamBytes> encoded;
  for (const auto& [w, j] : by_weight) {
    if (std::abs(j.scale - scale) > 1e-6 * scale)
      return Status::Invalid(dir + "/adapter_config.json: lora_alpha / r is " + number(scale) + ", " + m.label() +
                             "'s adapters scale by " + number(j.scale) + " (compile it with the config's alpha)");
    for (int id : {j.a, j.b}) {
      const TensorInfo& p = m.tensors()[id];
      const std::string key = peft_key(p.name);
      auto it = by_key.find(key);
      if (it == by_key.end()) return Status::Invalid(path + ": has no tensor '" + key + "' (" + p.name + " of " + m.label() + ")");
      SafeTensor& t = *it->second;
      if (t.shape != p.type.shape)
        return Status::Invalid(path + ": tensor '" + key + "' is " + shape_str(t.shape) + ", " + p.name + " of " + m.label() +
                               " is " + shape_str(p.type.shape));
      if (const int64_t heads = id == j.b ? interleaved_heads(eval, j.y) : 0; heads > 0)
        t.values = permute_rows(t.values, p.type.shape[0], p.type.shape[1], heads, /*to_hf=*/false);
      encoded.emplace_back();
      SG_TRY(encode_param(s, id, t.values, &encoded.back()).with_context(path + ": " + key));
      by_key.erase(it);
    }
  }
  if (!by_key.empty())
    return Status::Invalid(path + ": tensor '" + by_key.begin()->first + "' is not an adapter of " + m.label());
  for (const ParamBytes& e : encoded) SG_TRY(s.write(e.tensor, e.bytes.data(), e.bytes.size()));
  return Status::Ok();
}

bool is_peft_folder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status import_adapters(Session& s, const std::string& path) {
  return is_peft_folder(path) ? import_peft_adapter(s, path) : import_safetensors(s, path, ParamSet::trained);
}

}  // namespace sgrt
