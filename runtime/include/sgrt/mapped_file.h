// A whole file mapped read-only into memory (mmap, MAP_PRIVATE): pages are
// read on first touch and shared with the page cache, never copied up front.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "sgrt/status.h"

namespace sgrt {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept { swap(o); }
  MappedFile& operator=(MappedFile&& o) noexcept { swap(o); return *this; }
  ~MappedFile();

  // Maps a regular file; an empty file maps to size() == 0 and data() == nullptr.
  static Status open(const std::string& path, MappedFile* out);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Drops the whole pages inside [offset, offset + bytes) from this process's
  // memory (they are read from the file again if touched): a reader done with
  // a large region keeps its resident size down. Out-of-range parts are ignored.
  void release(size_t offset, size_t bytes) const;

 private:
  void swap(MappedFile& o) noexcept;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sgrt
