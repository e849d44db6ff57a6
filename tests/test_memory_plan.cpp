// The static memory plan, checked against liveness computed here from the
// programs' op lists (independently of compiler/memory_plan.cpp):
//  * no two tensors live at the same time in any program share an arena byte
//    (every pair is checked), except an output written over an input by an
//    op whose kernels allow it (op_overwritable_input: the cross-entropy
//    gradients), at the input's offset, when that op is the input's last touch;
//  * every tensor lies inside the arena, with the bytes its type needs;
//  * persistent tensors (params, optimizer state, inputs) overlap nothing;
//  * no program reads a transient tensor before writing it (a transient value
//    cannot survive from one program to the next);
//  * for a deep MLP the arena is well below the sum of all tensors.
#include <algorithm>
#include <sstream>

#include "harness.h"

using namespace sgrt;

namespace {

struct PTensor {
  std::string name;
  uint64_t offset = 0, bytes = 0, need = 0;  // need: what the type takes
  bool persistent = false;
};
struct POp {
  OpCode code;
  std::vector<int> in, out;
};
struct PProgram {
  std::string name;
  std::vector<POp> ops;
};
struct Plan {
  std::vector<PTensor> tensors;
  std::vector<PProgram> programs;
  std::vector<int> read_after;  // loss, metrics, outputs: read back once a program ends
  uint64_t arena = 0;
};

Plan from_graph(const compiler::Graph& g) {
  Plan p;
  for (const compiler::Tensor& t : g.tensors)
    p.tensors.push_back({t.name, t.offset, t.bytes, dtype_bytes(t.type.dtype, numel(t.type.shape)), t.persistent});
  for (const compiler::Program& pr : g.programs) {
    PProgram pp{pr.name, {}};
    for (const compiler::Op& op : pr.ops) pp.ops.push_back({op.code, op.in, op.out});
    p.programs.push_back(std::move(pp));
  }
  p.read_after.push_back(g.loss);
  for (auto& [n, id] : g.metrics) p.read_after.push_back(id);
  for (auto& [n, id] : g.outputs) p.read_after.push_back(id);
  p.arena = g.arena_bytes;
  return p;
}

Plan from_model(const Model& m) {
  Plan p;
  for (const TensorInfo& t : m.tensors())
    p.tensors.push_back({t.name, t.offset, t.bytes, dtype_bytes(t.type.dtype, numel(t.type.shape)), t.persistent});
  for (const ProgramInfo& pr : m.programs()) {
    PProgram pp{pr.name, {}};
    for (const OpInfoLoaded& op : pr.ops) pp.ops.push_back({op.code, op.in, op.out});
    p.programs.push_back(std::move(pp));
  }
  p.read_after.push_back(m.loss());
  for (auto& [n, id] : m.metrics()) p.read_after.push_back(id);
  for (auto& [n, id] : m.outputs()) p.read_after.push_back(id);
  p.arena = m.arena_bytes();
  return p;
}

bool bytes_overlap(const PTensor& a, const PTensor& b) {
  return a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// Every violation, one line each; empty when the plan is sound.
std::vector<std::string> violations(const Plan& p) {
  std::vector<std::string> v;
  const int n = static_cast<int>(p.tensors.size());
  std::vector<bool> used(n, false);
  for (const PProgram& pr : p.programs)
    for (const POp& op : pr.ops) {
      for (int id : op.in) used[id] = true;
      for (int id : op.out) used[id] = true;
    }
  // Placement and size.
  for (int i = 0; i < n; ++i) {
    const PTensor& t = p.tensors[i];
    if ((used[i] || t.persistent) && t.bytes != t.need)
      v.push_back(t.name + ": " + std::to_string(t.bytes) + " bytes, its type needs " + std::to_string(t.need));
    if (t.offset + t.bytes > p.arena) v.push_back(t.name + ": ends at " + std::to_string(t.offset + t.bytes) + ", past the arena");
  }
  // Persistent tensors overlap nothing, at any time.
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if ((p.tensors[i].persistent || p.tensors[j].persistent) && bytes_overlap(p.tensors[i], p.tensors[j]))
        v.push_back("persistent overlap: " + p.tensors[i].name + " and " + p.tensors[j].name);
  // Per program: inclusive live ranges [first touch, last touch] of transient
  // tensors, extended to the end for values read back after the program.
  for (const PProgram& pr : p.programs) {
    const int end = static_cast<int>(pr.ops.size());
    std::vector<int> first(n, -1), last(n, -1);
    std::vector<bool> written(n, false);
    for (int k = 0; k < end; ++k) {
      for (int id : pr.ops[k].in) {
        if (!p.tensors[id].persistent && !written[id])
          v.push_back(pr.name + ": op " + std::to_string(k) + " reads transient " + p.tensors[id].name + " before any op writes it");
        if (first[id] < 0) first[id] = k;
        last[id] = k;
      }
      for (int id : pr.ops[k].out) {
        written[id] = true;
        if (first[id] < 0) first[id] = k;
        last[id] = k;
      }
    }
    for (int id : p.read_after)
      if (id >= 0 && first[id] >= 0) last[id] = end;
    // y written over x: by the op that touches x last and y first, which may.
    auto overwrites = [&](int x, int y) {
      if (last[x] != first[y] || last[x] >= end) return false;
      const POp& op = pr.ops[last[x]];
      const int k = op_overwritable_input(op.code);
      return k >= 0 && op.in[k] == x && op.out[0] == y && p.tensors[x].offset == p.tensors[y].offset;
    };
    std::vector<int> live;
    for (int i = 0; i < n; ++i)
      if (first[i] >= 0 && !p.tensors[i].persistent) live.push_back(i);
    for (size_t a = 0; a < live.size(); ++a)
      for (size_t b = a + 1; b < live.size(); ++b) {
        int x = live[a], y = live[b];
        bool together = first[x] <= last[y] && first[y] <= last[x];
        if (together && bytes_overlap(p.tensors[x], p.tensors[y]) && !overwrites(x, y) && !overwrites(y, x))
          v.push_back(pr.name + ": " + p.tensors[x].name + " [ops " + std::to_string(first[x]) + ".." + std::to_string(last[x]) +
                      "] and " + p.tensors[y].name + " [ops " + std::to_string(first[y]) + ".." + std::to_string(last[y]) +
                      "] are live together and overlap");
      }
  }
  return v;
}

std::string join(const std::vector<std::string>& v, size_t max = 20) {
  std::ostringstream o;
  for (size_t i = 0; i < v.size() && i < max; ++i) o << "\n  " << v[i];
  if (v.size() > max) o << "\n  ... " << v.size() - max << " more";
  return o.str();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string deep_mlp(int batch, int width, int layers) {
  std::ostringstream o;
  o << "local sg = require \"sg\"\n"
    << "local x = sg.input(\"image\", {" << batch << ", " << width << "})\n"
    << "local y = sg.input(\"label\", {" << batch << "}, \"i32\")\n"
    << "local widths = {}\n"
    << "for i = 1, " << layers - 1 << " do widths[i] = " << width << " end\n"
    << "widths[" << layers << "] = 10\n"
    << "local logits = sg.nn.mlp(x, widths, {name = \"deep\", activation = \"gelu\"})\n"
    << "sg.loss(sg.softmax_cross_entropy(logits, y))\n"
    << "sg.metric(\"accuracy\", sg.accuracy(logits, y))\n"
    << "sg.output(\"logits\", logits)\n"
    << "sg.optimizer.adamw{ lr = 1e-3, weight_decay = 0.01 }\n";
  return o.str();
}

void check_graph_and_model(const std::string& lua, const std::map<std::string, std::string>& set, compiler::Graph* g) {
  Status st = test::compile_graph(lua, g, set);
  REQUIRE_MESSAGE(st.ok(), st.message());
  REQUIRE(g->programs.size() >= 2);
  std::vector<std::string> v = violations(from_graph(*g));
  CHECK_MESSAGE(v.empty(), v.size() << " violations in the compiler's plan:" << join(v));
  std::unique_ptr<Model> m;
  st = Model::load_bytes(compiler::serialize(*g), "plan.sg", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  v = violations(from_model(*m));
  CHECK_MESSAGE(v.empty(), v.size() << " violations in the loaded plan:" << join(v));
}

}  // namespace

TEST_CASE("fashion MLP: no two live tensors overlap, everything inside the arena") {
  compiler::Graph g;
  check_graph_and_model(read_text(SGRT_SOURCE_DIR "/models/fashion_mlp.lua"), {}, &g);
  // Shrunk: a different tensor size mix, so different placement decisions.
  compiler::Graph small;
  check_graph_and_model(read_text(SGRT_SOURCE_DIR "/models/fashion_mlp.lua"), {{"batch", "3"}, {"hidden", "7"}}, &small);
}

TEST_CASE("fashion CNN (im2col patches, pooling windows): no two live tensors overlap") {
  compiler::Graph g;
  check_graph_and_model(read_text(SGRT_SOURCE_DIR "/models/fashion_cnn.lua"), {{"batch", "3"}}, &g);
}

TEST_CASE("deep MLP: plan sound, and the arena well below the sum of all tensors") {
  compiler::Graph g;
  check_graph_and_model(deep_mlp(256, 128, 12), {}, &g);
  uint64_t all = 0, transient = 0, persistent = 0;
  for (const compiler::Tensor& t : g.tensors) {
    all += t.bytes;
    (t.persistent ? persistent : transient) += t.bytes;
  }
  const uint64_t transient_arena = g.arena_bytes - g.persistent_bytes;
  MESSAGE("deep MLP (batch 256, 12 layers of 128): arena " << g.arena_bytes << " B, sum of all tensors " << all
          << " B, ratio " << double(g.arena_bytes) / double(all) << "; transient part " << transient_arena << " B of "
          << transient << " B summed, ratio " << double(transient_arena) / double(transient));
  CHECK(persistent <= g.persistent_bytes);
  CHECK(g.arena_bytes < 0.6 * double(all));
  // Backward needs every layer's activations until its gradient is taken, and
  // weight gradients live until the optimizer runs, so ~1/3 is close to the floor.
  CHECK(transient_arena < 0.4 * double(transient));
  // The plan's own figure for the naive size agrees with the sum (up to alignment).
  CHECK(g.naive_bytes >= all);
  CHECK(g.naive_bytes <= all + 64 * g.tensors.size());
}

// The cross-entropy gradient (the logits' shape) takes the logits' bytes when
// nothing reads them after it, and not when they are read back as an output.
TEST_CASE("a cross-entropy gradient is written over its logits when they die there") {
  for (const char* loss : {"sg.softmax_cross_entropy(logits, y)",
                           "sg.nn.masked_cross_entropy(logits, y, sg.relu(sg.reshape(sg.slice(x, 1, 0, 1), {64})))"}) {
    for (bool output : {false, true}) {
      CAPTURE(loss);
      CAPTURE(output);
      std::string lua = std::string(R"(
local sg = require "sg"
local x = sg.input("x", {64, 32})
local y = sg.input("y", {64}, "i32")
local logits = sg.nn.mlp(x, {48, 1000}, {name = "m"})
sg.loss()") + loss + ")\n" + (output ? "sg.output(\"logits\", logits)\n" : "") + "sg.optimizer.sgd{ lr = 0.1 }\n";
      compiler::Graph g;
      check_graph_and_model(lua, {}, &g);
      int z = -1, dz = -1;
      for (const compiler::Op& op : g.programs[0].ops)
        if (op_overwritable_input(op.code) == 0) z = op.in[0], dz = op.out[0];
      REQUIRE(dz >= 0);
      CHECK((g.tensors[dz].offset == g.tensors[z].offset) == !output);
      if (!output) continue;
      // The checker refuses the share where the logits live on (read back).
      Plan p = from_graph(g);
      p.tensors[dz].offset = p.tensors[z].offset;
      CHECK_FALSE(violations(p).empty());
    }
  }
}

TEST_CASE("the checker finds an overlap that the plan did not make") {
  compiler::Graph g;
  check_graph_and_model(deep_mlp(8, 16, 3), {}, &g);
  Plan p = from_graph(g);
  REQUIRE(violations(p).empty());

  SUBCASE("two transient tensors live at once moved onto each other") {
    // The first op of train_step that reads one transient tensor and writes another.
    const PProgram& pr = p.programs[0];
    int a = -1, b = -1;
    for (const POp& op : pr.ops) {
      for (int i : op.in)
        if (!p.tensors[i].persistent) a = i;
      if (a >= 0 && !p.tensors[op.out[0]].persistent && op.out[0] != a) {
        b = op.out[0];
        break;
      }
      a = -1;
    }
    REQUIRE(a >= 0);
    REQUIRE(b >= 0);
    p.tensors[b].offset = p.tensors[a].offset;
    std::vector<std::string> v = violations(p);
    REQUIRE(!v.empty());
    CHECK(v[0].find(p.tensors[a].name) != std::string::npos);
  }
  SUBCASE("a transient tensor placed on a parameter") {
    int param = g.find_tensor("deep.fc1.w"), act = -1;
    for (size_t i = 0; i < p.tensors.size(); ++i)
      if (!p.tensors[i].persistent && p.tensors[i].bytes > 0) act = static_cast<int>(i);
    REQUIRE(param >= 0);
    REQUIRE(act >= 0);
    p.tensors[act].offset = p.tensors[param].offset;
    std::vector<std::string> v = violations(p);
    REQUIRE(!v.empty());
    CHECK(v[0].find("persistent overlap") != std::string::npos);
  }
  SUBCASE("a tensor past the end of the arena") {
    uint64_t top = 0;
    for (const PTensor& t : p.tensors) top = std::max(top, t.offset + t.bytes);
    REQUIRE(top <= p.arena);
    p.arena = top - 1;
    CHECK(!violations(p).empty());
  }
  SUBCASE("the loss read back after the program is kept alive to the end") {
    // Place a tensor written by the last op of eval onto the loss: only the
    // read-after rule makes this a conflict.
    int eval = g.find_program("eval");
    const PProgram& pr = p.programs[eval];
    int loss = g.loss;
    int late = -1;
    for (int k = static_cast<int>(pr.ops.size()) - 1; k >= 0 && late < 0; --k)
      for (int o : pr.ops[k].out)
        if (o != loss && !p.tensors[o].persistent) late = o;
    REQUIRE(late >= 0);
    p.tensors[late].offset = p.tensors[loss].offset;
    CHECK(!violations(p).empty());
  }
}
