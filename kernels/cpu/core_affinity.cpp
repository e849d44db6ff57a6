#include "cpu/core_affinity.h"

#if defined(__linux__)
#include <sched.h>
#endif

namespace sgrt::cpu {

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

}  // namespace sgrt::cpu
