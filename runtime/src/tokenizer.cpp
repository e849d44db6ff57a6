#include "sgrt/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <unordered_map>

#include "pretokenizer.h"
#include "unicode_class.h"

namespace sgrt {
namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
// the other 68 bytes for U+0100.. in byte order, so every token is printable.
std::array<uint32_t, 256> byte_to_code_point() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    map[b] = printable ? b : next++;
  }
  return map;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The bytes a token stands for: each character mapped back through the
// byte-level alphabet or, when one is outside it (e.g. a special token with
// a space), the text itself, as the reference's ByteLevel decoder does.
std::string token_bytes(const std::string& text, const std::array<int16_t, 324>& code_point_to_byte) {
  std::string bytes;
  for (size_t pos = 0; pos < text.size();) {
    const unicode::Utf8Char c = unicode::next_utf8(text, pos);
    if (c.cp >= code_point_to_byte.size() || code_point_to_byte[c.cp] < 0) return text;
    bytes.push_back(static_cast<char>(code_point_to_byte[c.cp]));
    pos += c.len;
  }
  return bytes;
}

// Status::Invalid("tokenizer: " + printf-formatted message). One formatter
// instead of string concatenations keeps this code small in libsgrt.
[[gnu::format(printf, 1, 2)]] Status invalid(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return Status::Invalid(std::string("tokenizer: ") + buf);
}

int shown_len(std::string_view s) { return static_cast<int>(std::min<size_t>(s.size(), 200)); }  // for %.*s

}  // namespace

// Open addressing on (left id, right id): the hot lookup of encoding.
struct Tokenizer::MergeTable {
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are < 2^31: no pair has this key
  std::vector<Slot> slots;
  uint64_t mask = 0;

  explicit MergeTable(size_t count) {
    size_t cap = 16;
    while (cap < 2 * count) cap *= 2;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
  static uint64_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    return k ^ (k >> 33);
  }
  // Keeps the first (lowest-rank) entry of a pair listed twice.
  void insert(int32_t l, int32_t r, uint32_t rank, int32_t merged) {
    const uint64_t k = key(l, r);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return;
      if (slots[i].key == kEmpty) {
        slots[i] = {k, rank, merged};
        return;
      }
    }
  }
  const Slot* find(int32_t l, int32_t r) const {
    const uint64_t k = key(l, r);
    for (uint64_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

// Buffers reused across the pieces of one encode() call.
struct Tokenizer::Scratch {
  std::vector<std::string_view> pieces;
  std::vector<int32_t> id, prev, next;  // the piece's symbols as a linked list; id -1 = merged away
  struct Candidate {
    uint32_t rank;
    int32_t left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Candidate> heap;  // min-heap: lowest rank, then leftmost
};

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Status Tokenizer::create(TokenizerSpec spec, std::unique_ptr<Tokenizer>* out) {
  const size_t n = spec.tokens.size();
  if (n == 0 || n > (size_t{1} << 30)) return invalid("%zu tokens", n);
  if (!spec.token_types.empty() && spec.token_types.size() != n)
    return invalid("%zu token types for %zu tokens", spec.token_types.size(), n);
  for (size_t i = 0; i < spec.token_types.size(); ++i)
    if (spec.token_types[i] < 1 || spec.token_types[i] > 6)
      return invalid("token %zu has unknown type %d", i, spec.token_types[i]);
  if (spec.bos < -1 || spec.bos >= static_cast<int64_t>(n))
    return invalid("bos id %d outside the %zu tokens", spec.bos, n);
  if (spec.eos < -1 || spec.eos >= static_cast<int64_t>(n))
    return invalid("eos id %d outside the %zu tokens", spec.eos, n);

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  std::unordered_map<std::string_view, int32_t> id_of;  // the last of duplicate texts wins, as in the reference
  id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) id_of[spec.tokens[i]] = static_cast<int32_t>(i);

  // Byte-level vocabularies may lack the bytes their training text never
  // had (SmolLM2: 0xC0, 0xC1, 0xF1, 0xF2, 0xF5-0xFF and six control
  // characters): those bytes are dropped when encoding, as by the reference
  // (BPE without an unknown token). Printable ASCII must be there.
  const std::array<uint32_t, 256> byte_cp = byte_to_code_point();
  std::array<int16_t, 324> cp_byte;
  cp_byte.fill(-1);
  for (int b = 0; b < 256; ++b) {
    cp_byte[byte_cp[b]] = static_cast<int16_t>(b);
    std::string text;
    append_utf8(byte_cp[b], &text);
    const auto it = id_of.find(text);
    t->byte_token_[b] = it == id_of.end() ? -1 : it->second;
    if (it == id_of.end() && b >= ' ' && b <= '~')
      return invalid("no token for byte 0x%02X ('%s'): not a byte-level BPE vocabulary", b, text.c_str());
  }

  t->merges_ = std::make_unique<MergeTable>(spec.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string& m = spec.merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) return invalid("merge %zu '%.*s' is not 'left right'", rank, shown_len(m), m.data());
    const std::string_view left = std::string_view(m).substr(0, space), right = std::string_view(m).substr(space + 1);
    const auto l = id_of.find(left), r = id_of.find(right);
    joined.assign(left).append(right);
    const auto merged = id_of.find(joined);
    if (l == id_of.end() || r == id_of.end() || merged == id_of.end()) {
      const std::string_view missing = l == id_of.end() ? left : r == id_of.end() ? right : joined;
      return invalid("merge %zu '%.*s': '%.*s' is not a token", rank, shown_len(m), m.data(), shown_len(missing), missing.data());
    }
    t->merges_->insert(l->second, r->second, static_cast<uint32_t>(rank), merged->second);
  }

  t->token_bytes_offset_.reserve(n + 1);
  t->token_bytes_offset_.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    t->token_bytes_ += token_bytes(spec.tokens[i], cp_byte);
    t->token_bytes_offset_.push_back(static_cast<uint32_t>(t->token_bytes_.size()));
    const int32_t type = spec.token_types.empty() ? 1 : spec.token_types[i];
    const bool special = type == static_cast<int32_t>(TokenType::control) ||
                         type == static_cast<int32_t>(TokenType::user_defined);
    if (special && !spec.tokens[i].empty()) {
      t->specials_.push_back(static_cast<int32_t>(i));
      t->special_first_byte_[static_cast<uint8_t>(spec.tokens[i][0])] = true;
    }
  }
  std::sort(t->specials_.begin(), t->specials_.end(), [&](int32_t a, int32_t b) {
    const size_t la = spec.tokens[a].size(), lb = spec.tokens[b].size();
    return la != lb ? la > lb : a < b;
  });
  t->spec_ = std::move(spec);
  *out = std::move(t);
  return Status::Ok();
}

