//! The [`Pass`] interface and the walk that applies a per-graph rewrite to
//! a graph and every subgraph nested in it.

use kiln_ir::{Attr, Graph, Result};

/// A graph-to-graph transformation.
pub trait Pass: Send + Sync {
    /// The name `--print-after` and reports use.
    fn name(&self) -> &'static str;

    /// Rewrites `g` (and its subgraphs) in place; true when anything changed.
    /// Must keep the graph's outputs (values and names), inputs and results.
    fn run(&self, g: &mut Graph) -> Result<bool>;
}

/// Applies `f` to every subgraph of `g` (innermost first) and then to `g`;
/// true when any call changed something.
pub fn each_graph(g: &mut Graph, f: &mut dyn FnMut(&mut Graph) -> Result<bool>) -> Result<bool> {
    let mut changed = false;
    for node in &mut g.nodes {
        if !node.attrs.values().any(|a| matches!(a, Attr::Graph(_))) {
            continue;
        }
        let what = node.describe();
        for (name, attr) in node.attrs.iter_mut() {
            if let Attr::Graph(sub) = attr {
                changed |= each_graph(sub, f)
                    .map_err(|e| e.context(format!("subgraph '{name}' of {what}")))?;
            }
        }
    }
    Ok(f(g)? | changed)
}
