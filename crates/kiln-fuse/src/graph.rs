//! The planners' view of a graph: per node its classes (both papers'),
//! its data-flow neighbours and sizes, with a group's cost estimated on a
//! target description's peak and bandwidth; and a [`Partition`] that
//! merges node groups while keeping them acyclic.
//!
//! Needs: an optimized graph (compounds opened) with static shapes where
//! fusion is wanted; nodes without a tensor expression are library ops
//! (opaque, not fusable).
//! Guarantees: edges follow values between nodes (graph inputs and
//! initializers are not nodes); [`Partition::can_merge`] is false exactly
//! when merging would create a cycle between groups (a path that leaves
//! one group and re-enters the other).

use kiln_ir::{Graph, Result};
use kiln_ops::te::classify::{classify, ApolloType, Classes, MappingType};
use kiln_ops::te::{classify::node_expr, TensorExpr};
use kiln_target::TargetDesc;
use std::collections::BTreeSet;

/// What the planners know about one node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub op: String,
    pub classes: Classes,
    /// The node's tensor expression (primitive ops with static shapes).
    pub te: Option<TensorExpr>,
    /// Nodes producing this node's inputs (deduplicated, ascending).
    pub producers: Vec<usize>,
    /// Nodes reading this node's outputs (deduplicated, ascending).
    pub consumers: Vec<usize>,
    /// An output is a graph output.
    pub graph_output: bool,
    /// Bytes of the node's outputs.
    pub out_bytes: u64,
    /// Bytes of the node's inputs that come from outside any node (graph
    /// inputs, weights).
    pub const_in_bytes: u64,
    /// Floating-point operations (multiply-add = 2), estimated.
    pub flops: u64,
}

impl NodeInfo {
    pub fn apollo(&self) -> ApolloType {
        self.classes.apollo
    }

    pub fn mapping(&self) -> MappingType {
        self.classes.mapping
    }

    /// The reduction's canonical form: the output extents and the reduced
    /// extents, dimensions of extent 1 dropped (PANAMERA §3: reductions
    /// of one canonical form share a loop structure).
    pub fn reduce_form(&self) -> Option<(Vec<usize>, Vec<usize>)> {
        let te = self.te.as_ref()?;
        let r = te.reduction.as_ref()?;
        let keep = |v: &[usize]| v.iter().copied().filter(|&e| e != 1).collect::<Vec<_>>();
        Some((keep(&te.shape), keep(&r.extents)))
    }

    /// Matmul or convolution (compute-bound).
    pub fn is_contraction(&self) -> bool {
        self.apollo().is_contraction()
    }
}

/// Nodes and edges of one graph as the planners see them.
#[derive(Debug, Clone)]
pub struct FusionGraph {
    pub nodes: Vec<NodeInfo>,
}

