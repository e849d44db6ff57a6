// `sgrt info`: tensors, dtypes, scales, memory plan and programs of a model.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "commands.h"
#include "json.h"
#include "model_source.h"
#include "sg_generated.h"
#include "sgrt/backend.h"
#include "sgrt/data_parallel.h"
#include "sgrt/file_io.h"

namespace sgrt::tool {
namespace {

const char* role_name(Role r) {
  static const char* const names[] = {"input", "param", "grad", "opt_state", "activation", "scratch", "constant", "scale_state", "cache", "statistic"};
  return names[static_cast<int>(r)];
}

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", b / 1048576.0);
  return buf;
}

// Bytes each trained parameter costs, read off the optimizer updates of
// train_step: its stored weight (the parameter, or its low-precision master),
// its gradient and its optimizer state (moments or momentum, their scales).
struct ParamMemory {
  uint64_t params = 0, weights = 0, grads = 0, state = 0;
  std::string formats;  // e.g. "weights f16, grads f32, state e4m3+f16"
};

ParamMemory param_memory(const Model& m) {
  ParamMemory r;
  int p = m.find_program("train_step");
  if (p < 0) return r;
  for (const OpInfoLoaded& op : m.programs()[p].ops) {
    if (op.code != OpCode::AdamwUpdate && op.code != OpCode::SgdUpdate) continue;
    const auto& ts = m.tensors();
    int nstate = op.code == OpCode::AdamwUpdate ? 2 : 1;
    r.params += numel(ts[op.in[0]].type.shape);
    r.weights += ts[op.in[0]].bytes;
    r.grads += ts[op.in[1]].bytes;
    r.state += ts[op.in[2 + nstate + 2]].bytes;  // the scales
    std::string st;
    for (int k = 0; k < nstate; ++k) {
      r.state += ts[op.in[2 + k]].bytes;
      st += std::string(k ? "+" : "") + dtype_name(ts[op.in[2 + k]].type.dtype);
    }
    r.formats = std::string("weights ") + dtype_name(ts[op.in[0]].type.dtype) + ", grads " +
                dtype_name(ts[op.in[1]].type.dtype) + ", state " + st;
  }
  return r;
}

// sg.train{accumulate = k}: micro-batches per optimizer step, and the bytes of
// the persistent gradient accumulators grad_step adds into.
struct Accumulation {
  int64_t k = 1;
  uint64_t bytes = 0;
};

Accumulation accumulation(const Model& m) {
  Accumulation a;
  if (const sg::TrainConfig* t = m.root().train()) a.k = std::max<int64_t>(1, t->accumulate());
  for (const TensorInfo& t : m.tensors())
    if (t.persistent && t.role == Role::grad) a.bytes += t.bytes;
  return a;
}

// The tokenizer an export carries (sgrt export --tokenizer), as "pre, N tokens, ...".
std::string tokenizer_summary(const sg::Tokenizer& t) {
  return t.pre()->str() + " byte-level BPE, " + std::to_string(t.tokens()->size()) + " tokens, " +
         std::to_string(t.merges() ? t.merges()->size() : 0) + " merges, bos " + std::to_string(t.bos()) + ", eos " +
         std::to_string(t.eos()) + (t.chat_template() && t.chat_template()->size() ? ", chat template" : "");
}

void print_human(const Model& m) {
  const sg::Model& r = m.root();
  const sg::MemoryPlan& mem = *r.memory();
  std::printf("model %s (from %s), recipe %s, schema v%u\n", r.name() ? r.name()->c_str() : "?",
              r.source() ? r.source()->c_str() : "?", r.recipe() ? r.recipe()->c_str() : "?", r.schema_version());
  std::printf("memory: arena %s = persistent %s + transient %s; all tensors unplanned would take %s (%.1fx)\n",
              mib(mem.arena_bytes()).c_str(), mib(mem.persistent_bytes()).c_str(),
              mib(mem.arena_bytes() - mem.persistent_bytes()).c_str(), mib(mem.naive_bytes()).c_str(),
              mem.arena_bytes() ? static_cast<double>(mem.naive_bytes()) / mem.arena_bytes() : 0.0);
  ParamCounts pc = count_params(m.tensors());
  std::printf("parameters: %llu (trained %llu, frozen %llu)\n", static_cast<unsigned long long>(pc.trained + pc.frozen),
              static_cast<unsigned long long>(pc.trained), static_cast<unsigned long long>(pc.frozen));
  if (ParamMemory pm = param_memory(m); pm.params > 0) {
    double n = static_cast<double>(pm.params);
    std::printf("bytes per trained parameter: weights %.2f + grads %.2f + optimizer state %.2f = %.2f (%s); "
                "arena %.2f\n", pm.weights / n, pm.grads / n, pm.state / n, (pm.weights + pm.grads + pm.state) / n,
                pm.formats.c_str(), mem.arena_bytes() / n);
  }
  if (Accumulation acc = accumulation(m); acc.k > 1)
    std::printf("gradient accumulation: %lld micro-batches per optimizer step (grad_step %lld times, then train_step); "
                "accumulators %s persistent\n", static_cast<long long>(acc.k), static_cast<long long>(acc.k - 1),
                mib(acc.bytes).c_str());
  if (size_t n = std::count_if(m.tensors().begin(), m.tensors().end(),
                               [](const TensorInfo& t) { return t.name.ends_with(".recomputed"); }))
    std::printf("activation recomputation (sg.checkpoint): %zu activations remade for the backward pass\n", n);
  if (const sg::Tokenizer* t = r.tokenizer()) std::printf("tokenizer: %s\n", tokenizer_summary(*t).c_str());
  for (const ProgramInfo& p : m.programs())
    std::printf("program %-10s %4zu ops, transient peak %s\n", p.name.c_str(), p.ops.size(), mib(p.peak_bytes).c_str());
  for (size_t i = 0; i < m.tensors().size(); ++i)
    if (const sg::Tensor* t = r.tensors()->Get(static_cast<flatbuffers::uoffset_t>(i)); t->has_range())
      std::printf("input %-24s declared range [%g, %g]\n", m.tensors()[i].name.c_str(), t->range_lo(), t->range_hi());
  std::printf("\n%-4s %-30s %-11s %-5s %-12s %10s %10s  %-12s %-6s %5s  %-22s %s\n", "id", "tensor", "role", "dtype",
              "shape", "bytes", "offset", "scale", "gran", "log2", "source", "rule");
  const auto* fts = r.tensors();
  for (size_t i = 0; i < m.tensors().size(); ++i) {
    const TensorInfo& t = m.tensors()[i];
    if (t.bytes == 0) continue;
    const sg::ScaleSpec* sc = fts->Get(static_cast<flatbuffers::uoffset_t>(i))->scale();
    std::printf("%-4zu %-30s %-11s %-5s %-12s %10llu %10llu  %-12s %-6s %5d  %-22s %s\n", i, t.name.c_str(),
                t.frozen ? "frozen" : role_name(t.role), dtype_name(t.type.dtype), shape_str(t.type.shape).c_str(),
                static_cast<unsigned long long>(t.bytes), static_cast<unsigned long long>(t.offset),
                sc ? sg::EnumNameScaleMode(sc->mode()) : "none", sc ? sg::EnumNameGranularity(sc->granularity()) : "-",
                sc ? sc->static_log2() : 0, t.loc.c_str(), sc && sc->rule() ? sc->rule()->c_str() : "");
  }
}

void print_json(const Model& m) {
  const sg::Model& r = m.root();
  const sg::MemoryPlan& mem = *r.memory();
  std::string j = "{\"name\":" + json_str(r.name() ? r.name()->str() : "") + ",\"recipe\":" +
                  json_str(r.recipe() ? r.recipe()->str() : "") + ",\"schema_version\":" + std::to_string(r.schema_version()) +
                  ",\"memory\":{\"arena_bytes\":" + std::to_string(mem.arena_bytes()) + ",\"persistent_bytes\":" +
                  std::to_string(mem.persistent_bytes()) + ",\"naive_bytes\":" + std::to_string(mem.naive_bytes()) +
                  "},\"programs\":[";
  ParamMemory pm = param_memory(m);
  j.insert(j.size() - std::string(",\"programs\":[").size(),
           ",\"trained_params\":{\"count\":" + std::to_string(pm.params) + ",\"weight_bytes\":" + std::to_string(pm.weights) +
               ",\"grad_bytes\":" + std::to_string(pm.grads) + ",\"state_bytes\":" + std::to_string(pm.state) +
               ",\"formats\":" + json_str(pm.formats) + "},\"accumulate\":" + std::to_string(accumulation(m).k) +
               ",\"accumulator_bytes\":" + std::to_string(accumulation(m).bytes) + ",\"tokenizer\":" +
               (r.tokenizer() ? json_str(tokenizer_summary(*r.tokenizer())) : "null"));
  for (size_t i = 0; i < m.programs().size(); ++i) {
    const ProgramInfo& p = m.programs()[i];
    j += std::string(i ? "," : "") + "{\"name\":" + json_str(p.name) + ",\"peak_bytes\":" + std::to_string(p.peak_bytes) + ",\"ops\":[";
    for (size_t k = 0; k < p.ops.size(); ++k) {
      const OpInfoLoaded& op = p.ops[k];
      j += std::string(k ? "," : "") + "{\"op\":" + json_str(std::string(op_info(op.code).name)) + ",\"inputs\":[";
      for (size_t q = 0; q < op.in.size(); ++q) j += (q ? "," : "") + std::to_string(op.in[q]);
      j += "],\"outputs\":[";
      for (size_t q = 0; q < op.out.size(); ++q) j += (q ? "," : "") + std::to_string(op.out[q]);
      j += "],\"source\":" + json_str(op.loc) + "}";
    }
    j += "]}";
  }
  j += "],\"tensors\":[";
  for (size_t i = 0; i < m.tensors().size(); ++i) {
    const TensorInfo& t = m.tensors()[i];
    const sg::ScaleSpec* sc = r.tensors()->Get(static_cast<flatbuffers::uoffset_t>(i))->scale();
    j += std::string(i ? "," : "") + "{\"id\":" + std::to_string(i) + ",\"name\":" + json_str(t.name) + ",\"role\":" +
         json_str(role_name(t.role)) + (t.frozen ? ",\"frozen\":true" : "") + ",\"dtype\":" +
         json_str(dtype_name(t.type.dtype)) + ",\"shape\":[";
    for (size_t q = 0; q < t.type.shape.size(); ++q) j += (q ? "," : "") + std::to_string(t.type.shape[q]);
    j += "],\"bytes\":" + std::to_string(t.bytes) + ",\"offset\":" + std::to_string(t.offset) + ",\"persistent\":" +
         (t.persistent ? "true" : "false") + ",\"scale\":{\"mode\":" + json_str(sc ? sg::EnumNameScaleMode(sc->mode()) : "none") +
         ",\"granularity\":" + json_str(sc ? sg::EnumNameGranularity(sc->granularity()) : "tensor") +
         ",\"block_size\":" + std::to_string(sc ? sc->block_size() : 0) + ",\"history_len\":" +
         std::to_string(sc ? sc->history_len() : 0) + ",\"state_tensor\":" + std::to_string(sc ? sc->state_tensor() : -1) +
         ",\"static_log2\":" + std::to_string(sc ? sc->static_log2() : 0) + ",\"rule\":" +
         json_str(sc && sc->rule() ? sc->rule()->str() : "") + "}";
    if (const sg::Tensor* ft = r.tensors()->Get(static_cast<flatbuffers::uoffset_t>(i)); ft->has_range())
      j += ",\"range\":[" + json_num(ft->range_lo()) + "," + json_num(ft->range_hi()) + "]";
    j += ",\"source\":" + json_str(t.loc) + "}";
  }
  j += "]}";
  std::puts(j.c_str());
}

// `--ranks N`: what each of N data-parallel ranks holds, without ZeRO and
// under ZeRO-1, read off the models the ranks would run (split_train_step,
// shard_optimizer_state): their tensors' storage and their arenas.
struct RankMemory {
  std::string who;
  uint64_t weights = 0, grads = 0, state = 0, arena = 0;
};

RankMemory rank_memory(const Model& whole, const Model& rank, std::string who) {
  ParamMemory pm = param_memory(whole);
  RankMemory r{std::move(who), pm.weights, pm.grads, 0, rank.arena_bytes()};
  int p = whole.find_program("train_step");
  for (const OpInfoLoaded& op : whole.programs()[p].ops) {
    if (op.code != OpCode::AdamwUpdate && op.code != OpCode::SgdUpdate) continue;
    r.state += rank.tensors()[op.in.end()[-2]].bytes;  // the scales: every rank's
    for (int t : update_moments(op)) r.state += rank.tensors()[t].bytes;  // 0 where another rank keeps it
  }
  return r;
}

Status print_ranks(const Model& m, int64_t ranks, bool json) {
  if (m.find_program("train_step") < 0) return Status::Invalid(m.label() + ": has no train_step (nothing to train on ranks)");
  std::vector<RankMemory> rows;
  std::unique_ptr<Model> split;
  SG_TRY(split_train_step(m, &split));
  rows.push_back(rank_memory(m, *split, "every rank, without ZeRO"));
  ZeroPlan plan;
  const bool zero = plan_zero(m, static_cast<int>(ranks), &plan).ok();  // else nothing to shard (plain SGD): said below
  for (int r = 0; r < ranks && zero; ++r) {
    SG_TRY(split_train_step(m, &split));
    SG_TRY(shard_optimizer_state(static_cast<int>(ranks), r, &split));
    rows.push_back(rank_memory(m, *split, "rank " + std::to_string(r) + ", ZeRO-1"));
  }
  const double n = static_cast<double>(param_memory(m).params);
  if (json) {
    std::string j = "{\"ranks\":" + std::to_string(ranks) + ",\"trained_params\":" + std::to_string(param_memory(m).params) +
                    ",\"per_rank\":[";
    for (size_t i = 0; i < rows.size(); ++i)
      j += std::string(i ? "," : "") + "{\"who\":" + json_str(rows[i].who) + ",\"weight_bytes\":" + std::to_string(rows[i].weights) +
           ",\"grad_bytes\":" + std::to_string(rows[i].grads) + ",\"state_bytes\":" + std::to_string(rows[i].state) +
           ",\"arena_bytes\":" + std::to_string(rows[i].arena) + "}";
    std::puts((j + "]}").c_str());
    return Status::Ok();
  }
  std::printf("%lld data-parallel ranks (mpirun -np %lld sgrt train; --zero 1 for ZeRO-1): bytes each rank holds, "
              "and per trained parameter of the whole model (%.0f)\n", static_cast<long long>(ranks),
              static_cast<long long>(ranks), n);
  std::printf("%-26s %20s %20s %20s %20s %12s\n", "", "weights", "gradients", "optimizer state", "total", "arena");
  auto cell = [n](uint64_t b) {
    char c[40];
    std::snprintf(c, sizeof c, "%llu (%.2f)", static_cast<unsigned long long>(b), b / n);
    return std::string(c);
  };
  for (const RankMemory& r : rows)
    std::printf("%-26s %20s %20s %20s %20s %12s\n", r.who.c_str(), cell(r.weights).c_str(), cell(r.grads).c_str(),
                cell(r.state).c_str(), cell(r.weights + r.grads + r.state).c_str(), mib(r.arena).c_str());
  if (!zero) std::printf("ZeRO-1: the optimizer keeps no moments (plain SGD): nothing to shard\n");
  return Status::Ok();
}

// Graphviz: tensors as boxes labelled with dtype and scale, ops as ellipses;
// low-precision tensors are filled so precision changes stand out.
std::string dot_graph(const Model& m, const std::string& program) {
  int p = m.find_program(program);
  std::string d = "digraph sgrt {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  std::vector<bool> shown(m.tensors().size(), false);
  auto tensor_node = [&](int id) {
    if (shown[id]) return;
    shown[id] = true;
    const TensorInfo& t = m.tensors()[id];
    const sg::ScaleSpec* sc = m.root().tensors()->Get(static_cast<flatbuffers::uoffset_t>(id))->scale();
    std::string scale = sc && sc->mode() != sg::ScaleMode::none
                            ? std::string("\\n") + sg::EnumNameScaleMode(sc->mode()) + " " +
                                  sg::EnumNameGranularity(sc->granularity()) + " 2^" + std::to_string(sc->static_log2())
                            : "";
    bool lowp = t.type.dtype != DType::f32 && t.type.dtype != DType::i32;
    d += "  t" + std::to_string(id) + " [shape=box" + (lowp ? ", style=filled, fillcolor=\"#ffd8a8\"" : "") +
         ", label=\"" + t.name + "\\n" + type_str(t.type) + scale + "\"];\n";
  };
  const std::vector<OpInfoLoaded>& ops = m.programs()[p].ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    std::string op = "o" + std::to_string(i);
    d += "  " + op + " [label=\"" + std::string(op_info(ops[i].code).name) + "\"];\n";
    for (int in : ops[i].in) { tensor_node(in); d += "  t" + std::to_string(in) + " -> " + op + ";\n"; }
    for (int out : ops[i].out) { tensor_node(out); d += "  " + op + " -> t" + std::to_string(out) + ";\n"; }
  }
  return d + "}\n";
}

