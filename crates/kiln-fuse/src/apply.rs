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
//! slice bounds) that no member reads as data, which are copied into the
//! body so that ops reading them as parameters still see their values; its
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
    Ok(apply_plan(g, plan)?.graph)
}

/// A plan applied: the fused graph, and the plan's parallel sets as
/// positions of consecutive nodes in it.
#[derive(Debug, Clone)]
pub struct Applied {
    pub graph: Graph,
    /// Each set's nodes, consecutive in `graph.nodes`; independent of one
    /// another, so a backend may run them concurrently.
    pub parallel: Vec<Vec<usize>>,
}

/// [`apply`], keeping the plan's parallel sets: each set's nodes are
/// placed next to each other (contracting a set of mutually independent
/// groups keeps the graph acyclic). Sets that are not independent are
/// dropped.
pub fn apply_plan(g: &Graph, plan: &Plan) -> Result<Applied> {
    plan.check_partition(g.nodes.len())?;
    let mut out = g.clone();
    out.opsets.entry(FUSED_DOMAIN.to_string()).or_insert(1);
    let readers = readers(g);
    let graph_outputs: BTreeSet<ValueId> = g.outputs.iter().copied().collect();
    // (rank = first member, node); unit i is group i.
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
    let stitched = blocks(units.len(), &plan.parallel);
    let (nodes, parallel) = match topological(g, &units, &stitched) {
        Ok(order) => order,
        Err(_) => topological(g, &units, &blocks(units.len(), &[]))?,
    };
    out.nodes = nodes;
    kiln_ir::verify::verify(&out)?;
    Ok(Applied {
        graph: out,
        parallel,
    })
}

/// The units ordered as blocks: each parallel set one block, every other
/// unit alone.
fn blocks(units: usize, parallel: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut in_set = vec![false; units];
    let mut out: Vec<Vec<usize>> = Vec::new();
    for set in parallel {
        let members: Vec<usize> = set
            .iter()
            .copied()
            .filter(|&u| u < units && !in_set[u])
            .collect();
        if members.len() > 1 {
            members.iter().for_each(|&u| in_set[u] = true);
            out.push(members);
        }
    }
    out.extend((0..units).filter(|&u| !in_set[u]).map(|u| vec![u]));
    out
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

/// Whether constant `v` is copied into the body of a group of `members`:
/// a scalar (a kernel takes it as a constant, a Gather's single index
/// folded into the load), or a short integer list that no member reads as
/// data (a Gather's index table stays an input, where a kernel can load
/// it).
fn inlined(g: &Graph, members: &[usize], v: ValueId) -> bool {
    let ty = g.ty(v);
    is_parameter(ty) && (ty.numel() == Some(1) || !read_as_data(g, members, v))
}

/// Whether a node of `members` reads constant `v`'s elements as data, not
/// as a parameter of its op.
fn read_as_data(g: &Graph, members: &[usize], v: ValueId) -> bool {
    members.iter().any(|&n| {
        let node = &g.nodes[n];
        let te = || kiln_ops::te::classify::node_expr(g, node).ok().flatten();
        node.inputs
            .iter()
            .enumerate()
            .any(|(k, &i)| i == Some(v) && te().is_some_and(|te| te.reads_input(k)))
    })
}

/// The nodes reading each value: through their inputs, or by name from their subgraphs (a
/// Loop body reading a value of this graph needs it outside any group).
fn readers(g: &Graph) -> Vec<Vec<usize>> {
    let mut r = vec![Vec::new(); g.values.len()];
    let names = g.names();
    for (n, node) in g.nodes.iter().enumerate() {
        for v in node.inputs.iter().flatten() {
            r[v.index()].push(n);
        }
        for name in node.subgraph_reads() {
            if let Some(v) = names.get(name.as_str()) {
                r[v.index()].push(n);
            }
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
                        Some(init) if inlined(g, members, v) => {
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

/// Orders the blocks of `units` so every value is defined before it is
/// read, taking the ready block of smallest rank (its first member's) and
/// placing a block's units consecutively. Returns the nodes and the
/// positions of the multi-unit blocks.
fn topological(
    g: &Graph,
    units: &[(usize, Node)],
    blocks: &[Vec<usize>],
) -> Result<(Vec<Node>, Vec<Vec<usize>>)> {
    let mut block_of = vec![0usize; units.len()];
    for (b, members) in blocks.iter().enumerate() {
        members.iter().for_each(|&u| block_of[u] = b);
    }
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    for (u, (_, node)) in units.iter().enumerate() {
        for v in node.outputs.iter().flatten() {
            producer.insert(*v, block_of[u]);
        }
    }
    let mut waiting = vec![0usize; blocks.len()];
    let mut dependents = vec![Vec::new(); blocks.len()];
    for (b, members) in blocks.iter().enumerate() {
        let mut deps: Vec<usize> = members
            .iter()
            .flat_map(|&u| units[u].1.inputs.iter().flatten())
            .filter_map(|v| producer.get(v).copied())
            .filter(|&p| p != b)
            .collect();
        deps.sort_unstable();
        deps.dedup();
        waiting[b] = deps.len();
        for d in deps {
            dependents[d].push(b);
        }
    }
    let rank = |b: usize| blocks[b].iter().map(|&u| units[u].0).min().unwrap_or(0);
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> = (0..blocks.len())
        .filter(|&b| waiting[b] == 0)
        .map(|b| Reverse((rank(b), b)))
        .collect();
    let mut nodes = Vec::with_capacity(units.len());
    let mut parallel = Vec::new();
    let mut emitted = 0;
    while let Some(Reverse((_, b))) = ready.pop() {
        emitted += 1;
        let mut members = blocks[b].clone();
        members.sort_by_key(|&u| units[u].0);
        if members.len() > 1 {
            parallel.push((nodes.len()..nodes.len() + members.len()).collect());
        }
        nodes.extend(members.iter().map(|&u| units[u].1.clone()));
        for &d in &dependents[b] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.push(Reverse((rank(d), d)));
            }
        }
    }
    if emitted != blocks.len() {
        bail!(
            "fusion plan for graph '{}' makes a cycle between groups (a group is not convex, or a parallel set not independent)",
            g.name
        );
    }
    Ok((nodes, parallel))
}
