// What a model script gets wrong must fail at compile time, naming the file
// and line, instead of training something else silently: unknown option keys
// (with the nearest valid key), inputs no data set binds, and shapes whose
// element count overflows (from the script or from --set), arithmetic operands
// that are neither tensors nor numbers, slices, pads and concats that do not fit.
#include "harness.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

const char kHead[] =
    "local sg = require \"sg\"\n"
    "local nn = sg.nn\n"
    "local x = sg.input(\"image\", { 4, 784 })\n"
    "local y = sg.input(\"label\", { 4 }, \"i32\")\n";

// The compile error of kHead + body, as the script dir/name.
std::string compile_error(const test::TempDir& dir, const std::string& name, const std::string& body,
                          const std::map<std::string, std::string>& set = {}) {
  std::string path = dir.file(name, kHead + body);
  dsl::ScriptOptions opts;
  opts.set = set;
  compiler::Graph g;
  Status st = dsl::load_script(path, opts, &g);
  if (st.ok()) st = compiler::compile(g);
  REQUIRE_MESSAGE(!st.ok(), name << " compiled");
  CHECK(st.code() == StatusCode::invalid_input);
  return st.message();
}

const char kValidTail[] =
    "sg.loss(sg.softmax_cross_entropy(logits, y))\n"
    "sg.data.fashion_mnist{ image = x, label = y }\n"
    "sg.optimizer.sgd{ lr = 0.1 }\n";

}  // namespace

TEST_CASE("an unknown option key fails at its line with the nearest valid key, for every option table") {
  test::TempDir d;
  struct Case { const char* call; const char* fn; const char* typo; const char* suggestion; };
  const Case cases[] = {
      {"local logits = nn.linear(x, 10, { bais = false })", "nn.linear", "bais", "bias"},
      {"local logits = nn.mlp(x, { 10 }, { activaton = 'gelu' })", "nn.mlp", "activaton", "activation"},
      {"local logits = sg.matmul(x, sg.param('w', { 10, 784 }), { transb = true })", "sg.matmul", "transb", "trans_b"},
      {"local logits = nn.linear(nn.layernorm(x, { epsilon = 1e-6 }), 10)", "nn.layernorm", "epsilon", "eps"},
      {"local logits = nn.linear(nn.rmsnorm(x, { nme = 'n' }), 10)", "nn.rmsnorm", "nme", "name"},
      {"local logits = nn.linear(x, 10)\nsg.optimizer.adamw{ lr = 1e-3, betas = { 0.9, 0.99 } }", "sg.optimizer.adamw",
       "betas", "beta1"},
      {"local logits = nn.linear(x, 10)\nsg.optimizer.sgd{ lr = 0.1, momentun = 0.5 }", "sg.optimizer.sgd", "momentun",
       "momentum"},
      {"local logits = nn.linear(x, 10)\nsg.optimizer.sgd{ lr = 0.1, schedule = sg.schedule.cosine{ warmpu = 5 } }",
       "sg.schedule.cosine", "warmpu", "warmup"},
      {"local logits = nn.linear(x, 10)\nsg.train{ epoch = 3 }", "sg.train", "epoch", "epochs"},
      {"local logits = nn.linear(x, 10)\nsg.recipe('fp8', { keeps = { 'fc' } })", "sg.recipe", "keeps", "keep"},
      {"local logits = nn.linear(x, 10)\nsg.data.fashion_mnist{ image = x, label = y, shufle = false }",
       "sg.data.fashion_mnist", "shufle", "shuffle"},
      {"local logits = nn.linear(x, 10)\nsg.data.text{ token = x }", "sg.data.text", "token", "tokens"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.call);
    std::string lines(c.call);
    int line = 5 + static_cast<int>(std::count(lines.begin(), lines.end(), '\n'));
    std::string msg = compile_error(d, "opts.lua", lines + "\n" + kValidTail);
    INFO(msg);
    CHECK(msg.find(d.path + "/opts.lua:" + std::to_string(line) + ": " + c.fn + ": unknown option '" + c.typo +
                   "' (did you mean '" + c.suggestion + "'?") != std::string::npos);
    CHECK(msg.find(c.suggestion) != std::string::npos);
  }
  // nn layers built on others check theirs too; a key nothing resembles gets the list only.
  std::string msg = compile_error(d, "block.lua",
                                  "local t = sg.input('t', { 2, 8, 16 })\nlocal h = nn.block(t, { n_head = 2, zzzzzz = 1 })\n" +
                                      std::string("local logits = nn.linear(x, 10)\n") + kValidTail);
  CHECK(msg.find("block.lua:6: nn.block: unknown option 'zzzzzz' (options: dropout, hidden, mlp, n_head, name, norm, rope)") !=
        std::string::npos);
  // A schedule must come from sg.schedule (a hand-made table used to be half read).
  msg = compile_error(d, "sched.lua", "local logits = nn.linear(x, 10)\nsg.optimizer.sgd{ lr = 0.1, schedule = 'cosine' }\n" +
                                          std::string(kValidTail));
  CHECK(msg.find("sched.lua:6: sg.optimizer.sgd: schedule must come from sg.schedule") != std::string::npos);
}

