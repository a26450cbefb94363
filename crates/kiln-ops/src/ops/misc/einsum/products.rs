//! Einsum of one or two operands as primitive ops, so the planners fuse
//! and the backends generate it like any matrix product (attention's
//! `bhid,bhjd->bhij` in MaxViT, say) instead of leaving it to the
//! interpreter's loop over the joint index space:
//!
//! 1. labels only one operand has and the output lacks: `ReduceSum`;
//! 2. each operand transposed to `[batch…, kept…, contracted…]` (the
//!    second to `[batch…, contracted…, kept…]`) and reshaped to
//!    `[B, M, K]` and `[B, K, N]`, where batch labels are in both operands
//!    and the output, contracted ones in both operands only, kept ones in
//!    one operand and the output;
//! 3. `MatMul`, reshaped to `[batch…, kept of the first…, kept of the
//!    second…]` and transposed to the output's order.
//!
//! One operand is steps 1 and 3's transpose. Transposes and reshapes that
//! change nothing are left out.
//!
//! Needs: static shapes. Declines (`None`, so the node keeps the
//! interpreter's kernel) more than two operands, a label repeated within
//! an operand (a diagonal), and a label of size 1 in one operand against a
//! larger size in the other (a broadcast). Guarantees: the equation's
//! result up to the order of the sums (the product accumulates in the
//! element type, the interpreter's kernel in f64).

use super::{labelled, Label, Labelled};
use crate::ops::compose::{reduce_keep, reshape};
use crate::Builder;
use kiln_ir::{bail, Attr, Result, ValueId};

/// The decomposition of an Einsum node with `equation` over `inputs`, or
/// `None` where it declines (see the module doc).
pub(super) fn decompose(
    b: &mut Builder,
    equation: &str,
    inputs: &[Option<ValueId>],
) -> Result<Option<Vec<Option<ValueId>>>> {
    let Some(ids) = inputs.iter().copied().collect::<Option<Vec<ValueId>>>() else {
        return Ok(None);
    };
    let Ok(shapes) = ids.iter().map(|&v| b.shape(v)).collect::<Result<Vec<_>>>() else {
        return Ok(None);
    };
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let l = labelled(equation, &refs)?;
    if ids.is_empty() || ids.len() > 2 || !plain(&l, &refs) {
        return Ok(None);
    }
    let mut operands = Vec::new();
    for (k, &v) in ids.iter().enumerate() {
        operands.push(summed_alone(b, &l, k, v)?);
    }
    let y = match operands.as_slice() {
        [(a, la)] => transposed(b, *a, la, &l.out)?,
        [a, c] => product(b, &l, a, c)?,
        _ => return Ok(None),
    };
    Ok(Some(vec![Some(y)]))
}

/// Whether every operand's labels are distinct and every label has its
/// full size wherever it appears.
fn plain(l: &Labelled, shapes: &[&[usize]]) -> bool {
    l.labels.iter().zip(shapes).all(|(labels, shape)| {
        let distinct = labels
            .iter()
            .enumerate()
            .all(|(i, x)| !labels[..i].contains(x));
        distinct && labels.iter().zip(*shape).all(|(&x, &d)| d == l.size[x])
    })
}

/// Operand `k` (value `v`) with the labels no other operand and not the
/// output has summed away: the value and its remaining labels.
fn summed_alone(
    b: &mut Builder,
    l: &Labelled,
    k: usize,
    v: ValueId,
) -> Result<(ValueId, Vec<Label>)> {
    let labels = &l.labels[k];
    let elsewhere = |x: &Label| {
        l.out.contains(x)
            || l.labels
                .iter()
                .enumerate()
                .any(|(j, o)| j != k && o.contains(x))
    };
    let axes: Vec<usize> = (0..labels.len())
        .filter(|&i| !elsewhere(&labels[i]))
        .collect();
    let kept: Vec<Label> = labels.iter().copied().filter(|x| elsewhere(x)).collect();
    let sum = reduce_keep(b, "ReduceSum", v, &axes)?;
    let shape: Vec<usize> = kept.iter().map(|&x| l.size[x]).collect();
    Ok((reshape(b, sum, &shape)?, kept))
}

/// The product of two operands (values with their labels) in the output's
/// label order.
fn product(
    b: &mut Builder,
    l: &Labelled,
    &(a, ref la): &(ValueId, Vec<Label>),
    &(c, ref lc): &(ValueId, Vec<Label>),
) -> Result<ValueId> {
    let in_both = |x: &&Label| lc.contains(x);
    let batch: Vec<Label> = la
        .iter()
        .filter(in_both)
        .filter(|x| l.out.contains(x))
        .copied()
        .collect();
    let contracted: Vec<Label> = la
        .iter()
        .filter(in_both)
        .filter(|x| !l.out.contains(x))
        .copied()
        .collect();
    let kept_a: Vec<Label> = la.iter().filter(|x| !lc.contains(x)).copied().collect();
    let kept_c: Vec<Label> = lc.iter().filter(|x| !la.contains(x)).copied().collect();
    let size = |labels: &[Label]| labels.iter().map(|&x| l.size[x]).product::<usize>();
    let (n_batch, m, k, n) = (
        size(&batch),
        size(&kept_a),
        size(&contracted),
        size(&kept_c),
    );
    let a_order = [&batch[..], &kept_a, &contracted].concat();
    let a = transposed(b, a, la, &a_order)?;
    let a = reshape(b, a, &[n_batch, m, k])?;
    let c_order = [&batch[..], &contracted, &kept_c].concat();
    let c = transposed(b, c, lc, &c_order)?;
    let c = reshape(b, c, &[n_batch, k, n])?;
    let y = b.op("MatMul", &[a, c], &[])?;
    let y_labels = [&batch[..], &kept_a, &kept_c].concat();
    let y_shape: Vec<usize> = y_labels.iter().map(|&x| l.size[x]).collect();
    let y = reshape(b, y, &y_shape)?;
    transposed(b, y, &y_labels, &l.out)
}

/// `v`, whose dims carry `from`, transposed so they carry `to` (the same
/// labels in another order; no node when the order is the same).
fn transposed(b: &mut Builder, v: ValueId, from: &[Label], to: &[Label]) -> Result<ValueId> {
    let perm = to
        .iter()
        .map(|x| match from.iter().position(|y| y == x) {
            Some(p) => Ok(p as i64),
            None => bail!("einsum: label {x} is not among the operand's {from:?}"),
        })
        .collect::<Result<Vec<i64>>>()?;
    if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
        return Ok(v);
    }
    b.op("Transpose", &[v], &[("perm", Attr::Ints(perm))])
}