// --backend B: the ops of the model that B has no kernel for, from B's kernel
// table; for a backend not built into this binary, from ops.def's declared coverage.
Status print_coverage(const Model& m, const std::string& backend, bool json) {
  std::vector<std::string> missing;
  std::string how = "its kernel table";
  std::vector<std::string> built = built_backends();
  if (std::find(built.begin(), built.end(), backend) != built.end()) {
    SG_TRY(missing_ops(backend, m, &missing));
  } else {
    uint8_t bit = backend == "cuda" ? kBackendCuda : backend == "vulkan" ? kBackendVulkan : 0;
    if (!bit) return Status::Invalid("unknown backend '" + backend + "' (cpu, vulkan or cuda)");
    how = "ops.def's declared coverage (" + backend + " is not built into this sgrt)";
    std::set<OpCode> seen;
    for (const ProgramInfo& p : m.programs())
      for (const OpInfoLoaded& op : p.ops)
        if (!(op_info(op.code).backends & bit) && seen.insert(op.code).second)
          missing.push_back(std::string(op_info(op.code).name) + " at " + op.loc);
  }
  if (json) {
    std::string j = "{\"backend\":" + json_str(backend) + ",\"source\":" + json_str(how) + ",\"missing\":[";
    for (size_t i = 0; i < missing.size(); ++i) j += (i ? "," : "") + json_str(missing[i]);
    std::puts((j + "]}").c_str());
  } else if (missing.empty()) {
    std::printf("backend %s: every op has a kernel (%s)\n", backend.c_str(), how.c_str());
  } else {
    std::printf("backend %s lacks %zu op(s), by %s:\n", backend.c_str(), missing.size(), how.c_str());
    for (const std::string& op : missing) std::printf("  %s\n", op.c_str());
  }
  return Status::Ok();
}

}  // namespace

