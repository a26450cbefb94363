//! The one step that applies any fusion plan.
//!
//! Needs: a verified graph and a [`Plan`] that partitions its nodes into
//! convex groups (no path leaves a group and comes back).
//! Guarantees: a verified graph computing the same outputs in which every
//! group of two or more nodes is one `kiln.Fused` node (op
//! `kiln_ops::ops::control::FUSED_OP`) whose graph attribute `body` holds
//! the group's nodes unchanged and whose string attribute `kind` is the
//! group's kind. The body's inputs are the values the group reads from
//! outside (in order of first use) except scalars and small integer
//! constants (at most [`INLINED_CONSTANT_ELEMS`] elements: shapes, axes,
//! slice bounds), which are copied into the body so that ops reading them
//! as parameters still see their values; its
//! outputs are the group's values read outside it or returned by the
//! graph. Single-node groups stay as they are. Nodes are re-ordered
//! topologically, keeping the original order where it is free. Values
//! internal to a group keep their ids in the outer graph but no longer
//! have a producer there.

use crate::plan::Plan;
use kiln_ir::{bail, Attr, Graph, Node, Result, ValueId};
use kiln_ops::ops::control::{FUSED_DOMAIN, FUSED_OP};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

/// Constants up to this many elements are copied into fused bodies.
pub const INLINED_CONSTANT_ELEMS: usize = 16;

pub fn apply(g: &Graph, plan: &Plan) -> Result<Graph> {
    plan.check_partition(g.nodes.len())?;
    let mut out = g.clone();
    out.opsets.entry(FUSED_DOMAIN.to_string()).or_insert(1);
    let readers = readers(g);
    let graph_outputs: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
    // (rank = first member, node)
    let mut units: Vec<(usize, Node)> = Vec::new();
    for (gi, group) in plan.groups.iter().enumerate() {
        if group.nodes.len() == 1 {
            let n = group.nodes[0];
            units.push((n, g.nodes[n].clone()));
            continue;
        }
        let node = fused_node(g, gi, &group.kind, &group.nodes, &readers, &graph_outputs)?;
        units.push((group.nodes[0], node));
    }
    out.nodes = topological(g, units)?;
    kiln_ir::verify::verify(&out)?;
    Ok(out)
}

/// The fused node of one group of `g` (what [`apply`] puts in its place),
/// for backends checking whether they can compile it.
pub fn group_node(g: &Graph, members: &[usize]) -> Result<Node> {
    let graph_outputs: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
    let mut members = members.to_vec();
    members.sort_unstable();
    fused_node(g, 0, "group", &members, &readers(g), &graph_outputs)
}

/// A constant that ops read as a parameter rather than as data: a scalar,
/// or a short integer list.
fn is_parameter(ty: &kiln_ir::TensorType) -> bool {
    match ty.numel() {
        Some(1) => true,
        Some(n) => n <= INLINED_CONSTANT_ELEMS && !ty.dtype.is_float(),
        None => false,
    }
}

/// The nodes reading each value.
fn readers(g: &Graph) -> Vec<Vec<usize>> {
    let mut r = vec![Vec::new(); g.values.len()];
    for (n, node) in g.nodes.iter().enumerate() {
        for v in node.inputs.iter().flatten() {
            r[v.index()].push(n);
        }
    }
    r
}

fn fused_node(
    g: &Graph,
    index: usize,
    kind: &str,
    members: &[usize],
    readers: &[Vec<usize>],
    graph_outputs: &BTreeSet<ValueId>,
) -> Result<Node> {
    let inside: BTreeSet<usize> = members.iter().copied().collect();
    let first = &g.nodes[members[0]];
    let mut body = Graph::new(format!("fused{index}"));
    body.opsets = g.opsets.clone();
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    let mut outer_inputs = Vec::new();
    let mut nodes = Vec::new();
    for &n in members {
        let node = &g.nodes[n];
        let mut copy = node.clone();
        for (slot, input) in copy.inputs.iter_mut().zip(&node.inputs) {
            let Some(v) = *input else { continue };
            let mapped = match map.get(&v) {
                Some(&m) => m,
                None => {
                    let m = body.add_value(g.name(v), g.ty(v).clone());
                    match g.constant(v) {
                        Some(init) if is_parameter(g.ty(v)) => {
                            body.initializers.insert(m, init.clone());
                        }
                        _ => {
                            body.inputs.push(m);
                            outer_inputs.push(Some(v));
                        }
                    }
                    map.insert(v, m);
                    m
                }
            };
            *slot = Some(mapped);
        }
        for (slot, output) in copy.outputs.iter_mut().zip(&node.outputs) {
            let Some(v) = *output else { continue };
            if map.contains_key(&v) {
                bail!(
                    "{}: output '{}' is defined twice in a group",
                    node.describe(),
                    g.name(v)
                );
            }
            let m = body.add_value(g.name(v), g.ty(v).clone());
            map.insert(v, m);
            *slot = Some(m);
        }
        nodes.push(copy);
    }
    body.nodes = nodes;
    let mut outer_outputs = Vec::new();
    for &n in members {
        for v in g.nodes[n].outputs.iter().flatten() {
            let used_outside = readers[v.index()].iter().any(|r| !inside.contains(r));
            if used_outside || graph_outputs.contains(v) {
                body.outputs.push(map[v]);
                outer_outputs.push(Some(*v));
            }
        }
    }
    if body.outputs.is_empty() {
        bail!(
            "fused group {index} ({}) computes nothing that is used",
            first.describe()
        );
    }
    let mut attrs = std::collections::BTreeMap::new();
    attrs.insert("body".to_string(), Attr::Graph(Box::new(body)));
    attrs.insert("kind".to_string(), Attr::String(kind.to_string()));
    Ok(Node {
        name: format!("fused{index}_{}", first.name),
        op: FUSED_OP.to_string(),
        domain: FUSED_DOMAIN.to_string(),
        inputs: outer_inputs,
        outputs: outer_outputs,
        attrs,
    })
}

/// Orders `units` so every value is defined before it is read, taking the
/// unit of smallest rank among those ready.
fn topological(g: &Graph, units: Vec<(usize, Node)>) -> Result<Vec<Node>> {
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    for (u, (_, node)) in units.iter().enumerate() {
        for v in node.outputs.iter().flatten() {
            producer.insert(*v, u);
        }
    }
    let mut waiting = vec![0usize; units.len()];
    let mut dependents = vec![Vec::new(); units.len()];
    for (u, (_, node)) in units.iter().enumerate() {
        let mut deps: Vec<usize> = node
            .inputs
            .iter()
            .flatten()
            .filter_map(|v| producer.get(v).copied())
            .filter(|&p| p != u)
            .collect();
        deps.sort_unstable();
        deps.dedup();
        waiting[u] = deps.len();
        for d in deps {
            dependents[d].push(u);
        }
    }
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> = units
        .iter()
        .enumerate()
        .filter(|(u, _)| waiting[*u] == 0)
        .map(|(u, (rank, _))| Reverse((*rank, u)))
        .collect();
    let mut order = Vec::with_capacity(units.len());
    while let Some(Reverse((_, u))) = ready.pop() {
        order.push(u);
        for &d in &dependents[u] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.push(Reverse((units[d].0, d)));
            }
        }
    }
    if order.len() != units.len() {
        bail!(
            "fusion plan for graph '{}' makes a cycle between groups (a group is not convex)",
            g.name
        );
    }
    let mut slots: Vec<Option<Node>> = units.into_iter().map(|(_, n)| Some(n)).collect();
    Ok(order.into_iter().filter_map(|u| slots[u].take()).collect())
}
