// GGUF files assembled field by field, as the format defines them
// (test_gguf.cpp's hand-built files, test_tokenizer_model.cpp's tokenizer).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sgrt/gguf.h"

namespace sgrt::test {

template <class T>
std::string le(T v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }
inline std::string gstr(const std::string& s) { return le<uint64_t>(s.size()) + s; }

struct GgufBuilder {
  uint32_t version = 3;
  uint64_t alignment = 32, n_kv = 0, n_tensors = 0;
  std::string kvs, infos, data;

  GgufBuilder& kv(const std::string& key, GgufValueType t, const std::string& value) {
    kvs += gstr(key) + le<uint32_t>(uint32_t(t)) + value;
    ++n_kv;
    return *this;
  }
  GgufBuilder& u32(const std::string& key, uint32_t v) { return kv(key, GgufValueType::U32, le(v)); }
  GgufBuilder& boolean(const std::string& key, bool v) { return kv(key, GgufValueType::BOOL, le<uint8_t>(v)); }
  GgufBuilder& str(const std::string& key, const std::string& v) { return kv(key, GgufValueType::STRING, gstr(v)); }
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& v) {
    std::string a = le<uint32_t>(uint32_t(GgufValueType::STRING)) + le<uint64_t>(v.size());
    for (const std::string& s : v) a += gstr(s);
    return kv(key, GgufValueType::ARRAY, a);
  }
  GgufBuilder& i32s(const std::string& key, const std::vector<int32_t>& v) {
    std::string a = le<uint32_t>(uint32_t(GgufValueType::I32)) + le<uint64_t>(v.size());
    for (int32_t x : v) a += le(x);
    return kv(key, GgufValueType::ARRAY, a);
  }
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    infos += gstr(name) + le<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) infos += le(d);
    infos += le(type) + le(offset);
    ++n_tensors;
    return *this;
  }
  std::string bytes() const {
    std::string s = "GGUF" + le(version) + le(n_tensors) + le(n_kv) + kvs + infos;
    s.append((alignment - s.size() % alignment) % alignment, '\0');
    return s + data;
  }
};

}  // namespace sgrt::test
