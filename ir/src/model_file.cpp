#include "sgrt/model_file.h"

#include <algorithm>
#include <cstring>

#include "sgrt/file_io.h"

namespace sgrt {

static const char kMagic[4] = {'S', 'G', 'C', 'K'};

void footer_of(uint32_t crc, uint8_t out[kFooterBytes]) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(crc >> (8 * i));
  std::memcpy(out + 4, kMagic, 4);
}

void append_footer(std::vector<uint8_t>* bytes) {
  uint8_t footer[kFooterBytes];
  footer_of(crc32_of(bytes->data(), bytes->size()), footer);
  bytes->insert(bytes->end(), footer, footer + kFooterBytes);
}

Status check_footer(const uint8_t* data, size_t size, size_t* payload, const std::function<void(size_t, size_t)>& checked) {
  if (size < kFooterBytes + 8 || std::memcmp(data + size - 4, kMagic, 4) != 0)
    return Status::Invalid("truncated, or not an sgrt file (no SGCK footer)");
  size_t n = size - kFooterBytes;
  uint32_t stored = 0, crc = 0;
  for (int i = 0; i < 4; ++i) stored |= static_cast<uint32_t>(data[n + i]) << (8 * i);
  constexpr size_t kChunk = size_t{8} << 20;
  for (size_t at = 0; at < n; at += kChunk) {
    const size_t len = std::min(kChunk, n - at);
    crc = crc32_of(data + at, len, crc);
    if (checked) checked(at, len);
  }
  if (crc != stored) return Status::Invalid("checksum mismatch: the file is corrupted");
  *payload = n;
  return Status::Ok();
}

Status check_schema_version(uint32_t version) {
  if (version > kSchemaVersion)
    return Status::Invalid("written by schema version " + std::to_string(version) + ", this reader takes ≤ " +
                           std::to_string(kSchemaVersion));
  if (version == 0) return Status::Invalid("schema version 0: not a version any sgrt wrote");
  return Status::Ok();
}

}  // namespace sgrt
