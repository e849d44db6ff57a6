#include "lora_merge.h"

#include <set>

#include "sgrt/params.h"

namespace sgrt {
namespace {

constexpr const char* kSuffixA = ".lora_A";

bool is_adapter_a(const TensorInfo& t) { return t.role == Role::param && t.name.ends_with(kSuffixA); }

class Tracer {
 public:
  explicit Tracer(const ProgramInfo& p) : p_(p) {}

  int producer(int t) const {
    for (size_t k = 0; k < p_.ops.size(); ++k)
      for (int o : p_.ops[k].out)
        if (o == t) return static_cast<int>(k);
    return -1;
  }

  std::vector<int> readers(int t) const {
    std::vector<int> r;
    for (size_t k = 0; k < p_.ops.size(); ++k)
      for (int i : p_.ops[k].in)
        if (i == t) {
          r.push_back(static_cast<int>(k));
          break;
        }
    return r;
  }

  // What a quantize op made `t` from, or t itself.
  int unquantized(int t) const {
    int k = producer(t);
    return k >= 0 && p_.ops[k].code == OpCode::Quantize ? p_.ops[k].in[0] : t;
  }

  // x @ w^T in any of its forms: (x, w) of a matmul with trans_b (a qmatmul's
  // operands before their quantize ops, a dequant_matmul's block weight).
  bool times_w_t(int k, int* x, int* w) const {
    const OpInfoLoaded& o = p_.ops[k];
    if (o.code == OpCode::DequantMatMul && !o.attrs.i("transpose_w")) {
      *x = o.in[0], *w = o.in[1];
      return true;
    }
    if ((o.code != OpCode::MatMul && o.code != OpCode::QMatMul) || o.attrs.i("trans_a") || !o.attrs.i("trans_b")) return false;
    const bool q = o.code == OpCode::QMatMul;
    *x = unquantized(o.in[0]);
    *w = unquantized(o.in[q ? 3 : 1]);
    return true;
  }

  // The op computing x @ param^T, or -1.
  int matmul_of(int param, int* x) const {
    for (size_t k = 0; k < p_.ops.size(); ++k) {
      int w = -1;
      if (times_w_t(static_cast<int>(k), x, &w) && w == param) return static_cast<int>(k);
    }
    return -1;
  }

  const OpInfoLoaded& op(int k) const { return p_.ops[k]; }
  int reader_of(int t, OpCode code) const {
    for (int k : readers(t))
      if (p_.ops[k].code == code) return k;
    return -1;
  }

