//! How row programs reach the GPU, without a GPU: Softmax and LayerNorm
//! over many rows are one block per row (threads sharing the row's
//! reductions), never one thread per row carrying the CPU's lane partials
//! in a local array (which ran 20-50x slower on an H200: BENCHMARKS.md,
//! "CUDA backend: f16/bf16 kernels, row programs as blocks again").

use kiln_cuda::program::CudaProgram;
use kiln_fuse::PlannerKind;
use kiln_target::GpuPreset;

/// Each kernel's launches (`GpuMapping` text) and CUDA source for `text`.
fn kernels(text: &str) -> Vec<(String, String)> {
    let mut g = kiln_ir::text::parse(text).expect("graph text");
    kiln_ops::infer::infer_graph(&mut g, &|_| None).expect("types");
    kiln_passes::optimize(&mut g, &Default::default()).expect("passes");
    let target = GpuPreset::Sm90.desc();
    let program = CudaProgram::build(&g, PlannerKind::default(), &target, "t").expect("program");
    program
        .kernels
        .iter()
        .flatten()
        .map(|k| (k.source.mapping.to_string(), k.source.cuda.clone()))
        .collect()
}

fn assert_rows_are_blocks(text: &str) {
    let ks = kernels(text);
    assert!(!ks.is_empty(), "no kernels");
    for (mapping, cuda) in ks {
        assert!(mapping.starts_with("rows("), "{mapping}\n{cuda}");
        // No per-thread arrays: a row's partial sums live in registers.
        assert!(!cuda.contains("_p_l["), "{mapping}\n{cuda}");
    }
}

#[test]
fn softmax_rows_are_one_block_each() {
    assert_rows_are_blocks(
        "graph \"s\" opsets [\"\"=17] {
  input %x: f32[16,384,384]
  node \"n\" %y: f32[16,384,384] = Softmax(%x) {axis=-1}
  output %y
}",
    );
}

#[test]
fn layernorm_rows_are_one_block_each() {
    assert_rows_are_blocks(
        "graph \"l\" opsets [\"\"=17] {
  input %x: f32[4096,768]
  input %g: f32[768]
  input %b: f32[768]
  node \"n\" %y: f32[4096,768] = LayerNormalization(%x, %g, %b) {axis=-1}
  output %y
}",
    );
}
