//! Facts about nodes that several passes match on: views (ops that keep
//! the elements in row-major order and change only the shape), transpose
//! permutations, and element-wise ops with one tensor operand.

use crate::edit::Editor;
use kiln_ir::{Node, ValueId};
use kiln_ops::registry;

/// Ops whose output holds the input's elements in the same row-major
/// order (ONNX semantics of Reshape, Flatten, Squeeze, Unsqueeze, Identity).
const VIEW_OPS: &[&str] = &["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"];

fn default_domain(node: &Node) -> bool {
    node.domain.is_empty() || node.domain == "ai.onnx"
}

/// `(x, y)` when node `n` is `y = view(x)`: a view op with static shapes
/// of the same size and dtype.
pub fn view(ed: &Editor, n: usize) -> Option<(ValueId, ValueId)> {
    let node = ed.node(n);
    if !default_domain(node) || !VIEW_OPS.contains(&node.op.as_str()) {
        return None;
    }
    let (x, y) = (ed.input(n, 0)?, single_output(node)?);
    let (tx, ty) = (ed.ty(x), ed.ty(y));
    let same_size = tx.numel().is_some() && tx.numel() == ty.numel();
    (same_size && tx.dtype == ty.dtype && ty.shape.is_some()).then_some((x, y))
}

/// The node's only output, when it has exactly one.
pub fn single_output(node: &Node) -> Option<ValueId> {
    match node.outputs.as_slice() {
        [Some(y)] => Some(*y),
        _ => None,
    }
}

/// The permutation of Transpose node `node` whose input has rank `rank`:
/// its `perm` attribute, else reversed axes (ONNX default).
pub fn transpose_perm(node: &Node, rank: usize) -> Option<Vec<usize>> {
    if !default_domain(node) || node.op != "Transpose" {
        return None;
    }
    let perm: Vec<usize> = match node.attr_ints("perm").ok()? {
        None => (0..rank).rev().collect(),
        Some(p) => p
            .iter()
            .map(|&a| usize::try_from(a).ok())
            .collect::<Option<_>>()?,
    };
    let mut seen = vec![false; rank];
    for &a in &perm {
        if a >= rank || std::mem::replace(&mut seen[a], true) {
            return None;
        }
    }
    (perm.len() == rank).then_some(perm)
}

/// `(perm, x, y)` when node `n` is `y = Transpose(x)` with a known rank.
pub fn transpose(ed: &Editor, n: usize) -> Option<(Vec<usize>, ValueId, ValueId)> {
    let x = ed.input(n, 0)?;
    let perm = transpose_perm(ed.node(n), ed.ty(x).rank()?)?;
    Some((perm, x, single_output(ed.node(n))?))
}

/// Transpose by `p` then by `q` is one transpose by the result.
pub fn compose(p: &[usize], q: &[usize]) -> Vec<usize> {
    q.iter().map(|&i| p[i]).collect()
}

pub fn is_identity(perm: &[usize]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| i == p)
}

/// Index of the one tensor operand when node `n` is an element-wise op
/// (a broadcasting op with a scalar rule) whose other operands are all
/// constants broadcast to its output's shape, which that operand has: it
/// maps each element of that operand to the element at the same position
/// of its output, reading constants that a layout change permutes alike.
pub fn elementwise_over_constants(ed: &Editor, n: usize) -> Option<usize> {
    let node = ed.node(n);
    if !default_domain(node) {
        return None;
    }
    registry::lookup("", &node.op)?.scalar_kernel()?;
    let y = single_output(node)?;
    let rank = ed.ty(y).rank()?;
    let broadcast_const =
        |v: ValueId| ed.constant(v).is_some() && ed.ty(v).rank().is_some_and(|r| r <= rank);
    let mut data = None;
    for k in 0..node.inputs.len() {
        let v = ed.input(n, k)?;
        if !broadcast_const(v) && data.replace(k).is_some() {
            return None;
        }
    }
    let x = ed.input(n, data?)?;
    (ed.ty(x).shape.is_some() && ed.ty(x).shape == ed.ty(y).shape).then_some(data?)
}
