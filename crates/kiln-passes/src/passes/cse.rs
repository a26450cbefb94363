//! Common subexpression elimination (APOLLO §3, data-flow optimization):
//! equal small initializers (same dtype, shape and bits, at most
//! [`MAX_COMPARED_ELEMS`] elements) become one, then a node with the same
//! op, attributes and inputs as an earlier node is replaced by it. Nodes
//! of non-deterministic ops (two random draws differ), of unregistered
//! ops and with subgraphs are never merged.
//!
//! Needs: a verified graph. Guarantees: the same results; a pinned value
//! (graph output, read by a subgraph) is never merged away.

use crate::edit::{has_subgraph, Editor};
use crate::pass::{each_graph, Pass};
use kiln_ir::{DType, Graph, Initializer, Result, ValueId};
use kiln_ops::registry;
use std::collections::HashMap;

/// Initializers up to this many elements are compared by value.
pub const MAX_COMPARED_ELEMS: usize = 1 << 12;

pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        each_graph(g, &mut |g| Ok(cse_graph(g)))
    }
}

/// (domain, op, inputs): nodes that may compute the same values.
type Key = (String, String, Vec<Option<ValueId>>);

fn cse_graph(g: &mut Graph) -> bool {
    let dups = duplicate_constants(g);
    let mut ed = Editor::new(g);
    for (dup, keep) in dups {
        ed.replace_value(dup, keep);
    }
    let mut seen: HashMap<Key, Vec<usize>> = HashMap::new();
    for n in 0..ed.len() {
        ed.resolve(n);
        let node = ed.node(n);
        let mergeable = !has_subgraph(node)
            && registry::lookup(&node.domain, &node.op).is_some_and(|op| op.deterministic());
        if !mergeable {
            continue;
        }
        let key = (node.domain.clone(), node.op.clone(), node.inputs.clone());
        let earlier = seen.entry(key).or_default();
        match earlier.iter().copied().find(|&m| is_twin(&ed, m, n)) {
            Some(m) => merge(&mut ed, m, n),
            None => earlier.push(n),
        }
    }
    ed.finish()
}

/// Whether node `n` (same op and inputs as `m`) computes what `m` does
/// and its outputs may be replaced by `m`'s.
fn is_twin(ed: &Editor, m: usize, n: usize) -> bool {
    let (a, b) = (ed.node(m), ed.node(n));
    a.attrs == b.attrs
        && b.outputs.iter().enumerate().all(|(k, o)| match o {
            None => true,
            Some(o) => {
                !ed.pinned(*o)
                    && a.outputs
                        .get(k)
                        .copied()
                        .flatten()
                        .is_some_and(|p| ed.ty(p) == ed.ty(*o))
            }
        })
}

fn merge(ed: &mut Editor, m: usize, n: usize) {
    let pairs: Vec<(ValueId, ValueId)> = ed
        .node(n)
        .outputs
        .iter()
        .zip(&ed.node(m).outputs)
        .filter_map(|(o, p)| Some(((*o)?, (*p)?)))
        .collect();
    for (o, p) in pairs {
        ed.replace_value(o, p);
    }
    ed.remove_node(n);
}

/// `(duplicate, first)` for each small initializer equal to an earlier one.
fn duplicate_constants(g: &Graph) -> Vec<(ValueId, ValueId)> {
    let mut first: HashMap<(DType, Vec<usize>, Vec<u8>), ValueId> = HashMap::new();
    let mut dups = Vec::new();
    for (&id, init) in &g.initializers {
        let ty = init.ty();
        if ty.dtype == DType::Str || ty.numel().is_none_or(|e| e > MAX_COMPARED_ELEMS) {
            continue;
        }
        let bytes = match init {
            Initializer::Raw { bytes, .. } => bytes.to_vec(),
            Initializer::Tensor(t) => match t.data.to_le_bytes() {
                Ok(b) => b,
                Err(_) => continue,
            },
        };
        let key = (ty.dtype, ty.shape.unwrap_or_default(), bytes);
        match first.get(&key) {
            Some(&keep) => dups.push((id, keep)),
            None => {
                first.insert(key, id);
            }
        }
    }
    dups
}