size_t Tokenizer::special_at(std::string_view text, size_t pos, int32_t* id) const {
  if (!special_first_byte_[static_cast<uint8_t>(text[pos])]) return 0;
  for (int32_t s : specials_) {  // longest first
    const std::string& tok = spec_.tokens[s];
    if (text.compare(pos, tok.size(), tok) == 0) {
      *id = s;
      return tok.size();
    }
  }
  return 0;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  Scratch scratch;
  size_t plain = 0;  // start of the text not yet encoded
  for (size_t pos = 0; pos < text.size();) {
    int32_t id;
    if (const size_t len = special_at(text, pos, &id)) {
      encode_plain(text.substr(plain, pos - plain), scratch, &ids);
      ids.push_back(id);
      pos += len;
      plain = pos;
    } else {
      ++pos;
    }
  }
  encode_plain(text.substr(plain), scratch, &ids);
  return ids;
}

void Tokenizer::encode_plain(std::string_view text, Scratch& scratch, std::vector<int32_t>* ids) const {
  scratch.pieces.clear();
  pretokenize(spec_.pre, text, &scratch.pieces);
  for (std::string_view piece : scratch.pieces) bpe(piece, scratch, ids);
}

// Standard BPE: start from one symbol per byte (bytes without a token are
// skipped, so their neighbours become adjacent) and repeatedly merge the
// adjacent pair of lowest rank (leftmost among equals) until none is a merge.
// A heap of candidate pairs makes it O(n log n) in the piece length; stale
// candidates (a side merged away or changed) are skipped when popped.
void Tokenizer::bpe(std::string_view piece, Scratch& s, std::vector<int32_t>* ids) const {
  s.id.clear();
  for (char c : piece)
    if (const int32_t id = byte_token_[static_cast<uint8_t>(c)]; id >= 0) s.id.push_back(id);
  const int32_t n = static_cast<int32_t>(s.id.size());
  if (n <= 1) {
    ids->insert(ids->end(), s.id.begin(), s.id.end());
    return;
  }
  s.prev.resize(n);
  s.next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1;
  }
  s.heap.clear();
  const auto greater = std::greater<Scratch::Candidate>();
  const auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r >= n) return;
    if (const MergeTable::Slot* m = merges_->find(s.id[l], s.id[r])) {
      s.heap.push_back({m->rank, l, r});
      std::push_heap(s.heap.begin(), s.heap.end(), greater);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), greater);
    const Scratch::Candidate c = s.heap.back();
    s.heap.pop_back();
    if (s.id[c.left] < 0 || s.next[c.left] != c.right) continue;
    const MergeTable::Slot* m = merges_->find(s.id[c.left], s.id[c.right]);
    if (m == nullptr || m->rank != c.rank) continue;
    s.id[c.left] = m->merged;
    s.id[c.right] = -1;
    s.next[c.left] = s.next[c.right];
    if (s.next[c.left] < n) s.prev[s.next[c.left]] = c.left;
    consider(s.prev[c.left], c.left);
    consider(c.left, s.next[c.left]);
  }
  for (int32_t i = 0; i < n; i = s.next[i]) ids->push_back(s.id[i]);
}

Status Tokenizer::decode(std::span<const int32_t> ids, std::string* out) const {
  out->clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= vocab_size())
      return invalid("decode: id %d at position %zu outside the %zu tokens", id, i, vocab_size());
    const uint32_t begin = token_bytes_offset_[id];
    out->append(token_bytes_, begin, token_bytes_offset_[id + 1] - begin);
  }
  return Status::Ok();
}

std::string utf8_replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const unicode::Utf8Char c = unicode::next_utf8(bytes, pos);
    if (c.cp == unicode::kInvalid)
      out += "\xEF\xBF\xBD";
    else
      out.append(bytes, pos, c.len);
    pos += c.len;
  }
  return out;
}

const char* pre_tokenizer_name(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::smollm: return "smollm";
  }
  return "?";
}

bool pre_tokenizer_named(std::string_view name, PreTokenizer* out) {
  for (PreTokenizer p : {PreTokenizer::smollm})
    if (name == pre_tokenizer_name(p)) {
      *out = p;
      return true;
    }
  return false;
}

}  // namespace sgrt
