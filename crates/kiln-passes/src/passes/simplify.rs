//! Algebraic simplification (APOLLO §3, algebraic simplification by
//! associativity, commutativity and identities). Rules, each local to a
//! node and its producer:
//!
//! - no-ops go: Identity; Cast/CastLike to the input's dtype; Reshape,
//!   Flatten, Squeeze, Unsqueeze and Expand whose output type equals the
//!   input's; a Slice whose output type equals the input's and whose steps
//!   are 1 (or cross axes of length ≤ 1).
//! - identity operands go: `x+0`, `0+x`, `x-0`, `x*1`, `1*x`, `x/1`, where
//!   the constant's elements all equal 0 (or 1) and the result's type
//!   equals `x`'s (a broadcasting constant that enlarges `x` keeps the op).
//! - division by a float constant becomes multiplication by its reciprocal
//!   and subtraction of a float constant addition of its negation, so
//!   chains and affine folding see one form.
//! - chains of constant operands fold: `(x*a)*b → x*(a*b)`,
//!   `(x+a)+b → x+(a+b)`, when the inner result has no other use.
//!
//! Composition of layout ops (Transpose∘Transpose, Reshape∘Reshape) is
//! canonicalize_layout's. A removed node whose output is a graph output
//! stays unless its input's producer can write that output instead.
//!
//! Needs: a type-inferred graph. Guarantees: the same results up to
//! floating-point rounding of `x/c` vs `x*(1/c)` and of reassociated
//! constant chains; no type changes.

use crate::consts::{self, SMALL};
use crate::edit::{sweep, Editor};
use crate::pass::{each_graph, Pass};
use crate::patterns::single_output;
use kiln_ir::{Graph, Result, ValueId};

pub struct Simplify;

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        each_graph(g, &mut |g| sweep(g, &mut simplify_node))
    }
}

fn simplify_node(ed: &mut Editor, n: usize) -> Result<()> {
    let node = ed.node(n);
    if !node.domain.is_empty() && node.domain != "ai.onnx" {
        return Ok(());
    }
    let Some(y) = single_output(node) else {
        return Ok(());
    };
    if let Some(x) = noop_input(ed, n).or_else(|| identity_operand(ed, n)) {
        if ed.forward(n, y, x) {
            return Ok(());
        }
    }
    if invert_constant(ed, n)? {
        return Ok(());
    }
    fold_chain(ed, n)?;
    Ok(())
}

/// The input a no-op node passes through unchanged.
fn noop_input(ed: &Editor, n: usize) -> Option<ValueId> {
    let node = ed.node(n);
    let x = ed.input(n, 0)?;
    let y = single_output(node)?;
    let same_type = ed.ty(x) == ed.ty(y);
    let passes = match node.op.as_str() {
        "Identity" => true,
        "Cast" | "CastLike" | "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Expand" => {
            same_type && ed.shape(x).is_some()
        }
        "Slice" => same_type && slice_takes_all(ed, n).unwrap_or(false),
        _ => false,
    };
    passes.then_some(x)
}

/// Whether a Slice whose output has the input's shape reads every element
/// in order: every step is 1 or runs along an axis of length ≤ 1.
fn slice_takes_all(ed: &Editor, n: usize) -> Option<bool> {
    let shape = ed.shape(ed.input(n, 0)?)?;
    let Some(steps) = ed.input(n, 4) else {
        return Some(true);
    };
    let steps = consts::ints(ed.graph(), steps)?;
    let axes = match ed.input(n, 3) {
        Some(a) => consts::ints(ed.graph(), a)?,
        None => (0..steps.len() as i64).collect(),
    };
    let rank = shape.len() as i64;
    Some(steps.iter().zip(&axes).all(|(&s, &a)| {
        let a = if a < 0 { a + rank } else { a };
        s == 1 || (0..rank).contains(&a) && shape[a as usize] <= 1
    }))
}

/// `x` when node `n` is `x+0`, `0+x`, `x-0`, `x*1`, `1*x` or `x/1`.
fn identity_operand(ed: &Editor, n: usize) -> Option<ValueId> {
    let node = ed.node(n);
    let (a, b) = (ed.input(n, 0)?, ed.input(n, 1)?);
    let is = |v: ValueId, want: f64| consts::splat(ed.graph(), v) == Some(want);
    match node.op.as_str() {
        "Add" if is(b, 0.0) => Some(a),
        "Add" if is(a, 0.0) => Some(b),
        "Sub" if is(b, 0.0) => Some(a),
        "Mul" if is(b, 1.0) => Some(a),
        "Mul" if is(a, 1.0) => Some(b),
        "Div" if is(b, 1.0) => Some(a),
        _ => None,
    }
}

/// `x / c → x * (1/c)` and `x - c → x + (-c)` for a float constant `c`.
fn invert_constant(ed: &mut Editor, n: usize) -> Result<bool> {
    let (to, inverse, suffix) = match ed.node(n).op.as_str() {
        "Div" => ("Mul", "Reciprocal", "reciprocal"),
        "Sub" => ("Add", "Neg", "neg"),
        _ => return Ok(false),
    };
    let (Some(x), Some(c)) = (ed.input(n, 0), ed.input(n, 1)) else {
        return Ok(false);
    };
    if ed.constant(x).is_some() || !ed.ty(c).dtype.is_float() {
        return Ok(false);
    }
    let Some(t) = consts::value(ed.graph(), c, SMALL) else {
        return Ok(false);
    };
    let Ok(inv) = consts::apply(inverse, ed.opset(n), &[&t]) else {
        return Ok(false);
    };
    let hint = format!("{}_{suffix}", ed.graph().name(c));
    let inv = ed.add_constant(&hint, inv);
    ed.set_op(n, to, Default::default());
    ed.set_input(n, 1, Some(inv));
    Ok(true)
}

/// `(x op a) op b → x op (a op b)` for op Add or Mul and constants a, b.
fn fold_chain(ed: &mut Editor, n: usize) -> Result<()> {
    let op = ed.node(n).op.clone();
    if op != "Add" && op != "Mul" {
        return Ok(());
    }
    let Some((t, b)) = constant_operand(ed, n) else {
        return Ok(());
    };
    let Some(m) = ed.sole_producer(t) else {
        return Ok(());
    };
    if ed.node(m).op != op || !ed.node(m).domain.is_empty() {
        return Ok(());
    }
    let Some((x, a)) = constant_operand(ed, m) else {
        return Ok(());
    };
    let g = ed.graph();
    let (Some(ta), Some(tb)) = (consts::value(g, a, SMALL), consts::value(g, b, SMALL)) else {
        return Ok(());
    };
    let Ok(ab) = consts::apply(&op, ed.opset(n), &[&ta, &tb]) else {
        return Ok(());
    };
    if ab.len() > SMALL {
        return Ok(());
    }
    let hint = format!("{}_{}", g.name(a), g.name(b));
    let ab = ed.add_constant(&hint, ab);
    ed.set_inputs(n, &[Some(x), Some(ab)]);
    ed.remove_if_unused(m);
    Ok(())
}

/// `(other operand, constant operand)` of a two-input node with exactly
/// one initializer operand.
fn constant_operand(ed: &Editor, n: usize) -> Option<(ValueId, ValueId)> {
    if ed.node(n).inputs.len() != 2 {
        return None;
    }
    let (a, b) = (ed.input(n, 0)?, ed.input(n, 1)?);
    match (ed.constant(a).is_some(), ed.constant(b).is_some()) {
        (false, true) => Some((a, b)),
        (true, false) => Some((b, a)),
        _ => None,
    }
}
