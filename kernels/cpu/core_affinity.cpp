#include "cpu/core_affinity.h"

#include <cstdio>
#include <cstring>
#include <thread>

#if defined(__linux__)
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>
#endif

namespace sgrt::cpu {
namespace {

#if defined(__linux__)
// A small text file's contents, as /proc and /sys hold, NUL-terminated ("" when
// it cannot be read).
void read_small(const char* path, char* buf, size_t size) {
  buf[0] = 0;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  const ssize_t n = read(fd, buf, size - 1);
  close(fd);
  buf[n > 0 ? n : 0] = 0;
}

// The tightest cpu.max from this process's cgroup up to the root of the hierarchy
// it sees (a container's namespace root is its own cgroup); 0: no limit.
int cgroup_cores() {
  char self[4096], path[4200], text[64];
  read_small("/proc/self/cgroup", self + 1, sizeof self - 1);
  self[0] = '\n';
  char* dir = std::strstr(self, "\n0::/");  // the cgroup v2 line: "0::/PATH"
  if (!dir) return 0;
  dir += 4;
  dir[std::strcspn(dir, "\n")] = 0;
  int cores = 0;
  for (;;) {
    std::snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", dir);
    read_small(path, text, sizeof text);
    const int c = cpu_max_cores(text);
    if (c > 0 && (cores == 0 || c < cores)) cores = c;
    char* last = std::strrchr(dir, '/');
    if (!last || !dir[0] || !dir[1]) return cores;
    *last = 0;  // the parent: "/a/b" -> "/a" -> ""
  }
}
#endif

}  // namespace

int current_cpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

int move_off_cpu(int cpu) {
#if defined(__linux__)
  cpu_set_t mask;
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof mask, &mask) != 0 || !CPU_ISSET(cpu, &mask) ||
      CPU_COUNT(&mask) < 2)
    return -1;
  cpu_set_t others = mask;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof others, &others) != 0) return -1;  // the kernel moves us before returning
  const int now = sched_getcpu();
  sched_setaffinity(0, sizeof mask, &mask);
  return now;
#else
  (void)cpu;
  return -1;
#endif
}

int cpu_max_cores(const char* text) {
  long long quota = 0, period = 0;
  if (std::sscanf(text, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0) return 0;
  return static_cast<int>((quota + period - 1) / period);
}

int usable_cores() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__linux__)
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) cores = CPU_COUNT(&mask);
  const int quota = cgroup_cores();
  if (quota > 0 && quota < cores) cores = quota;
#endif
  return cores > 0 ? cores : 1;
}

}  // namespace sgrt::cpu
