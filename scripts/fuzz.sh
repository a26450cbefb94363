#!/usr/bin/env bash
# Continue the coverage-guided fuzzing campaigns (outside CI; docs/fuzzing.md
# records them). Usage: scripts/fuzz.sh [TARGET...] [-- SECONDS]
#   scripts/fuzz.sh                      # every target, 600 s each
#   scripts/fuzz.sh onnx_import -- 3600  # one target, an hour
# Seeds empty corpora from fuzz/corpus-min (else the ONNX node tests and
# the IR text tests), runs
# each target with the memory and time limits of fuzz/README.md, and prints
# libFuzzer's final statistics (executions). Crashes land in
# fuzz/artifacts/<target>/: minimise, fix, commit under fuzz/regressions/.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
seconds=600
while [ $# -gt 0 ]; do
  case "$1" in
    --) seconds="${2:?seconds after --}"; shift 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(onnx_import pipeline generated graph_text loop_text)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
tests="${KILN_ONNX_NODE_TESTS:-../shared/onnx-node-tests}"
seed() {
  local dir="fuzz/corpus/$1"
  mkdir -p "$dir"
  [ -z "$(ls -A "$dir")" ] || return 0
  # The committed minimised corpus (fuzz/corpus-min, `cargo fuzz cmin` of
  # the campaigns in docs/fuzzing.md) continues where they stopped.
  if [ -f "fuzz/corpus-min/$1.tar.xz" ]; then
    tar xJf "fuzz/corpus-min/$1.tar.xz" -C fuzz/corpus
    return 0
  fi
  # Otherwise the node tests and the IR text tests; `generated` starts
  # from nothing (every input is a generator seed).
  case "$1" in
    onnx_import|pipeline)
      for d in "$tests"/*/; do cp "$d/model.onnx" "$dir/$(basename "$d").onnx"; done ;;
    graph_text)
      cp crates/kiln-ir/tests/text/*.kiln crates/kiln-cpu/tests/cases/*.kiln "$dir/" ;;
    loop_text)
      cp crates/kiln-cpu/tests/cases/*.expected crates/kiln-cpu/tests/fused/*.expected "$dir/" ;;
  esac
}
for t in "${targets[@]}"; do
  seed "$t"
  echo "== $t, $seconds s"
  extra=()
  [ "$t" != generated ] || extra=(-max_len=16)
  (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$t" -- "${extra[@]}" \
      -max_total_time="$seconds" -rss_limit_mb=3000 -timeout=30 -print_final_stats=1 2>&1) \
    | grep -E '^stat::number_of_executed_units|^==[0-9]+== ERROR|Test unit written' || true
done
