// A small pull-style JSON reader shared by the runtime's parsers.
#pragma once
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace sgrt {

// Just enough JSON for safetensors headers, JSON-lines data sets and PEFT's
// adapter_config.json: objects, arrays, strings (\u escapes to UTF-8),
// non-negative integers, numbers, literals; other values are skipped. Errors
// name the byte offset.
class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}
  bool fail(const std::string& what) { if (err_.empty()) err_ = what + " at byte " + std::to_string(pos_); return false; }
  const std::string& error() const { return err_; }

  void ws() { while (pos_ < s_.size() && std::strchr(" \t\r\n", s_[pos_])) ++pos_; }
  bool eat(char c) { ws(); if (pos_ < s_.size() && s_[pos_] == c) { ++pos_; return true; } return false; }
  bool at_end() { ws(); return pos_ == s_.size(); }

  bool string(std::string* out) {
    if (!eat('"')) return fail("expected a string");
    out->clear();
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) break;
        char e = s_[pos_++];
        if (e == 'u') {
          uint32_t cp = 0;
          if (!hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair: \uD83D\uDE00
            uint32_t lo = 0;
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') return fail("unpaired surrogate");
            pos_ += 2;
            if (!hex4(&lo)) return false;
            if (lo < 0xDC00 || lo >= 0xE000) return fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return fail("unpaired surrogate");
          }
          append_utf8(cp, out);
          continue;
        } else {
          const char* from = "\"\\/bfnrt";
          const char* to = "\"\\/\b\f\n\r\t";
          const char* k = std::strchr(from, e);
          if (!e || !k) return fail("bad escape");
          c = to[k - from];
        }
      }
      out->push_back(c);
    }
    if (pos_ >= s_.size()) return fail("unterminated string");
    ++pos_;
    return true;
  }
  // The next non-space character, or 0 at the end.
  char peek() { ws(); return pos_ < s_.size() ? s_[pos_] : 0; }

  bool integer(uint64_t* out) {
    ws();
    size_t start = pos_;
    *out = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (*out > (UINT64_MAX - 9) / 10) return fail("integer too large");
      *out = *out * 10 + static_cast<uint64_t>(s_[pos_++] - '0');
    }
    return pos_ > start || fail("expected a non-negative integer");
  }
  bool number(double* out) {
    ws();
    size_t start = pos_;
    while (pos_ < s_.size() && std::strchr("+-.0123456789eE", s_[pos_])) ++pos_;
    const std::string token(s_.substr(start, pos_ - start));
    char* end = nullptr;
    *out = token.empty() ? 0 : std::strtod(token.c_str(), &end);
    return (!token.empty() && end == token.c_str() + token.size()) || fail("expected a number");
  }
  // true, false or null.
  bool literal(std::string* out) {
    ws();
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= 'a' && s_[pos_] <= 'z') ++pos_;
    *out = std::string(s_.substr(start, pos_ - start));
    return *out == "true" || *out == "false" || *out == "null" || fail("expected true, false or null");
  }
  bool int_array(std::vector<uint64_t>* out) {
    out->clear();
    if (!eat('[')) return fail("expected an array");
    if (eat(']')) return true;
    do {
      uint64_t v;
      if (!integer(&v)) return false;
      out->push_back(v);
    } while (eat(','));
    return eat(']') || fail("expected ']'");
  }
  bool skip_value(int depth = 0) {
    ws();
    if (depth > 32) return fail("nested too deeply");
    if (pos_ >= s_.size()) return fail("unexpected end");
    char c = s_[pos_];
    if (c == '"') { std::string t; return string(&t); }
    if (c == '{' || c == '[') {
      ++pos_;
      char close = c == '{' ? '}' : ']';
      if (eat(close)) return true;
      do {
        if (c == '{') {
          std::string k;
          if (!string(&k) || !eat(':')) return fail("expected \"key\":");
        }
        if (!skip_value(depth + 1)) return false;
      } while (eat(','));
      return eat(close) || fail(std::string("expected '") + close + "'");
    }
    size_t start = pos_;
    while (pos_ < s_.size() && std::strchr("+-.0123456789eEtruefalsn", s_[pos_])) ++pos_;
    return pos_ > start || fail("unexpected character");
  }

 private:
  // Four hex digits after \u (std::stoul throws, and takes "+1" or " 1").
  bool hex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return fail("bad \\u escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_ + i];
      if (!std::isxdigit(static_cast<unsigned char>(h))) return fail("bad \\u escape");
      *v = *v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    pos_ += 4;
    return true;
  }
  static void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | cp >> 6));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | cp >> 12));
      out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | cp >> 18));
      out->push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string err_;
};

}  // namespace sgrt
