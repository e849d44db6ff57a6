#include "sgrt/file_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace sgrt {

Status read_file(const std::string& path, std::vector<uint8_t>* out) { return read_file_prefix(path, SIZE_MAX, out); }

Status read_file_prefix(const std::string& path, size_t max_bytes, std::vector<uint8_t>* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::Io(path + ": cannot open: " + std::strerror(errno));
  out->clear();
  uint8_t buf[1 << 16];
  size_t n;
  while (out->size() < max_bytes && (n = std::fread(buf, 1, std::min(sizeof buf, max_bytes - out->size()), f)) > 0)
    out->insert(out->end(), buf, buf + n);
  bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return Status::Io(path + ": read error");
  return Status::Ok();
}

static std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

Status AtomicFile::create(const std::string& path, std::unique_ptr<AtomicFile>* out) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Io(path + ": cannot create: " + std::strerror(errno));
  out->reset(new AtomicFile(path, std::move(tmp), fd));
  return Status::Ok();
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

Status AtomicFile::fail(const std::string& what) {
  const std::string err = std::strerror(errno);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  return Status::Io(path_ + ": " + what + " failed: " + err);
}

Status AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) return Status::Io(path_ + ": write after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t w = ::write(fd_, p, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail("write");
    p += w;
    size -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status AtomicFile::commit() {
  if (fd_ < 0) return Status::Io(path_ + ": commit after commit or failure");
  if (::fsync(fd_) != 0) return fail("sync");
  const int fd = fd_;
  fd_ = -1;  // closed here either way; fail() removes the temporary file
  if (::close(fd) != 0) return fail("close");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return fail("rename");
  int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Status write_file_atomic(const std::string& path, const void* data, size_t size) {
  std::unique_ptr<AtomicFile> f;
  SG_TRY(AtomicFile::create(path, &f));
  SG_TRY(f->write(data, size));
  return f->commit();
}

uint32_t crc32_of(const void* data, size_t size, uint32_t prior) {
  uLong crc = prior;
  const Bytef* p = static_cast<const Bytef*>(data);
  while (size > 0) {
    uInt chunk = size > (1u << 30) ? (1u << 30) : static_cast<uInt>(size);
    crc = crc32(crc, p, chunk);
    p += chunk;
    size -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace sgrt