impl FusionGraph {
    pub fn new(g: &Graph) -> Result<FusionGraph> {
        let producers = g.producers();
        let outputs: BTreeSet<usize> = g.outputs.iter().map(|v| v.index()).collect();
        let mut nodes: Vec<NodeInfo> = Vec::with_capacity(g.nodes.len());
        for node in &g.nodes {
            let te = node_expr(g, node)?;
            let classes = te.as_ref().map(classify).unwrap_or(Classes::LIBRARY);
            let bytes = |v: kiln_ir::ValueId| {
                let ty = g.ty(v);
                ty.numel().unwrap_or(0) as u64 * ty.dtype.size() as u64
            };
            let out_bytes = node.outputs.iter().flatten().map(|&v| bytes(v)).sum();
            let const_in_bytes = node
                .inputs
                .iter()
                .flatten()
                .filter(|v| producers[v.index()].is_none())
                .map(|&v| bytes(v))
                .sum();
            nodes.push(NodeInfo {
                op: node.op.clone(),
                flops: te.as_ref().map(flops).unwrap_or(0),
                te,
                classes,
                producers: producer_nodes(node, &producers),
                consumers: Vec::new(),
                graph_output: node
                    .outputs
                    .iter()
                    .flatten()
                    .any(|v| outputs.contains(&v.index())),
                out_bytes,
                const_in_bytes,
            });
        }
        for n in 0..nodes.len() {
            for p in nodes[n].producers.clone() {
                nodes[p].consumers.push(n);
            }
        }
        Ok(FusionGraph { nodes })
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// A rough time estimate of running `nodes` as one kernel on
    /// `target`, in nanoseconds: the slower of its arithmetic at the
    /// target's peak and the bytes it moves across the group boundary at
    /// the target's memory bandwidth ([`TargetDesc::roofline_ns`]).
    pub fn cost_ns(&self, nodes: &[usize], target: &TargetDesc) -> f64 {
        let inside: BTreeSet<usize> = nodes.iter().copied().collect();
        let mut flops = 0u64;
        let mut bytes = 0u64;
        for &n in nodes {
            let info = &self.nodes[n];
            flops += info.flops;
            bytes += info.const_in_bytes;
            if info.graph_output || info.consumers.iter().any(|c| !inside.contains(c)) {
                bytes += info.out_bytes;
            }
            for &p in &info.producers {
                if !inside.contains(&p) {
                    bytes += self.nodes[p].out_bytes;
                }
            }
        }
        target.roofline_ns(flops as f64, bytes as f64)
    }
}

/// The nodes producing `node`'s inputs (deduplicated, ascending), given
/// each value's producer.
pub fn producer_nodes(node: &kiln_ir::Node, producers: &[Option<usize>]) -> Vec<usize> {
    let mut ps: Vec<usize> = node
        .inputs
        .iter()
        .flatten()
        .filter_map(|v| producers[v.index()])
        .collect();
    ps.sort_unstable();
    ps.dedup();
    ps
}

/// Estimated floating-point operations of one tensor expression.
fn flops(te: &TensorExpr) -> u64 {
    let out: u64 = te.shape.iter().product::<usize>() as u64;
    let red: u64 = te
        .reduction
        .as_ref()
        .map(|r| r.extents.iter().product::<usize>() as u64)
        .unwrap_or(1);
    let mut calls = 0u64;
    te.body.visit(&mut |e| {
        if matches!(e, kiln_ops::te::Expr::Call(..)) {
            calls += 1;
        }
    });
    out * red * calls.max(1)
}

/// Groups of nodes being merged: which group each node is in, and the
/// acyclicity check every planner's merge needs.
#[derive(Debug, Clone)]
pub struct Partition {
    /// Group id of each node.
    group_of: Vec<usize>,
    /// Members of each group id (empty once merged away).
    members: Vec<Vec<usize>>,
}

impl Partition {
    /// Every node in its own group (group id = node number).
    pub fn singletons(n: usize) -> Partition {
        Partition {
            group_of: (0..n).collect(),
            members: (0..n).map(|i| vec![i]).collect(),
        }
    }

    pub fn group_of(&self, node: usize) -> usize {
        self.group_of[node]
    }

    pub fn members(&self, group: usize) -> &[usize] {
        &self.members[group]
    }

    /// Ids of the live groups, in order of their first node.
    pub fn groups(&self) -> Vec<usize> {
        let mut ids: Vec<usize> = (0..self.members.len())
            .filter(|&i| !self.members[i].is_empty())
            .collect();
        ids.sort_by_key(|&i| self.members[i][0]);
        ids
    }

