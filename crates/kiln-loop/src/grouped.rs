//! Grouped contractions as batched ones.
//!
//! A grouped convolution's tensor expression (`kiln_ops` conv.rs, when a
//! group has several input and output channels) sums over every group `g`
//! and keeps the product only where `g == i_l floordiv d` (output channel
//! `i_l`, `d` channels per group): affine, but `G` times the work, and not
//! a gemm. This rewrite splits output dimension `l` into the group
//! `i_l floordiv d` and the channel within it `i_l mod d`, and replaces
//! `g` by the group, dropping the select.
//!
//! Needs: a tensor expression whose body is `Where(Equal(Index(r_g),
//! Index(i_l floordiv d)), product, 0)` (either order of the comparison)
//! with `d` dividing `i_l`'s extent, affine accesses and no other index
//! value in `product`. Guarantees: an expression computing the same sums
//! with output shape `[…, E/d, d, …]` — row-major, the same memory as
//! `[…, E, …]` — whose group variable both factors read (a gemm's batch),
//! and [`Split::restore`] to state an index of its output in the original
//! dimensions. Anything else is `None` and stays as it is.

use crate::ir::Idx;
use kiln_ops::te::{Affine, Expr, IndexExpr, TensorExpr, Var};

/// Which output dimension was split, and how many positions each group
/// has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub dim: usize,
    pub inner: usize,
}

impl Split {
    /// An index of the split expression's output (one entry per split
    /// dimension) as an index of the original output.
    pub fn restore(&self, index: &[Idx]) -> Vec<Idx> {
        let l = self.dim;
        let mut out: Vec<Idx> = index[..l].to_vec();
        out.push(
            index[l]
                .clone()
                .scale(self.inner as i64)
                .plus(&index[l + 1]),
        );
        out.extend(index[l + 2..].iter().cloned());
        out
    }
}

/// `te` with its group reduction made a batch (see the module doc).
pub fn ungroup(te: &TensorExpr) -> Option<(TensorExpr, Split)> {
    let (group_red, l, inner, product) = pinned_group(te)?;
    let reduction = te.reduction.as_ref()?;
    let extent = *te.shape.get(l)?;
    if inner == 0 || extent % inner != 0 || reduction.extents.get(group_red)? * inner != extent {
        return None;
    }
    let to = |v: Var| -> Affine {
        match v {
            Var::Out(i) if i < l => Affine::from_terms([(Var::Out(i), 1)], 0),
            Var::Out(i) if i == l => {
                Affine::from_terms([(Var::Out(l), inner as i64), (Var::Out(l + 1), 1)], 0)
            }
            Var::Out(i) => Affine::from_terms([(Var::Out(i + 1), 1)], 0),
            Var::Red(k) if k == group_red => Affine::from_terms([(Var::Out(l), 1)], 0),
            Var::Red(k) if k > group_red => Affine::from_terms([(Var::Red(k - 1), 1)], 0),
            Var::Red(k) => Affine::from_terms([(Var::Red(k), 1)], 0),
        }
    };
    let mut accesses = te.accesses.clone();
    for a in &mut accesses {
        for e in &mut a.index {
            *e = IndexExpr::Affine(substituted(e.as_affine()?, &to));
        }
    }
    let mut shape = te.shape.clone();
    shape.splice(l..=l, [extent / inner, inner]);
    let mut reduction = reduction.clone();
    reduction.extents.remove(group_red);
    let split = TensorExpr {
        dtype: te.dtype,
        shape,
        inputs: te.inputs.clone(),
        accesses,
        reduction: Some(reduction),
        body: product.clone(),
    };
    Some((split, Split { dim: l, inner }))
}

/// The body's pinned group: (the group's reduction variable, the output
/// dimension it is pinned to, channels per group, the kept product).
fn pinned_group(te: &TensorExpr) -> Option<(usize, usize, usize, &Expr)> {
    let Expr::Call(select, args) = &te.body else {
        return None;
    };
    let [Expr::Call(equal, sides), product, Expr::Const(zero)] = args.as_slice() else {
        return None;
    };
    if select.op != "Where" || equal.op != "Equal" || zero.data.get_f64(0) != 0.0 {
        return None;
    }
    let [Expr::Index(x), Expr::Index(y)] = sides.as_slice() else {
        return None;
    };
    let (g, (l, d)) = match (group_var(x), out_div(y)) {
        (Some(g), Some(o)) => (g, o),
        _ => (group_var(y)?, out_div(x)?),
    };
    (!mentions_index(product)).then_some((g, l, d, product))
}

