//! Layout canonicalization (APOLLO §3, data-layout transformation): moves
//! and merges layout changes so that they meet and cancel. Rules, applied
//! at each node in order (shapes must be static):
//!
//! 1. `Transpose(x, p)` with `p` the identity → `x`; one that keeps the
//!    order of the axes longer than 1 (moves only unit axes) → `Reshape`.
//! 2. `Transpose(Transpose(x, p), q)` → `Transpose(x, p∘q)` (→ `x` when
//!    that is the identity); the inner one goes when nothing else uses it.
//! 3. `Transpose(U_k(…U_1(Transpose(x, p))…), q)` where each `U_i` is an
//!    element-wise op of one tensor operand (others constants, broadcast to
//!    it) and every intermediate has a single use →
//!    `Transpose(U_k(…U_1(x)…), p∘q)`: the inner transpose moves down to
//!    meet the outer one (rule 2's result), so two layout changes become one
//!    or none; each constant of rank above 0 is replaced by its copy in
//!    `x`'s layout (the inverse of `p`: a per-channel scale between two
//!    layout changes, ConvNeXt's layer scale). Only fires when it reaches a
//!    Transpose, so it never just moves a transpose around.
//! 4. `view(view(x))` → `Reshape(x, shape)` (views: Reshape, Flatten,
//!    Squeeze, Unsqueeze), or `x` when the shapes agree.
//! 5. A unit view (one that only inserts or removes axes of length 1, like
//!    Squeeze/Unsqueeze) of a single-use `Transpose(x, p)` → the transpose
//!    of a unit view of `x`: the view moves above the transpose, so
//!    transposes that were separated only by unit views become adjacent
//!    and rule 2 merges them. Views never move down, transposes move down
//!    only to merge, so the rules terminate.
//!
//! Needs: a type-inferred graph. Guarantees: the same results (pure data
//! movement, exact); moved intermediates are retyped, graph outputs keep
//! their ids and names.

use crate::consts;
use crate::edit::{sweep, Editor};
use crate::pass::{each_graph, Pass};
use crate::patterns::{compose, elementwise_over_constants, is_identity, transpose, view};
use kiln_ir::{Attr, Data, Graph, Result, Tensor, TensorType, ValueId};
use kiln_ops::te::layout::inverse;
use kiln_ops::util::transpose as transpose_tensor;
use std::collections::BTreeMap;

pub struct CanonicalizeLayout;

impl Pass for CanonicalizeLayout {
    fn name(&self) -> &'static str {
        "canonicalize_layout"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        each_graph(g, &mut |g| sweep(g, &mut layout_node))
    }
}

fn layout_node(ed: &mut Editor, n: usize) -> Result<()> {
    if transpose(ed, n).is_some() {
        merge_transposes(ed, n);
    }
    // Also when rule 1 just made the transpose a Reshape.
    if let Some((x, y)) = view(ed, n) {
        if ed.node(n).op != "Identity" && !merge_views(ed, n, x, y) {
            hoist_unit_view(ed, n, x, y);
        }
    }
    Ok(())
}

fn perm_attr(perm: &[usize]) -> BTreeMap<String, Attr> {
    let p = perm.iter().map(|&a| a as i64).collect();
    BTreeMap::from([("perm".to_string(), Attr::Ints(p))])
}

/// Rules 1–3 at Transpose node `n`.
fn merge_transposes(ed: &mut Editor, n: usize) {
    let Some((q, x, y)) = transpose(ed, n) else {
        return;
    };
    if is_identity(&q) {
        ed.forward(n, y, x);
        return;
    }
    if let (Some(xs), Some(ys)) = (ed.shape(x), ed.shape(y)) {
        if moves_only_unit_axes(xs, &q) && !ys.contains(&0) {
            let ys = ys.to_vec();
            make_reshape(ed, n, x, &ys);
            return;
        }
    }
    let Some(m) = ed.producer(x) else { return };
    let (p, input) = match transpose(ed, m) {
        // Rule 2: merge directly, even when the inner one has other users.
        Some((p, x0, _)) => (p, x0),
        None => match sink_through_chain(ed, x) {
            Some(p) => (p, x),
            None => return,
        },
    };
    let perm = compose(&p, &q);
    if !(is_identity(&perm) && ed.forward(n, y, input)) {
        ed.set_inputs(n, &[Some(input)]);
        ed.set_op(n, "Transpose", perm_attr(&perm));
    }
    ed.remove_if_unused(m);
}

/// Whether transposing a tensor of shape `xs` by `perm` keeps the order
/// of its axes longer than 1 (so it is a view).
fn moves_only_unit_axes(xs: &[usize], perm: &[usize]) -> bool {
    let kept: Vec<usize> = perm.iter().copied().filter(|&a| xs[a] != 1).collect();
    kept.windows(2).all(|w| w[0] < w[1])
}

/// Rule 3: walks up from `end` through single-use element-wise ops to a
/// single-use Transpose; when found, the first op of the chain reads the
/// transpose's input instead, the chain's values take that input's shape,
/// their constants its layout, and the transpose goes. Returns the
/// transpose's permutation.
fn sink_through_chain(ed: &mut Editor, end: ValueId) -> Option<Vec<usize>> {
    let mut chain = Vec::new();
    let mut v = end;
    let (perm, x0, t) = loop {
        let m = ed.sole_producer(v)?;
        if let Some((perm, x0, _)) = transpose(ed, m) {
            break (perm, x0, m);
        }
        let k = elementwise_over_constants(ed, m)?;
        chain.push((m, k, ed.output(m, 0)?));
        v = ed.input(m, k)?;
    };
    let &(first, k, _) = chain.last()?;
    let shape = ed.shape(x0)?.to_vec();
    // Every constant's copy is made before anything changes: the rule fires whole or not.
    let unpermuted = inverse(&perm);
    let mut permuted = Vec::new();
    for &(m, data, _) in &chain {
        for j in (0..ed.node(m).inputs.len()).filter(|&j| j != data) {
            let c = ed.input(m, j)?;
            if let Some(t) = permuted_constant(ed, c, &unpermuted)? {
                permuted.push((m, j, format!("{}_permuted", ed.graph().name(c)), t));
            }
        }
    }
    for (m, j, hint, t) in permuted {
        let c = ed.add_constant(&hint, t);
        ed.set_input(m, j, Some(c));
    }
    ed.set_input(first, k, Some(x0));
    for &(_, _, out) in &chain {
        let dtype = ed.ty(out).dtype;
        ed.set_type(out, TensorType::new(dtype, shape.clone()));
    }
    ed.remove_if_unused(t);
    Some(perm)
}

