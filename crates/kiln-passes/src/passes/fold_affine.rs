//! Affine folding (APOLLO §3, algebraic simplification by distributivity):
//! a per-channel scale after a linear op with a constant weight goes into
//! the weight. This is how BatchNormalization, which opens into Mul/Add
//! with constants, folds into the convolution or matmul before it.
//!
//! - `Mul(Conv(x, W[, B]), s)` → `Conv(x, W·s[, B·s])` when `s` varies only
//!   along the output-channel axis (axis 1: after broadcasting to the
//!   output's rank every other dimension of `s` is 1); `W` is scaled per
//!   output channel (its axis 0).
//! - `Mul(Add(Conv(x, W), b), s)` → `Add(Conv(x, W·s), b·s)` (kiln keeps a
//!   conv bias as a separate Add, which stays).
//! - the same with `MatMul(x, W)` and `s` varying only along the last axis
//!   (W's last axis, `W` of rank ≥ 2).
//!
//! Fires only when the weight (and bias) is a float initializer used by
//! this node alone (scaling a shared weight would copy it), every
//! intermediate has a single use, and `s` does not broadcast the result to
//! a larger shape. The Mul's output becomes the rewritten chain's output,
//! so graph outputs keep their names.
//!
//! Needs: a type-inferred graph. Guarantees: the same results up to
//! floating-point rounding (`(x·W)·s` vs `x·(W·s)`).

use crate::consts::{self, SMALL};
use crate::edit::{sweep, Editor};
use crate::pass::{each_graph, Pass};
use crate::patterns::single_output;
use kiln_ir::{Graph, Result, Tensor, ValueId};

pub struct FoldAffine;

impl Pass for FoldAffine {
    fn name(&self) -> &'static str {
        "fold_affine"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        each_graph(g, &mut |g| sweep(g, &mut fold_node))
    }
}

/// A linear node whose weight a scale can absorb.
struct Linear {
    node: usize,
    /// Output axis a scale may vary along (Conv: 1, MatMul: last).
    axis: usize,
    /// Weight axis that axis maps to (Conv: 0, MatMul: last).
    weight_axis: usize,
}

fn fold_node(ed: &mut Editor, n: usize) -> Result<()> {
    let node = ed.node(n);
    if node.op != "Mul" || !node.domain.is_empty() || node.inputs.len() != 2 {
        return Ok(());
    }
    let (Some(a), Some(b), Some(y)) = (ed.input(n, 0), ed.input(n, 1), single_output(node)) else {
        return Ok(());
    };
    let (u, s) = if ed.constant(b).is_some() {
        (a, b)
    } else {
        (b, a)
    };
    if ed.constant(s).is_none() || ed.constant(u).is_some() || ed.ty(u) != ed.ty(y) {
        return Ok(());
    }
    let Some(p) = ed.sole_producer(u) else {
        return Ok(());
    };
    if let Some(lin) = linear(ed, p) {
        let Some(scale) = channel_scale(ed, &lin, s, u) else {
            return Ok(());
        };
        if scale_weights(ed, &lin, &scale)? {
            ed.remove_node(n);
            ed.set_output(p, 0, y);
        }
        return Ok(());
    }
    fold_through_bias(ed, n, p, s, y)
}

/// `Mul(Add(linear, b), s)`: node `add` is the Add, `s` the scale.
fn fold_through_bias(ed: &mut Editor, n: usize, add: usize, s: ValueId, y: ValueId) -> Result<()> {
    let node = ed.node(add);
    if node.op != "Add" || !node.domain.is_empty() || node.inputs.len() != 2 {
        return Ok(());
    }
    let (Some(a), Some(b)) = (ed.input(add, 0), ed.input(add, 1)) else {
        return Ok(());
    };
    let (t, k_bias) = if ed.constant(b).is_some() {
        (a, 1)
    } else {
        (b, 0)
    };
    let Some(bias) = ed.input(add, k_bias) else {
        return Ok(());
    };
    let Some(lin) = ed.sole_producer(t).and_then(|p| linear(ed, p)) else {
        return Ok(());
    };
    if ed.constant(bias).is_none() || ed.ty(t) != ed.ty(y) {
        return Ok(());
    }
    let Some(scale) = channel_scale(ed, &lin, s, t) else {
        return Ok(());
    };
    let g = ed.graph();
    let (Some(tb), Some(ts)) = (consts::value(g, bias, SMALL), consts::value(g, s, SMALL)) else {
        return Ok(());
    };
    let Ok(scaled_bias) = consts::apply("Mul", ed.opset(n), &[&tb, &ts]) else {
        return Ok(());
    };
    if scaled_bias.len() > SMALL {
        return Ok(());
    }
    if !scale_weights(ed, &lin, &scale)? {
        return Ok(());
    }
    let hint = format!("{}_scaled", ed.graph().name(bias));
    let new_bias = ed.add_constant(&hint, scaled_bias);
    ed.set_input(add, k_bias, Some(new_bias));
    ed.remove_node(n);
    ed.set_output(add, 0, y);
    Ok(())
}

