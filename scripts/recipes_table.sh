#!/usr/bin/env bash
# Trains models/fashion_mlp.lua under every recipe (same seed and
# hyperparameters) and prints a Markdown table of test accuracy against fp32.
# Usage: scripts/recipes_table.sh [BUILD_DIR] [extra sgrt train flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
sgrt="$build/tools/sgrt"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # name, flags...
  local name=$1; shift
  "$sgrt" train models/fashion_mlp.lua --quiet --seed 1 --log "$out/$name.jsonl" "$@" >/dev/null
  python3 - "$out/$name.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
done = [r for r in rows if r.get("event") == "done"][0]
steps = [r for r in rows if "samples_per_s" in r]
sps = sorted(r["samples_per_s"] for r in steps)[len(steps) // 2]
over = sum(r["overflows"] for r in steps)
under = sum(r["underflows"] for r in steps)
print(f'{done["accuracy"]:.4f} {done["loss"]:.4f} {sps:.0f} {over} {under}')
PY
}

echo "| recipe | test accuracy | vs fp32 (points) | test loss | median samples/s | overflows | underflows |"
echo "|---|---|---|---|---|---|---|"
read -r ref _ <<<"$(run fp32 --recipe fp32 "$@")"
for r in fp32 bf16 fp8 fp8-delayed mxfp8 fp8-row fp8-block fp8-static fp4 nvfp4 nvfp4-train "fp8 --no-plan" "fp4 --no-plan"; do
  name=${r// /_}
  read -r acc loss sps over under <<<"$(run "$name" --recipe $r "$@")"
  delta=$(python3 -c "print(f'{100*($acc-$ref):+.2f}')")
  echo "| $r | $acc | $delta | $loss | $sps | $over | $under |"
done