 private:
  const ProgramInfo& p_;
};

// The join of the adapters a, b in program p (false: p does not use them).
Status trace(const Model& m, const Tracer& g, int a, int b, LoraJoin* j, bool* found) {
  const std::string& name = m.tensors()[a].name;
  auto refuse = [&](const std::string& why) { return Status::Invalid(name + ": not an nn.lora adapter (" + why + ")"); };
  int xa = -1, low = -1;
  int ma = g.matmul_of(a, &xa);
  *found = ma >= 0;
  if (!*found) return Status::Ok();
  int sc = g.reader_of(g.op(ma).out[0], OpCode::Scale);
  if (sc < 0) return refuse("x A^T is not scaled by alpha / rank");
  int mb = g.matmul_of(b, &low);
  if (mb < 0 || low != g.op(sc).out[0]) return refuse("B^T does not follow the scaled x A^T");
  int add = g.reader_of(g.op(mb).out[0], OpCode::Add);
  if (add < 0) return refuse("its product is not added to a base matmul");
  const OpInfoLoaded& ad = g.op(add);
  int base_out = ad.in[0] == g.op(mb).out[0] ? ad.in[1] : ad.in[0];
  int base = g.producer(base_out), x = -1, w = -1;
  if (base < 0 || !g.times_w_t(base, &x, &w) || m.tensors()[w].role != Role::param) return refuse("no x W^T beside it");
  int d = g.producer(xa);
  const bool dropped = d >= 0 && g.op(d).code == OpCode::Dropout;
  if (dropped) xa = g.op(d).in[0];
  if (x != xa) return refuse("its input is not its base matmul's");
  *j = {w, a, b, g.op(sc).attrs.f("alpha"), dropped ? g.op(d).attrs.f("p") : 0.0, add, ad.out[0], base_out};
  return Status::Ok();
}

// Every read of a merged weight must be one of the adapted matmuls (directly
// or through a quantize op feeding only them): any other would see the merge.
Status check_only_adapted_reads(const Model& m, const Tracer& g, const std::vector<LoraJoin>& joins) {
  std::set<int> bases, weights;
  for (const LoraJoin& j : joins) {
    bases.insert(g.producer(j.base_out));
    weights.insert(j.w);
  }
  for (int w : weights)
    for (int k : g.readers(w)) {
      if (bases.count(k)) continue;
      bool feeds_bases = g.op(k).code == OpCode::Quantize;
      for (int r : feeds_bases ? g.readers(g.op(k).out[0]) : std::vector<int>{}) feeds_bases = feeds_bases && bases.count(r);
      if (!feeds_bases)
        return Status::Invalid(m.tensors()[w].name + ": also read without its adapter (" + std::string(op_info(g.op(k).code).name) + " at " +
                               g.op(k).loc + "); merging would change that read");
    }
  return Status::Ok();
}

}  // namespace

Status find_lora_joins(const Model& m, const ProgramInfo& p, std::vector<LoraJoin>* out) {
  out->clear();
  Tracer g(p);
  bool any = false;
  for (size_t a = 0; a < m.tensors().size(); ++a) {
    const TensorInfo& t = m.tensors()[a];
    if (!is_adapter_a(t)) continue;
    any = true;
    std::string name_b = t.name.substr(0, t.name.size() - 1) + "B";
    int b = m.find_tensor(name_b);
    if (b < 0) return Status::Invalid(t.name + ": has no " + name_b);
    LoraJoin j;
    bool found = false;
    SG_TRY(trace(m, g, static_cast<int>(a), b, &j, &found).with_context(p.name));
    if (found) out->push_back(j);
  }
  if (!any) return Status::Invalid(m.label() + ": has no LoRA adapters (params NAME.lora_A, NAME.lora_B)");
  return check_only_adapted_reads(m, g, *out).with_context(p.name);
}

Status merged_weight(const Session& s, const LoraJoin& j, std::vector<float>* out) {
  std::vector<float> a, b;
  SG_TRY(read_param(s, j.w, out));
  SG_TRY(read_param(s, j.a, &a));
  SG_TRY(read_param(s, j.b, &b));
  const std::vector<int64_t>& ws = s.model().tensors()[j.w].type.shape;
  const int64_t rows = ws[0], cols = ws[1], rank = s.model().tensors()[j.a].type.shape[0];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double d = 0;
      for (int64_t k = 0; k < rank; ++k) d += static_cast<double>(b[r * rank + k]) * a[k * cols + c];
      float& v = (*out)[r * cols + c];
      v = static_cast<float>(v + j.scale * d);
    }
  return Status::Ok();
}

int first_adapter(const Model& m) {
  for (size_t a = 0; a < m.tensors().size(); ++a)
    if (is_adapter_a(m.tensors()[a])) return static_cast<int>(a);
  return -1;
}

Status joins_by_weight(const Model& m, std::map<int, LoraJoin>* joins, std::set<int>* adapters, const std::string& program) {
  int p = m.find_program(program.empty() ? "infer" : program);
  if (p < 0 && program.empty()) p = m.find_program("eval");
  if (p < 0)
    return Status::Invalid(m.label() + ": has no " + (program.empty() ? "infer or eval" : program) +
                           " program to find its LoRA adapters in");
  std::vector<LoraJoin> found;
  SG_TRY(find_lora_joins(m, m.programs()[p], &found));
  for (const LoraJoin& j : found) {
    (*joins)[j.w] = j;
    adapters->insert({j.a, j.b});
  }
  for (size_t a = 0; a < m.tensors().size(); ++a)
    if (is_adapter_a(m.tensors()[a]) && !adapters->count(static_cast<int>(a)))
      return Status::Invalid(m.tensors()[a].name + ": not used by program " + m.programs()[p].name + ", so it cannot be merged");
  return Status::Ok();
}

}  // namespace sgrt
