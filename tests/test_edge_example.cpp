// examples/edge (plain C against libsgrt, shared and static builds) prints the
// same losses and predictions, to the bit, as the C++ session doing the same
// steps on the same exported graph and data; `sgrt export` and `sgrt eval`
// (no --checkpoint for an exported graph) on the command line.
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

#include <cstdio>
#include <numeric>

#include "harness.h"
#include "sgrt/checkpoint.h"
#include "sgrt/dataset.h"
#include "sgrt/export.h"

using namespace sgrt;
using namespace sgrt::test;

namespace {

constexpr int kSteps = 4;

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string run_command(const std::string& cmd, int* status) {
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

// The example reads uncompressed IDX files: gunzip Debian's copies into dir.
void gunzip_dataset(const std::string& dir) {
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    gzFile in = gzopen((std::string(kFashionMnistDir) + "/" + name + ".gz").c_str(), "rb");
    REQUIRE_MESSAGE(in, "Fashion-MNIST not found in " << kFashionMnistDir);
    FILE* out = std::fopen((dir + "/" + name).c_str(), "wb");
    REQUIRE(out);
    char buf[1 << 16];
    int n;
    while ((n = gzread(in, buf, sizeof buf)) > 0) std::fwrite(buf, 1, static_cast<size_t>(n), out);
    gzclose(in);
    std::fclose(out);
  }
}

// What the example does, through the C++ session: kSteps train steps on the
// training set's first batches in order, then infer on the first test batch.
std::string reference(const std::string& deploy) {
  std::unique_ptr<Model> m;
  REQUIRE(Model::load_file(deploy, &m).ok());
  std::shared_ptr<const Model> model = std::move(m);
  auto s = open_session(model, "cpu", 1);
  REQUIRE(s->init(1, kSteps).ok());
  std::unique_ptr<Dataset> data;
  REQUIRE(open_fashion_mnist(kFashionMnistDir, &data).ok());
  int image = tensor_id(*s, "image"), label = tensor_id(*s, "label");
  int64_t batch = model->tensors()[image].type.shape[0];
  std::vector<float> x(batch * 784), logits;
  std::vector<int32_t> y(batch);
  std::vector<int64_t> idx(batch);
  auto load = [&](Split split, int64_t first) {
    std::iota(idx.begin(), idx.end(), first);
    REQUIRE(data->gather(split, idx.data(), batch, "image", model->tensors()[image], x.data()).ok());
    REQUIRE(data->gather(split, idx.data(), batch, "label", model->tensors()[label], y.data()).ok());
    write_vec(*s, "image", x);
    write_vec(*s, "label", y);
  };
  std::string out;
  char line[64];
  for (int step = 0; step < kSteps; ++step) {
    load(Split::train, step * batch);
    std::snprintf(line, sizeof line, "step %d loss %.9g\n", step + 1, loss_of(*s, "train_step"));
    out += line;
  }
  load(Split::test, 0);
  run(*s, "infer");
  logits = read_f32(*s, model->tensors()[model->outputs()[0].second].name);
  int correct = 0;
  out += "predictions";
  for (int64_t r = 0; r < batch; ++r) {
    int best = 0;
    for (int c = 1; c < 10; ++c)
      if (logits[r * 10 + c] > logits[r * 10 + best]) best = c;
    correct += best == y[r];
    out += " " + std::to_string(best);
  }
  return out + "\naccuracy " + std::to_string(correct) + "/" + std::to_string(batch) + "\n";
}

}  // namespace

