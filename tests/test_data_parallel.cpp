// Data-parallel training (sgrt/data_parallel.h, docs/distributed.md).
//  - split_train_step cuts train_step where its gradients are complete: before
//    the finiteness check at the fp32 state level, before each quantize_grad below it;
//  - under `mpirun -np 2`, 2 ranks x batch b follow 1 rank x batch 2b (losses
//    and final parameters to rounding) for the MLP and a small GPT, with
//    dropout too (a rank's masks are its rows' in the global batch, checked
//    on one process on the CPU and Vulkan); bf16 and fp8 gradients stay close
//    to fp32 and send 1/2 and 1/4 of its bytes; fp8 is E4M3 where the
//    recipe's gradients are (fp8-block), E5M2 otherwise;
//  - ranks that do not run the same model, or a rank that leaves, end the run
//    with one clear line instead of a hang;
//  - an infinite gradient on one rank skips that step on every rank;
//  - a checkpoint of 2 ranks resumes on 1 rank with twice the batch and back.
// scripts/test_two_hosts.sh (ctest two_hosts) runs 2 ranks as two machines.
// The mpirun cases skip with one line where sgrt is built without MPI.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <regex>

#include "harness.h"
#include "sgrt/checkpoint.h"
#include "sgrt/data_parallel.h"
#include "sgrt/rng.h"
#include "test_vulkan_support.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

const char* kMlp = "models/fashion_mlp.lua";
const char* kGpt = "models/gpt.lua";

std::vector<OpCode> codes(const ProgramInfo& p) {
  std::vector<OpCode> c;
  for (const OpInfoLoaded& op : p.ops) c.push_back(op.code);
  return c;
}

// The parts split_train_step made, in order.
std::vector<const ProgramInfo*> parts_of(const Model& m) {
  std::vector<const ProgramInfo*> parts;
  for (int p; (p = m.find_program(train_step_part(parts.size()))) >= 0;) parts.push_back(&m.programs()[p]);
  return parts;
}

