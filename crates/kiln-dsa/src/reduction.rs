//! The reduction loop of a phase that the tiling may cut (swTVM's matrix
//! product walk-through tiles its `k` by 64), and the compute's change
//! that makes the cut correct.
//!
//! A phase's reduction may be cut when the body of its innermost outer
//! loop (or the phase itself, with no outer loop) is exactly `let acc =
//! v0; for r { … acc = f(acc, …) … }; let v = …; …; out[…] = E`: `f` a
//! sum, min or max of `acc` only (no other store, no arg-reduction, no
//! half-float accumulation — `kiln_loop::ir::reduces_in_order`), the
//! `let`s and `E` values of `acc`, the earlier `let`s and loads (`E =
//! acc` with no `let`, or an epilogue: a fused mean's division, a bias, an
//! activation; only for a float accumulator, since the epilogue is also
//! computed, and discarded, on the partial sums), the output of the accumulator's type or
//! f32 for an f64 accumulator (the partial sum is then rounded to f32
//! once per tile of the reduction: the f32 matrix products' case), and
//! the outer loops interchangeable (`tile_choice.rs`: the store writes a
//! distinct element per outer iteration and nothing reads the output).
//! Then `r`'s tile loop goes inside every other tile loop (so the
//! output's box and DMA stay outside it), the accumulator starts, on
//! every tile of `r` but the first, from the partial sum the previous
//! tile stored in the output's LB array, and every tile but the last
//! stores the partial sum itself, the last one `E` of it ([`resume`]):
//! the same additions in the same order as the kernel's, and `E` applied
//! once to the whole sum.

use crate::device::TileLoop;
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
    /// The output's element type (it holds the partial sums).
    pub out: DType,
    /// Whether the store applies an epilogue to the accumulator.
    pub epilogue: bool,
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
    let [Stmt::Let { name, dtype, .. }, Stmt::Loop(r), tail @ .., Stmt::Store { buf, value, .. }] =
        acc_body(stmts, outer)
    else {
        return None;
    };
    let plain = tail.is_empty() && matches!(value, Val::Local(n) if n == name);
    // An epilogue runs on partial sums too (its result discarded): only
    // float arithmetic, which cannot trap on them.
    let stores_acc = plain || (dtype.is_float() && epilogue_of(name, tail, value));
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
        out,
        epilogue: !plain,
    })
}

/// Whether `lets` then `stored` compute a value of `acc` and loads only:
/// each `let` and the stored value read no local but `acc` and the lets
/// before them.
fn epilogue_of(acc: &str, lets: &[Stmt], stored: &Val) -> bool {
    let mut known = vec![acc];
    for s in lets {
        match s {
            Stmt::Let { name, value, .. } if reads_only(value, &known) => known.push(name),
            _ => return false,
        }
    }
    reads_only(stored, &known)
}

