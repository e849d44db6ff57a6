// Pretrained model files some tests use. They are not in git:
// scripts/get_models.sh fetches them into ${SGRT_CACHE:-$HOME/.cache/sgrt}
// (scripts/setup.sh calls it). A test that needs one skips with one MESSAGE
// when it is absent:
//   std::string path = test::smollm2_gguf();
//   if (path.empty()) { MESSAGE(test::kNoSmollm2); return; }
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

namespace sgrt::test {

inline const std::string kNoSmollm2 =
    "skipping: SmolLM2-135M-Instruct.Q4_1.gguf not found (run scripts/get_models.sh, or set SGRT_SMOLLM2_GGUF)";

// $SGRT_SMOLLM2_GGUF, else the cache's copy; "" when the file is not there.
inline std::string smollm2_gguf() {
  std::string path;
  if (const char* env = std::getenv("SGRT_SMOLLM2_GGUF"); env && *env) {
    path = env;
  } else {
    const char* cache = std::getenv("SGRT_CACHE");
    const char* home = std::getenv("HOME");
    std::string dir = cache && *cache ? cache : std::string(home ? home : "") + "/.cache/sgrt";
    path = dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) ? path : "";
}

}  // namespace sgrt::test