// `script` compiled with `set` as `sgrt train --opt-level level --recipe recipe`
// compiles it ("" leaves the script's).
std::unique_ptr<Model> compiled(const std::string& script, const std::map<std::string, std::string>& set,
                                const std::string& level, const std::string& recipe = "") {
  dsl::ScriptOptions opts;
  opts.set = set;
  compiler::Graph g;
  Status st = dsl::load_script(SGRT_SOURCE_DIR "/" + script, opts, &g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  if (!level.empty()) g.optimizer.state = level;
  if (!recipe.empty()) {
    g.recipe = recipe;
    g.switches = {};
  }
  st = compiler::compile(g);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Model> m;
  st = Model::load_bytes(compiler::serialize(g), script, &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

// mpirun, allowed to run as root (CI containers) and to put 2 ranks on fewer cores.
std::string mpirun() {
#if defined(SGRT_WITH_MPI) && defined(SGRT_MPIEXEC)
  if (access(SGRT_MPIEXEC, X_OK) == 0)
    // detect_leaks=0: under ASan (scripts/test.sh SANITIZE=1) OpenMPI's own
    // allocations, and its unloaded plugins', are reported as leaks at exit. The
    // ranks are still checked for memory errors, and sgrt's leaks by every
    // single-process test; other builds ignore the variable.
    return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
           "ASAN_OPTIONS=detect_leaks=0 " SGRT_MPIEXEC;
#endif
  return "";
}

bool have_mpi() {
  static bool said = false;  // one line for all the cases
  if (!mpirun().empty()) return true;
  if (!said) MESSAGE("skipped: sgrt is built without MPI or mpirun is missing (libopenmpi-dev, openmpi-bin; SGRT_MPI)");
  said = true;
  return false;
}

// The numbers named `key` in a --log file, in order (steps, then the done event).
std::vector<double> logged(const std::string& log, const std::string& key) {
  std::vector<double> v;
  std::regex re("\"" + key + "\":([-0-9.e+]+)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    v.push_back(std::stod((*it)[1]));
  return v;
}

struct Run {
  std::string log, out;  // the --log file, rank 0's stdout
  test::TempDir dir;
};

// `sgrt train` of `model` with `flags`, on one rank or under mpirun -np ranks;
// one thread per rank (CI has two cores).
void train(const std::string& model, const std::string& flags, int ranks, Run* r) {
  std::string cmd = test::kTool + " train " + model + " " + flags + " --threads 1 --quiet --log " + r->dir.path +
                    "/log.jsonl --checkpoint " + r->dir.path + "/ck";
  if (ranks > 1) cmd = mpirun() + " -np " + std::to_string(ranks) + " " + cmd + " --comm-timeout 60";
  test::ToolResult o = test::run_shell(cmd);
  REQUIRE_MESSAGE(o.code == 0, cmd << "\n" << o.err);
  r->log = test::slurp(r->dir.path + "/log.jsonl");
  r->out = o.out;
}

// Every parameter of the checkpoint in `dir` (with the model.sg beside it), concatenated.
std::vector<float> params_of(const std::string& dir) {
  std::unique_ptr<Model> m;
  Status st = Model::load_file(dir + "/model.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Session> s = test::open_session(std::move(m));
  int64_t step;
  st = load_checkpoint(*s, dir, &step);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<float> all;
  for (const TensorInfo& t : s->model().tensors())
    if (t.role == Role::param) {
      std::vector<float> v = test::read_f32(*s, t.name);
      all.insert(all.end(), v.begin(), v.end());
    }
  return all;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]) / std::max(1e-6, std::fabs(a[i])));
  return d;
}

std::string sets(const std::map<std::string, std::string>& set) {
  std::string s;
  for (auto& [k, v] : set) s += " --set " + k + "=" + v;
  return s;
}

// The MLP at hidden 16.
std::unique_ptr<Model> compile_mlp(const std::string& level, const std::string& recipe) {
  return compiled(kMlp, {{"hidden", "16"}}, level, recipe);
}

}  // namespace

TEST_CASE("split_train_step cuts before the finiteness check at fp32, before each quantize_grad at O2") {
  for (const char* level : {"fp32", "O2"}) {
    CAPTURE(level);
    std::unique_ptr<Model> m = compile_mlp(level, "");
    std::unique_ptr<Model> split;
    Status st = split_train_step(*m, &split);
    REQUIRE_MESSAGE(st.ok(), st.message());
    const ProgramInfo& whole = split->programs()[split->find_program("train_step")];
    std::vector<const ProgramInfo*> parts = parts_of(*split);
    std::vector<OpCode> joined;
    for (const ProgramInfo* p : parts) {
      std::vector<OpCode> c = codes(*p);
      joined.insert(joined.end(), c.begin(), c.end());
    }
    CHECK(joined == codes(whole));  // the parts are train_step, in order
    int params = 0;
    for (const TensorInfo& t : m->tensors()) params += t.role == Role::param;
    // Every update reads its gradient after the last cut: all of backward is before it.
    size_t updates_in_last = 0;
    for (OpCode c : codes(*parts.back())) updates_in_last += c == OpCode::AdamwUpdate;
    CHECK(updates_in_last == static_cast<size_t>(params));
    if (std::string(level) == "fp32") {
      REQUIRE(parts.size() == 2);
      CHECK(parts[1]->ops.front().code == OpCode::CheckFinite);
    } else {
      REQUIRE(parts.size() == static_cast<size_t>(params) + 1);
      for (size_t i = 1; i < parts.size(); ++i) CHECK(parts[i]->ops.front().code == OpCode::QuantizeGrad);
    }
  }
}

// ZeRO-1's plan, checked against the model's shapes: at O2 Adam's m is E4M3
// (1 byte) and v FP16 (2), so the moments take 3 bytes per trained parameter.
TEST_CASE("ZeRO-1 on 2 ranks: each rank's arena holds about half the moments, the other half has no storage") {
  std::unique_ptr<Model> whole = compiled(kGpt, {{"n_layer", "2"}, {"n_embd", "16"}, {"n_head", "2"}, {"block", "16"}}, "O2");
  const double moments = 3.0 * static_cast<double>(count_params(whole->tensors()).trained);
  std::vector<int> keeper(whole->tensors().size(), -1);
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    std::unique_ptr<Model> m;
    Status st = split_train_step(*whole, &m);
    REQUIRE_MESSAGE(st.ok(), st.message());
    st = shard_optimizer_state(2, r, &m);
    REQUIRE_MESSAGE(st.ok(), st.message());
    uint64_t kept = 0, dropped = 0;
    for (size_t id = 0; id < m->tensors().size(); ++id) {
      const TensorInfo& t = m->tensors()[id];
      if (!t.sharded) continue;
      if (t.bytes > 0) {
        CHECK(keeper[id] == -1);  // no moment on both ranks
        keeper[id] = r;
        kept += t.bytes;
      } else {
        dropped += dtype_bytes(whole->tensors()[id].type.dtype, numel(t.type.shape));
      }
    }
    CHECK(static_cast<double>(kept + dropped) == moments);
    MESSAGE("rank " << r << " keeps " << kept << " of " << moments << " moment bytes");
    CHECK(static_cast<double>(kept) / moments == doctest::Approx(0.5).epsilon(0.1));
    // What a backend allocates shrinks by the dropped moments (each rounded up to
    // the 64-byte tensor alignment), and the rank's model still runs its step.
    CHECK(m->arena_bytes() <= whole->arena_bytes() - dropped);
    CHECK(m->arena_bytes() >= whole->arena_bytes() - dropped - 64 * m->tensors().size());
    std::unique_ptr<Session> s = test::open_session(std::shared_ptr<const Model>(std::move(m)));
    st = s->init(1, 10);
    REQUIRE_MESSAGE(st.ok(), st.message());
  }
  for (size_t id = 0; id < keeper.size(); ++id)
    if (whole->tensors()[id].role == Role::opt_state && (whole->tensors()[id].name.ends_with(".adam_m") ||
                                                         whole->tensors()[id].name.ends_with(".adam_v")))
      CHECK(keeper[id] >= 0);  // every moment is kept by some rank
}

