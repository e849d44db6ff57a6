#include "cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu/core_affinity.h"

namespace sgrt::cpu {
namespace {

thread_local bool t_in_pool_work = false;

// How long an idle thread polls for the next job before sleeping: kSpin with
// the core paused between polls, then up to kYieldSpin yielding it. A helper
// that slept between the parallel_for calls of one product was woken onto its
// caller's core each time (see run) and moved off it again.
constexpr std::chrono::microseconds kSpin{50}, kYieldSpin{1000};

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  // Runs a job on up to `threads` threads; false if the pool is busy (caller runs it).
  bool run(int64_t chunks, int threads, ChunkFn fn, void* ctx, int64_t n, int64_t grain) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    grow(threads - 1);
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = fn; ctx_ = ctx; n_ = n; grain_ = grain; chunks_ = chunks;
      next_.store(0);
      finished_.store(0);
      caller_cpu_.store(current_cpu(), std::memory_order_relaxed);
      const uint64_t number = (job_.load() >> kHelperBits) + 1;
      join_.store(number << kJoinShift, std::memory_order_release);
      // One word holds the job's number and its helper count, so a helper reads
      // both from the same job.
      job_.store(number << kHelperBits | static_cast<uint64_t>(threads - 1), std::memory_order_release);
    }
    wake_.notify_all();
    work();
    // Every chunk is taken: no helper may join now, and the caller waits only for
    // those that joined, whose chunks are running. A helper that has not woken,
    // or was preempted before joining (another process on the cores), is not
    // waited for: the caller took its chunks.
    const int joined = static_cast<int>(join_.fetch_or(kClosed, std::memory_order_acq_rel) & kJoinedMask);
    // The caller polls, then yields, and never sleeps. A thread woken from a
    // futex can be placed on its waker's core while another core idles (seen on
    // a 2-vCPU KVM guest, where a halted vCPU reads as preempted and wake-ups
    // skip it): a caller woken by its helper followed it from core to core, and
    // products ran at one core's speed for tens of milliseconds.
    while (!spin_until([&] { return finished_.load(std::memory_order_acquire) == joined; })) {
    }
    return true;
  }

 private:
  void grow(int n) {
    while (static_cast<int>(workers_.size()) < n)
      workers_.emplace_back([this, id = static_cast<int>(workers_.size())] { loop(id); });
  }

  void work() {
    t_in_pool_work = true;
    for (int64_t c; (c = next_.fetch_add(1)) < chunks_;) {
      const int64_t b = c * grain_, e = b + grain_ < n_ ? b + grain_ : n_;
      fn_(ctx_, b, e);
    }
    t_in_pool_work = false;
  }

  void loop(int id) {
    uint64_t seen = 0;
    for (;;) {
      // A step runs one parallel_for after another with short serial gaps: a
      // helper that spins through the gap starts the next job without a futex
      // wake-up (tens of microseconds, the cost of a small GEMM). It sleeps after.
      if (!spin_until([&] { return job_.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock<std::mutex> lk(mu_);
        wake_.wait(lk, [&] { return quit_ || job_.load() != seen; });
        if (quit_) return;
      }
      seen = job_.load(std::memory_order_acquire);
      // A job this helper is not part of may end, and the next begin, at any time.
      if (static_cast<uint64_t>(id) >= (seen & kHelperMask)) continue;
      // Woken onto the caller's core (see run), a helper would share it with the
      // caller's own chunks: it moves to another core of its mask first.
      const int caller_cpu = caller_cpu_.load(std::memory_order_relaxed);
      if (caller_cpu >= 0 && caller_cpu == current_cpu()) move_off_cpu(caller_cpu);
      if (!join(seen >> kHelperBits)) continue;
      work();
      finished_.fetch_add(1, std::memory_order_release);
    }
  }

  // Joins job `number` unless it has ended or its caller has closed it; a helper
  // reads the job's fields only once joined, and the caller changes them only
  // after every helper that joined has finished.
  bool join(uint64_t number) {
    uint64_t w = join_.load(std::memory_order_acquire);
    while ((w >> kJoinShift) == number && !(w & kClosed))
      if (join_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    return false;
  }

  // Polls ready() for up to kSpin, pausing the core between polls, then up to
  // kYieldSpin in all, yielding the core between polls (to a thread of ours
  // placed on it, or anyone's).
  template <class Ready>
  static bool spin_until(Ready ready) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0;; ++i) {
      if (ready()) return true;
      cpu_relax();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > start + kSpin) break;
    }
    while (!ready()) {
      if (std::chrono::steady_clock::now() > start + kYieldSpin) return false;
      std::this_thread::yield();
    }
    return true;
  }

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::mutex busy_, mu_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
  bool quit_ = false;
  static constexpr int kHelperBits = 16;
  static constexpr uint64_t kHelperMask = (uint64_t{1} << kHelperBits) - 1;
  static constexpr int kJoinShift = kHelperBits + 1;
  static constexpr uint64_t kClosed = uint64_t{1} << kHelperBits, kJoinedMask = kHelperMask;
  std::atomic<uint64_t> job_{0};   // job number << kHelperBits | helpers it wants
  std::atomic<uint64_t> join_{0};  // job number << kJoinShift | kClosed | helpers joined
  std::atomic<int> finished_{0};   // helpers of the current job done
  std::atomic<int> caller_cpu_{-1};  // the core the current job's caller posted it from
  ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, grain_ = 1, chunks_ = 0;
  std::atomic<int64_t> next_{0};
};

Pool& pool() {
  static Pool p;
  return p;
}

// SGRT_NUM_THREADS, else the cores this process may use, read once.
int default_threads() {
  static const int n = [] {
    if (const char* s = std::getenv("SGRT_NUM_THREADS"); s && std::atoi(s) > 0) return std::atoi(s);
    return usable_cores();
  }();
  return n;
}

std::atomic<int> g_threads{0};

}  // namespace

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : default_threads();
}

void set_num_threads(int n) { g_threads.store(n, std::memory_order_relaxed); }

void parallel_run(int64_t n, int64_t grain, ChunkFn fn, void* ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>({chunks, num_threads(), 1 << 16}));  // 16 bits of helpers
  if (threads > 1 && !t_in_pool_work && pool().run(chunks, threads, fn, ctx, n, grain)) return;
  for (int64_t b = 0; b < n; b += grain) fn(ctx, b, b + grain < n ? b + grain : n);
}

void* thread_scratch(int slot, size_t bytes) {
  struct Free { void operator()(void* p) const { std::free(p); } };
  thread_local std::unique_ptr<void, Free> buf[6];
  thread_local size_t cap[6] = {};
  if (bytes > cap[slot]) {
    cap[slot] = (bytes + 4095) & ~size_t{4095};
    buf[slot].reset(std::aligned_alloc(64, cap[slot]));
  }
  return buf[slot].get();
}

}  // namespace sgrt::cpu
