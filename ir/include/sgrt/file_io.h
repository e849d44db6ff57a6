// Whole-file reads and crash-safe writes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sgrt/status.h"

namespace sgrt {

Status read_file(const std::string& path, std::vector<uint8_t>* out);

// Writes to PATH.tmp.<pid>, fsyncs, renames over PATH and fsyncs the folder:
// a reader sees the old file or the new one, never a part.
Status write_file_atomic(const std::string& path, const void* data, size_t size);

uint32_t crc32_of(const void* data, size_t size);

}  // namespace sgrt
