// Which cores a thread may use and runs on, and moving it off one, for the thread
// pool (parallel.cpp). Linux only; elsewhere current_cpu() is -1, nothing moves
// and every core counts.
#pragma once

namespace sgrt::cpu {

int current_cpu();  // the calling thread's core now, -1 where unknown

// Moves the calling thread off core `cpu` when its affinity mask allows another,
// then restores the mask as it was. Returns the core it ran on between the two
// (-1: it did not move: `cpu` not in the mask, the mask has one core, or no Linux).
int move_off_cpu(int cpu);

// The cores the calling thread may run on: its affinity mask (taskset, a
// container's cpuset), capped by the CPU quota of its cgroup and the cgroups
// above it (cgroup v2's cpu.max, `docker --cpus`), rounded up. More threads
// than that share cores, and the pool's threads then wait on each other.
int usable_cores();

// Cores a cgroup v2 cpu.max grants ("QUOTA PERIOD", rounded up; at least 1);
// 0 for "max ..." (no limit) or text that is not such a line.
int cpu_max_cores(const char* text);

}  // namespace sgrt::cpu
