// `sgrt run` through the real command line: a tiny GPT trained for a few steps
// on a small corpus samples reproducibly from its checkpoint (same seed, same
// bytes; the prompt comes first), greedily the argmax bytes of its infer
// program, and a prompt longer than the block is one line on stderr with exit
// status 2.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>

#include "harness.h"
#include "sgrt/checkpoint.h"

namespace {

const std::string kTool = SGRT_BINARY_DIR "/tools/sgrt";
const std::string kSets = " --set n_layer=1 --set n_embd=16 --set n_head=2 --set block=8 --set batch=4";

struct Output {
  int code = -1;
  std::string out, err;
};

Output sh(const std::string& cmd) {
  sgrt::test::TempFile err(".err");
  Output o;
  FILE* p = popen((cmd + " 2>" + err.path).c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, n);
  int st = pclose(p);
  o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(err.path);
  o.err.assign(std::istreambuf_iterator<char>(f), {});
  return o;
}

// `count` bytes after `prompt`, each the argmax of infer's logits at the last
// context position (the context slides past the block, as sgrt run's does).
std::string greedy_bytes(const std::string& ck, const std::string& prompt, int count) {
  std::shared_ptr<const sgrt::Model> m;
  {
    std::unique_ptr<sgrt::Model> loaded;
    REQUIRE(sgrt::Model::load_file(ck + "/model.sg", &loaded).ok());
    m = std::move(loaded);
  }
  auto s = sgrt::test::open_session(m, "cpu");
  int64_t step = 0;
  REQUIRE(sgrt::load_checkpoint(*s, ck, &step).ok());
  int tokens = m->find_tensor("tokens"), logits = -1, infer = -1;
  for (auto& [name, id] : m->outputs())
    if (name == "logits") logits = id;
  REQUIRE(s->find_program("infer", &infer).ok());
  const sgrt::Shape& ts = m->tensors()[tokens].type.shape;
  const int64_t block = ts[1], vocab = m->tensors()[logits].bytes / sizeof(float) / (ts[0] * block);
  std::string text = prompt, out;
  for (int i = 0; i < count; ++i) {
    const int64_t n = std::min<int64_t>(block, static_cast<int64_t>(text.size()));
    std::vector<int32_t> in(static_cast<size_t>(ts[0] * block), 0);
    for (int64_t j = 0; j < n; ++j) in[j] = static_cast<uint8_t>(text[text.size() - n + j]);
    REQUIRE(s->write(tokens, in.data(), in.size() * sizeof(int32_t)).ok());
    REQUIRE(s->run(infer).ok());
    std::vector<float> z(m->tensors()[logits].bytes / sizeof(float));
    REQUIRE(s->read(logits, z.data(), z.size() * sizeof(float)).ok());
    const float* row = z.data() + (n - 1) * vocab;
    const char next = static_cast<char>(std::max_element(row, row + vocab) - row);
    text += next;
    out += next;
  }
  return out;
}

}  // namespace

TEST_CASE("sgrt run samples reproducibly from a trained GPT; an over-long prompt is exit 2") {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  sgrt::test::TempFile corpus(".txt", text), ck("_ck");
  std::string model = SGRT_SOURCE_DIR "/models/gpt.lua";
  Output t = sh(kTool + " train " + model + kSets + " --steps 30 --data " + corpus.path + " --checkpoint " + ck.path +
                " --quiet");
  REQUIRE_MESSAGE(t.code == 0, t.err);
  std::string run = kTool + " run " + model + kSets + " --checkpoint " + ck.path + " --tokens 24 --top-k 5";
  Output a = sh(run + " --prompt 'the ' --seed 7"), b = sh(run + " --prompt 'the ' --seed 7");
  REQUIRE_MESSAGE(a.code == 0, a.err);
  CHECK(a.out == b.out);
  CHECK(a.out.rfind("the ", 0) == 0);
  CHECK(a.out.size() == 4 + 24 + 1);  // prompt, sampled bytes, newline

  // The checkpoint folder carries the model and its --set values: no model needed.
  Output d = sh(kTool + " run --checkpoint " + ck.path + " --tokens 24 --top-k 5 --prompt 'the ' --seed 7");
  REQUIRE_MESSAGE(d.code == 0, d.err);
  CHECK(d.out == a.out);

  // Greedy (top-k 1): each byte is the argmax of the infer program's logits at
  // the context's last position, which the test reads here from the whole tensor.
  Output g = sh(run + " --prompt 'the ' --top-k 1 --tokens 12");
  REQUIRE_MESSAGE(g.code == 0, g.err);
  CHECK(g.out == "the " + greedy_bytes(ck.path, "the ", 12) + "\n");

  Output c = sh(run + " --prompt 'longer than eight bytes'");
  CHECK(c.code == 2);
  CHECK(c.err.find("longer than the model's block of 8 bytes") != std::string::npos);
  CHECK(std::count(c.err.begin(), c.err.end(), '\n') == 1);
  for (const char* f : {"/checkpoint.sgck", "/model.sg", "/model.flags"}) std::remove((ck.path + f).c_str());
  std::remove(ck.path.c_str());
}
