#include "sgrt/model_file.h"

#include <cstring>

#include "sgrt/file_io.h"

namespace sgrt {

static const char kMagic[4] = {'S', 'G', 'C', 'K'};

void append_footer(std::vector<uint8_t>* bytes) {
  uint32_t crc = crc32_of(bytes->data(), bytes->size());
  for (int i = 0; i < 4; ++i) bytes->push_back(static_cast<uint8_t>(crc >> (8 * i)));
  bytes->insert(bytes->end(), kMagic, kMagic + 4);
}

Status check_footer(const uint8_t* data, size_t size, size_t* payload) {
  if (size < kFooterBytes + 8 || std::memcmp(data + size - 4, kMagic, 4) != 0)
    return Status::Invalid("truncated, or not an sgrt file (no SGCK footer)");
  size_t n = size - kFooterBytes;
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) stored |= static_cast<uint32_t>(data[n + i]) << (8 * i);
  if (crc32_of(data, n) != stored) return Status::Invalid("checksum mismatch: the file is corrupted");
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