TEST_CASE("an input that train_step or eval reads but the data set does not bind is a compile error naming it") {
  test::TempDir d;
  std::string msg = compile_error(d, "unbound.lua",
                                  "local logits = nn.linear(x, 10)\n"
                                  "sg.loss(sg.softmax_cross_entropy(logits, y))\n"
                                  "sg.metric('accuracy', sg.accuracy(logits, y))\n"
                                  "sg.data.fashion_mnist{ image = x }\n"
                                  "sg.optimizer.sgd{ lr = 0.1 }\n");
  CHECK(msg.find(d.path + "/unbound.lua:4: input 'label' is read by train_step but the fashion_mnist data set does not bind it") !=
        std::string::npos);
  // Bound: compiles. Without a data set (a graph driven through the C API) every input is the caller's.
  compiler::Graph g;
  CHECK(test::compile_graph(kHead + std::string("local logits = nn.linear(x, 10)\n") + kValidTail, &g).ok());
  compiler::Graph g2;
  CHECK(test::compile_graph(kHead + std::string("local logits = nn.linear(x, 10)\nsg.loss(sg.softmax_cross_entropy(logits, y))\n"
                                                           "sg.optimizer.sgd{ lr = 0.1 }\n"),
                            &g2).ok());
}

TEST_CASE("an inference-only input need not be bound: infer reads it, train_step and eval do not") {
  // The text model binds tokens and targets; a `prompt_scale` input only the
  // infer program's output reads is the caller's to set.
  compiler::Graph g;
  Status st = test::compile_graph(kHead + std::string(
      "local s = sg.input('scale', { 4, 10 })\n"
      "local logits = nn.linear(x, 10)\n"
      "sg.output('scaled', logits * s)\n") + kValidTail, &g);
  CHECK_MESSAGE(st.ok(), st.message());
}

TEST_CASE("a shape whose element count overflows is a compile error at its line, from the script or --set") {
  test::TempDir d;
  std::string msg = compile_error(d, "huge.lua", "local w = sg.param('w', { 1 << 31, 1 << 31 })\n");
  CHECK(msg.find("huge.lua:5: shape [2147483648, 2147483648] has more than 2^40 elements") != std::string::npos);
  msg = compile_error(d, "huge_set.lua",
                      "local cfg = sg.config{ hidden = 100 }\nlocal logits = nn.linear(x, cfg.hidden)\n" + std::string(kValidTail),
                      {{"hidden", "4611686018427387904"}});
  CHECK(msg.find("huge_set.lua:6: shape [4611686018427387904, 784] has more than 2^40 elements") != std::string::npos);
  // Each operand within the bound, the product past it: the op's output is refused.
  msg = compile_error(d, "huge_matmul.lua",
                      "local a = sg.param('a', { 1 << 30, 1 })\nlocal b = sg.param('b', { 1 << 30, 1 })\n"
                      "local c = sg.matmul(a, b, { trans_b = true })\n");
  CHECK(msg.find("huge_matmul.lua:7: matmul: the output f32[1073741824, 1073741824] has more than 2^40 elements") !=
        std::string::npos);
  msg = compile_error(d, "huge_reshape.lua", "local r = sg.reshape(x, { 1 << 40, 1 << 40, 0 })\n");
  CHECK(msg.find("huge_reshape.lua:5:") != std::string::npos);
}

TEST_CASE("an arithmetic operand that is neither a tensor nor a number fails at its line, naming the op") {
  test::TempDir d;
  std::string msg = compile_error(d, "operand.lua", "local h = x + 'one'\n");
  CHECK(msg.find("operand.lua:5: add: operand 2 is a string, expected a tensor or a number") != std::string::npos);
  msg = compile_error(d, "operand2.lua", "local h = sg.sub({}, x)\n");
  CHECK(msg.find("operand2.lua:5: sub: operand 1 is a table, expected a tensor or a number") != std::string::npos);
  msg = compile_error(d, "nil.lua", "local h = sg.add(nil, x)\n");
  CHECK(msg.find("nil.lua:5: add: operand 1 is a nil, expected a tensor or a number") != std::string::npos);
  msg = compile_error(d, "numbers.lua", "local h = sg.mul(2, 3)\n");
  CHECK(msg.find("numbers.lua:5: mul: at least one operand must be a tensor") != std::string::npos);
  msg = compile_error(d, "zero.lua", "local h = x / 0\n");
  CHECK(msg.find("zero.lua:5: div: division by the constant 0") != std::string::npos);
}

TEST_CASE("a slice, pad or concat that does not fit fails at its line, naming the op and the axis") {
  test::TempDir d;  // x is f32[4, 784]
  std::string msg = compile_error(d, "slice.lua", "local h = sg.slice(x, 1, 780, 5)\n");
  CHECK(msg.find("slice.lua:5: slice: axis 1 of f32[4, 784]: elements 780 .. 780 + 5 - 1 are not inside 0 .. 783") !=
        std::string::npos);
  msg = compile_error(d, "starts.lua", "local h = sg.op('slice', {x}, {starts = {0}, sizes = {1}})\n");
  CHECK(msg.find("starts.lua:5: slice: starts [0] and sizes [1] need one entry per axis of f32[4, 784]") != std::string::npos);
  msg = compile_error(d, "pad.lua", "local h = sg.pad(x, {0, -1}, {0, 0})\n");
  CHECK(msg.find("pad.lua:5: pad: axis 1 of f32[4, 784]: padding -1 before and 0 after must be non-negative") !=
        std::string::npos);
  msg = compile_error(d, "axis.lua", "local h = sg.slice(x, 2, 0, 1)\n");
  CHECK(msg.find("axis.lua:5: sg.slice: axis 2 out of range for a rank-2 tensor") != std::string::npos);
  msg = compile_error(d, "concat.lua", "local h = sg.concat({x, sg.slice(x, 1, 0, 10)}, 0)\n");
  CHECK(msg.find("concat.lua:5: sg.concat: entry 2 is [4, 10], entry 1 [4, 784]: only axis 0 may differ") != std::string::npos);
}
