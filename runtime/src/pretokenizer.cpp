#include "pretokenizer.h"

#include "unicode_class.h"

namespace sgrt {
namespace {

using unicode::CharClass;

// Code point class at `pos` and its length; invalid UTF-8 counts as kOther.
struct Char {
  CharClass cls;
  uint32_t cp, len;
};
Char char_at(std::string_view s, size_t pos) {
  const unicode::Utf8Char u = unicode::next_utf8(s, pos);
  return {u.cp == unicode::kInvalid ? unicode::kOther : unicode::char_class(u.cp), u.cp, u.len};
}

// End of the run of `cls` characters starting at `pos`.
size_t run_end(std::string_view s, size_t pos, CharClass cls) {
  while (pos < s.size()) {
    const Char c = char_at(s, pos);
    if (c.cls != cls) break;
    pos += c.len;
  }
  return pos;
}

// Length of the contraction ('s 't 're 've 'm 'll 'd, case-sensitive) at pos.
size_t contraction_at(std::string_view s, size_t pos) {
  if (s[pos] != '\'' || pos + 1 >= s.size()) return 0;
  const char a = s[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= s.size()) return 0;
  const char b = s[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// End of the GPT-2 regex's match at `pos`: its alternatives in order,
//   's|'t|'re|'ve|'m|'ll|'d | ' ?\p{L}+ | ' ?\p{N}+ | ' ?[^\s\p{L}\p{N}]+ | \s+(?!\S) | \s+
// with the backtracking they imply. Every position matches something.
size_t gpt2_match_end(std::string_view s, size_t pos) {
  if (const size_t n = contraction_at(s, pos)) return pos + n;
  const Char c = char_at(s, pos);
  if (c.cls != unicode::kSpace) return run_end(s, pos + c.len, c.cls);
  if (c.cp == ' ' && pos + 1 < s.size()) {
    const Char next = char_at(s, pos + 1);  // " ?X+": one space may lead a run of L, N or other
    if (next.cls != unicode::kSpace) return run_end(s, pos + 1 + next.len, next.cls);
  }
  // Whitespace: the run, minus its last character when a non-space follows
  // (\s+(?!\S) backtracks; that character then leads the next piece), unless
  // the run is one character (\s+).
  size_t end = pos, last = pos;
  while (end < s.size()) {
    const Char w = char_at(s, end);
    if (w.cls != unicode::kSpace) break;
    last = end;
    end += w.len;
  }
  if (end < s.size() && last > pos) return last;
  return end;
}

void gpt2_split(std::string_view s, std::vector<std::string_view>* pieces) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t end = gpt2_match_end(s, pos);
    pieces->push_back(s.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace

void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>* pieces) {
  switch (kind) {
    case PreTokenizer::smollm: {
      // Digits(individual_digits): each \p{N} code point is a piece of its
      // own; the regex then runs on each span between them.
      size_t span = 0;
      for (size_t pos = 0; pos < text.size();) {
        const Char c = char_at(text, pos);
        if (c.cls == unicode::kNumber) {
          gpt2_split(text.substr(span, pos - span), pieces);
          pieces->push_back(text.substr(pos, c.len));
          span = pos + c.len;
        }
        pos += c.len;
      }
      gpt2_split(text.substr(span), pieces);
      return;
    }
  }
}

}  // namespace sgrt
