// Whole-file reads and crash-safe writes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sgrt/status.h"

namespace sgrt {

Status read_file(const std::string& path, std::vector<uint8_t>* out);
// The first max_bytes of the file (all of a shorter one).
Status read_file_prefix(const std::string& path, size_t max_bytes, std::vector<uint8_t>* out);

// Writes to PATH.tmp.<pid>, fsyncs, renames over PATH and fsyncs the folder:
// a reader sees the old file or the new one, never a part.
Status write_file_atomic(const std::string& path, const void* data, size_t size);

// The same for a file written in pieces (one too large to assemble in memory
// first): write() appends, commit() puts it in place; destroyed uncommitted
// (an error on the way), it removes the temporary file and PATH is untouched.
class AtomicFile {
 public:
  static Status create(const std::string& path, std::unique_ptr<AtomicFile>* out);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  Status write(const void* data, size_t size);
  Status commit();

 private:
  AtomicFile(std::string path, std::string tmp, int fd) : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  Status fail(const std::string& what);  // closes and removes the temporary file

  std::string path_, tmp_;
  int fd_ = -1;
};

// CRC-32 (zlib's); `prior`, the CRC of the bytes before these, continues it.
uint32_t crc32_of(const void* data, size_t size, uint32_t prior = 0);

}  // namespace sgrt
