#include "sgrt/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace sgrt {

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::swap(MappedFile& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
}

Status MappedFile::open(const std::string& path, MappedFile* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Io(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::Io(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Io(path + ": not a regular file");
  }
  MappedFile m;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return Status::Io(path + ": cannot map " + std::to_string(m.size_) + " bytes: " + std::strerror(e));
    }
    m.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file open
  *out = std::move(m);
  return Status::Ok();
}

void MappedFile::release(size_t offset, size_t bytes) const {
  if (offset >= size_) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE)), last = offset + std::min(bytes, size_ - offset);
  const size_t begin = (offset + page - 1) / page * page, end = last / page * page;
  if (begin < end) ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);  // advice: failure is harmless
}

}  // namespace sgrt