TEST_CASE("edge example: same losses and predictions as the C++ session, shared and static builds") {
  char tmpl[] = "/tmp/sgrt_edge_XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  std::string dir = tmpl, deploy = dir + "/deploy.sg", tuned = dir + "/tuned.sg";
  gunzip_dataset(dir);

  // A deployable graph (training kept) from a briefly trained session.
  std::shared_ptr<const Model> m;
  Status st = compile_lua(read_text(SGRT_SOURCE_DIR "/models/fashion_mlp.lua"), &m, {{"hidden", "64"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  auto s = open_session(m, "cpu", 11);
  REQUIRE(export_to_file(*s, {}, deploy).ok());

  std::string want = reference(deploy);
  for (const char* exe : {"edge", "edge_static"}) {
    CAPTURE(exe);
    int status = -1;
    std::string got = run_command(std::string(SGRT_BINARY_DIR "/examples/edge/") + exe + " " + deploy + " " + dir + " " +
                                      std::to_string(kSteps) + " 1 " + tuned,
                                  &status);
    CHECK(status == 0);
    CHECK(got == want);
  }
  // The fine-tuned graph it wrote is inference-only and carries its weights.
  std::unique_ptr<Model> t;
  REQUIRE(Model::load_file(tuned, &t).ok());
  CHECK(carries_weights(*t));
  CHECK(t->find_program("train_step") < 0);

  int status = -1;
  std::string err = run_command(std::string(SGRT_BINARY_DIR "/examples/edge/edge ") + dir + "/missing.sg " + dir + " 2>&1", &status);
  CHECK(status != 0);
  CHECK(err.find("missing.sg") != std::string::npos);

  for (const char* f : {"deploy.sg", "tuned.sg", "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    std::remove((dir + "/" + f).c_str());
  rmdir(tmpl);
}

TEST_CASE("edge example: a valid graph whose inputs are not what it assumes is refused, not overrun") {
  char tmpl[] = "/tmp/sgrt_edge_shape_XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl, path = dir + "/narrow.sg";
  struct Case { const char* image; const char* label; const char* want; };
  for (const Case& c : {Case{"{ 4, 1000 }", "{ 4 }", "expected an f32 image input [batch, 784]"},
                        Case{"{ 4, 784 }", "{ 2 }", "expected an i32 label input [4]"}}) {
    CAPTURE(c.image);
    const std::string lua = std::string("local sg = require \"sg\"\n") + "local x = sg.input(\"image\", " + c.image +
                            ")\nlocal y = sg.input(\"label\", " + c.label +
                            ", \"i32\")\nlocal logits = sg.nn.linear(x, 10)\n"
                            "sg.output(\"logits\", logits)\nsg.loss(sg.mean(sg.mean(logits)))\nsg.optimizer.sgd{ lr = 0.1 }\n";
    compiler::Graph g;
    Status st = compile_graph(lua, &g);
    REQUIRE_MESSAGE(st.ok(), st.message());
    std::vector<uint8_t> bytes = compiler::serialize(g);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    int status = -1;
    std::string err = run_command(std::string(SGRT_BINARY_DIR "/examples/edge/edge ") + path + " " + dir + " 2>&1", &status);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK(err.find(c.want) != std::string::npos);
  }
  std::remove(path.c_str());
  rmdir(tmpl);
}

TEST_CASE("sgrt export and eval on the command line: an exported graph evaluates without --checkpoint") {
  char tmpl[] = "/tmp/sgrt_export_cli_XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  std::string dir = tmpl, tool = SGRT_BINARY_DIR "/tools/sgrt";
  compiler::Graph g;
  Status st = compile_graph(read_text(SGRT_SOURCE_DIR "/models/fashion_mlp.lua"), &g, {{"hidden", "32"}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::vector<uint8_t> bytes = compiler::serialize(g);
  std::ofstream(dir + "/mlp.sg", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::unique_ptr<Model> m;
  REQUIRE(Model::load_bytes(bytes, "mlp.sg", &m).ok());
  auto s = open_session(std::move(m), "cpu", 2);
  REQUIRE(save_checkpoint(*s, dir + "/ck", 0).ok());

  int status = -1;
  std::string out = run_command(tool + " eval " + dir + "/mlp.sg --checkpoint " + dir + "/ck", &status);
  CHECK(status == 0);
  std::string want = out.substr(out.find(": "));  // "step 0: test loss ..."
  run_command(tool + " export " + dir + "/mlp.sg --checkpoint " + dir + "/ck -o " + dir + "/d.sg --infer-only", &status);
  CHECK(status == 0);
  out = run_command(tool + " eval " + dir + "/d.sg", &status);
  CHECK(status == 0);
  CHECK(out.substr(out.find(": ")) == want);  // same loss and accuracy
  run_command(tool + " export " + dir + "/mlp.sg --checkpoint " + dir + "/ck -o " + dir + "/q.sg --quantize fp8 2>&1", &status);
  CHECK(WEXITSTATUS(status) == 2);  // --quantize needs --infer-only
  out = run_command(tool + " eval " + dir + "/mlp.sg 2>&1", &status);
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(out.find("needs --checkpoint") != std::string::npos);

  for (const char* f : {"mlp.sg", "d.sg", "ck/checkpoint.sgck"}) std::remove((dir + "/" + f).c_str());
  rmdir((dir + "/ck").c_str());
  rmdir(tmpl);
}
