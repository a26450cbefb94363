#!/bin/bash
# Alternates two kiln builds over models, model by model, ROUNDS times, so
# both see the same minutes of a machine whose speed drifts (BENCHMARKS.md).
# Prints "round model build median_ms" per measurement.
#
#   scripts/bench/alternate.sh /tmp/kiln-base /tmp/kiln-new "resnet50 bert" 3
#   THREADS=1 scripts/bench/alternate.sh ...   # another thread count (default 2)
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 KILN_A KILN_B \"MODEL...\" [ROUNDS]" >&2
  exit 2
fi
A=$1; B=$2; MODELS=$3; ROUNDS=${4:-3}; THREADS=${THREADS:-2}
DIR=$(cd "$(dirname "$0")/../.." && pwd)/models
for r in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    for k in "$A" "$B"; do
      t=$("$k" bench "$DIR/$m/model.onnx" --threads "$THREADS" --runs 10 --warmup 2 2>&1 | tail -1 \
        | sed -E 's/.*median: ([0-9.]+) ms.*/\1/')
      echo "$r $m $k $t"
    done
  done
done