/// Node `p` as a [`Linear`] when it is a Conv or MatMul with a constant
/// float weight (and bias) used by it alone.
fn linear(ed: &Editor, p: usize) -> Option<Linear> {
    let node = ed.node(p);
    if !node.domain.is_empty() || single_output(node).is_none() {
        return None;
    }
    let out_rank = ed.ty(single_output(node)?).rank()?;
    let (axis, weight_axis, params) = match node.op.as_str() {
        "Conv" => (1, 0, &[1, 2][..]),
        "MatMul" if ed.ty(ed.input(p, 1)?).rank()? >= 2 => {
            let w_rank = ed.ty(ed.input(p, 1)?).rank()?;
            (out_rank.checked_sub(1)?, w_rank - 1, &[1][..])
        }
        _ => return None,
    };
    let owned = |k: usize| match ed.input(p, k) {
        None => k != 1,
        Some(v) => ed.constant(v).is_some() && ed.ty(v).dtype.is_float() && ed.used_only_by(v, p),
    };
    params.iter().all(|&k| owned(k)).then_some(Linear {
        node: p,
        axis,
        weight_axis,
    })
}

/// Length of the one axis `shape` (broadcast against `out`) may vary
/// along: `Some(1)` for a uniform constant, `Some(C)` for a per-channel
/// one; `None` when it varies along another axis or enlarges `out`.
fn channel_vector(shape: &[usize], out: Option<&[usize]>, axis: usize) -> Option<usize> {
    let out = out?;
    let offset = out.len().checked_sub(shape.len())?;
    let mut len = 1;
    for (i, &d) in shape.iter().enumerate() {
        if i + offset == axis {
            if d != 1 && d != out[axis] {
                return None;
            }
            len = d;
        } else if d != 1 {
            return None;
        }
    }
    Some(len)
}

/// The scale `s` (applied to the linear op's output `out`) as a flat
/// vector of length 1 or C, when it varies only along the channel axis.
fn channel_scale(ed: &Editor, lin: &Linear, s: ValueId, out: ValueId) -> Option<Tensor> {
    channel_vector(ed.shape(s)?, ed.shape(out), lin.axis)?;
    let t = consts::value(ed.graph(), s, SMALL)?;
    let n = t.len();
    t.reshaped(vec![n]).ok()
}

/// Multiplies the linear node's weight (and Conv bias) by the flat
/// per-channel `scale`; false, with nothing changed, when the op's own
/// Mul rejects the operands (e.g. mixed dtypes).
fn scale_weights(ed: &mut Editor, lin: &Linear, scale: &Tensor) -> Result<bool> {
    let p = lin.node;
    let opset = ed.opset(p);
    let mut scaled = Vec::new();
    for (k, axis) in [(1, lin.weight_axis), (2, 0)] {
        let Some(v) = ed.input(p, k) else { continue };
        let Some(init) = ed.constant(v) else {
            return Ok(false);
        };
        let w = init.to_tensor()?;
        // The scale along `axis` of the weight: shape [C, 1, ..., 1] there.
        let mut shape = vec![1; w.rank().saturating_sub(axis)];
        if let Some(first) = shape.first_mut() {
            *first = scale.len();
        }
        let Ok(s) = scale.reshaped(shape) else {
            return Ok(false);
        };
        match consts::apply("Mul", opset, &[&w, &s]) {
            Ok(t) if t.shape == w.shape => scaled.push((k, v, t)),
            _ => return Ok(false),
        }
    }
    for (k, v, t) in scaled {
        let hint = format!("{}_scaled", ed.graph().name(v));
        let c = ed.add_constant(&hint, t);
        ed.set_input(p, k, Some(c));
    }
    Ok(true)
}
