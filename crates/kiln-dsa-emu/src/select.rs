//! Which nodes become DSA kernels, and their DSA C.
//!
//! Needs: an optimized graph with static shapes where kernels are wanted,
//! and a [`DsaDesc`].
//! Guarantees: per node either a kernel — the node lowered for the DSA
//! target (`kiln_cpu::select::lower_node` with [`DsaDesc::target_desc`]:
//! plain nests, contractions as loops), tiled for the LB
//! (`kiln_dsa::tiling`) and printed by the DSA printer
//! (`kiln_codegen::dsa`) — or the reason it runs on the reference
//! interpreter instead: the CPU backend's reasons, gathers, kernels whose
//! smallest tiles overflow the LB (the error names the kernel and sizes).
//! A view (reshape) is aliased by the execution plan and gets no code.

use kiln_codegen::dsa::kernel_dsa;
use kiln_cpu::select::{lower_fused, lower_node, NodeKernel};
use kiln_dsa::{tile_kernel, DsaDesc};
use kiln_fuse::GroupCheck;
use kiln_ir::{Graph, Node, Result};
use kiln_target::TargetDesc;

/// The DSA target: its description and what the shared layers read.
#[derive(Debug, Clone)]
pub struct DsaTarget {
    pub desc: DsaDesc,
    pub target: TargetDesc,
}

impl DsaTarget {
    pub fn new(desc: DsaDesc) -> DsaTarget {
        DsaTarget {
            target: desc.target_desc(),
            desc,
        }
    }
}

/// `kernel` tiled for the LB and printed as DSA C.
pub fn device_c(kernel: &kiln_loop::Kernel, t: &DsaTarget) -> Result<String> {
    kernel_dsa(&tile_kernel(kernel, &t.desc)?, &t.desc)
}

/// The DSA kernel of `node` (named `name`), or why there is none.
pub fn node_kernel(g: &Graph, node: &Node, name: &str, t: &DsaTarget) -> Result<NodeKernel> {
    let lowered = lower_node(g, node, name, &t.target)?;
    let c = match lowered.view {
        // Aliased to its input by the execution plan: never called.
        Some(_) => String::new(),
        None => device_c(&lowered.kernel, t)?,
    };
    Ok(NodeKernel {
        kernel: lowered.kernel,
        schedule: lowered.schedule,
        c,
        inputs: lowered.inputs,
        in_place: None,
        view: lowered.view,
        packs: None,
        workspace: Default::default(),
        tuning: Default::default(),
    })
}

/// The DSA backend's answer to the planners (APOLLO's feedback): a group
/// is accepted when it lowers to one kernel whose tiles fit the LB.
pub struct DsaGroupCheck<'a> {
    pub target: &'a DsaTarget,
}

impl GroupCheck for DsaGroupCheck<'_> {
    fn check(&self, g: &Graph, nodes: &[usize]) -> std::result::Result<(), String> {
        let attempt = || -> Result<()> {
            let node = kiln_fuse::apply::group_node(g, nodes)?;
            let lowered = lower_fused(&node, "check", Vec::new(), &self.target.target)?;
            device_c(&lowered.kernel, self.target).map(|_| ())
        };
        attempt().map_err(|e| e.to_string())
    }
}
