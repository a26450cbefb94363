//! Structural verifier: value ids in range, every value defined exactly once
//! (SSA), every use after its definition (so the node list is a topological
//! order and the graph is acyclic), initializer data matching its type,
//! unique value names, and subgraph captures bound in the enclosing scope.
//! Op-specific type checks (does `Add` really give this shape?) are done by
//! `kiln_ops::verify_types`, which builds on this.

use crate::graph::{Attr, Graph, ValueId};
use crate::{bail, Result};
use std::collections::HashSet;

/// Verifies the graph's structure. `outer` holds the names visible from an
/// enclosing graph (empty for a top-level graph).
pub fn verify(g: &Graph) -> Result<()> {
    verify_scoped(g, &HashSet::new())
}

fn verify_scoped(g: &Graph, outer: &HashSet<String>) -> Result<()> {
    let n = g.values.len();
    let mut names = HashSet::new();
    for v in &g.values {
        if !names.insert(v.name.as_str()) {
            bail!("value name '{}' is used by two values", v.name);
        }
    }
    let mut defined = vec![false; n];
    let check = |id: ValueId, what: &str| -> Result<()> {
        if id.index() >= n {
            bail!(
                "{what} refers to value #{} but the graph has {n} values",
                id.0
            );
        }
        Ok(())
    };
    let define = |id: ValueId, what: &str, defined: &mut Vec<bool>| -> Result<()> {
        check(id, what)?;
        if defined[id.index()] {
            bail!("value '{}' is defined twice (again by {what})", g.name(id));
        }
        defined[id.index()] = true;
        Ok(())
    };
    for &id in &g.inputs {
        define(id, "a graph input", &mut defined)?;
    }
    for &id in &g.captures {
        define(id, "a capture", &mut defined)?;
        if !outer.contains(g.name(id)) {
            bail!(
                "captured value '{}' is not defined in the enclosing graph",
                g.name(id)
            );
        }
    }
    for (&id, init) in &g.initializers {
        define(id, "an initializer", &mut defined)?;
        if init.ty() != *g.ty(id) {
            bail!(
                "initializer '{}' holds {} but is declared {}",
                g.name(id),
                init.ty(),
                g.ty(id)
            );
        }
        if let crate::Initializer::Raw {
            dtype,
            shape,
            bytes,
        } = init
        {
            let want = shape.iter().product::<usize>() * dtype.size();
            if bytes.len() != want {
                bail!(
                    "initializer '{}' has {} bytes, its type {} needs {want}",
                    g.name(id),
                    bytes.len(),
                    g.ty(id)
                );
            }
        }
    }
    for node in &g.nodes {
        let what = node.describe();
        for i in node.inputs.iter().flatten() {
            check(*i, &what)?;
            if !defined[i.index()] {
                bail!(
                    "{what} uses '{}' before it is defined (nodes out of order or a cycle)",
                    g.name(*i)
                );
            }
        }
        for attr in node.attrs.values() {
            if let Attr::Graph(sub) = attr {
                let mut scope: HashSet<String> = outer.clone();
                scope.extend(
                    g.values
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| defined[*i])
                        .map(|(_, v)| v.name.clone()),
                );
                verify_scoped(sub, &scope)
                    .map_err(|e| e.context(format!("subgraph '{}' of {what}", sub.name)))?;
            }
        }
        for o in node.outputs.iter().flatten() {
            define(*o, &what, &mut defined)?;
        }
    }
    for &o in &g.outputs {
        check(o, "a graph output")?;
        if !defined[o.index()] {
            bail!("graph output '{}' is never defined", g.name(o));
        }
    }
    Ok(())
}
