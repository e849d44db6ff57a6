#!/usr/bin/env bash
# Installs what sgrt's build, tests and default training need, from Debian's
# packages. Idempotent: returns at once when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  liblua5.4-dev              # the DSL front end (compiler side only)
  libflatbuffers-dev flatbuffers-compiler   # the scaled-graph IR
  doctest-dev                # unit tests
  zlib1g-dev                 # gzip'd IDX data, checkpoints
  libpng-dev                 # sg.data.images and sgrt predict (the sgrt tool; not libsgrt)
  libjpeg62-turbo-dev        # the same, JPEG
  dataset-fashion-mnist      # the default data set
  jargon-text                # the GPT's default text corpus (The Jargon File)
  wordnet-base               # scripts/make_wordnet_instructions.py: the LoRA example's instruction set
  libopenblas-dev            # baseline for bench/gemm only
  libopenmpi-dev openmpi-bin # data-parallel training: mpirun -np N sgrt train (SGRT_MPI)
  iproute2                   # scripts/test_two_hosts.sh: 2 ranks in two network namespaces
  libvulkan-dev glslc mesa-vulkan-drivers   # Vulkan backend; lavapipe runs it on the CPU
  python3-matplotlib         # scripts/plot_gpt_curves.py: curves of --log files
  clang libclang-rt-14-dev   # scripts/fuzz.sh: the libFuzzer targets (CI runs each for 10 s)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Pretrained models for the tests that use them (scripts/get_models.sh): fetched
# into a cache outside git; offline, those tests skip, and setup goes on.
fetch_models() {
  "$(dirname "$0")/get_models.sh" >/dev/null || echo "setup: models not fetched (tests that need them skip)"
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  fetch_models
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fetch_models
echo "setup: done"
