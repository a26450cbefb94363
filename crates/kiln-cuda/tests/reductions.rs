//! Reductions in the GPU mapping's forms against the reference interpreter,
//! at sizes the node tests and random graphs do not reach: y-reduces whose
//! few columns split over blocks (`columns(..., N splits)`), f16 inputs,
//! arg-reductions with ties (one thread per output, first index wins), and
//! Softmax/LayerNorm rows as blocks. Needs a GPU: runs only with
//! `KILN_CUDA_TESTS=1` (`scripts/gpu/check.sh` sets it), a no-op elsewhere.

#[path = "../../kiln-cpu/tests/common/mod.rs"]
mod common;

use kiln_cuda::{CudaModel, CudaOptions};

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

#[test]
fn reductions_match_the_interpreter_on_the_gpu() {
    if std::env::var("KILN_CUDA_TESTS").is_err() {
        println!("skipped: set KILN_CUDA_TESTS=1 on a machine with an NVIDIA GPU");
        return;
    }
    for (name, text) in CASES {
        let mut graph = common::load(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let inputs = common::inputs(&graph).expect("inputs");
        let want = kiln_interp::run(&graph, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Softmax and LayerNorm become their primitive ops here, as on import.
        kiln_passes::optimize(&mut graph, &Default::default()).expect("passes");
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
