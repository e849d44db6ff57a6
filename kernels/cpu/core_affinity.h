// Which core a thread runs on, and moving it off one, for the thread pool
// (parallel.cpp). Linux only; elsewhere current_cpu() is -1 and nothing moves.
#pragma once

namespace sgrt::cpu {

int current_cpu();  // the calling thread's core now, -1 where unknown

// Moves the calling thread off core `cpu` when its affinity mask allows another,
// then restores the mask as it was. Returns the core it ran on between the two
// (-1: it did not move: `cpu` not in the mask, the mask has one core, or no Linux).
int move_off_cpu(int cpu);

}  // namespace sgrt::cpu
