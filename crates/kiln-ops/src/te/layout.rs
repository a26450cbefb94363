//! The channels-last form of a tensor expression: the same computation
//! with the output and input 0 stored `[N, spatial…, C]` instead of
//! `[N, C, spatial…]` (NHWC instead of NCHW for 2-d images).
//!
//! Needs: an expression whose output and input 0 have the same rank ≥ 3
//! and whose axis 0 is the batch and axis 1 the channels (Conv, pooling).
//! Guarantees: [`channels_last`] computes, at output index `(n, s…, c)`,
//! what the original computes at `(n, c, s…)`, reading input 0 at the
//! permuted index, and every other input of the same rank (a
//! convolution's weights `[M, C/group, k…]`) stored `[k…, C/group, M]`
//! (HWIO): the output channel, which the kernels vectorize or take as the
//! matrix columns, is contiguous there too. The reduction variables that
//! index input 0's channel axis move innermost (after the window taps), so
//! that a convolution's reduction runs along input 0's contiguous axis
//! (`K = (kh, kw, ci)`: each tap row of the implicit im2col is one run).

use super::{Access, TensorExpr, Var};
use kiln_ir::{ensure, Result};

/// The permutation taking a rank-`r` tensor from channels-first to
/// channels-last: axis `i` of the result is axis `perm[i]` of the input
/// (`[0, 2, …, r-1, 1]`, as ONNX's Transpose reads `perm`).
pub fn channels_last_perm(r: usize) -> Vec<usize> {
    grouped_channels_last_perm(r, 1)
}

/// [`channels_last_perm`] for a rank-`r` tensor with `k` channel axes after
/// the batch (`[N, C…, S…]` → `[N, S…, C…]`): a channel split into groups
/// (`[N, g, C/g, H, W]`) keeps its groups last, in order.
pub fn grouped_channels_last_perm(r: usize, k: usize) -> Vec<usize> {
    let mut p = vec![0];
    p.extend(1 + k..r);
    p.extend(1..1 + k);
    p
}

/// The permutation taking rank-`r` weights from `[M, C, k…]` to
/// `[k…, C, M]`.
pub fn weights_last_perm(r: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (2..r).collect();
    p.extend([1, 0]);
    p
}

/// The permutation that undoes `perm`.
pub fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

/// `v` permuted by `perm`: entry `i` is `v[perm[i]]`.
pub fn permuted<T: Clone>(v: &[T], perm: &[usize]) -> Vec<T> {
    perm.iter().map(|&p| v[p].clone()).collect()
}

/// How a channels-last expression of output rank `rank` stores input `k`
/// of rank `r`, as the permutation from the wrapped op's layout: input 0
/// channels-last when `inputs` says so, inputs of the output's rank (the
/// weights) `[k…, C, M]`, others unchanged (`None`).
pub fn stored_perm(k: usize, r: usize, rank: usize, inputs: bool) -> Option<Vec<usize>> {
    match k {
        0 if inputs => Some(channels_last_perm(r)),
        0 => None,
        _ if r == rank => Some(weights_last_perm(r)),
        _ => None,
    }
}

/// Input `k`'s `v` (its index or shape) in the order it is stored: see
/// [`stored_perm`].
fn stored<T: Clone>(k: usize, v: &[T], rank: usize, inputs: bool) -> Vec<T> {
    match stored_perm(k, v.len(), rank, inputs) {
        Some(perm) => permuted(v, &perm),
        None => v.to_vec(),
    }
}

/// The expression `te` with its output and weights channels-last and,
/// when `inputs` is true, input 0 too (see the module doc); otherwise input
/// 0 is read as `te` reads it.
pub fn channels_last(te: TensorExpr, inputs: bool) -> Result<TensorExpr> {
    let rank = te.shape.len();
    let x_rank = te.inputs.first().and_then(|s| s.as_ref()).map(|s| s.len());
    ensure!(
        rank >= 3 && x_rank == Some(rank),
        "a channels-last expression needs an output and input 0 of the same rank (at least 3), got {:?} and {:?}",
        te.shape,
        te.inputs.first()
    );
    let position_of_out = |l: usize| inverse(&channels_last_perm(rank))[l];
    let red_order = match inputs {
        true => reduction_order(&te),
        false => (0..te.reduction.as_ref().map_or(0, |r| r.extents.len())).collect(),
    };
    let position_of_red = |k: usize| red_order.iter().position(|&o| o == k).unwrap_or(k);
    let rename = |v: Var| match v {
        Var::Out(l) => Var::Out(position_of_out(l)),
        Var::Red(k) => Var::Red(position_of_red(k)),
    };
    let accesses = te
        .accesses
        .iter()
        .map(|a| {
            let index: Vec<_> = a.index.iter().map(|e| e.renamed(&rename)).collect();
            Access {
                input: a.input,
                index: stored(a.input, &index, rank, inputs),
            }
        })
        .collect();
    let inputs = te
        .inputs
        .iter()
        .enumerate()
        .map(|(k, shape)| shape.as_deref().map(|s| stored(k, s, rank, inputs)))
        .collect();
    let reduction = te.reduction.as_ref().map(|r| super::Reduction {
        extents: red_order.iter().map(|&k| r.extents[k]).collect(),
        ..r.clone()
    });
    Ok(TensorExpr {
        dtype: te.dtype,
        shape: permuted(&te.shape, &channels_last_perm(rank)),
        inputs,
        accesses,
        reduction,
        body: te.body.renamed(&rename),
    })
}

/// The reduction variables in their new order: those that do not index
/// input 0's channel axis, then those that do (each group in its order).
fn reduction_order(te: &TensorExpr) -> Vec<usize> {
    let count = te.reduction.as_ref().map_or(0, |r| r.extents.len());
    let mut channel_vars = Vec::new();
    for a in te.accesses.iter().filter(|a| a.input == 0) {
        if let Some(e) = a.index.get(1) {
            e.vars(&mut channel_vars);
        }
    }
    let is_channel = |k: &usize| channel_vars.contains(&Var::Red(*k));
    let (channel, other): (Vec<usize>, Vec<usize>) = (0..count).partition(is_channel);
    other.into_iter().chain(channel).collect()
}
