//! The reduction loop of a phase that the tiling may cut (swTVM's matrix
//! product walk-through tiles its `k` by 64), and the compute's change
//! that makes the cut correct.
//!
//! A phase's reduction may be cut when the body of its innermost outer
//! loop (or the phase itself, with no outer loop) is exactly `let acc =
//! v0; for r { … acc = f(acc, …) … }; out[…] = acc`: `f` a sum, min or
//! max of `acc` only (no other store, no arg-reduction, no half-float
//! accumulation — `kiln_loop::ir::reduces_in_order`), the output of the
//! accumulator's type or f32 for an f64 accumulator (the partial sum is
//! then rounded to f32 once per tile of the reduction: the f32 matrix
//! products' case), and the outer loops interchangeable (`tile_choice.rs`: the
//! store writes a distinct element per outer iteration and nothing reads
//! the output). Then `r`'s tile loop goes inside every other tile loop
//! (so the output's box and DMA stay outside it) and the accumulator
//! starts, on every tile of `r` but the first, from the partial sum the
//! previous tile stored in the output's LB array ([`resume`]): the same
//! additions in the same order as the kernel's.

use kiln_ir::DType;
use kiln_loop::ir::reduces_in_order;
use kiln_loop::{Extent, Idx, Kernel, Loop, Stmt, Val};
use kiln_ops::te::{Combiner, Scalar};

/// A reduction loop the tiling may cut.
#[derive(Debug, Clone)]
pub(crate) struct Reduction {
    /// The reduction loop's variable and extent.
    pub var: String,
    pub extent: i64,
}

/// The body holding the accumulator: the innermost outer loop's, or the
/// phase's.
fn acc_body<'a>(stmts: &'a [Stmt], outer: &[&'a Loop]) -> &'a [Stmt] {
    outer.last().map_or(stmts, |l| &l.body)
}

/// The reduction of a phase that may be cut (module doc); `interchangeable`
/// tells whether its outer loops are.
pub(crate) fn cuttable(
    k: &Kernel,
    stmts: &[Stmt],
    outer: &[&Loop],
    interchangeable: bool,
) -> Option<Reduction> {
    let [Stmt::Let { name, dtype, .. }, Stmt::Loop(r), Stmt::Store { buf, value, .. }] =
        acc_body(stmts, outer)
    else {
        return None;
    };
    let stores_acc = matches!(value, Val::Local(n) if n == name);
    let out = k.buffers[*buf].dtype;
    let holds_partials = out == *dtype || (out == DType::F32 && *dtype == DType::F64);
    let legal = interchangeable
        && stores_acc
        && holds_partials
        && matches!(r.extent, Extent::Const(_))
        && !reduces_in_order(&r.body)
        && only_folds(&r.body, name);
    legal.then(|| Reduction {
        var: r.var.clone(),
        extent: r.extent.max(),
    })
}

/// Whether `body` stores nothing and changes `acc` only by sum, min or max.
fn only_folds(body: &[Stmt], acc: &str) -> bool {
    body.iter().all(|s| match s {
        Stmt::Loop(l) => only_folds(&l.body, acc),
        Stmt::Let { name, .. } => name != acc,
        Stmt::Update { name, combiner, .. } => {
            name != acc || matches!(combiner, Combiner::Sum | Combiner::Min | Combiner::Max)
        }
        _ => false,
    })
}

/// The compute `stmts` (rebased and shortened, outer loops `outer` deep)
/// with the accumulator starting from the output's LB element on every
/// tile of `tile_var` but the first: `let acc = tile_var < 1 ? v0 :
/// (acc's type) out_lb[…]`.
pub(crate) fn resume(stmts: &[Stmt], depth: usize, tile_var: &str) -> Vec<Stmt> {
    if depth > 0 {
        return stmts
            .iter()
            .map(|s| match s {
                Stmt::Loop(l) => Stmt::Loop(Loop {
                    body: resume(&l.body, depth - 1, tile_var),
                    ..l.clone()
                }),
                other => other.clone(),
            })
            .collect();
    }
    let mut out = stmts.to_vec();
    if let [Stmt::Let { value, dtype, .. }, _, Stmt::Store { buf, offset, .. }] = out.as_mut_slice()
    {
        let load = Val::Load {
            buf: *buf,
            offset: offset.clone(),
            guard: Vec::new(),
        };
        let stored = Val::cast(*dtype, load);
        let first = Val::InBounds(vec![(Idx::var(tile_var), 1)]);
        *value = Val::Call(Scalar::new("Where"), vec![first, value.clone(), stored]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::prefix;

    /// Whether the one phase of `body` (under `out0: f32[8]`, `in0:
    /// f32[8, 64]`) has a cuttable reduction.
    fn cuts(body: &str) -> bool {
        let k = kiln_loop::parse_kernel(&format!(
            "kernel k(in0: f32[8, 64], out out0: f32[8]) {{ for i0 in 0..8 {{ {body} }} }}"
        ))
        .expect("kernel");
        cuttable(&k, &k.body, &prefix(&k.body), true).is_some()
    }

    #[test]
    fn only_a_plain_fold_stored_as_is_is_cut() {
        let fold = |comb: &str, store: &str| {
            format!(
                "let acc: f64 = 0.0:f64
                 for r0 in 0..64 {{ acc = {comb}(acc, in0[64*i0 + r0]) }}
                 out0[i0] = {store}"
            )
        };
        assert!(cuts(&fold("sum", "acc")));
        assert!(cuts(&fold("max", "acc")));
        // An epilogue after the reduction, a product.
        assert!(!cuts(&fold("sum", "Relu(acc)")));
        assert!(!cuts(&fold("prod", "acc")));
        // A store inside the reduction.
        assert!(!cuts(
            "let acc: f64 = 0.0:f64
             for r0 in 0..64 { acc = sum(acc, in0[64*i0 + r0])
               out0[i0] = acc }
             out0[i0] = acc"
        ));
    }
}