/// `r_g` alone.
fn group_var(e: &IndexExpr) -> Option<usize> {
    match e.as_affine()?.as_var()? {
        Var::Red(k) => Some(k),
        Var::Out(_) => None,
    }
}

/// `i_l floordiv d`, as `(l, d)`.
fn out_div(e: &IndexExpr) -> Option<(usize, usize)> {
    let IndexExpr::Div(inner, d) = e else {
        return None;
    };
    match inner.as_affine()?.as_var()? {
        Var::Out(l) if *d > 0 => Some((l, *d as usize)),
        _ => None,
    }
}

/// Whether `e` reads an index value (which the split would change).
fn mentions_index(e: &Expr) -> bool {
    match e {
        Expr::Index(_) => true,
        Expr::Call(_, args) => args.iter().any(mentions_index),
        Expr::Load(_) | Expr::InBounds(_) | Expr::Const(_) => false,
    }
}

/// `a` with every variable replaced by its affine image under `to`.
fn substituted(a: &Affine, to: &dyn Fn(Var) -> Affine) -> Affine {
    let mut terms = Vec::new();
    for &(v, c) in &a.terms {
        terms.extend(to(v).terms.into_iter().map(|(w, k)| (w, k * c)));
    }
    Affine::from_terms(terms, a.constant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ops::te::classify::node_expr;

    /// A grouped convolution's tensor expression from kiln-ops: `x` of
    /// `[1, c, 5, 5]`, weights `[m, c/group, 3, 3]`, padding 1.
    fn conv_te(c: usize, m: usize, group: usize) -> TensorExpr {
        let g = kiln_ir::text::parse(&format!(
            r#"graph "g" opsets [""=17] {{
  input %x: f32[1,{c},5,5]
  input %w: f32[{m},{cg},3,3]
  node "conv" %y: f32[1,{m},5,5] = Conv(%x, %w) {{group={group}, pads=[1,1,1,1]}}
  output %y
}}"#,
            cg = c / group
        ))
        .expect("test graph parses");
        node_expr(&g, &g.nodes[0]).unwrap().expect("expression")
    }

    #[test]
    fn grouped_convolution_becomes_a_batch_over_groups() {
        let te = conv_te(8, 12, 4);
        let (split, s) = ungroup(&te).expect("a grouped convolution");
        assert_eq!(s, Split { dim: 1, inner: 3 });
        assert_eq!(split.shape, vec![1, 4, 3, 5, 5]);
        // The group reduction is gone: input channels in the group, taps.
        assert_eq!(split.reduction.as_ref().unwrap().extents, vec![2, 3, 3]);
        // x reads channel 2·group + r0; w reads row 3·group + position.
        assert_eq!(
            split.accesses[0].index[1],
            IndexExpr::affine([(Var::Out(1), 2), (Var::Red(0), 1)], 0)
        );
        assert_eq!(
            split.accesses[1].index[0],
            IndexExpr::affine([(Var::Out(1), 3), (Var::Out(2), 1)], 0)
        );
        assert!(split.body.as_padded_load().is_none(), "the product stays");
    }

    #[test]
    fn ungrouped_and_depthwise_convolutions_stay() {
        assert!(ungroup(&conv_te(8, 12, 1)).is_none());
        assert!(ungroup(&conv_te(8, 8, 8)).is_none());
    }

    #[test]
    fn restore_recombines_the_split_dimension() {
        let s = Split { dim: 1, inner: 3 };
        let idx: Vec<Idx> = ["n", "g", "p", "h"].iter().map(|v| Idx::var(v)).collect();
        let back = s.restore(&idx);
        assert_eq!(back.len(), 3);
        assert_eq!(back[1], Idx::var("g").scale(3).plus(&Idx::var("p")));
    }
}
