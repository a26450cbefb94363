//! The CUDA target's pipeline: a graph in, a program out (fusion plan,
//! kernels, execution plan, one CUDA source). `runtime.rs` compiles and
//! runs it.
//!
//! Needs: an optimized, verified graph and a GPU target description.
//! Guarantees: fusion planned with the CUDA backend's feedback (APOLLO
//! §4.1) and applied; per node of the fused graph a kernel
//! ([`crate::select`]) or the reason it runs on the interpreter; an
//! execution plan (`kiln_exec::build`, no concurrent blocks: one stream
//! runs the steps in order); the CUDA source of every kernel after one
//! prelude. Nothing is compiled here.

use crate::select::{node_kernel, CudaGroupCheck, CudaKernel};
use kiln_cpu::program::{kernels_and_plan, KernelPlacing};
use kiln_exec::ExecPlan;
use kiln_fuse::{PlanOptions, Planned, PlannerKind};
use kiln_ir::{Graph, Result};
use kiln_target::TargetDesc;

/// Alignment of device arena offsets (a 128-byte cache line).
pub const ALIGNMENT: usize = 256;

/// A model compiled for a GPU, before NVRTC runs.
pub struct CudaProgram {
    /// The fused graph the plan's node numbers refer to.
    pub graph: Graph,
    /// Per node of `graph`: its kernel, if it has one.
    pub kernels: Vec<Option<CudaKernel>>,
    pub plan: ExecPlan,
    pub fusion: Planned,
}

impl CudaProgram {
    /// Plans fusion with `planner` on `graph` for `target`, applies it and
    /// selects the kernels, named `PREFIX_kN` (a C identifier prefix).
    pub fn build(
        graph: &Graph,
        planner: PlannerKind,
        target: &TargetDesc,
        prefix: &str,
    ) -> Result<CudaProgram> {
        let check = CudaGroupCheck { target };
        let plan_opts = PlanOptions::for_target(target.clone());
        let fusion = kiln_fuse::plan(graph, planner, &check, &plan_opts)?;
        let graph = kiln_fuse::apply::apply_plan(graph, &fusion.plan)?.graph;
        let (kernels, plan) = kernels_and_plan(
            &graph,
            &|node, name| node_kernel(&graph, node, name, target),
            CudaKernel::info,
            &KernelPlacing {
                parallel: &[],
                threads: 1,
                prefix,
                alignment: ALIGNMENT,
            },
        )?;
        Ok(CudaProgram {
            kernels,
            graph,
            plan,
            fusion,
        })
    }

    /// The whole program's CUDA source: the prelude, then every kernel.
    pub fn source(&self) -> String {
        kiln_codegen::cuda::prelude::prelude() + &self.kernels_source()
    }

    /// Every kernel's CUDA, without the prelude.
    pub fn kernels_source(&self) -> String {
        self.kernels
            .iter()
            .flatten()
            .map(|k| k.source.cuda.as_str())
            .collect()
    }

    /// Nodes left to the interpreter: (node, why).
    pub fn interpreted(&self) -> Vec<(String, String)> {
        kiln_cpu::CpuProgram::interpreted_in(&self.graph, &self.plan)
    }
}
