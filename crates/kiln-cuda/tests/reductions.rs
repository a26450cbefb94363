//! Reductions in the GPU mapping's forms against the reference interpreter,
//! at sizes the node tests and random graphs do not reach: y-reduces whose
//! few columns split over blocks (`columns(..., N splits)`), f16 inputs,
//! arg-reductions with ties (one thread per output, first index wins), and
//! Softmax/LayerNorm rows as blocks. The comparison needs a GPU: it runs
//! only with `KILN_CUDA_TESTS=1` (`scripts/gpu/check.sh` sets it), a no-op
//! elsewhere. Without a GPU, the mapping of the row programs is checked:
//! Softmax and LayerNorm rows are one block per row (threads sharing the
//! row's reductions), never one thread per row carrying the CPU's lane
//! partials in a local array (20-760x slower on an H200: BENCHMARKS.md,
//! "CUDA backend: f16/bf16 kernels, row programs as blocks again").

#[path = "../../kiln-cpu/tests/common/mod.rs"]
mod common;

use kiln_cuda::program::CudaProgram;
use kiln_cuda::{CudaModel, CudaOptions};
use kiln_fuse::PlannerKind;
use kiln_target::GpuPreset;

/// `(name, graph text)` of every case.
const CASES: &[(&str, &str)] = &[
    (
        "sum over 1024 rows of 1024 columns (split columns)",
        "graph \"y\" opsets [\"\"=17] {
  input %x: f32[1024,1024]
  init %ax: i64[1] = [0]
  node \"r\" %y: f32[1024] = ReduceSum(%x, %ax) {keepdims=0}
  output %y
}",
    ),
    (
        "max over 4096 rows of 200 columns (split columns, a partial block)",
        "graph \"m\" opsets [\"\"=17] {
  input %x: f32[4096,200]
  node \"r\" %y: f32[1,200] = ReduceMax(%x) {axes=[0]}
  output %y
}",
    ),
    (
        "f16 cast to f32, summed over 8192 rows of 768 columns",
        "graph \"h\" opsets [\"\"=17] {
  input %x: f16[8192,768]
  init %ax: i64[1] = [0]
  node \"c\" %f: f32[8192,768] = Cast(%x) {to=1}
  node \"r\" %y: f32[768] = ReduceSum(%f, %ax) {keepdims=0}
  output %y
}",
    ),
    (
        "argmax with ties along rows of 4096",
        "graph \"a\" opsets [\"\"=17] {
  input %x: f32[64,4096]
  node \"f\" %t: f32[64,4096] = Floor(%x)
  node \"r\" %y: i64[64,1] = ArgMax(%t) {axis=1}
  output %y
}",
    ),
    (
        "Softmax rows of 384",
        "graph \"s\" opsets [\"\"=17] {
  input %x: f32[512,384]
  node \"s\" %y: f32[512,384] = Softmax(%x) {axis=-1}
  output %y
}",
    ),
    (
        "LayerNorm rows of 768",
        "graph \"l\" opsets [\"\"=17] {
  input %x: f32[256,768]
  input %g: f32[768]
  input %b: f32[768]
  node \"n\" %y: f32[256,768] = LayerNormalization(%x, %g, %b) {axis=-1}
  output %y
}",
    ),
];

/// The case's graph, optimized as on import (Softmax and LayerNorm become
/// their primitive ops), its inputs and the interpreter's outputs.
fn case(name: &str, text: &str) -> (kiln_ir::Graph, Vec<kiln_ir::Tensor>, Vec<kiln_ir::Tensor>) {
    let mut graph = common::load(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let inputs = common::inputs(&graph).expect("inputs");
    let want = kiln_interp::run(&graph, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
    kiln_passes::optimize(&mut graph, &Default::default()).expect("passes");
    (graph, inputs, want)
}

#[test]
fn softmax_and_layernorm_rows_are_one_block_each() {
    let target = GpuPreset::Sm90.desc();
    let rows = |n: &str| n.starts_with("Softmax") || n.starts_with("LayerNorm");
    for (name, text) in CASES.iter().filter(|(n, _)| rows(n)) {
        let (graph, _, _) = case(name, text);
        let program = CudaProgram::build(&graph, PlannerKind::default(), &target, "t")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let kernels: Vec<_> = program.kernels.iter().flatten().collect();
        assert!(!kernels.is_empty(), "{name}: no kernels");
        for k in kernels {
            let (mapping, cuda) = (k.source.mapping.to_string(), &k.source.cuda);
            assert!(mapping.starts_with("rows("), "{name}: {mapping}\n{cuda}");
            // No per-thread arrays: a row's partial sums live in registers.
            assert!(!cuda.contains("_p_l["), "{name}: {mapping}\n{cuda}");
        }
    }
}

#[test]
fn reductions_match_the_interpreter_on_the_gpu() {
    if std::env::var("KILN_CUDA_TESTS").is_err() {
        println!("skipped: set KILN_CUDA_TESTS=1 on a machine with an NVIDIA GPU");
        return;
    }
    for (name, text) in CASES {
        let (graph, inputs, want) = case(name, text);
        let model = CudaModel::compile(&graph, &CudaOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let summary = model.summary();
        assert!(
            summary.interpreted.is_empty(),
            "{name}: nodes on the interpreter: {:?}",
            summary.interpreted
        );
        println!("{name}: {} launches", summary.launches);
        let got = model.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Twice: the split columns' counters must be reset for the next launch.
        let again = model.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        common::assert_close(&got, &want, name).expect("outputs");
        common::assert_close(&again, &want, name).expect("outputs");
    }
}
