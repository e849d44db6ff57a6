#include "unicode_class.h"

#include <algorithm>
#include <array>

namespace sgrt::unicode {
namespace {

std::array<CharClass, 128> ascii_classes() {
  std::array<CharClass, 128> t{};
  for (uint32_t c = 0; c < 128; ++c) {
    const CodeRange* end = kCodeRanges + kCodeRangeCount;
    const CodeRange* r = std::find_if(kCodeRanges, end, [c](const CodeRange& x) { return c <= x.last; });
    t[c] = (r != end && c >= r->first) ? r->cls : kOther;
  }
  return t;
}

}  // namespace

CharClass char_class(uint32_t cp) {
  static const std::array<CharClass, 128> ascii = ascii_classes();  // the common case, no search
  if (cp < 128) return ascii[cp];
  const CodeRange* end = kCodeRanges + kCodeRangeCount;
  const CodeRange* r = std::upper_bound(kCodeRanges, end, cp,
                                        [](uint32_t v, const CodeRange& x) { return v < x.first; });
  if (r == kCodeRanges) return kOther;
  --r;
  return cp <= r->last ? r->cls : kOther;
}

Utf8Char next_utf8(std::string_view s, size_t pos) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t c = b(pos);
  if (c < 0x80) return {c, 1};
  // Length and the allowed range of the second byte per lead byte (Unicode
  // table 3-7); excludes overlongs, surrogates and values past U+10FFFF.
  uint32_t len, cp;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3; cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4; cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return {kInvalid, 1};
  }
  for (uint32_t i = 1; i < len; ++i) {
    if (pos + i >= s.size()) return {kInvalid, i};
    const uint8_t x = b(pos + i);
    if (x < (i == 1 ? lo : 0x80) || x > (i == 1 ? hi : 0xBF)) return {kInvalid, i};
    cp = (cp << 6) | (x & 0x3F);
  }
  return {cp, len};
}

}  // namespace sgrt::unicode
