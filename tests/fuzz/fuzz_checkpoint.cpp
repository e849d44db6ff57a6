// Fuzzes the checkpoint reader (load_checkpoint) against a session of a tiny
// model; the input is written to DIR/checkpoint.sgck in a scratch folder.
// Byte 0 odd: the rest gets a freshly computed footer (reaches the records).
#include "fuzz_util.h"
#include "sgrt/checkpoint.h"
#include "sgrt/model_file.h"

using namespace sgrt;

namespace {

const char kModel[] = R"(
local sg = require "sg"
local x = sg.input("image", {2, 4})
local y = sg.input("label", {2}, "i32")
local logits = sg.nn.linear(x, 3, { name = "fc" })
sg.loss(sg.softmax_cross_entropy(logits, y))
sg.optimizer.adamw{ lr = 1e-2 }
)";

std::unique_ptr<Session> g_session;

std::string ckpt_dir() { return fuzz::scratch_dir() + "/ckpt"; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::unique_ptr<Model> m;
  Status st = Model::load_bytes(fuzz::compile_lua(kModel), "tiny.sg", &m);
  std::unique_ptr<Backend> be;
  if (st.ok()) st = make_backend("cpu", &be);
  if (st.ok()) st = Session::create(std::move(m), std::move(be), &g_session);
  if (st.ok()) st = g_session->init(1, 10);
  if (st.ok()) st = save_checkpoint(*g_session, ckpt_dir(), 5);  // also creates the folder
  if (!st.ok()) fuzz::fail(st.message());
  std::vector<uint8_t> file;
  if (!read_file(ckpt_dir() + "/checkpoint.sgck", &file).ok()) fuzz::fail("cannot read the seed checkpoint");
  std::vector<uint8_t> raw{0}, payload{1};
  raw.insert(raw.end(), file.begin(), file.end());
  payload.insert(payload.end(), file.begin(), file.end() - kFooterBytes);
  fuzz::write_seed("tiny_raw", raw);
  fuzz::write_seed("tiny_payload", payload);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if (data[0] & 1) append_footer(&bytes);
  fuzz::write_or_die(ckpt_dir() + "/checkpoint.sgck", bytes);
  int64_t step = -1;
  Status st = load_checkpoint(*g_session, ckpt_dir(), &step);
  if (!st.ok() && st.message().empty()) fuzz::fail("a rejection without a message");
  return 0;
}
