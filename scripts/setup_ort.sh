#!/usr/bin/env bash
# ONNX Runtime training, a peer of bench/train.cpp (MLP and GPT), from PyPI into a venv
# in the cache (outside git): ${SGRT_CACHE:-$HOME/.cache/sgrt}/ort-venv. Its last
# release, onnxruntime-training 1.19.2, ships a CPU wheel for CPython 3.11 (Debian
# 12's python3); onnx 1.16 writes models that release reads (IR version 10). Its
# training package imports torch: the venv sees Debian's python3-torch (and its
# numpy), as the PyTorch peer uses. Needs python3-venv. Usage: scripts/setup_ort.sh
set -euo pipefail
cache=${SGRT_CACHE:-$HOME/.cache/sgrt}
venv=$cache/ort-venv
fail() { echo "setup_ort.sh: $*" >&2; exit 1; }
[ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import onnxruntime.training, onnx" 2>/dev/null && {
  echo "setup_ort.sh: $venv is ready"; exit 0; }
mkdir -p "$cache" || fail "cannot create $cache"
tmp=$(mktemp -d "$cache/.ort-venv.XXXXXX") || fail "cannot write to $cache"
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 -c "import torch" 2>/dev/null || fail "Debian's python3-torch is missing (apt-get install python3-torch)"
/usr/bin/python3 -m venv --system-site-packages "$tmp" || fail "cannot make a venv (apt-get install python3-venv)"
echo "setup_ort.sh: installing onnxruntime-training 1.19.2 and onnx 1.16.2 from PyPI (about 320 MB)" >&2
"$tmp/bin/pip" install -q "onnxruntime-training==1.19.2" "onnx==1.16.2" || fail "pip install failed"
rm -rf "$venv"
mv "$tmp" "$venv"  # a venv's scripts name their directory: rewrite them for the new place
sed -i "s|$tmp|$venv|g" "$venv"/bin/* 2>/dev/null || true
trap - EXIT
echo "setup_ort.sh: $venv is ready"
