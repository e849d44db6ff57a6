#include "profile_report.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "sgrt/shape.h"

namespace sgrt::tool {
namespace {

constexpr size_t kSlowestOps = 15;
constexpr size_t kProductShapes = 12;

struct Kind {
  double seconds = 0;
  int ops = 0;
  double flops = 0;  // products: 2 M N K each
};

// A product's key, "op MxNxK" with a^T / b^T for transposed operands, and its
// 2 M N K; false for other ops. M N is the output's size, K the contracting
// dimension of the first operand (dequant_matmul's x: its last).
bool product_shape(const OpInfoLoaded& op, const std::vector<TensorInfo>& ts, std::string* key, double* flops) {
  if (op.code != OpCode::MatMul && op.code != OpCode::QMatMul && op.code != OpCode::DequantMatMul) return false;
  const Shape &a = ts[op.in[0]].type.shape, &y = ts[op.out[0]].type.shape;
  const bool ta = op.attrs.i("trans_a", 0) != 0, tb = op.attrs.i("trans_b", 0) != 0;
  const int64_t n = y.back(), m = numel(y) / n, k = ta ? numel(a) / a.back() : a.back();
  *key = std::string(op_info(op.code).name) + " " + std::to_string(m) + "x" + std::to_string(n) + "x" +
         std::to_string(k) + (ta ? " a^T" : "") + (tb ? " b^T" : "");
  *flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return true;
}

// The first three parameters or parameter gradients an op reads or writes:
// they name its layer where the script line is that of a call that built a
// whole block.
std::string weights_of(const OpInfoLoaded& op, const Model& m) {
  const std::vector<TensorInfo>& ts = m.tensors();
  const std::string grad = ".grad";
  auto is_weight = [&](const TensorInfo& t) {
    if (t.role == Role::param) return true;
    if (t.role != Role::grad || t.name.size() <= grad.size() || t.name.compare(t.name.size() - grad.size(), grad.size(), grad))
      return false;
    int p = m.find_tensor(t.name.substr(0, t.name.size() - grad.size()));
    return p >= 0 && ts[p].role == Role::param;
  };
  std::string s;
  int shown = 0, more = 0;
  for (const std::vector<int>* ids : {&op.in, &op.out})
    for (int id : *ids) {
      if (!is_weight(ts[id])) continue;
      if (shown == 3) ++more;
      else s += (shown++ ? " " : "") + ts[id].name;
    }
  return more ? s + " (+" + std::to_string(more) + " more)" : s;
}

// The products grouped by shape, slowest first: where a step of many small
// products loses its time (GFLOP/s of the time between the op before and this).
void print_products(const ProgramInfo& p, const std::vector<TensorInfo>& ts, const ProgramProfile& prof, std::FILE* out) {
  std::map<std::string, Kind> shapes;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    std::string key;
    double flops = 0;
    if (!product_shape(p.ops[i], ts, &key, &flops)) continue;
    Kind& k = shapes[key];
    k.seconds += prof.op_seconds[i];
    ++k.ops;
    k.flops += flops;
  }
  if (shapes.empty()) return;
  std::vector<std::pair<std::string, Kind>> rows(shapes.begin(), shapes.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  const size_t shown = std::min(rows.size(), kProductShapes);
  std::fprintf(out, "  products by shape (M x N x K; %zu of %zu shapes):\n  %10s %5s %10s %9s  %s\n", shown, rows.size(),
               "ms/run", "ops", "us/op", "GFLOP/s", "product");
  const double runs = static_cast<double>(prof.runs);
  for (size_t r = 0; r < shown; ++r) {
    const Kind& k = rows[r].second;
    const double gflops = k.seconds > 0 ? k.flops * runs / k.seconds * 1e-9 : 0.0;
    std::fprintf(out, "  %10.3f %5d %10.1f %9.1f  %s\n", 1e3 * k.seconds / runs, k.ops, 1e6 * k.seconds / runs / k.ops,
                 gflops, rows[r].first.c_str());
  }
}

void print_program(const ProgramInfo& p, const Model& m, const char* backend, const ProgramProfile& prof, std::FILE* out) {
  const std::vector<TensorInfo>& ts = m.tensors();
  const double runs = static_cast<double>(prof.runs);
  const double total = std::accumulate(prof.op_seconds.begin(), prof.op_seconds.end(), 0.0);
  auto ms = [&](double s) { return 1e3 * s / runs; };
  auto share = [&](double s) { return total > 0 ? 100 * s / total : 0.0; };
  std::fprintf(out, "profile of %s on %s: %lld runs after the first, %.3f ms of ops a run\n", p.name.c_str(), backend,
               static_cast<long long>(prof.runs), ms(total));
  std::map<std::string, Kind> kinds;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    Kind& k = kinds[std::string(op_info(p.ops[i].code).name)];
    k.seconds += prof.op_seconds[i];
    ++k.ops;
  }
  std::vector<std::pair<std::string, Kind>> by_kind(kinds.begin(), kinds.end());
  std::stable_sort(by_kind.begin(), by_kind.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::fprintf(out, "  by op:\n  %10s %7s %5s  %s\n", "ms/run", "share", "ops", "op");
  for (const auto& [name, k] : by_kind)
    std::fprintf(out, "  %10.3f %6.1f%% %5d  %s\n", ms(k.seconds), share(k.seconds), k.ops, name.c_str());
  print_products(p, ts, prof, out);
  std::vector<size_t> order(p.ops.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prof.op_seconds[a] > prof.op_seconds[b]; });
  order.resize(std::min(order.size(), kSlowestOps));
  std::vector<std::string> names, outputs;
  int name_w = 2, output_w = 6;  // "op", "output"
  for (size_t i : order) {
    const OpInfoLoaded& op = p.ops[i];
    names.emplace_back(op_info(op.code).name);
    outputs.push_back(op.out.empty() ? "-" : type_str(ts[op.out[0]].type));
    name_w = std::max(name_w, static_cast<int>(names.back().size()));
    output_w = std::max(output_w, static_cast<int>(outputs.back().size()));
  }
  std::fprintf(out, "  slowest ops:\n  %10s %7s  %-*s  %-*s  %s\n", "ms/run", "share", name_w, "op", output_w, "output",
               "at, weights");
  for (size_t r = 0; r < order.size(); ++r) {
    const OpInfoLoaded& op = p.ops[order[r]];
    const double s = prof.op_seconds[order[r]];
    const std::string weights = weights_of(op, m);
    const std::string where = weights.empty() ? op.loc : op.loc + " " + weights;
    std::fprintf(out, "  %10.3f %6.1f%%  %-*s  %-*s  %s\n", ms(s), share(s), name_w, names[r].c_str(), output_w,
                 outputs[r].c_str(), where.c_str());
  }
}

}  // namespace

void print_profile(const Model& m, const char* backend, const std::vector<ProgramProfile>& profile, std::FILE* out) {
  for (size_t p = 0; p < profile.size(); ++p) {
    if (profile[p].runs > 0) print_program(m.programs()[p], m, backend, profile[p], out);
    else if (profile[p].ran)
      std::fprintf(out, "profile of %s on %s: it ran once, and the first run is left out (run more steps)\n",
                   m.programs()[p].name.c_str(), backend);
  }
}

}  // namespace sgrt::tool
