//! Which nodes become CUDA kernels, and their source.
//!
//! Needs: an optimized graph with static shapes where kernels are wanted,
//! and a GPU target description.
//! Guarantees: per node either a [`CudaKernel`] — the node lowered for the
//! GPU (the same lowering as the CPU's, `kiln_cpu::select::lower_node`,
//! whose schedules only coalesce loops on a GPU target) and printed by the
//! CUDA printer with its launches — or the reason it runs on the reference
//! interpreter instead (the CPU backend's reasons: no expression, element
//! types without a C type, …).

use kiln_codegen::cuda::{kernel_cuda, CudaSource};
use kiln_exec::{KernelInfo, WorkspaceNeed};
use kiln_fuse::GroupCheck;
use kiln_ir::{bail, Graph, Node, Result};
use kiln_loop::Kernel;
use kiln_target::{GpuDesc, TargetDesc};

/// A node compiled to CUDA functions.
#[derive(Debug, Clone)]
pub struct CudaKernel {
    pub kernel: Kernel,
    pub source: CudaSource,
    /// Node input positions passed as the kernel's input buffers, in order.
    pub inputs: Vec<usize>,
    /// Input position whose bytes the output is (a reshape).
    pub view: Option<usize>,
}

impl CudaKernel {
    /// What the execution plan needs to know of it: no in-place outputs,
    /// packings or workspaces on the GPU.
    pub fn info(&self) -> KernelInfo {
        KernelInfo {
            name: self.kernel.name.clone(),
            inputs: self.inputs.clone(),
            in_place: None,
            view: self.view,
            packs: None,
            workspace: WorkspaceNeed::default(),
            assembled: false,
        }
    }
}

/// The GPU part of `target`, or an error saying it is not a GPU.
pub fn gpu_of(target: &TargetDesc) -> Result<&GpuDesc> {
    match &target.gpu {
        Some(g) => Ok(g),
        None => bail!("target '{}' is not a GPU", target.name),
    }
}

/// The CUDA kernel for `node` (named `name`), or why there is none.
pub fn node_kernel(g: &Graph, node: &Node, name: &str, target: &TargetDesc) -> Result<CudaKernel> {
    let lowered = kiln_cpu::select::lower_node(g, node, name, target)?;
    let source = kernel_cuda(&lowered.kernel, gpu_of(target)?)?;
    Ok(CudaKernel {
        kernel: lowered.kernel,
        source,
        inputs: lowered.inputs,
        view: lowered.view,
    })
}

/// The CUDA backend's answer to the planners (APOLLO's feedback): a group
/// is accepted when it lowers to one kernel for `target` that prints as
/// CUDA.
pub struct CudaGroupCheck<'a> {
    pub target: &'a TargetDesc,
}

impl GroupCheck for CudaGroupCheck<'_> {
    fn check(&self, g: &Graph, nodes: &[usize]) -> std::result::Result<(), String> {
        let attempt = || -> Result<()> {
            let node = kiln_fuse::apply::group_node(g, nodes)?;
            let lowered = kiln_cpu::select::lower_fused(&node, "check", Vec::new(), self.target)?;
            kernel_cuda(&lowered.kernel, gpu_of(self.target)?).map(|_| ())
        };
        attempt().map_err(|e| e.to_string())
    }
}
