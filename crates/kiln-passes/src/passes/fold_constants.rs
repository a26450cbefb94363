//! Constant folding (APOLLO §3, data-flow optimization): a node whose
//! inputs are all initializers is evaluated at compile time with its op's
//! own definition (the op registry's `eval`) and its outputs become
//! initializers, keeping their ids and names. Constant nodes (no inputs)
//! become initializers this way too.
//!
//! Not folded: non-deterministic ops (`Op::deterministic`), ops with
//! subgraphs, ops that fail to evaluate (the error is left for run time),
//! and results over [`MAX_FOLD_ELEMS`] elements unless every constant the
//! node reads is used by this node alone — then the old constants die and
//! nothing is duplicated (a weight transposed once, say). Views of a
//! constant (Reshape, Flatten, Squeeze, Unsqueeze, Identity) are folded
//! whatever their size: the new initializer shares the old one's storage.
//!
//! Needs: a type-inferred graph. Guarantees: the same results; every
//! folded value has the type it was declared with.

use crate::consts;
use crate::edit::{has_subgraph, sweep, Editor};
use crate::pass::{each_graph, Pass};
use crate::patterns::view;
use kiln_ir::{Graph, Initializer, Result, Tensor, ValueId};
use kiln_ops::registry;

/// Results larger than this (in elements, all outputs together) are not
/// folded when that would keep their inputs alive too.
pub const MAX_FOLD_ELEMS: usize = 1 << 20;

pub struct FoldConstants;

impl Pass for FoldConstants {
    fn name(&self) -> &'static str {
        "fold_constants"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        each_graph(g, &mut |g| sweep(g, &mut fold_node))
    }
}

fn fold_node(ed: &mut Editor, n: usize) -> Result<()> {
    let node = ed.node(n);
    if has_subgraph(node)
        || node
            .inputs
            .iter()
            .flatten()
            .any(|v| ed.constant(*v).is_none())
    {
        return Ok(());
    }
    match registry::lookup(&node.domain, &node.op) {
        Some(op) if op.deterministic() => {}
        _ => return Ok(()),
    }
    if let Some((x, y)) = view(ed, n) {
        if let (Some(init), Some(shape)) = (ed.constant(x), ed.shape(y)) {
            let init = consts::reshaped(init, shape.to_vec())?;
            ed.remove_node(n);
            ed.make_constant(y, init);
        }
        return Ok(());
    }
    let sole_user = node.inputs.iter().flatten().all(|&v| ed.used_only_by(v, n));
    if !sole_user && !small_enough(ed, n) {
        return Ok(());
    }
    let inputs: Vec<Option<Tensor>> = node
        .inputs
        .iter()
        .map(|i| {
            i.and_then(|v| ed.constant(v))
                .map(|c| c.to_tensor())
                .transpose()
        })
        .collect::<Result<_>>()?;
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(|t| t.as_ref()).collect();
    let Ok(outs) = consts::eval(node, ed.opset(n), &refs) else {
        return Ok(());
    };
    if sole_user || outs.iter().map(|t| t.len()).sum::<usize>() <= MAX_FOLD_ELEMS {
        install(ed, n, outs);
    }
    Ok(())
}

/// Whether node `n`'s outputs are known to fit [`MAX_FOLD_ELEMS`], or,
/// when their shapes are unknown, its inputs are small enough to try.
fn small_enough(ed: &Editor, n: usize) -> bool {
    let node = ed.node(n);
    let outs: Option<usize> = node
        .outputs
        .iter()
        .flatten()
        .map(|&o| ed.ty(o).numel())
        .sum();
    match outs {
        Some(e) => e <= MAX_FOLD_ELEMS,
        None => {
            let ins: usize = node
                .inputs
                .iter()
                .flatten()
                .map(|&v| ed.ty(v).numel().unwrap_or(usize::MAX))
                .fold(0, usize::saturating_add);
            ins <= MAX_FOLD_ELEMS
        }
    }
}

/// Replaces node `n` by the constants `outs` (one per output position)
/// when each fits its output's declared type; false, with nothing changed,
/// otherwise.
pub(crate) fn install(ed: &mut Editor, n: usize, outs: Vec<Tensor>) -> bool {
    let outputs: Vec<Option<ValueId>> = ed.node(n).outputs.clone();
    let fits = outputs.iter().enumerate().all(|(k, o)| match o {
        None => true,
        Some(o) => outs.get(k).is_some_and(|t| {
            let ty = ed.ty(*o);
            t.dtype() == ty.dtype && ty.shape.as_ref().is_none_or(|s| *s == t.shape)
        }),
    });
    if !fits {
        return false;
    }
    ed.remove_node(n);
    for (o, t) in outputs.into_iter().zip(outs) {
        if let Some(o) = o {
            ed.make_constant(o, Initializer::Tensor(t));
        }
    }
    true
}