Status cmd_info(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  if (a.positional.size() != 1) return Status::Invalid("info takes one MODEL.sg (or MODEL.lua, FILE.gguf, a checkpoint folder)");
  if (a.positional[0].ends_with(".gguf")) {
    if (!a.flags.empty() || !a.sets.empty()) return Status::Invalid("info FILE.gguf takes no flags");
    return print_gguf_info(a.positional[0]);
  }
  if (struct stat st {}; ::stat(a.positional[0].c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    if (!a.flags.empty() || !a.sets.empty()) return Status::Invalid("info DIR (a checkpoint folder) takes no flags");
    return print_checkpoint_info(a.positional[0]);
  }
  std::shared_ptr<const Model> m;
  SG_TRY(load_model(a, a.positional[0], &m));
  if (a.has("--dot")) {
    // --dot FILE: the train_step program (or eval when there is none) as Graphviz.
    std::string prog = m->find_program("train_step") >= 0 ? "train_step" : "eval";
    if (m->find_program(prog) < 0) return Status::Invalid(a.positional[0] + ": has no program to draw");
    std::string d = dot_graph(*m, prog);
    SG_TRY(write_file_atomic(a.get("--dot"), d.data(), d.size()));
    std::fprintf(stderr, "wrote %s (%s); render with: dot -Tpng %s -o graph.png\n", a.get("--dot").c_str(), prog.c_str(),
                 a.get("--dot").c_str());
    return Status::Ok();
  }
  if (a.has("--backend")) return print_coverage(*m, a.get("--backend"), a.has("--json"));
  if (a.has("--ranks")) {
    int64_t ranks;
    SG_TRY(a.get_int("--ranks", 1, &ranks));
    if (ranks < 1 || ranks > 65536) return Status::Invalid("--ranks expects 1 to 65536 data-parallel ranks, got " + a.get("--ranks"));
    return print_ranks(*m, ranks, a.has("--json"));
  }
  if (a.has("--json")) print_json(*m);
  else print_human(*m);
  return Status::Ok();
}

}  // namespace sgrt::tool
