//! Feedback from lowering to planning (APOLLO §4.1).
//!
//! Needs: a plan whose groups partition the graph and are convex (every
//! planner guarantees it).
//! Guarantees: every multi-node group of the result was accepted by the
//! backend's [`GroupCheck`]; a refused group is split into the longest
//! prefix (in graph order) the backend accepts and the rest, recursively,
//! so single nodes always remain. A prefix of a convex group in
//! topological order is convex, and so is the rest, so the result stays
//! acyclic. Each refusal is recorded with the group's op pattern and the
//! backend's reason (`kiln explain --explain-feedback` lists them).

use crate::graph::FusionGraph;
use crate::plan::{Group, Plan};
use crate::GroupCheck;
use kiln_ir::Graph;

/// One group the backend refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feedback {
    /// The refused group's nodes.
    pub nodes: Vec<usize>,
    /// Its ops in graph order, joined by `+` (the pattern).
    pub pattern: String,
    /// Why lowering refused it.
    pub reason: String,
    /// The groups it was split into.
    pub split: Vec<Vec<usize>>,
}

pub fn apply_feedback(
    g: &Graph,
    fg: &FusionGraph,
    plan: Plan,
    check: &dyn GroupCheck,
) -> (Plan, Vec<Feedback>) {
    let mut feedback = Vec::new();
    let mut groups = Vec::new();
    // New position of each old group, when it survived whole.
    let mut kept: Vec<Option<usize>> = Vec::new();
    for group in plan.groups {
        if group.nodes.len() < 2 {
            kept.push(Some(groups.len()));
            groups.push(group);
            continue;
        }
        match check.check(g, &group.nodes) {
            Ok(()) => {
                kept.push(Some(groups.len()));
                groups.push(group);
            }
            Err(reason) => {
                let split = split(g, &group.nodes, check);
                feedback.push(Feedback {
                    pattern: pattern(fg, &group.nodes),
                    nodes: group.nodes.clone(),
                    reason,
                    split: split.clone(),
                });
                kept.push(None);
                for nodes in split {
                    let kind = if nodes.len() == 1 {
                        super::planners::node_kind(&fg.nodes[nodes[0]])
                    } else {
                        group.kind.clone()
                    };
                    groups.push(Group::new(kind, nodes));
                }
            }
        }
    }
    let parallel = plan
        .parallel
        .iter()
        .map(|set| set.iter().filter_map(|&i| kept.get(i).copied().flatten()).collect())
        .collect();
    let plan = Plan {
        planner: plan.planner,
        groups,
        parallel,
    };
    (plan.normalized(), feedback)
}

/// Splits `nodes` (ascending) into accepted pieces: the longest accepted
/// prefix, then the rest the same way.
fn split(g: &Graph, nodes: &[usize], check: &dyn GroupCheck) -> Vec<Vec<usize>> {
    let mut pieces = Vec::new();
    let mut rest = nodes;
    while !rest.is_empty() {
        let take = (1..=rest.len())
            .rev()
            .find(|&len| len == 1 || check.check(g, &rest[..len]).is_ok())
            .unwrap_or(1);
        pieces.push(rest[..take].to_vec());
        rest = &rest[take..];
    }
    pieces
}

/// `MatMul+Add+Relu`: the ops of `nodes` in graph order.
pub fn pattern(fg: &FusionGraph, nodes: &[usize]) -> String {
    nodes
        .iter()
        .map(|&n| fg.nodes[n].op.as_str())
        .collect::<Vec<_>>()
        .join("+")
}
