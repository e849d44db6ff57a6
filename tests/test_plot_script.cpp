// scripts/plot_gpt_curves.py draws any --log file: the y axis named after the
// log's metric, the logged steps, the held-out evaluations and the final value,
// skipping nulls (non-finite values). Skips where Debian's python3-matplotlib
// (scripts/setup.sh) is not installed.
#include <cstdio>
#include <cstdlib>

#include "harness.h"
#include "tool_runner.h"

namespace {

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  *status = pclose(p);
  return out;
}

uint32_t be32(const std::string& s, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + at);
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

}  // namespace

TEST_CASE("plot_gpt_curves.py draws logged steps, held-out evaluations and the final value of any metric") {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: python3-matplotlib is not installed (scripts/setup.sh installs it)");
    return;
  }
  sgrt::test::TempDir dir;
  std::string log = dir.file("run.jsonl",
                             "{\"step\":1,\"epoch\":0,\"loss\":2.5,\"lr\":0.001}\n"
                             "{\"step\":2,\"epoch\":0,\"loss\":null,\"lr\":0.001,\"nonfinite\":true}\n"
                             "{\"step\":3,\"epoch\":0,\"loss\":2.25,\"lr\":0.001}\n"
                             "{\"event\":\"eval\",\"step\":3,\"epoch\":0,\"split\":\"validation\",\"loss\":2.4,\"accuracy\":0.5}\n"
                             "{\"step\":4,\"epoch\":1,\"loss\":2.0,\"lr\":0.001}\n"
                             "{\"event\":\"eval\",\"step\":4,\"epoch\":1,\"split\":\"validation\",\"loss\":2.3,\"accuracy\":0.625}\n"
                             "{\"event\":\"done\",\"step\":4,\"epoch\":1,\"loss\":2.125,\"accuracy\":0.75}\n");
  std::string png = dir.path + "/curve.png";
  int status = -1;
  std::string out = run("/usr/bin/python3 " SGRT_SOURCE_DIR "/scripts/plot_gpt_curves.py -o " + png + " a=" + log, &status);
  REQUIRE_MESSAGE(status == 0, out);
  CHECK_MESSAGE(out.find("a: 3 logged steps, 2 validation evaluations, final loss 2.125\n") != std::string::npos, out);
  std::string img = sgrt::test::slurp(png);
  REQUIRE(img.size() > 24);
  CHECK(img.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  CHECK(be32(img, 16) == 700);  // 7 x 4.2 inches at 100 dpi
  CHECK(be32(img, 20) == 420);
  // A metric only the evaluations carry.
  out = run("/usr/bin/python3 " SGRT_SOURCE_DIR "/scripts/plot_gpt_curves.py --metric accuracy -o " + png + " a=" + log, &status);
  REQUIRE_MESSAGE(status == 0, out);
  CHECK_MESSAGE(out.find("a: 0 logged steps, 2 validation evaluations, final accuracy 0.75\n") != std::string::npos, out);
  CHECK(out.find("| a | 0.7500 |") != std::string::npos);
}
