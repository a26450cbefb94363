//! The mapping-rules paper's Algorithm 1 "融合候选项集构建" (building the
//! fusion candidate sets, §3.3.2 part 1).
//!
//! Needs: a [`FusionGraph`] and every node's rule type (`rules.rs`).
//! Guarantees: from every fusable node, a depth-first search follows
//! consumer edges while Table 1 (`rules::fuse`, applied to the type fused
//! so far and the next node, so a path never holds two many-to-many ops)
//! allows the next node, and records each path that cannot be extended
//! (`DFS`/`JudgeFuseRule`); the candidates of a node are all prefixes of
//! its paths (`getAllPrefixSubsets`), represented by the paths themselves.
//! Paths are chains of producer→consumer edges; a prefix is not always
//! convex (a path can skip a node that re-enters it), which the search
//! checks with `Partition::can_merge`. At most [`MAX_PATHS`] paths are kept
//! per start node (the diamonds of a DAG multiply paths); `capped` counts
//! the nodes that hit it.

use super::rules::{fuse, FuseType};
use crate::graph::FusionGraph;
use kiln_ops::te::classify::MappingType;

/// Paths kept per start node.
pub const MAX_PATHS: usize = 32;

/// The longest fusable paths from every node (empty for not-fusable nodes).
#[derive(Debug, Clone)]
pub struct Candidates {
    pub paths: Vec<Vec<Vec<usize>>>,
    /// Start nodes whose paths were cut at [`MAX_PATHS`].
    pub capped: usize,
}

pub fn build(fg: &FusionGraph, types: &[FuseType]) -> Candidates {
    let mut paths = Vec::with_capacity(fg.len());
    let mut capped = 0;
    for start in 0..fg.len() {
        let mut found = Vec::new();
        if types[start].mapping != MappingType::NotFusable {
            let mut path = vec![start];
            if !dfs(fg, types, types[start], &mut path, &mut found) {
                capped += 1;
            }
        }
        paths.push(found);
    }
    Candidates { paths, capped }
}

/// Extends `path` (fused type `ty`) by every consumer the rules allow;
/// records it when none does. False when [`MAX_PATHS`] was reached.
fn dfs(
    fg: &FusionGraph,
    types: &[FuseType],
    ty: FuseType,
    path: &mut Vec<usize>,
    found: &mut Vec<Vec<usize>>,
) -> bool {
    let Some(&last) = path.last() else {
        return true;
    };
    let mut extended = false;
    for &next in &fg.nodes[last].consumers {
        let Some(fused) = fuse(ty, types[next]) else {
            continue;
        };
        extended = true;
        path.push(next);
        let complete = dfs(fg, types, fused, path, found);
        path.pop();
        if !complete {
            return false;
        }
    }
    if !extended {
        if found.len() == MAX_PATHS {
            return false;
        }
        found.push(path.clone());
    }
    true
}

impl Candidates {
    /// The longest prefix of `node`'s paths whose nodes all satisfy
    /// `free` (`findLongestPath`); empty when `node` itself is not free.
    pub fn longest_free(&self, node: usize, free: impl Fn(usize) -> bool) -> &[usize] {
        self.paths[node]
            .iter()
            .map(|p| &p[..p.iter().take_while(|&&n| free(n)).count()])
            .max_by_key(|p| p.len())
            .unwrap_or(&[])
    }
}
