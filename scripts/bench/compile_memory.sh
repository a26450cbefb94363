#!/bin/bash
# Compile time (cold, cached), a whole cached `kiln run` and its peak resident
# memory, for one or more kiln builds alternated over ROUNDS rounds, then
# onnxruntime's peak resident memory on the same models (issue 19, item 4-5).
#
# Usage: scripts/bench/compile_memory.sh "OLD_KILN NEW_KILN" "resnet50 bert" [ROUNDS]
# Needs the exported models in models/ (scripts/models/export.py) and the
# benchmark venv (.venv-models, scripts/bench/setup.sh). Run on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=${1:-target/release/kiln}
models=${2:-"resnet50 bert"}
rounds=${3:-2}
for round in $(seq "$rounds"); do
  for bin in $bins; do
    for m in $models; do
      ins=()
      for f in models/"$m"/input_*.npy; do ins+=(-i "$f"); done
      json=$("$bin" bench models/"$m"/model.onnx --cold --runs 5 --warmup 1 --json "${ins[@]}" 2>/dev/null | tail -1)
      times=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("cold %.2f s, cached %.3f s, median run %.1f ms" % (d["compile_s"], d["compile_cached_s"], d["median_ms"]))' "$json")
      "$bin" run models/"$m"/model.onnx "${ins[@]}" > /dev/null 2>&1
      read -r wall kb < <(/usr/bin/time -f "%e %M" "$bin" run models/"$m"/model.onnx "${ins[@]}" 2>&1 > /dev/null | tail -1)
      echo "round $round $bin $m: $times; cached kiln run $wall s, peak RSS $((kb / 1024)) MB"
    done
  done
done
for m in $models; do
  .venv-models/bin/python scripts/bench/ort_rss.py "$m"
done
