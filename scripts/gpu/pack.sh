#!/usr/bin/env bash
# Puts what scripts/gpu/check.sh needs into .gpu/ (git-ignored): release
# builds of the kiln binary, the node-test binary, the CUDA random-graph
# and reductions tests and the gemm-template products test, and the ONNX
# node tests (compressed), about 51 MB. The device tool takes .gpu/ to the
# GPU machine when the call names it: `carry: [".gpu"]`.
set -eu
cd "$(dirname "$0")/../.."
cargo build --release -p kiln-cli
# The test binary of `cargo test --release -p PACKAGE --test NAME`.
test_binary() {
  cargo test --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$2"
}
mkdir -p .gpu
cp target/release/kiln .gpu/kiln
cp "$(test_binary kiln-conformance node_tests)" .gpu/node_tests
cp "$(test_binary kiln-cuda random_graphs)" .gpu/random_graphs
cp "$(test_binary kiln-conformance cuda_products)" .gpu/cuda_products
cp "$(test_binary kiln-cuda reductions)" .gpu/cuda_reductions
strip .gpu/kiln .gpu/node_tests .gpu/random_graphs .gpu/cuda_products .gpu/cuda_reductions
tar czf .gpu/node-tests.tar.gz -C ../shared onnx-node-tests
du -sh .gpu/*
