// GGUF reading: time to open (map and validate) a file, and to dequantize
// every tensor into one reused f32 buffer, per tensor type; resident memory
// after opening and at the peak (the buffer holds the largest tensor). One
// JSON line per type and one for the whole file.
//
//   bench_gguf FILE.gguf     e.g. bench_gguf $(scripts/get_models.sh)
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "sgrt/gguf.h"

using namespace sgrt;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of this thread: on a shared machine wall time also counts waiting.
double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// VmRSS or VmHWM of this process, KiB.
long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::string(field).size());
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: bench_gguf FILE.gguf   (e.g. bench_gguf $(scripts/get_models.sh))\n");
    return 2;
  }
  const std::string path = argv[1];
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<GgufFile> f;
  Status st = GgufFile::open(path, &f);
  const double open_ms = ms_since(t0);
  if (!st.ok()) {
    std::fprintf(stderr, "bench_gguf: %s\n", st.message().c_str());
    return st.exit_code();
  }
  const long rss_open = status_kib("VmRSS:");

  struct Sum { int tensors = 0; int64_t elements = 0; uint64_t bytes = 0; double ms = 0, cpu_ms = 0; };
  std::map<std::string, Sum> by_type;
  std::vector<float> buf;
  for (const GgufTensor& t : f->tensors()) {
    if (!gguf_type_supported(t.type)) continue;
    if (buf.size() < static_cast<size_t>(t.numel())) buf.resize(static_cast<size_t>(t.numel()));
    auto t1 = std::chrono::steady_clock::now();
    const double c1 = cpu_ms();
    st = f->dequantize(t, std::span<float>(buf.data(), static_cast<size_t>(t.numel())));
    Sum& s = by_type[gguf_type_name(uint32_t(t.type))];
    s.ms += ms_since(t1);
    s.cpu_ms += cpu_ms() - c1;
    if (!st.ok()) {
      std::fprintf(stderr, "bench_gguf: %s\n", st.message().c_str());
      return st.exit_code();
    }
    ++s.tensors;
    s.elements += t.numel();
    s.bytes += t.bytes;
  }
  Sum all;
  for (const auto& [type, s] : by_type) {
    std::printf("{\"bench\":\"gguf_dequantize\",\"type\":\"%s\",\"tensors\":%d,\"elements\":%lld,\"ms\":%.1f,"
                "\"cpu_ms\":%.1f,\"Melem_per_cpu_s\":%.0f}\n",
                type.c_str(), s.tensors, static_cast<long long>(s.elements), s.ms, s.cpu_ms,
                s.elements / s.cpu_ms / 1e3);
    all.tensors += s.tensors;
    all.elements += s.elements;
    all.bytes += s.bytes;
    all.ms += s.ms;
    all.cpu_ms += s.cpu_ms;
  }
  std::printf("{\"bench\":\"gguf\",\"file_bytes\":%llu,\"open_ms\":%.2f,\"dequantize_ms\":%.1f,\"dequantize_cpu_ms\":%.1f,"
              "\"tensors\":%d,\"Melem_per_cpu_s\":%.0f,\"rss_after_open_kib\":%ld,\"peak_rss_kib\":%ld,"
              "\"largest_tensor_kib\":%zu}\n",
              static_cast<unsigned long long>(f->file_size()), open_ms, all.ms, all.cpu_ms, all.tensors,
              all.elements / all.cpu_ms / 1e3,
              rss_open, status_kib("VmHWM:"), buf.size() * sizeof(float) / 1024);
  return 0;
}
