#include "sgrt/run_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sgrt {
namespace {

// The pid holding a flock on the file with inode `ino`, from /proc/locks
// ("1: FLOCK  ADVISORY  WRITE 4242 08:01:123456 0 EOF"); 0 when unknown.
long lock_holder(ino_t ino) {
  std::ifstream f("/proc/locks");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string id, kind, mode, access, dev;
    long pid = 0;
    if (!(in >> id >> kind >> mode >> access >> pid >> dev) || kind != "FLOCK") continue;
    size_t colon = dev.rfind(':');
    if (colon != std::string::npos && std::strtoull(dev.c_str() + colon + 1, nullptr, 10) == ino) return pid;
  }
  return 0;
}

Status write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Status::Runtime(path + ": write failed: " + std::strerror(w < 0 ? errno : ENOSPC));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Length of the prefix of `text` made of whole lines whose "step" is at most `step`.
size_t prefix_through_step(const std::string& text, int64_t step) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) break;  // a torn last line is dropped
    size_t key = text.find("\"step\":", at);
    if (key == std::string::npos || key > end || std::strtoll(text.c_str() + key + 7, nullptr, 10) > step) break;
    at = end + 1;
  }
  return at;
}

}  // namespace

RunLock::~RunLock() {
  if (owned_fd_ >= 0) ::close(owned_fd_);
  if (!created_.empty()) ::rmdir(created_.c_str());  // fails, as it should, unless still empty
}

Status RunLock::lock_fd(int fd, const std::string& path, const std::string& what) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return Status::Ok();
  if (errno != EWOULDBLOCK) return Status::Io(path + ": cannot lock: " + std::strerror(errno));
  struct stat st {};
  long pid = ::fstat(fd, &st) == 0 ? lock_holder(st.st_ino) : 0;
  return Status::Invalid(path + ": " + what + " is in use by another sgrt run" +
                         (pid > 0 ? " (pid " + std::to_string(pid) + ")" : std::string()) +
                         "; wait for it to finish or use another path");
}

Status RunLock::lock_folder(const std::string& path, const std::string& what) {
  if (::mkdir(path.c_str(), 0755) == 0) created_ = path;
  else if (errno != EEXIST) return Status::Io(path + ": cannot create: " + std::strerror(errno));
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Io(path + ": cannot open: " + std::strerror(errno));
  Status st = lock_fd(fd, path, what);
  if (!st.ok()) {
    ::close(fd);
    return st;
  }
  owned_fd_ = fd;
  return Status::Ok();
}

int remove_stale_temporaries(const std::string& dir, const std::string& name) {
  const std::string prefix = name + ".tmp.";
  int removed = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(e->d_name + prefix.size(), &end, 10);
    if (pid <= 0 || *end || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    removed += ::unlink((dir + "/" + e->d_name).c_str()) == 0;
  }
  ::closedir(d);
  return removed;
}

RunLog::~RunLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status RunLog::open(const std::string& path, int64_t keep_through_step) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::Io(path + ": cannot open the log for writing: " + std::strerror(errno));
  SG_TRY(lock_.lock_fd(fd_, path, "the log"));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Status::Runtime(path + ": cannot stat the log: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::Ok();  // a pipe or a device: nothing to keep or cut
  off_t keep = 0;
  if (keep_through_step >= 0) {
    std::string text(static_cast<size_t>(st.st_size), '\0');
    ssize_t got = ::pread(fd_, text.data(), text.size(), 0);
    if (got != static_cast<ssize_t>(text.size())) return Status::Runtime(path + ": cannot read the log back");
    keep = static_cast<off_t>(prefix_through_step(text, keep_through_step));
  }
  if (::ftruncate(fd_, keep) != 0 || ::lseek(fd_, keep, SEEK_SET) != keep)
    return Status::Runtime(path + ": cannot truncate the log: " + std::strerror(errno));
  return Status::Ok();
}

Status RunLog::line(const std::string& json) {
  if (fd_ < 0) return Status::Ok();
  std::string l = json + "\n";
  return write_all(fd_, l.data(), l.size(), path_);
}

}  // namespace sgrt
