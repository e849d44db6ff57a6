// Fuzzes the checkpoint reader (load_checkpoint, and read_checkpoint_meta's
// header alone) against a session of a tiny model; the input is written to
// DIR/checkpoint.sgck in a scratch folder. Byte 0 odd: the rest gets a freshly
// computed footer (reaches the records). The seed records an init file.
#include "fuzz_util.h"
#include "sgrt/checkpoint.h"
#include "sgrt/model_file.h"

using namespace sgrt;

namespace {

std::unique_ptr<Session> g_session;

std::string ckpt_dir() { return fuzz::scratch_dir() + "/ckpt"; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_session = fuzz::tiny_session("adamw");
  CheckpointMeta meta;
  meta.step = 5;
  meta.init_file = "/models/init.gguf";
  meta.init_identity = 0x0123456789abcdefull;
  Status st = save_checkpoint(*g_session, ckpt_dir(), meta);  // also creates the folder
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
  CheckpointMeta meta;
  Status st = read_checkpoint_meta(ckpt_dir(), &meta);
  if (!st.ok() && st.message().empty()) fuzz::fail("a header rejection without a message");
  int64_t step = -1;
  st = load_checkpoint(*g_session, ckpt_dir(), &step);
  if (!st.ok() && st.message().empty()) fuzz::fail("a rejection without a message");
  return 0;
}