/// Whether every local `v` reads is in `known`.
fn reads_only(v: &Val, known: &[&str]) -> bool {
    match v {
        Val::Local(n) => known.contains(&n.as_str()),
        Val::Call(_, args) => args.iter().all(|a| reads_only(a, known)),
        _ => true,
    }
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
/// tile of `t` but the first — `let acc = t < 1 ? v0 : (acc's type)
/// out_lb[…]` — and, when the store applies an epilogue `E`, the partial
/// sum stored as is on every tile but the last: `out_lb[…] = t is last ?
/// E : acc` (both cast to the output's type, which holds the partials).
pub(crate) fn resume(stmts: &[Stmt], depth: usize, t: &TileLoop, out: DType) -> Vec<Stmt> {
    if depth > 0 {
        return stmts
            .iter()
            .map(|s| match s {
                Stmt::Loop(l) => Stmt::Loop(Loop {
                    body: resume(&l.body, depth - 1, t, out),
                    ..l.clone()
                }),
                other => other.clone(),
            })
            .collect();
    }
    let mut body = stmts.to_vec();
    if let [Stmt::Let {
        name, value, dtype, ..
    }, _, tail @ .., Stmt::Store {
        buf,
        offset,
        value: stored,
    }] = body.as_mut_slice()
    {
        let load = Val::Load {
            buf: *buf,
            offset: offset.clone(),
            guard: Vec::new(),
        };
        let partial = Val::cast(*dtype, load);
        let first = Val::InBounds(vec![(Idx::var(&t.tile_var), 1)]);
        *value = Val::Call(Scalar::new("Where"), vec![first, value.clone(), partial]);
        if !tail.is_empty() || !matches!(stored, Val::Local(n) if n == name) {
            let last = Idx::var(&t.tile_var).plus(&Idx::constant(1 - t.count()));
            let acc = Val::cast(out, Val::Local(name.clone()));
            let epilogue = Val::cast(out, stored.clone());
            *stored = Val::Call(
                Scalar::new("Where"),
                vec![Val::InBounds(vec![(last, 1)]), epilogue, acc],
            );
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::prefix;

    /// The cuttable reduction of the one phase of `body` (under `out0:
    /// T[8]`, `in0: T[8, 64]`), if any.
    fn cut_of(ty: &str, body: &str) -> Option<Reduction> {
        let k = kiln_loop::parse_kernel(&format!(
            "kernel k(in0: {ty}[8, 64], out out0: {ty}[8]) {{ for i0 in 0..8 {{ {body} }} }}"
        ))
        .expect("kernel");
        cuttable(&k, &k.body, &prefix(&k.body), true)
    }

    fn cuts(body: &str) -> bool {
        cut_of("f32", body).is_some()
    }

    fn fold(comb: &str, store: &str) -> String {
        format!(
            "let acc: f64 = 0.0:f64
             for r0 in 0..64 {{ acc = {comb}(acc, in0[64*i0 + r0]) }}
             out0[i0] = {store}"
        )
    }

    #[test]
    fn a_fold_stored_as_is_or_through_an_epilogue_is_cut() {
        assert!(cuts(&fold("sum", "acc")));
        assert!(cuts(&fold("max", "acc")));
        let plain = cut_of("f32", &fold("sum", "acc")).expect("cut");
        assert!(!plain.epilogue);
        // An epilogue after the reduction (of `acc` and loads).
        let relu = cut_of("f32", &fold("sum", "Relu(Add(acc, in0[64*i0]))")).expect("cut");
        assert!(relu.epilogue);
        // The fused mean's form: the sum converted by a `let`, then scaled.
        let mean = "let acc: f64 = 0.0:f64
                    for r0 in 0..64 { acc = sum(acc, in0[64*i0 + r0]) }
                    let v: f32 = acc
                    out0[i0] = Mul(v, 0.015625:f32)";
        assert!(cut_of("f32", mean).is_some_and(|r| r.epilogue));
        // Not: a `let` reading another local, an integer epilogue (it runs on partial sums too), a
        // product, a store inside the reduction.
        let int = "let acc: i32 = 0:i32
                   for r0 in 0..64 { acc = sum(acc, in0[64*i0 + r0]) }
                   out0[i0] = Neg(acc)";
        assert!(cut_of("i32", int).is_none());
        assert!(!cuts(
            "let acc: f64 = 0.0:f64
             for r0 in 0..64 { acc = sum(acc, in0[64*i0 + r0]) }
             let v: f32 = w
             out0[i0] = v"
        ));
        assert!(!cuts(&fold("prod", "acc")));
        assert!(!cuts(
            "let acc: f64 = 0.0:f64
             for r0 in 0..64 { acc = sum(acc, in0[64*i0 + r0])
               out0[i0] = acc }
             out0[i0] = acc"
        ));
    }

    #[test]
    fn an_epilogue_is_applied_on_the_last_tile_only() {
        let k = kiln_loop::parse_kernel(&format!(
            "kernel k(in0: f32[8, 64], out out0: f32[8]) {{ for i0 in 0..8 {{ {} }} }}",
            fold("sum", "Relu(acc)")
        ))
        .expect("kernel");
        let t = TileLoop {
            var: "r0".into(),
            tile_var: "r0_t".into(),
            extent: 64,
            tile: 16,
        };
        let body = resume(&k.body, 1, &t, DType::F32);
        let Stmt::Loop(l) = &body[0] else {
            panic!("a loop")
        };
        let Stmt::Store { value, .. } = &l.body[2] else {
            panic!("a store")
        };
        // Four tiles: the last is `r0_t - 3` in [0, 1).
        let last = Val::InBounds(vec![(Idx::var("r0_t").plus(&Idx::constant(-3)), 1)]);
        let Val::Call(s, args) = value else {
            panic!("a call")
        };
        assert_eq!((s.op.as_str(), &args[0]), ("Where", &last));
        assert_eq!(args[2], Val::cast(DType::F32, Val::Local("acc".into())));
    }
}
