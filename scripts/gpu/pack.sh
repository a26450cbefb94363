#!/usr/bin/env bash
# Puts what scripts/gpu/check.sh needs into .gpu/ (git-ignored): release
# builds of the kiln binary and the node-test binary, and the ONNX node tests
# (compressed). The device tool carries .gpu/ to the GPU machine.
set -eu
cd "$(dirname "$0")/../.."
cargo build --release -p kiln-cli
tests=$(cargo test --release -p kiln-conformance --test node_tests --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "node_tests" and m.get("executable"):
        print(m["executable"])')
mkdir -p .gpu
cp target/release/kiln .gpu/kiln
cp "$tests" .gpu/node_tests
strip .gpu/kiln .gpu/node_tests
tar czf .gpu/node-tests.tar.gz -C ../shared onnx-node-tests
du -sh .gpu/*