// Checked against the formats: at O2 a weight is an FP16 master (2 bytes), its
// gradient E5M2 (1), its moments E4M3 + FP16 (3), plus 5 f32 opt scales per tensor.
TEST_CASE("sgrt info --ranks 2: per-rank bytes without ZeRO, and ZeRO-1's moments split between the ranks") {
  test::ToolResult r = test::run_tool({"info", kMlp, "--set", "hidden=32", "--opt-level", "O2", "--ranks", "2", "--json"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const double n = 784 * 32 + 32 + 32 * 10 + 10, scales = 4 * 5 * 4;
  std::vector<double> weights = logged(r.out, "weight_bytes"), grads = logged(r.out, "grad_bytes"),
                      state = logged(r.out, "state_bytes"), arena = logged(r.out, "arena_bytes");
  REQUIRE(state.size() == 3);  // every rank without ZeRO, then ranks 0 and 1
  for (size_t i = 0; i < 3; ++i) {
    CHECK(weights[i] == 2 * n);
    CHECK(grads[i] == n);
  }
  CHECK(state[0] == 3 * n + scales);
  CHECK(state[1] + state[2] == 3 * n + 2 * scales);  // each moment on one rank, the scales on both
  CHECK(state[1] == 3 * 784 * 32 + scales);          // fc1.w, the largest, alone on rank 0
  CHECK(arena[2] < arena[1]);
  CHECK(arena[1] < arena[0]);
}

TEST_CASE("--zero 1 on one process, or with a bad value, is one clear error") {
  test::ToolResult r = test::run_tool({"train", kMlp, "--zero", "1", "--steps", "1"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--zero 1 shards the optimizer state over data-parallel ranks: start sgrt train with mpirun -np N") !=
        std::string::npos);
  r = test::run_tool({"train", kMlp, "--zero", "2", "--steps", "1"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--zero expects 0 or 1") != std::string::npos);
}

// 3 x 1001 ones under dropout: x.grad is the step's mask times 1 / (1 - p).
const char kDropoutRows[] = R"(
  local sg = require "sg"
  local cfg = sg.config{ rows = 3 }
  local x = sg.param("x", {cfg.rows, 1001}, "ones")
  sg.loss(sg.sum(sg.sum(sg.dropout(x, 0.3))))
  sg.optimizer.sgd{ lr = 0.1 }
)";

TEST_CASE("a rank's dropout masks are its rows' in the global batch, on the cpu and vulkan") {
  std::shared_ptr<const Model> global, row;
  Status st = test::compile_lua(kDropoutRows, &global);
  REQUIRE_MESSAGE(st.ok(), st.message());
  st = test::compile_lua(kDropoutRows, &row, {{"rows", "1"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  const OpInfoLoaded* drop = nullptr;
  for (const OpInfoLoaded& op : global->programs()[global->find_program("train_step")].ops)
    if (op.code == OpCode::Dropout && !drop) drop = &op;
  REQUIRE(drop != nullptr);
  const uint64_t seed = static_cast<uint64_t>(drop->attrs.i("seed"));
  std::vector<std::string> backends{"cpu"};
  if (test::vulkan_device_present()) backends.push_back("vulkan");
  for (const std::string& be : backends) {
    CAPTURE(be);
    std::unique_ptr<Session> whole = test::open_session(global, be);
    test::run(*whole, "train_step");  // step 0
    const std::vector<float> all = test::read_f32(*whole, "x.grad");
    std::vector<float> rank_rows[3];
    for (int rank = 0; rank < 3; ++rank) {
      CAPTURE(rank);
      std::unique_ptr<Model> m;
      st = Model::load_bytes(std::vector<uint8_t>(row->file_bytes().begin(), row->file_bytes().end()), "row.sg", &m);
      REQUIRE_MESSAGE(st.ok(), st.message());
      place_dropout_masks(m.get(), rank);
      std::unique_ptr<Session> s = test::open_session(std::move(m), be);
      test::run(*s, "train_step");
      rank_rows[rank] = test::read_f32(*s, "x.grad");
      REQUIRE(rank_rows[rank].size() == 1001);
      size_t differ = 0, dropped = 0;
      for (size_t i = 0; i < 1001; ++i) {
        const bool keep = rng_uniform(seed, 0, static_cast<uint64_t>(rank) * 1001 + i) >= 0.3f;  // sgrt/rng.h
        differ += rank_rows[rank][i] != all[static_cast<size_t>(rank) * 1001 + i];
        differ += rank_rows[rank][i] != (keep ? 1.f / 0.7f : 0.f);
        dropped += !keep;
      }
      CHECK(differ == 0);
      CHECK(dropped > 250);  // ~0.3 x 1001
      CHECK(dropped < 350);
    }
    CHECK(rank_rows[0] != rank_rows[1]);  // the ranks' masks differ
  }
}

TEST_CASE("fp8 gradients travel as E4M3 where the recipe's gradients are E4M3, else as E5M2") {
  const std::map<std::string, Wire> expected{{"fp32", Wire::e5m2},   {"bf16", Wire::e5m2},   {"fp8", Wire::e5m2},
                                             {"mxfp8", Wire::e5m2},  {"nvfp4", Wire::e5m2},  {"fp8-row", Wire::e4m3},
                                             {"fp8-block", Wire::e4m3}};  // docs/recipes.md's gradient columns
  for (auto& [recipe, wire] : expected) {
    CAPTURE(recipe);
    std::unique_ptr<Model> m = compile_mlp("", recipe);
    CHECK(fp8_wire(*m) == wire);
    CHECK(grad_comm_label(GradComm::fp8, *m) == (wire == Wire::e4m3 ? "fp8 (E4M3)" : "fp8 (E5M2)"));
    CHECK(grad_comm_label(GradComm::bf16, *m) == "bf16");
  }
}

TEST_CASE("unknown --grad-comm is one clear error") {
  test::ToolResult r = test::run_tool({"train", kMlp, "--grad-comm", "fp16", "--steps", "1"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--grad-comm expects fp32, bf16 or fp8, got 'fp16'") != std::string::npos);
}

#ifndef SGRT_WITH_MPI
TEST_CASE("an sgrt built without MPI, started by mpirun with 2 ranks, says so (exit 2)") {
  test::ToolResult r = test::run_shell("OMPI_COMM_WORLD_SIZE=2 " + test::kTool + " train " + kMlp + " --steps 1");
  CHECK(r.code == 2);
  CHECK(r.err.find("started by mpirun with 2 ranks, but this sgrt was built without MPI") != std::string::npos);
}
#endif

// The MLP: 200 steps of 2 ranks x batch 50 against 1 rank x batch 100.
TEST_CASE("mpirun -np 2: the MLP's losses and parameters follow one rank with twice the batch; bf16 and fp8 stay close") {
  if (!have_mpi()) return;
  const std::map<std::string, std::string> small{{"hidden", "32"}};
  const std::string steps = " --steps 200 --log-every 10";
  Run one, two, bf16, fp8;
  train(kMlp, sets(small) + " --set batch=100" + steps, 1, &one);
  train(kMlp, sets(small) + " --set batch=50" + steps, 2, &two);
  std::vector<double> l1 = logged(one.log, "loss"), l2 = logged(two.log, "loss");
  REQUIRE(l1.size() == 21);  // 20 logged steps and the final evaluation
  // Not bit-identical: one rank sums the batch's 100 rows inside its GEMMs,
  // two ranks sum 50 each and then add the two halves.
  MESSAGE("MLP, 2 ranks x 50 against 1 x 100: largest relative loss difference " << max_rel_diff(l1, l2));
  CHECK(max_rel_diff(l1, l2) < 1e-5);
  std::vector<float> p1 = params_of(one.dir.path + "/ck"), p2 = params_of(two.dir.path + "/ck");
  REQUIRE(p1.size() == p2.size());
  double worst = 0;
  for (size_t i = 0; i < p1.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(p1[i] - p2[i])));
  MESSAGE("largest parameter difference " << worst);
  CHECK(worst < 1e-5);

  // Bytes per step, from the parameter count: a ring all-reduce's 2 (N-1)/N per element.
  const double n = static_cast<double>(p1.size());
  CHECK(logged(two.log, "comm_bytes").front() == doctest::Approx(n * 4).epsilon(1e-4));
  train(kMlp, sets(small) + " --set batch=50 --grad-comm bf16" + steps, 2, &bf16);
  train(kMlp, sets(small) + " --set batch=50 --grad-comm fp8" + steps, 2, &fp8);
  CHECK(logged(bf16.log, "comm_bytes").front() == doctest::Approx(n * 2).epsilon(1e-4));
  // fp8: one byte per element, plus the max-reduce of the 4 tensors' amaxes (f32).
  CHECK(logged(fp8.log, "comm_bytes").front() == doctest::Approx(n * 1 + 4 * 4).epsilon(1e-4));
  for (Run* r : {&bf16, &fp8}) {
    MESSAGE("final test loss " << logged(r->log, "loss").back() << " against fp32's " << l2.back());
    CHECK(logged(r->log, "loss").back() == doctest::Approx(l2.back()).epsilon(0.02));
    CHECK(logged(r->log, "accuracy").back() == doctest::Approx(logged(two.log, "accuracy").back()).epsilon(0.02));
  }
}

namespace {

// A small GPT (1 layer, 16 wide) on a repeated sentence, `sets` added, for
// `steps` steps: the largest relative difference of the losses logged every
// steps / 20 steps, 2 ranks x 2 against 1 x 4.
double gpt_two_ranks_against_one(const std::string& sets, int steps) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 17) + ". ";
  test::TempFile corpus(".txt", text);
  const std::string model = std::string(kGpt) + " --set n_layer=1 --set n_embd=16 --set n_head=2 --set block=16" + sets;
  const std::string flags =
      " --steps " + std::to_string(steps) + " --log-every " + std::to_string(steps / 20) + " --data " + corpus.path;
  Run one, two;
  train(model, "--set batch=4" + flags, 1, &one);
  train(model, "--set batch=2" + flags, 2, &two);
  return max_rel_diff(logged(one.log, "loss"), logged(two.log, "loss"));
}

}  // namespace

TEST_CASE("mpirun -np 2: a small GPT's losses follow one rank with twice the batch") {
  if (!have_mpi()) return;
  double d = gpt_two_ranks_against_one("", 200);
  MESSAGE("GPT, 2 ranks x 2 against 1 x 4: largest relative loss difference " << d);
  CHECK(d < 1e-5);
}

// ZeRO-1 changes where each update runs, not what it computes: the owner's
// update is the one every rank ran before, and the all-gather copies its bits.
TEST_CASE("mpirun -np 2 --zero 1 at O2: the same losses and checkpoint as without; a ZeRO checkpoint resumes without it") {
  if (!have_mpi()) return;
  const std::string flags = " --set hidden=32 --set batch=50 --opt-level O2 --steps 100 --log-every 10";
  Run plain, zero, resumed;
  train(kMlp, flags, 2, &plain);
  train(kMlp, flags + " --zero 1", 2, &zero);
  std::regex loss_re("\"loss\":[-0-9.e+]+");
  auto losses = [&](const std::string& log) {
    std::vector<std::string> v;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), loss_re); it != std::sregex_iterator(); ++it) v.push_back(it->str());
    return v;
  };
  REQUIRE(losses(plain.log).size() == 11);
  CHECK(losses(zero.log) == losses(plain.log));  // bit-identical, as printed to 9 digits
  CHECK(test::slurp(zero.dir.path + "/ck/checkpoint.sgck") == test::slurp(plain.dir.path + "/ck/checkpoint.sgck"));
  // The gradients' all-reduce plus the all-gather of the larger rank's weights:
  // fc1.w alone (784 x 32, FP16 masters) and its 5 f32 opt scales.
  const double grads = logged(plain.log, "comm_bytes").front();
  CHECK(logged(zero.log, "comm_bytes").front() == grads + 784 * 32 * 2 + 5 * 4);

  // Saved under ZeRO at step 50 (rank 0 gathers the moments), resumed without it.
  const std::string cmd = test::kTool + " train " + kMlp + flags + " --threads 1 --quiet --comm-timeout 60 --log " +
                          resumed.dir.path + "/log.jsonl --checkpoint " + resumed.dir.path + "/ck";
  test::ToolResult o = test::run_shell(mpirun() + " -np 2 " + cmd + " --zero 1 --stop-after 50");
  REQUIRE_MESSAGE(o.code == 0, o.err);
  o = test::run_shell(mpirun() + " -np 2 " + cmd + " --resume");
  REQUIRE_MESSAGE(o.code == 0, o.err);
  CHECK(losses(test::slurp(resumed.dir.path + "/log.jsonl")) == losses(plain.log));
  CHECK(test::slurp(resumed.dir.path + "/ck/checkpoint.sgck") == test::slurp(plain.dir.path + "/ck/checkpoint.sgck"));
}

// Dropout on the embeddings, every block's attention and MLP outputs: the
// ranks draw their rows' masks of the global batch.
TEST_CASE("mpirun -np 2: a small GPT with dropout follows one rank with twice the batch") {
  if (!have_mpi()) return;
  double d = gpt_two_ranks_against_one(" --set dropout=0.1", 40);
  MESSAGE("GPT with dropout 0.1, 2 ranks x 2 against 1 x 4: largest relative loss difference " << d);
  CHECK(d < 1e-5);
}

TEST_CASE("mpirun -np 2: fp8-block's gradients travel as E4M3, one byte each, and stay close to fp32") {
  if (!have_mpi()) return;
  const std::string model = std::string(kMlp) + " --set hidden=16 --set batch=50 --recipe fp8-block";
  const std::string flags = " --steps 30 --log-every 10";
  Run fp32, fp8;
  train(model, flags, 2, &fp32);
  train(model, " --grad-comm fp8" + flags, 2, &fp8);
  CHECK(fp8.out.find("2 ranks, fp8 (E4M3) gradients") != std::string::npos);
  const double n = 16 * 784 + 16 + 10 * 16 + 10;  // parameters; 4 tensors' f32 amaxes besides
  CHECK(logged(fp8.log, "comm_bytes").front() == doctest::Approx(n + 4 * 4).epsilon(1e-4));
  MESSAGE("fp8-block, E4M3 exchange: final test loss " << logged(fp8.log, "loss").back() << " against fp32's "
          << logged(fp32.log, "loss").back());
  CHECK(logged(fp8.log, "loss").back() == doctest::Approx(logged(fp32.log, "loss").back()).epsilon(0.02));
}

TEST_CASE("mpirun -np 2: ranks with different models, or a rank that leaves, end the run with a clear line") {
  if (!have_mpi()) return;
  const std::string tool = test::kTool + " train " + kMlp + " --set hidden=16 --set batch=50 --threads 1 --quiet";
  test::ToolResult o = test::run_shell(mpirun() + " -np 1 " + tool + " : -np 1 " + tool + " --set lr=0.01");
  CHECK(o.code != 0);
  CHECK(o.err.find("rank 1's model (compiled with other flags or from another file) differs from rank 0's") != std::string::npos);

  // Rank 1 stops after step 3; rank 0 waits for it 2 s in step 4's exchange.
  o = test::run_shell(mpirun() + " -np 1 " + tool + " --steps 20 --comm-timeout 2 : -np 1 " + tool + " --steps 20 --stop-after 3");
  CHECK(o.code != 0);
  CHECK(o.err.find("rank 0 of 2: no answer from the other ranks in alltoall for 2 s (--comm-timeout): a rank died or hangs") !=
        std::string::npos);
}

namespace {

// Three classes around (1, 1, 1, 1) + e_class, every feature positive but one:
// row `bad` has a 0, so its log is -inf and the gradient of log(x p) infinite.
const char kLogModel[] = R"(
local sg = require "sg"
local cfg = sg.config{ batch = 10 }
local x = sg.input("features", {cfg.batch, 4})
local y = sg.input("label", {cfg.batch}, "i32")
local logits = sg.nn.linear(x, 3, { name = "fc" })
local p = sg.param("p", {4}, "ones")
sg.loss(sg.softmax_cross_entropy(logits, y) + sg.scale(sg.mean(sg.mean(sg.log(x * p))), -1e-3))
sg.metric("accuracy", sg.accuracy(logits, y))
sg.data.csv{ features = x, label = y }
sg.optimizer.sgd{ lr = 0.1 }
)";

std::string blobs_csv(int rows, int bad) {
  std::string csv;
  for (int i = 0; i < rows; ++i) {
    int label = i % 3;
    for (int j = 0; j < 4; ++j) {
      double v = 1.0 + (j == label) + 0.3 * ((static_cast<unsigned>(i * 4 + j) * 2654435761u >> 8) % 1000 / 1000.0 - 0.5);
      csv += std::to_string(i == bad && j == 1 ? 0.0 : v) + ",";
    }
    csv += std::to_string(label) + "\n";
  }
  return csv;
}

// The steps whose log line says "nonfinite": true (evaluations aside).
std::vector<int> nonfinite_steps(const std::string& log) {
  std::vector<int> steps;
  std::regex re("\\{\"step\":([0-9]+),[^\n]*\"nonfinite\":true");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    steps.push_back(std::stoi((*it)[1]));
  return steps;
}

}  // namespace

TEST_CASE("mpirun -np 2: an infinite gradient on one rank only skips that step on every rank, as one rank with twice the batch does") {
  if (!have_mpi()) return;
  test::TempFile model(".lua", kLogModel), data(".csv", blobs_csv(100, 0));
  const std::string flags = " --steps 9 --log-every 1 --data " + data.path;  // 90 training examples: one epoch
  Run one, two, half;
  train(model.path, "--set batch=10" + flags, 1, &one);
  train(model.path, "--set batch=5" + flags, 2, &two);
  // Rank 1's shard of step s is one rank's step 2s + 1 with half the batch: the
  // bad row is there, so only rank 1 saw the infinity.
  train(model.path, "--set batch=5 --steps 18 --log-every 1 --data " + data.path, 1, &half);
  std::vector<int> bad_half = nonfinite_steps(half.log);
  REQUIRE(bad_half.size() == 1);
  CHECK(bad_half[0] % 2 == 0);
  const int step = bad_half[0] / 2;
  CHECK(nonfinite_steps(one.log) == std::vector<int>{step});
  CHECK(nonfinite_steps(two.log) == std::vector<int>{step});  // rank 0 logs the step as skipped
  CHECK(logged(two.log, "nonfinite_steps").back() == 1);
  // The other steps' losses and the final parameters follow one rank: the
  // skipped step changed nothing on either rank (they would differ, and the
  // run's final check of the ranks' state would fail, had rank 1 applied it).
  MESSAGE("step " << step << " skipped; the other losses: largest relative difference "
          << max_rel_diff(logged(one.log, "loss"), logged(two.log, "loss")));
  CHECK(max_rel_diff(logged(one.log, "loss"), logged(two.log, "loss")) < 1e-5);
  std::vector<float> p1 = params_of(one.dir.path + "/ck"), p2 = params_of(two.dir.path + "/ck");
  REQUIRE(p1.size() == p2.size());
  for (size_t i = 0; i < p1.size(); ++i) CHECK(p2[i] == doctest::Approx(p1[i]).epsilon(1e-5));
}

TEST_CASE("a checkpoint of 2 ranks x batch 5 resumes on 1 rank x batch 10 and back, following one uninterrupted rank") {
  if (!have_mpi()) return;
  test::TempFile model(".lua", kLogModel), data(".csv", blobs_csv(100, -1));
  // 90 training examples: 9 steps an epoch; the runs stop mid-epoch, at steps 12 and 24 of 36.
  const std::string flags = " --steps 36 --log-every 1 --data " + data.path;
  Run one, moved;
  train(model.path, "--set batch=10" + flags, 1, &one);
  train(model.path, "--set batch=5 --stop-after 12" + flags, 2, &moved);
  train(model.path, "--set batch=10 --resume --stop-after 24" + flags, 1, &moved);
  // Another number of examples a step is another run: one clear line.
  test::ToolResult o = test::run_tool({"train", model.path, "--set", "batch=5", "--resume", "--checkpoint", moved.dir.path + "/ck",
                                       "--data", data.path, "--threads", "1"});
  CHECK(o.code == 2);
  CHECK(o.err.find("saved by steps of 10 examples, this run's are 1 rank x batch 5 x accumulate 1 = 5: give each rank the "
                   "batch that makes 10") != std::string::npos);
  // A compiled .sg cannot take another batch.
  o = test::run_tool({"train", moved.dir.path + "/ck/model.sg", "--set", "batch=5", "--resume", "--checkpoint",
                      moved.dir.path + "/ck", "--data", data.path, "--threads", "1"});
  CHECK(o.code == 2);
  CHECK(o.err.find("--set batch=5 conflicts with the checkpoint's --set batch=10 (" + moved.dir.path +
                   "/ck/model.flags); another batch needs the script, to compile it") != std::string::npos);
  train(model.path, "--set batch=5 --resume" + flags, 2, &moved);
  std::vector<double> l1 = logged(one.log, "loss"), l2 = logged(moved.log, "loss");
  REQUIRE(l1.size() == 36 + 4);  // every step, 3 epochs' evaluations and the final one
  MESSAGE("2 ranks, then 1, then 2 against 1 rank throughout: largest relative loss difference " << max_rel_diff(l1, l2));
  CHECK(max_rel_diff(l1, l2) < 1e-5);
  std::vector<float> p1 = params_of(one.dir.path + "/ck"), p2 = params_of(moved.dir.path + "/ck");
  REQUIRE(p1.size() == p2.size());
  for (size_t i = 0; i < p1.size(); ++i) CHECK(p2[i] == doctest::Approx(p1[i]).epsilon(1e-5));
}
