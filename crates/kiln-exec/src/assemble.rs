//! Concatenations assembled in place: which ones can be, and where their
//! parts live.
//!
//! A concatenation copies every part once more than needed: its producers
//! could have written them into its output. A target that can make a
//! producer's kernel write its output as a part of a larger tensor (the
//! CPU: `kiln_loop::write_as_part`) marks the concatenation
//! `KernelInfo::assembled`, and the plan then gives every part the
//! whole's place (`build.rs`) and runs nothing for the concatenation
//! (`Step::Assembled`).
//!
//! Needs: a graph in execution order. Guarantees: [`part_producers`]
//! accepts a node only when giving its parts the whole's memory changes
//! no value anyone reads: it is a plain `Concat` whose output is not a
//! graph output; each part is a different value computed by a different
//! earlier node that runs a kernel, read by this node alone (once, by no
//! subgraph) and not a graph output.

use kiln_ir::{Graph, ValueId};

/// For concatenation node `n`, the node producing each of its parts (in
/// input order), when they can write them in place (see the module doc).
/// `runs_kernel(p)`: whether node `p` runs a kernel that writes its
/// outputs (not a view, not itself assembled). `scope_reads[p]`: values
/// node `p`'s subgraphs read by name.
pub fn part_producers(
    g: &Graph,
    n: usize,
    runs_kernel: &dyn Fn(usize) -> bool,
    scope_reads: &[Vec<ValueId>],
) -> Option<Vec<usize>> {
    let node = g.nodes.get(n)?;
    let whole = match node.outputs.as_slice() {
        [Some(o)] => *o,
        _ => return None,
    };
    if !node.domain.is_empty() || node.op != "Concat" || g.outputs.contains(&whole) {
        return None;
    }
    let producers = g.producers();
    // Reads by nodes and as graph outputs.
    let uses = g.use_counts();
    let mut found: Vec<usize> = Vec::with_capacity(node.inputs.len());
    for v in &node.inputs {
        let v = (*v)?;
        let p = producers[v.index()]?;
        let by_subgraphs = scope_reads.iter().flatten().any(|&i| i == v);
        let once = uses[v.index()] == 1 && !by_subgraphs;
        if p >= n || !runs_kernel(p) || !once || found.contains(&p) {
            return None;
        }
        found.push(p);
    }
    (!found.is_empty()).then_some(found)
}