/// Constant `c`, broadcast to `perm`'s rank, transposed by `perm`; `Some(None)` when `c`
/// is a scalar (read the same in any layout).
fn permuted_constant(ed: &Editor, c: ValueId, perm: &[usize]) -> Option<Option<Tensor>> {
    let shape = ed.shape(c)?;
    if shape.is_empty() {
        return Some(None);
    }
    let mut full = vec![1; perm.len() - shape.len()];
    full.extend_from_slice(shape);
    let data = ed.constant(c)?.to_tensor().ok()?.data.clone();
    let t = transpose_tensor(&Tensor::new(full, data).ok()?, perm).ok()?;
    Some(Some(t))
}

/// An int64 shape constant for `shape`, reusing node `n`'s shape input
/// when it already holds exactly that.
fn shape_constant(ed: &mut Editor, n: usize, shape: &[usize]) -> ValueId {
    let want: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    if ed.node(n).op == "Reshape" {
        if let Some(c) = ed.input(n, 1) {
            if consts::ints(ed.graph(), c).as_deref() == Some(&want[..]) {
                return c;
            }
        }
    }
    let hint = format!("{}_shape", ed.node(n).name);
    let t = Tensor {
        shape: vec![want.len()],
        data: Data::I64(want.into()),
    };
    ed.add_constant(&hint, t)
}

/// Rewrites node `n` into `y = Reshape(x, shape of y)`.
fn make_reshape(ed: &mut Editor, n: usize, x: ValueId, shape: &[usize]) {
    let c = shape_constant(ed, n, shape);
    ed.set_inputs(n, &[Some(x), Some(c)]);
    ed.set_op(n, "Reshape", BTreeMap::new());
}

/// Rule 4 at view node `n` (`y = view(x)`); true when it fired.
fn merge_views(ed: &mut Editor, n: usize, x: ValueId, y: ValueId) -> bool {
    let Some(m) = ed.producer(x) else {
        return false;
    };
    let Some((x0, _)) = view(ed, m) else {
        return false;
    };
    let Some(shape) = ed.shape(y).map(<[usize]>::to_vec) else {
        return false;
    };
    // Reshape reads a 0 in its shape input as "copy this dimension".
    if shape.contains(&0) {
        return false;
    }
    if !ed.forward(n, y, x0) {
        make_reshape(ed, n, x0, &shape);
    }
    ed.remove_if_unused(m);
    true
}

/// Dimensions other than 1, in order.
fn non_unit(shape: &[usize]) -> Vec<usize> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}

/// Rule 5 at view node `n` (`y = view(t)`, `t = Transpose(x0, p)`).
fn hoist_unit_view(ed: &mut Editor, n: usize, t: ValueId, y: ValueId) {
    let Some(m) = ed.sole_producer(t) else { return };
    let Some((p, x0, _)) = transpose(ed, m) else {
        return;
    };
    let (Some(xs), Some(ts), Some(ys)) = (ed.shape(x0), ed.shape(t), ed.shape(y)) else {
        return;
    };
    if ts == ys || non_unit(ts) != non_unit(ys) || xs.contains(&0) {
        return;
    }
    let (view_shape, perm) = unit_view_plan(xs, ts, ys, &p);
    let dtype = ed.ty(x0).dtype;
    let hint = format!("{}_view", ed.graph().name(x0));
    let v = ed.add_value(&hint, TensorType::new(dtype, view_shape.clone()));
    make_reshape(ed, m, x0, &view_shape);
    ed.set_output(m, 0, v);
    ed.set_inputs(n, &[Some(v)]);
    ed.set_op(n, "Transpose", perm_attr(&perm));
}

/// For `y = unit_view(Transpose(x, p))`: the shape of a unit view of `x`
/// (its non-unit dims in order, then ones) and the permutation taking it
/// to `y`.
fn unit_view_plan(
    xs: &[usize],
    ts: &[usize],
    ys: &[usize],
    p: &[usize],
) -> (Vec<usize>, Vec<usize>) {
    // Position among x's non-unit axes of each x axis.
    let mut rank_of = vec![usize::MAX; xs.len()];
    let mut count = 0;
    for (a, &d) in xs.iter().enumerate() {
        if d != 1 {
            rank_of[a] = count;
            count += 1;
        }
    }
    let mut view_shape: Vec<usize> = non_unit(xs);
    view_shape.resize(ys.len(), 1);
    // x axes behind t's non-unit dims, in t's order.
    let mut sources = ts
        .iter()
        .enumerate()
        .filter(|(_, &d)| d != 1)
        .map(|(i, _)| rank_of[p[i]]);
    let mut next_unit = count;
    let perm = ys
        .iter()
        .map(|&d| {
            if d != 1 {
                sources.next().unwrap_or(0)
            } else {
                next_unit += 1;
                next_unit - 1
            }
        })
        .collect();
    (view_shape, perm)
}
