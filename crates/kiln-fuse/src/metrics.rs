//! What a plan does to a graph, in numbers: kernels, fusion ratio (the
//! DP paper's metric: primitive ops before / kernels after) and the bytes
//! written to memory between kernels.
//!
//! A reshape on its own (a view: `kiln_ops::te::classify::is_view`) is no
//! kernel: backends alias its output to its input, so it neither runs nor
//! writes memory.

use crate::plan::Plan;
use kiln_ir::Graph;
use kiln_ops::te::classify::{is_view, node_expr};

/// Whether node `n` of `g` is a view (a reshape).
pub fn is_view_node(g: &Graph, n: usize) -> bool {
    g.nodes
        .get(n)
        .and_then(|node| node_expr(g, node).ok().flatten())
        .is_some_and(|te| is_view(&te))
}

#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    pub primitive_nodes: usize,
    pub kernels: usize,
    pub fusion_ratio: f64,
    /// Bytes of the values one kernel writes and another reads.
    pub intermediate_bytes: u64,
}

pub fn metrics(g: &Graph, plan: &Plan) -> Metrics {
    let views: Vec<bool> = plan
        .groups
        .iter()
        .map(|grp| matches!(grp.nodes[..], [n] if is_view_node(g, n)))
        .collect();
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
                let written = !views.get(group_of[p]).copied().unwrap_or(false);
                if written && group_of[p] != group_of[n] {
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
    let kernels = views.iter().filter(|v| !**v).count();
    Metrics {
        primitive_nodes: g.nodes.len(),
        kernels,
        fusion_ratio: g.nodes.len() as f64 / kernels.max(1) as f64,
        intermediate_bytes,
    }
}
