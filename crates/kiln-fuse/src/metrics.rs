//! What a plan does to a graph, in numbers: kernels, fusion ratio (the
//! DP paper's metric: primitive ops before / kernels after) and the bytes
//! written to memory between kernels.

use crate::plan::Plan;
use kiln_ir::Graph;

#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    pub primitive_nodes: usize,
    pub kernels: usize,
    pub fusion_ratio: f64,
    /// Bytes of the values one kernel writes and another reads.
    pub intermediate_bytes: u64,
}

pub fn metrics(g: &Graph, plan: &Plan) -> Metrics {
    let mut group_of = vec![usize::MAX; g.nodes.len()];
    for (i, grp) in plan.groups.iter().enumerate() {
        for &n in &grp.nodes {
            if let Some(slot) = group_of.get_mut(n) {
                *slot = i;
            }
        }
    }
    let producers = g.producers();
    let mut crossing = vec![false; g.values.len()];
    for (n, node) in g.nodes.iter().enumerate() {
        for v in node.inputs.iter().flatten() {
            if let Some(p) = producers[v.index()] {
                if group_of[p] != group_of[n] {
                    crossing[v.index()] = true;
                }
            }
        }
    }
    let intermediate_bytes = crossing
        .iter()
        .enumerate()
        .filter(|(_, c)| **c)
        .map(|(v, _)| {
            let ty = g.ty(kiln_ir::ValueId(v as u32));
            ty.numel().unwrap_or(0) as u64 * ty.dtype.size() as u64
        })
        .sum();
    let kernels = plan.kernels();
    Metrics {
        primitive_nodes: g.nodes.len(),
        kernels,
        fusion_ratio: g.nodes.len() as f64 / kernels.max(1) as f64,
        intermediate_bytes,
    }
}
