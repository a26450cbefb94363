//! Dead code elimination (APOLLO §3, control-flow optimization: dead
//! producers and branches): removes nodes none of whose outputs is used
//! (nodes with subgraphs too; a subgraph's reads by name count as uses),
//! initializers nothing reads, and values nothing defines or uses any
//! more; the remaining values are renumbered in their old order.
//!
//! Needs: a verified graph. Guarantees: the same results; graph inputs,
//! outputs and captures are kept (ids may change, names do not).

use crate::pass::{each_graph, Pass};
use kiln_ir::{Graph, ValueId};
use std::collections::HashMap;

pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, g: &mut Graph) -> kiln_ir::Result<bool> {
        each_graph(g, &mut |g| Ok(dce_graph(g)))
    }
}

fn dce_graph(g: &mut Graph) -> bool {
    let live = live_values(g);
    let nodes_before = g.nodes.len();
    let inits_before = g.initializers.len();
    g.nodes
        .retain(|n| n.outputs.iter().flatten().any(|o| live[o.index()]));
    g.initializers.retain(|id, _| live[id.index()]);
    let removed = g.nodes.len() != nodes_before || g.initializers.len() != inits_before;
    compact(g) || removed
}

/// Values the graph's outputs depend on (through nodes and the names
/// their subgraphs read), plus the graph's inputs and captures.
fn live_values(g: &Graph) -> Vec<bool> {
    let mut live = vec![false; g.values.len()];
    for &v in g.outputs.iter().chain(&g.inputs).chain(&g.captures) {
        live[v.index()] = true;
    }
    let mut ids: Option<HashMap<&str, ValueId>> = None;
    for node in g.nodes.iter().rev() {
        if !node.outputs.iter().flatten().any(|o| live[o.index()]) {
            continue;
        }
        for i in node.inputs.iter().flatten() {
            live[i.index()] = true;
        }
        let reads = node.subgraph_reads();
        if !reads.is_empty() {
            let ids = ids.get_or_insert_with(|| g.names());
            for id in reads.iter().filter_map(|r| ids.get(r.as_str())) {
                live[id.index()] = true;
            }
        }
    }
    live
}

/// Drops values nothing defines or uses and renumbers the rest; true
/// when any was dropped.
fn compact(g: &mut Graph) -> bool {
    let mut keep = vec![false; g.values.len()];
    let defined = g
        .inputs
        .iter()
        .chain(&g.outputs)
        .chain(&g.captures)
        .chain(g.initializers.keys())
        .chain(
            g.nodes
                .iter()
                .flat_map(|n| n.inputs.iter().chain(&n.outputs).flatten()),
        );
    for v in defined {
        keep[v.index()] = true;
    }
    if keep.iter().all(|&k| k) {
        return false;
    }
    let mut new_id = vec![ValueId(u32::MAX); g.values.len()];
    let mut values = Vec::new();
    for (i, v) in std::mem::take(&mut g.values).into_iter().enumerate() {
        if keep[i] {
            new_id[i] = ValueId(values.len() as u32);
            values.push(v);
        }
    }
    g.values = values;
    let map = |v: &mut ValueId| *v = new_id[v.index()];
    g.inputs.iter_mut().for_each(map);
    g.outputs.iter_mut().for_each(map);
    g.captures.iter_mut().for_each(map);
    for node in &mut g.nodes {
        node.inputs.iter_mut().flatten().for_each(map);
        node.outputs.iter_mut().flatten().for_each(map);
    }
    g.initializers = std::mem::take(&mut g.initializers)
        .into_iter()
        .map(|(k, v)| (new_id[k.index()], v))
        .collect();
    true
}
