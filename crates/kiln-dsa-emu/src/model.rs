//! A model compiled for a DSA and run by the functional emulator.
//!
//! Needs: an optimized, verified graph and a [`DsaDesc`].
//! Guarantees: fusion planned with the DSA backend's feedback and applied;
//! per node a DSA kernel (`select.rs`) or an interpreter step; the
//! execution plan and executor of the CPU JIT (`kiln_cpu::CompiledModel`:
//! one arena — the DSA's DDR — weights, inputs, interpreter steps), the
//! kernels' host and device C compiled with the emulator unit through the
//! JIT's compiler and cache. Each kernel step calls its host function,
//! which reaches DDR only through DMA; results equal the interpreter's up
//! to float rounding. [`DsaModel::run`] returns the DMA counts of the run.

use crate::emulator::{emulator_unit, DmaCounts};
use crate::select::{node_kernel, DsaGroupCheck, DsaTarget};
use kiln_cpu::program::{kernels_and_plan, KernelPlacing};
use kiln_cpu::select::NodeKernel;
use kiln_cpu::{CompiledModel, CpuOptions, CpuProgram};
use kiln_dsa::DsaDesc;
use kiln_fuse::{PlanOptions, PlannerKind};
use kiln_ir::{Graph, Result, Tensor};
use kiln_runtime::jit::CompilerConfig;

/// How to compile for a DSA.
#[derive(Debug, Clone)]
pub struct DsaOptions {
    pub fusion: PlannerKind,
    /// The host C compiler (flags: [`emulator_flags`]).
    pub compiler: CompilerConfig,
    /// Compiler processes at once.
    pub threads: usize,
}

impl Default for DsaOptions {
    fn default() -> Self {
        let mut compiler = CompilerConfig::from_env();
        compiler.flags = emulator_flags();
        DsaOptions {
            fusion: PlannerKind::default(),
            compiler,
            threads: kiln_runtime::cpu::available_threads(),
        }
    }
}

/// Flags for the emulated code: portable C11 (no host-specific vector
/// width or OpenMP: each core is sequential code), optimised lightly so
/// that compiling many small models stays quick.
pub fn emulator_flags() -> Vec<String> {
    ["-O1", "-fPIC", "-pthread", "-fno-trapping-math", "-std=c11"]
        .map(str::to_string)
        .to_vec()
}

/// The program: fused graph, kernels (DSA C), plan, emulator unit.
pub fn build_program(graph: &Graph, t: &DsaTarget, fusion: PlannerKind) -> Result<CpuProgram> {
    let check = DsaGroupCheck { target: t };
    let planned = kiln_fuse::plan(
        graph,
        fusion,
        &check,
        &PlanOptions::for_target(t.target.clone()),
    )?;
    let graph = kiln_fuse::apply::apply_plan(graph, &planned.plan)?.graph;
    let (kernels, plan) = kernels_and_plan(
        &graph,
        &|node, name| node_kernel(&graph, node, name, t),
        NodeKernel::info,
        &KernelPlacing {
            parallel: &[],
            threads: 1,
            prefix: "kiln",
            alignment: kiln_cpu::program::ALIGNMENT,
        },
    )?;
    Ok(CpuProgram {
        graph,
        kernels,
        plan,
        fusion: planned,
        runtime_units: vec![emulator_unit(&t.desc)],
    })
}

/// A model compiled for a DSA, run by the emulator.
pub struct DsaModel {
    pub model: CompiledModel,
    pub desc: DsaDesc,
}

impl DsaModel {
    pub fn compile(graph: &Graph, desc: &DsaDesc, opts: &DsaOptions) -> Result<DsaModel> {
        let t = DsaTarget::new(desc.clone());
        let program = build_program(graph, &t, opts.fusion)?;
        let cpu = CpuOptions {
            threads: opts.threads,
            compiler: opts.compiler.clone(),
            fusion: opts.fusion,
            target: t.target,
            tunings: Default::default(),
        };
        Ok(DsaModel {
            model: CompiledModel::load(program, &cpu)?,
            desc: desc.clone(),
        })
    }

    /// Runs the model; the outputs and what its kernels moved.
    pub fn run(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, DmaCounts)> {
        self.counts(true)?;
        let out = self.model.run(inputs)?;
        Ok((out, self.counts(true)?))
    }

    /// The emulator's counters (zero without kernels), cleared if `clear`.
    pub fn counts(&self, clear: bool) -> Result<DmaCounts> {
        match self.model.library() {
            Some(lib) => DmaCounts::read(lib, clear),
            None => Ok(DmaCounts::default()),
        }
    }
}

/// The emulator's memories (an LB per core, a GB per cluster: tens of MB)
/// go with the model; libraries stay loaded (`kiln_runtime::jit::Library`).
impl Drop for DsaModel {
    fn drop(&mut self) {
        if let Some(lib) = self.model.library() {
            crate::emulator::release(lib);
        }
    }
}
