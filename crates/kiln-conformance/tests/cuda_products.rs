//! The GPU's gemm template against the interpreter, on the product cases
//! (`kiln_conformance::products`: both tile sizes, split depth, batches,
//! convolutions, an epilogue), on CUDA cores and on TF32 tensor cores.
//! Needs a GPU: runs only with `KILN_CUDA_TESTS=1` (`scripts/gpu/check.sh`
//! sets it), a no-op elsewhere.

use kiln_conformance::products::{self, Oracle};
use kiln_cuda::{CudaModel, CudaOptions};
use kiln_ir::Tensor;

/// Error units (see `products`): f32 products round each term and sum
/// in f32; TF32 rounds each factor to 10 mantissa bits (2^-11 relative
/// each, so about 2^-10 a term), doubled for margin.
const F32_UNIT: f64 = 1.0 / 4096.0;
const TF32_UNIT: f64 = 1.0 / 512.0;

fn run(g: &kiln_ir::Graph, inputs: &[Tensor], tf32: bool) -> Vec<Tensor> {
    let opts = CudaOptions {
        tf32,
        ..Default::default()
    };
    let model = CudaModel::compile(g, &opts).unwrap_or_else(|e| panic!("tf32 {tf32}: {e}"));
    model
        .run(inputs)
        .unwrap_or_else(|e| panic!("tf32 {tf32}: {e}"))
}

#[test]
fn gemm_template_meets_its_error_bound_on_both_units() {
    if std::env::var("KILN_CUDA_TESTS").is_err() {
        println!("skipped: set KILN_CUDA_TESTS=1 on a machine with an NVIDIA GPU");
        return;
    }
    for case in products::cases() {
        let mut g = products::graph(&case.text).expect(case.name);
        let oracle = Oracle::of(&g).expect(case.name);
        kiln_passes::optimize(&mut g, &Default::default()).expect(case.name);
        let exact = run(&g, &oracle.inputs, false);
        let tf32 = run(&g, &oracle.inputs, true);
        let worst_f32 = oracle.worst(&exact, F32_UNIT).expect("f32");
        let worst_tf32 = oracle.worst(&tf32, TF32_UNIT).expect("tf32");
        println!(
            "{}: error / bound {worst_f32:.3} (f32), {worst_tf32:.3} (tf32)",
            case.name
        );
        assert!(
            worst_f32 <= 1.0,
            "{}: f32 products off by {worst_f32} bounds",
            case.name
        );
        assert!(
            worst_tf32 <= 1.0,
            "{}: tf32 products off by {worst_tf32} bounds",
            case.name
        );
        // Factors with three decimals are not TF32 numbers: rounding them
        // changes some sum, or tensor cores did not run.
        let same = exact
            .iter()
            .zip(&tf32)
            .all(|(a, b)| a.data.to_f64_vec().ok() == b.data.to_f64_vec().ok());
        assert!(!same, "{}: tf32 gave exactly the f32 results", case.name);
    }
}

/// The same cases on the CPU backend, which needs no GPU: the oracle and
/// the f32 bound hold for f32 products (every CI run checks them).
#[test]
fn cpu_products_meet_the_f32_bound() {
    for case in products::cases() {
        let mut g = products::graph(&case.text).expect(case.name);
        let oracle = Oracle::of(&g).expect(case.name);
        kiln_passes::optimize(&mut g, &Default::default()).expect(case.name);
        let model = kiln_cpu::CompiledModel::compile(&g, &Default::default()).expect(case.name);
        let got = model.run(&oracle.inputs).expect(case.name);
        let worst = oracle.worst(&got, F32_UNIT).expect(case.name);
        assert!(
            worst <= 1.0,
            "{}: cpu products off by {worst} bounds",
            case.name
        );
    }
}
