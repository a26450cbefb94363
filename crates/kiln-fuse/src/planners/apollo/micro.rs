//! APOLLO's micro-graphs (§3.3): a [`Partition`] of the nodes plus the
//! type of each group, which the aggregation rules read and write.
//!
//! Needs: a [`FusionGraph`].
//! Guarantees: every group starts as one primitive op typed by
//! `NodeInfo::apollo()` (Algo. 1, lines 1–3); [`MicroGraphs::merge`]
//! merges only when `Partition::can_merge` holds, so the groups stay
//! convex (no cycle between groups), and gives the merged group the type
//! the caller's rule names (Algo. 1, line 7). [`elements`] and [`space`]
//! give the element counts the rules' dimension checks compare.

use crate::graph::{FusionGraph, Partition};
use kiln_ops::te::classify::ApolloType;

#[derive(Debug, Clone)]
pub struct MicroGraphs {
    pub part: Partition,
    /// Type of each group id (meaningful for live groups only).
    types: Vec<ApolloType>,
}

impl MicroGraphs {
    /// One micro-graph per primitive op, with the op's type.
    pub fn new(fg: &FusionGraph) -> MicroGraphs {
        MicroGraphs {
            part: Partition::singletons(fg.len()),
            types: fg.nodes.iter().map(|n| n.apollo()).collect(),
        }
    }

    pub fn ty(&self, group: usize) -> ApolloType {
        self.types[group]
    }

    /// Merges groups `a` and `b` into one of type `ty` when that keeps the
    /// groups acyclic; returns whether it merged.
    pub fn merge(&mut self, fg: &FusionGraph, a: usize, b: usize, ty: ApolloType) -> bool {
        if a == b || !self.part.can_merge(fg, a, b) {
            return false;
        }
        let kept = self.part.merge(a, b);
        self.types[kept] = ty;
        true
    }
}

/// Elements of node `n`'s output (0 for a node without a tensor
/// expression).
pub fn elements(fg: &FusionGraph, n: usize) -> usize {
    fg.nodes[n]
        .te
        .as_ref()
        .map_or(0, |te| te.shape.iter().product())
}

/// The largest output, in elements, among `nodes`: the iteration space a
/// fused kernel of them runs over.
pub fn space(fg: &FusionGraph, nodes: &[usize]) -> usize {
    nodes.iter().map(|&n| elements(fg, n)).max().unwrap_or(0)
}
