// Fuzzes the .sg loader (Model::load_bytes): the CRC footer, the FlatBuffer
// verifier and the semantic checks (indices, shape rules, arena bounds).
// Byte 0 picks the mode; odd: the rest is a payload that gets a freshly
// computed footer, so mutations reach past the checksum; even: the rest is the
// whole file, footer included. A model that loads must also run.
#include "fuzz_util.h"
#include "sgrt/model_file.h"
#include "sgrt/session.h"

using namespace sgrt;

namespace {

// Bigger arenas load and reach the backend, which refuses to allocate them:
// a declared size that the backend's arithmetic shrinks still runs.
constexpr uint64_t kMaxArena = 16 << 20;

void exercise(std::unique_ptr<Model> m) {
  std::shared_ptr<const Model> sm(std::move(m));
  std::unique_ptr<Backend> be;
  if (!make_backend("cpu", &be).ok()) fuzz::fail("no cpu backend");
  be->limit_arena(kMaxArena);
  std::unique_ptr<Session> s;
  if (!Session::create(sm, std::move(be), &s).ok() || !s->init(7, 10).ok()) return;
  for (const char* p : {"train_step", "eval", "infer"}) {
    int id = -1;
    if (s->find_program(p, &id).ok()) (void)s->run(id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::vector<uint8_t> file = fuzz::small_mlp();
  std::vector<uint8_t> raw{0}, payload{1};
  raw.insert(raw.end(), file.begin(), file.end());
  payload.insert(payload.end(), file.begin(), file.end() - kFooterBytes);
  fuzz::write_seed("mlp_raw", raw);
  fuzz::write_seed("mlp_payload", payload);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if (data[0] & 1) append_footer(&bytes);
  std::unique_ptr<Model> m;
  Status st = Model::load_bytes(std::move(bytes), "fuzz.sg", &m);
  if (st.ok() != static_cast<bool>(m)) fuzz::fail("load_bytes: status and model disagree");
  if (!st.ok() && st.message().empty()) fuzz::fail("a rejection without a message");
  if (m) exercise(std::move(m));
  return 0;
}
