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

/// `v` in channels-last order: `[v0, v2, …, v(r-1), v1]`.
pub fn to_channels_last<T: Clone>(v: &[T]) -> Vec<T> {
    let mut out = vec![v[0].clone()];
    out.extend_from_slice(&v[2..]);
    out.push(v[1].clone());
    out
}

/// `v` in channels-first order: the inverse of [`to_channels_last`].
pub fn to_channels_first<T: Clone>(v: &[T]) -> Vec<T> {
    let r = v.len();
    let mut out = vec![v[0].clone(), v[r - 1].clone()];
    out.extend_from_slice(&v[1..r - 1]);
    out
}

/// Weights `[M, C, k…]` in the order `[k…, C, M]`.
pub fn to_weights_last<T: Clone>(v: &[T]) -> Vec<T> {
    let mut out = v[2..].to_vec();
    out.push(v[1].clone());
    out.push(v[0].clone());
    out
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
    let position_of_out = |l: usize| match l {
        0 => 0,
        1 => rank - 1,
        l => l - 1,
    };
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
            let index = match a.input {
                0 if !inputs => index,
                0 => to_channels_last(&index),
                _ if index.len() == rank => to_weights_last(&index),
                _ => index,
            };
            Access {
                input: a.input,
                index,
            }
        })
        .collect();
    let inputs = te
        .inputs
        .iter()
        .enumerate()
        .map(|(k, shape)| {
            shape.as_deref().map(|s| match k {
                0 if !inputs => s.to_vec(),
                0 => to_channels_last(s),
                _ if s.len() == rank => to_weights_last(s),
                _ => s.to_vec(),
            })
        })
        .collect();
    let reduction = te.reduction.as_ref().map(|r| super::Reduction {
        extents: red_order.iter().map(|&k| r.extents[k]).collect(),
        combiner: r.combiner,
    });
    Ok(TensorExpr {
        dtype: te.dtype,
        shape: to_channels_last(&te.shape),
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
