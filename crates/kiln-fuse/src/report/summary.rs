//! Per-group facts for the `kiln explain` reports (issue 5, item 6): the
//! group's node names, op pattern, the bytes its kernel reads and writes,
//! and its measured time when a profile is given.
//!
//! Needs: a graph and a plan that partitions its nodes (every planned
//! plan does).
//! Guarantees: `bytes_in` counts each distinct value a group reads from
//! outside it (other groups' outputs, graph inputs, weights) once;
//! `bytes_out` counts each distinct value it writes that another group
//! reads or the graph returns once.

use crate::plan::Plan;
use kiln_ir::{Graph, ValueId};
use std::collections::BTreeSet;

/// One group (kernel) of a plan, as the reports show it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSummary {
    pub kind: String,
    /// Node positions, ascending.
    pub nodes: Vec<usize>,
    /// `MatMul+Add+Relu`: the ops in graph order.
    pub ops: String,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Measured kernel time, when profiled.
    pub time_ms: Option<f64>,
}

/// Summaries of `plan`'s groups in plan order; `profile` gives
/// (group index, milliseconds) pairs.
pub fn summarize(g: &Graph, plan: &Plan, profile: &[(usize, f64)]) -> Vec<GroupSummary> {
    let (reads, writes) = boundary_values(g, plan);
    plan.groups
        .iter()
        .enumerate()
        .map(|(i, grp)| GroupSummary {
            kind: grp.kind.clone(),
            nodes: grp.nodes.clone(),
            ops: ops_pattern(g, &grp.nodes),
            bytes_in: reads[i].iter().map(|&v| value_bytes(g, v)).sum(),
            bytes_out: writes[i].iter().map(|&v| value_bytes(g, v)).sum(),
            time_ms: profile.iter().find(|(k, _)| *k == i).map(|&(_, ms)| ms),
        })
        .collect()
}

/// Per group: the values it reads from outside, and the values it
/// writes that are read outside or returned.
fn boundary_values(g: &Graph, plan: &Plan) -> (Vec<BTreeSet<ValueId>>, Vec<BTreeSet<ValueId>>) {
    let mut group_of = vec![usize::MAX; g.nodes.len()];
    for (i, grp) in plan.groups.iter().enumerate() {
        for &n in &grp.nodes {
            if let Some(slot) = group_of.get_mut(n) {
                *slot = i;
            }
        }
    }
    let producers = g.producers();
    let mut reads = vec![BTreeSet::new(); plan.groups.len()];
    let mut writes = vec![BTreeSet::new(); plan.groups.len()];
    for (n, node) in g.nodes.iter().enumerate() {
        let Some(reader) = reads.get_mut(group_of[n]) else {
            continue;
        };
        for &v in node.inputs.iter().flatten() {
            match producers[v.index()] {
                Some(p) if group_of[p] == group_of[n] => {}
                Some(p) => {
                    reader.insert(v);
                    if let Some(w) = writes.get_mut(group_of[p]) {
                        w.insert(v);
                    }
                }
                None => {
                    reader.insert(v);
                }
            }
        }
    }
    for &v in &g.outputs {
        if let Some(w) = producers[v.index()].and_then(|p| writes.get_mut(group_of[p])) {
            w.insert(v);
        }
    }
    (reads, writes)
}

fn value_bytes(g: &Graph, v: ValueId) -> u64 {
    let ty = g.ty(v);
    ty.numel().unwrap_or(0) as u64 * ty.dtype.size() as u64
}

/// The ops of `nodes` in graph order, joined by `+`.
pub fn ops_pattern(g: &Graph, nodes: &[usize]) -> String {
    nodes
        .iter()
        .filter_map(|&n| g.nodes.get(n))
        .map(|node| node.op.as_str())
        .collect::<Vec<_>>()
        .join("+")
}

/// `1.5 MB`, `12.0 KB`, `640 B`.
pub fn human_bytes(b: u64) -> String {
    match b {
        0..=9_999 => format!("{b} B"),
        10_000..=999_999 => format!("{:.1} KB", b as f64 / 1e3),
        _ => format!("{:.1} MB", b as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Group;

    #[test]
    fn bytes_cross_group_boundaries_once() {
        let g = kiln_ir::text::parse(
            r#"graph "g" opsets [""=18] {
              input %x: f32[16]
              node "a" %a: f32[16] = Exp(%x)
              node "b" %b: f32[16] = Neg(%a)
              node "c" %c: f32[16] = Add(%a, %b)
              output %c
            }"#,
        )
        .unwrap();
        let plan = Plan {
            planner: "test".into(),
            groups: vec![
                Group::new("element-wise", vec![0]),
                Group::new("element-wise", vec![1, 2]),
            ],
            parallel: Vec::new(),
        };
        let s = summarize(&g, &plan, &[(1, 2.5)]);
        assert_eq!((s[0].bytes_in, s[0].bytes_out), (64, 64));
        assert_eq!((s[1].bytes_in, s[1].bytes_out), (64, 64));
        assert_eq!(s[1].ops, "Neg+Add");
        assert_eq!((s[0].time_ms, s[1].time_ms), (None, Some(2.5)));
        assert_eq!(human_bytes(64), "64 B");
        assert_eq!(human_bytes(2_500_000), "2.5 MB");
    }
}
