// The byte-level text data set (runtime/src/text_dataset.cpp): windows and
// their one-byte shift, the 90/10 split, fixed validation windows, and the
// errors for corpora too small to hold a window.
#include <zlib.h>

#include "harness.h"
#include "sgrt/dataset.h"

using namespace sgrt;

namespace {

// A model binding i32 [2, block] tokens and targets to the text data set.
std::shared_ptr<const Model> text_model(int block) {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local cfg = sg.config{ block = 8 }
    local x = sg.input("tokens", {2, cfg.block}, "i32")
    local y = sg.input("targets", {2, cfg.block}, "i32")
    local t = sg.param("t", {256, 4})
    sg.loss(sg.sum(sg.reshape(sg.embedding(t, x), {8 * cfg.block})))
    sg.data.text{ tokens = x, targets = y }
    sg.optimizer.sgd{ lr = 0.1 }
  )", &m, {{"block", std::to_string(block)}});
  REQUIRE_MESSAGE(st.ok(), st.message());
  return m;
}

Status open_text(const std::string& content, int block, std::unique_ptr<Dataset>* out) {
  test::TempFile f(".txt", content);
  if (content.empty()) std::ofstream(f.path).flush();
  return open_text_dataset(f.path, *text_model(block), out);
}

}  // namespace

TEST_CASE("text windows: targets are the tokens shifted by one byte; splits 90/10") {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  std::unique_ptr<Dataset> d;
  Status st = open_text(text, 8, &d);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(d->size(Split::train) == 900 - 8);      // every start whose window + 1 stays in the train 90%
  CHECK(d->size(Split::test) == (100 - 1) / 8);  // non-overlapping validation windows
  std::shared_ptr<const Model> m = text_model(8);
  const TensorInfo& x = m->tensors()[m->find_tensor("tokens")];
  const TensorInfo& y = m->tensors()[m->find_tensor("targets")];
  int64_t idx[2] = {0, 891};
  std::vector<int32_t> tok(16), tgt(16);
  REQUIRE(d->gather(Split::train, idx, 2, "tokens", x, tok.data()).ok());
  REQUIRE(d->gather(Split::train, idx, 2, "targets", y, tgt.data()).ok());
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 8; ++j) {
      CHECK(tok[r * 8 + j] == static_cast<unsigned char>(text[idx[r] + j]));
      CHECK(tgt[r * 8 + j] == static_cast<unsigned char>(text[idx[r] + j + 1]));
    }
  int64_t past = d->size(Split::train);
  CHECK_FALSE(d->gather(Split::train, &past, 1, "tokens", x, tok.data()).ok());
  // Validation window k starts at 900 + 8k: never inside the training bytes.
  int64_t v[2] = {0, d->size(Split::test) - 1};
  REQUIRE(d->gather(Split::test, v, 2, "tokens", x, tok.data()).ok());
  CHECK(tok[0] == static_cast<unsigned char>(text[900]));
  CHECK(tok[8] == static_cast<unsigned char>(text[900 + 8 * v[1]]));
}

TEST_CASE("text corpora too small for a window are rejected with the path") {
  std::unique_ptr<Dataset> d;
  Status st = open_text("", 8, &d);
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message().find("empty") != std::string::npos);
  st = open_text(std::string(50, 'x'), 8, &d);  // the 10% validation split holds 5 bytes < 9
  CHECK(st.code() == StatusCode::invalid_input);
  CHECK(st.message().find("too few") != std::string::npos);
  CHECK(st.message().find(".txt") != std::string::npos);
  CHECK(open_text(std::string(90, 'x'), 8, &d).ok());  // 81 / 9 bytes: one window each
}

TEST_CASE("a sequence longer than the block is a script error at its line") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(R"(
    local sg = require "sg"
    local x = sg.input("tokens", {2, 16}, "i32")
    local h = sg.nn.embedding(x, 256, 8)
    local y = sg.nn.position_embedding(h, 8)
    sg.loss(sg.sum(sg.reshape(y, {256})))
    sg.optimizer.sgd{ lr = 0.1 }
  )", &m);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find(".lua:5:") != std::string::npos);
  CHECK(st.message().find("longer than the block (8)") != std::string::npos);
}

TEST_CASE("a truncated or corrupt .txt.gz corpus is refused; a whole one reads like the plain text") {
  std::string text;
  for (int i = 0; i < 4000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  test::TempFile gz(".txt.gz");
  gzFile w = gzopen(gz.path.c_str(), "wb");
  REQUIRE(w);
  REQUIRE(gzwrite(w, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(w) == Z_OK);
  std::ifstream in(gz.path, std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto open_bytes = [&](const std::string& bytes, std::unique_ptr<Dataset>* d) {
    std::ofstream(gz.path, std::ios::binary | std::ios::trunc) << bytes;
    return open_text_dataset(gz.path, *text_model(8), d);
  };
  std::unique_ptr<Dataset> d, plain;
  REQUIRE(open_bytes(whole, &d).ok());
  REQUIRE(open_text(text, 8, &plain).ok());
  CHECK(d->size(Split::train) == plain->size(Split::train));
  // gzip ends with CRC-32 and length (8 bytes): cut into them, and into the data.
  for (size_t cut : {size_t{1}, size_t{4}, size_t{8}, whole.size() / 2}) {
    CAPTURE(cut);
    Status st = open_bytes(whole.substr(0, whole.size() - cut), &d);
    REQUIRE(!st.ok());
    CHECK(st.code() == StatusCode::invalid_input);
    CHECK(st.message().find(gz.path) != std::string::npos);
    CHECK(st.message().find("truncated") != std::string::npos);
  }
  std::string bad_crc = whole;
  bad_crc[bad_crc.size() - 8] ^= 1;
  Status st = open_bytes(bad_crc, &d);
  REQUIRE(!st.ok());
  CHECK(st.message().find("corrupt") != std::string::npos);
}
