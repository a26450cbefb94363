//! The CUDA backend in the conformance harness: running node tests on a
//! GPU (`KILN_CUDA_TESTS=1` where one is present), and making their CUDA
//! source without one (compiled by NVRTC in `tests/cuda.rs`).

use crate::{import, Backend};
use kiln_cuda::program::CudaProgram;
use kiln_fuse::PlannerKind;
use kiln_ir::{Graph, Result, Tensor};
use kiln_target::TargetDesc;
use std::path::Path;

/// Node tests on the first GPU, with the default fusion planner.
#[derive(Default)]
pub struct Cuda {
    pub fusion: PlannerKind,
    /// f32 products on TF32 tensor cores (`kiln_cuda::CudaOptions::tf32`).
    pub tf32: bool,
}

impl Backend for Cuda {
    fn name(&self) -> &str {
        "cuda"
    }
    fn run(&self, model: &Path, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let g = optimized(model, inputs)?;
        let opts = kiln_cuda::CudaOptions {
            fusion: self.fusion,
            tf32: self.tf32,
            ..Default::default()
        };
        kiln_cuda::CudaModel::compile(&g, &opts)?.run(inputs)
    }
}

/// A case's graph after import (input shapes from its data) and the
/// default passes.
pub fn optimized(model: &Path, inputs: &[Tensor]) -> Result<Graph> {
    let mut g = import(model, inputs)?;
    kiln_passes::optimize(&mut g, &kiln_passes::Options::default())?;
    Ok(g)
}

/// The CUDA of a case's kernels for `target` (no prelude), their names
/// starting with `prefix`.
pub fn case_kernels(
    model: &Path,
    inputs: &[Tensor],
    target: &TargetDesc,
    prefix: &str,
) -> Result<String> {
    graph_kernels(&optimized(model, inputs)?, target, prefix)
}

/// The CUDA of an optimized graph's kernels for `target` (no prelude),
/// their names starting with `prefix`.
pub fn graph_kernels(g: &Graph, target: &TargetDesc, prefix: &str) -> Result<String> {
    Ok(CudaProgram::build(g, PlannerKind::default(), target, prefix)?.kernels_source())
}