    /// Groups that consume an output of `group` (excluding itself).
    pub fn consumer_groups(&self, fg: &FusionGraph, group: usize) -> Vec<usize> {
        let mut out: Vec<usize> = self.members[group]
            .iter()
            .flat_map(|&n| fg.nodes[n].consumers.iter())
            .map(|&c| self.group_of[c])
            .filter(|&c| c != group)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Groups that produce an input of `group` (excluding itself).
    pub fn producer_groups(&self, fg: &FusionGraph, group: usize) -> Vec<usize> {
        let mut out: Vec<usize> = self.members[group]
            .iter()
            .flat_map(|&n| fg.nodes[n].producers.iter())
            .map(|&p| self.group_of[p])
            .filter(|&p| p != group)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether merging groups `a` and `b` keeps the group graph acyclic:
    /// no path leaves one of them, passes through another group and
    /// enters the other. Paths are followed group by group, not node by
    /// node: a group runs as one kernel, so a path entering it may leave
    /// from any of its members (two convex groups `{a, d}` and `{b, c}`
    /// with edges `a → b` and `c → d` wait on each other).
    pub fn can_merge(&self, fg: &FusionGraph, a: usize, b: usize) -> bool {
        a == b || (!self.reaches_via_other(fg, a, b) && !self.reaches_via_other(fg, b, a))
    }

    /// A path from group `from` to group `to` through at least one other
    /// group.
    fn reaches_via_other(&self, fg: &FusionGraph, from: usize, to: usize) -> bool {
        // Nodes are in topological order: a group whose first node comes
        // after `to`'s last cannot reach it.
        let Some(&last) = self.members[to].iter().max() else {
            return false;
        };
        let mut seen = BTreeSet::new();
        let mut stack: Vec<usize> = self
            .consumer_groups(fg, from)
            .into_iter()
            .filter(|&g| g != to)
            .collect();
        while let Some(g) = stack.pop() {
            if self.members[g][0] > last || !seen.insert(g) {
                continue;
            }
            for c in self.consumer_groups(fg, g) {
                if c == to {
                    return true;
                }
                if c != from {
                    stack.push(c);
                }
            }
        }
        false
    }

    /// Merges `b` into `a`; returns the surviving id (`a`).
    pub fn merge(&mut self, a: usize, b: usize) -> usize {
        if a == b {
            return a;
        }
        let moved = std::mem::take(&mut self.members[b]);
        for &n in &moved {
            self.group_of[n] = a;
        }
        self.members[a].extend(moved);
        self.members[a].sort_unstable();
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 128x128x128 matmul (compute-bound at the reference peak) and a
    /// ReLU of its result (memory-bound).
    fn matmul_relu() -> FusionGraph {
        let g = kiln_ir::text::parse(
            r#"graph "g" opsets [""=18] {
  input %x: f32[128,128]
  input %w: f32[128,128]
  node "mm" %m: f32[128,128] = MatMul(%x, %w)
  node "relu" %y: f32[128,128] = Relu(%m)
  output %y
}"#,
        )
        .expect("test graph parses");
        FusionGraph::new(&g).expect("fusion graph")
    }

    /// `a → b` and `c → d` with `b`, `c` independent: `{a, d}` and then
    /// `{b, c}` would each be convex but wait on each other, so the second
    /// merge is refused.
    #[test]
    fn merges_keep_the_group_graph_acyclic() {
        let g = kiln_ir::text::parse(
            r#"graph "g" opsets [""=18] {
  input %x: f32[4]
  node "a" %a: f32[4] = Relu(%x)
  node "c" %c: f32[4] = Neg(%x)
  node "b" %b: f32[4] = Abs(%a)
  node "d" %d: f32[4] = Add(%a, %c)
  output %b, %d
}"#,
        )
        .expect("test graph parses");
        let fg = FusionGraph::new(&g).expect("fusion graph");
        let mut part = Partition::singletons(4);
        assert!(part.can_merge(&fg, 0, 3), "{{a, d}}");
        let ad = part.merge(0, 3);
        assert!(!part.can_merge(&fg, 2, 1), "{{b, c}} after {{a, d}}");
        assert!(part.can_merge(&fg, ad, 2), "{{a, b, d}}");
    }

    #[test]
    fn cost_follows_the_targets_peak_and_bandwidth() {
        let fg = matmul_relu();
        let base = crate::reference_target();
        let faster = TargetDesc {
            peak_gflops: 2.0 * base.peak_gflops,
            ..base.clone()
        };
        let wider = TargetDesc {
            memory_gbps: 2.0 * base.memory_gbps,
            ..base.clone()
        };
        let (mm, relu) = ([0], [1]);
        let ratio =
            |nodes: &[usize], t: &TargetDesc| fg.cost_ns(nodes, &base) / fg.cost_ns(nodes, t);
        assert_eq!(
            ratio(&mm, &faster),
            2.0,
            "compute-bound: twice the peak, half the time"
        );
        assert_eq!(ratio(&mm, &wider), 1.0);
        assert_eq!(ratio(&relu, &faster), 1.0);
        assert_eq!(
            ratio(&relu, &wider),
            2.0,
            "memory-bound: twice the bandwidth, half the time"
        );
    }
}
