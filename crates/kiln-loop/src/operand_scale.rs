//! Scalar factors in front of a contraction move behind it.
//!
//! Needs: a [`GroupExpr`].
//! Guarantees: a group computing the same outputs in which a matmul or
//! convolution whose operand was `x * s`, `x / s` (s a scalar constant),
//! seen through any reshapes, reads `x` itself, with the factors returned
//! per contraction: `Σ (x·s)·w = s·Σ x·w`, so the gemm applies them to its
//! result (in its epilogue) and its operands stay in memory. Only chains
//! whose nodes are read by nothing else and are not outputs are moved.
//! (The mean's `1/n` before a classifier's matmul, attention's `q·scale`.)

use crate::group::{GroupExpr, Src};
use kiln_ir::Tensor;
use kiln_ops::te::classify::is_view;
use kiln_ops::te::{Expr, IndexExpr, Scalar};
use std::collections::HashMap;

/// A factor applied to a contraction's result: `Mul` or `Div` by a scalar.
pub type Factor = (Scalar, Tensor);

pub fn hoist_scales(group: &GroupExpr) -> (GroupExpr, HashMap<usize, Vec<Factor>>) {
    let mut out = group.clone();
    let mut scales: HashMap<usize, Vec<Factor>> = HashMap::new();
    for (c, node) in group.nodes.iter().enumerate() {
        if !node.is_contraction() {
            continue;
        }
        for (pos, arg) in node.args.iter().enumerate() {
            let Some(Src::Node(p)) = arg else { continue };
            if let Some((src, factors)) = trace(group, *p) {
                out.nodes[c].args[pos] = Some(src);
                scales.entry(c).or_default().extend(factors);
            }
        }
    }
    (out, scales)
}

/// The memory `p` reads through views and scalar factors, and the factors.
fn trace(group: &GroupExpr, mut p: usize) -> Option<(Src, Vec<Factor>)> {
    let mut factors = Vec::new();
    loop {
        if readers(group, p) != 1 || group.outputs.contains(&p) {
            return None;
        }
        let node = &group.nodes[p];
        let next = if is_view(&node.te) {
            node.args.first().cloned().flatten()?
        } else {
            let (factor, x) = scalar_factor(group, p)?;
            factors.push(factor);
            x
        };
        match next {
            Src::Node(q) => p = q,
            Src::Input(_) => return Some((next, factors)),
            Src::Const(_) => return None,
        }
    }
}

/// How many times group nodes read node `p`.
fn readers(group: &GroupExpr, p: usize) -> usize {
    group
        .nodes
        .iter()
        .flat_map(|n| n.args.iter().flatten())
        .filter(|s| **s == Src::Node(p))
        .count()
}

/// `x * s`, `s * x` or `x / s` read element for element: the factor and `x`.
fn scalar_factor(group: &GroupExpr, p: usize) -> Option<(Factor, Src)> {
    let node = &group.nodes[p];
    let Expr::Call(op, args) = &node.te.body else {
        return None;
    };
    let [Expr::Load(a), Expr::Load(b)] = args.as_slice() else {
        return None;
    };
    let source = |k: usize| {
        let access = node.te.accesses.get(k)?;
        node.args.get(access.input).cloned().flatten()
    };
    let (sa, sb) = (source(*a)?, source(*b)?);
    let (x_access, x, s) = match (op.op.as_str(), &sa, &sb) {
        ("Mul", Src::Const(s), _) => (*b, sb.clone(), s.clone()),
        ("Mul" | "Div", _, Src::Const(s)) => (*a, sa.clone(), s.clone()),
        _ => return None,
    };
    if !op.attrs.is_empty() || !reads_elementwise(node, x_access) {
        return None;
    }
    Some(((op.clone(), s), x))
}

/// Access `k` reads its input at the output's own index.
fn reads_elementwise(node: &crate::group::GroupNode, k: usize) -> bool {
    let te = &node.te;
    te.access_shape(k) == te.shape.as_slice()
        && te.accesses[k].index.iter().enumerate().all(|(d, e)| {
            *e == IndexExpr::out(d) || (te.shape[d] == 1 && e.as_constant() == Some(0))
        })
}
