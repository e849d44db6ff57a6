#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz and
# runs one for SECONDS on its corpus; see docs/reliability.md.
# Usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]
#        scripts/fuzz.sh --smoke [SECONDS]   (every target in turn, 60 s each by default)
#   TARGET: fuzz_model, fuzz_checkpoint, fuzz_idx, fuzz_text, fuzz_safetensors, fuzz_lua, fuzz_gguf, fuzz_npy (tests/fuzz/fuzz_*.cpp)
# New inputs go to build-fuzz/corpus/TARGET (seeded by the target itself from
# the current formats), crashes to build-fuzz/findings/TARGET; the committed
# seeds in tests/fuzz/corpus/TARGET are read, never written.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --smoke ]; then  # a short run of every target; the first finding fails it
  for src in tests/fuzz/fuzz_*.cpp; do
    "$0" "$(basename "$src" .cpp)" "${2:-60}"
  done
  exit 0
fi
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...] | scripts/fuzz.sh --smoke [SECONDS]" >&2
  exit 2
fi
target=$1 seconds=$2
shift 2
[ -f "tests/fuzz/$target.cpp" ] || { echo "fuzz.sh: no target tests/fuzz/$target.cpp" >&2; exit 2; }
build=${BUILD_DIR:-build-fuzz}
mkdir -p "$build"
exec 9>"$build/.build.lock"
flock 9  # one build at a time when several targets start together
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSGRT_FUZZ=ON \
  -DSGRT_TESTS=OFF -DSGRT_BENCH=OFF -DSGRT_VULKAN=OFF >/dev/null
cmake --build "$build" --target "$target" -j "${JOBS:-$(nproc)}"
flock -u 9
work="$build/corpus/$target" findings="$build/findings/$target"
mkdir -p "$work" "$findings"
seeds=()
[ -d "tests/fuzz/corpus/$target" ] && seeds+=("tests/fuzz/corpus/$target")
[ "$target" = fuzz_lua ] && seeds+=(models)
SGRT_FUZZ_SEED_DIR="$work" "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$findings/" -print_final_stats=1 "$@" "$work" "${seeds[@]}"
