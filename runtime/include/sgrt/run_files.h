// The files a training run owns while it runs: its checkpoint folder and its
// JSON-lines log. Each is locked for the whole run (an advisory flock, so a
// second trainer on the same folder or log fails at once instead of losing
// one run), and every write is checked.
#pragma once
#include <cstdint>
#include <string>

#include "sgrt/status.h"

namespace sgrt {

// An exclusive advisory lock (flock) on a file or folder, held until
// destruction. A second holder gets an invalid-input error naming `what`,
// the path and the holder's pid.
class RunLock {
 public:
  RunLock() = default;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();
  // Locks the open descriptor fd (not owned) of `path`.
  Status lock_fd(int fd, const std::string& path, const std::string& what);
  // Creates the folder when missing, opens and locks it. A folder it created
  // and that is still empty at destruction (the run wrote nothing) is removed.
  Status lock_folder(const std::string& path, const std::string& what);

 private:
  int owned_fd_ = -1;
  std::string created_;
};

// Removes DIR/NAME.tmp.<pid> files left by writers that died (pid no longer
// running); returns how many were removed.
int remove_stale_temporaries(const std::string& dir, const std::string& name);

// A JSON-lines log, locked while open. Fresh runs start it empty; resumed
// runs keep only the lines up to the checkpoint's step, so the file ends up
// exactly as an uninterrupted run's. A failed write is a run-time error.
class RunLog {
 public:
  RunLog() = default;
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;
  ~RunLog();
  // keep_through_step < 0: start empty; else keep the lines whose "step" is at most it.
  Status open(const std::string& path, int64_t keep_through_step);
  Status line(const std::string& json);

 private:
  int fd_ = -1;
  std::string path_;
  RunLock lock_;
};

}  // namespace sgrt
