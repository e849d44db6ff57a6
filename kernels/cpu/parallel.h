// A small persistent thread pool for the CPU kernels.
//
// parallel_for(n, grain, fn) calls fn(begin, end) on the chunks
//   [i * grain, min(n, (i + 1) * grain)),  i = 0 .. ceil(n / grain) - 1,
// spread over the pool's threads (the caller works too) and returns when all are
// done. The chunks depend only on (n, grain), never on the thread count, so a
// kernel that keeps one partial result per chunk and combines them in chunk order
// is deterministic on any number of threads. Calls made from inside a chunk, or
// while another thread is using the pool, run serially on the calling thread.
// Idle threads poll for the next call for 50 us, then yield between polls up to
// 1 ms, then sleep, so a step's back-to-back calls cost about a microsecond
// each, not a futex wake-up (bench/parallel.cpp). The caller waits for its
// helpers by polling and yielding, never sleeping (parallel.cpp says why), and
// only for those that joined the call before its chunks ran out: a helper that
// wakes late (another process had its core) finds the call closed and its
// chunks done by the threads that were there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace sgrt::cpu {

int num_threads();            // threads a parallel_for may use, caller included
void set_num_threads(int n);  // n <= 0: usable_cores() (default; env SGRT_NUM_THREADS)

using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end);
void parallel_run(int64_t n, int64_t grain, ChunkFn fn, void* ctx);

template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  using Fn = std::remove_reference_t<F>;
  parallel_run(n, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<Fn*>(ctx))(b, e); },
               const_cast<void*>(static_cast<const void*>(&fn)));
}

// Per-thread scratch memory, 64-byte aligned, kept between calls (grown as needed;
// earlier contents are not kept when it grows). `slot` 0..5 gives independent buffers.
void* thread_scratch(int slot, size_t bytes);

}  // namespace sgrt::cpu
