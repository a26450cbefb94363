//! Shape folding (APOLLO §3, data-flow optimization; the static-shape half
//! of constant folding): a node whose outputs its op can compute from its
//! inputs' types alone (`Op::fold`: Shape, with its start/end attributes,
//! and Size, of a tensor with a static shape) becomes constants. With
//! fold_constants this removes exporters' shape computations
//! (Shape → Gather → Concat → Reshape, ConstantOfShape of a Shape).
//!
//! Needs: a type-inferred graph. Guarantees: the same results; folded
//! values keep their ids, names and types.

use crate::edit::{has_subgraph, sweep, Editor};
use crate::pass::{each_graph, Pass};
use crate::passes::fold_constants::install;
use kiln_ir::{Graph, Result, Tensor};
use kiln_ops::{registry, InferCx, InputInfo};

pub struct FoldShapes;

impl Pass for FoldShapes {
    fn name(&self) -> &'static str {
        "fold_shapes"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        each_graph(g, &mut |g| sweep(g, &mut fold_node))
    }
}

fn fold_node(ed: &mut Editor, n: usize) -> Result<()> {
    if let Some(outs) = fold(ed, n) {
        install(ed, n, outs);
    }
    Ok(())
}

/// What the op's `fold` computes for node `n` from its input types.
fn fold(ed: &Editor, n: usize) -> Option<Vec<Tensor>> {
    let node = ed.node(n);
    if has_subgraph(node) {
        return None;
    }
    let op = registry::lookup(&node.domain, &node.op)?;
    let inputs = node
        .inputs
        .iter()
        .map(|i| {
            i.map(|v| InputInfo {
                ty: ed.ty(v).clone(),
                value: None,
            })
        })
        .collect();
    let cx = InferCx {
        node,
        opset: ed.opset(n),
        inputs,
        scope: &|_| None,
    };
    // A panic in an op's definition is its bug, not a reason to fail here.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op.fold(&cx)))
        .ok()?
        .ok()?
}
