//! Index-driven reads: Gather, GatherElements and GatherND. Indices may be
//! negative (counted from the end); out-of-range indices are errors.

use super::common::{for_each_index, int_values, resolve_index, take, typed};
use crate::registry::Registry;
use crate::util::{normalize_axis, strides};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, DType, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("Gather", Gather);
    r.add("GatherElements", GatherElements);
    r.add("GatherND", GatherNd);
}

fn check_index_type(dtype: DType) -> Result<()> {
    ensure!(
        matches!(dtype, DType::I32 | DType::I64),
        "indices must be int32 or int64, got {dtype}"
    );
    Ok(())
}

/// Output type from the data and indices shapes, when both are known.
fn from_shapes(
    cx: &InferCx,
    rule: impl Fn(&[usize], &[usize]) -> Result<Vec<usize>>,
) -> Result<Vec<TensorType>> {
    let data = cx.input(0)?;
    check_index_type(cx.input(1)?.ty.dtype)?;
    let shape = match (data.ty.shape.as_deref(), cx.shape(1)?) {
        (Some(d), Some(i)) => Some(rule(d, i)?),
        _ => None,
    };
    Ok(vec![typed(data.ty.dtype, shape)])
}

struct Gather;

impl Gather {
    fn out_shape(data: &[usize], indices: &[usize], axis: usize) -> Vec<usize> {
        [&data[..axis], indices, &data[axis + 1..]].concat()
    }

    fn axis(cx_node: &kiln_ir::Node, rank: usize) -> Result<usize> {
        ensure!(rank >= 1, "Gather data must have rank >= 1");
        normalize_axis(cx_node.attr_int_or("axis", 0)?, rank)
    }
}

impl Op for Gather {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        from_shapes(cx, |d, i| {
            Ok(Gather::out_shape(d, i, Gather::axis(cx.node, d.len())?))
        })
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, indices) = (arg(inputs, 0)?, arg(inputs, 1)?);
        check_index_type(indices.dtype())?;
        let axis = Gather::axis(cx.node, x.rank())?;
        let dim = x.shape[axis];
        let picks = int_values(indices)?
            .into_iter()
            .map(|i| resolve_index(i, dim))
            .collect::<Result<Vec<_>>>()?;
        let inner: usize = x.shape[axis + 1..].iter().product();
        let outer: usize = x.shape[..axis].iter().product();
        let mut idx = Vec::with_capacity(outer * picks.len() * inner);
        for o in 0..outer {
            for &p in &picks {
                let base = (o * dim + p) * inner;
                idx.extend(base..base + inner);
            }
        }
        Ok(vec![take(
            x,
            Gather::out_shape(&x.shape, &indices.shape, axis),
            idx,
        )?])
    }
}

struct GatherElements;

impl GatherElements {
    /// Checks the shapes and returns the normalized axis.
    fn axis(node: &kiln_ir::Node, data: &[usize], indices: &[usize]) -> Result<usize> {
        ensure!(!data.is_empty(), "GatherElements data must have rank >= 1");
        ensure!(
            data.len() == indices.len(),
            "indices rank {} differs from data rank {}",
            indices.len(),
            data.len()
        );
        let axis = normalize_axis(node.attr_int_or("axis", 0)?, data.len())?;
        for (d, (&n, &m)) in data.iter().zip(indices).enumerate() {
            ensure!(
                d == axis || m <= n,
                "indices shape {indices:?} exceeds data shape {data:?} at axis {d}"
            );
        }
        Ok(axis)
    }
}

impl Op for GatherElements {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        from_shapes(cx, |d, i| {
            GatherElements::axis(cx.node, d, i)?;
            Ok(i.to_vec())
        })
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, indices) = (arg(inputs, 0)?, arg(inputs, 1)?);
        check_index_type(indices.dtype())?;
        let axis = GatherElements::axis(cx.node, &x.shape, &indices.shape)?;
        let dim = x.shape[axis];
        let picks = int_values(indices)?
            .into_iter()
            .map(|i| resolve_index(i, dim))
            .collect::<Result<Vec<_>>>()?;
        let st = strides(&x.shape);
        let mut idx = Vec::with_capacity(picks.len());
        for_each_index(&indices.shape, |o| {
            let k = idx.len();
            idx.push(
                o.iter()
                    .zip(&st)
                    .enumerate()
                    .map(|(d, (&i, &s))| if d == axis { picks[k] * s } else { i * s })
                    .sum(),
            );
        });
        Ok(vec![take(x, indices.shape.clone(), idx)?])
    }
}

struct GatherNd;

/// The layout of a GatherND: batch dims, index tuple length and output shape.
struct NdPlan {
    batch_dims: usize,
    k: usize,
    out: Vec<usize>,
}

impl GatherNd {
    fn plan(node: &kiln_ir::Node, data: &[usize], indices: &[usize]) -> Result<NdPlan> {
        let b = node.attr_int_or("batch_dims", 0)?;
        let (r, q) = (data.len(), indices.len());
        ensure!(
            r >= 1 && q >= 1,
            "data and indices must have rank >= 1, got {r} and {q}"
        );
        let Ok(b) = usize::try_from(b) else {
            bail!("batch_dims must be >= 0, got {b}")
        };
        ensure!(
            b < q && b < r,
            "batch_dims {b} must be less than both ranks ({r} and {q})"
        );
        ensure!(
            data[..b] == indices[..b],
            "batch dimensions of data {data:?} and indices {indices:?} differ"
        );
        let k = indices[q - 1];
        ensure!(
            k <= r - b,
            "index tuples of length {k} are too long for data of rank {r} with {b} batch dims"
        );
        let out = [&indices[..q - 1], &data[b + k..]].concat();
        Ok(NdPlan {
            batch_dims: b,
            k,
            out,
        })
    }
}

impl Op for GatherNd {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        from_shapes(cx, |d, i| Ok(GatherNd::plan(cx.node, d, i)?.out))
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, indices) = (arg(inputs, 0)?, arg(inputs, 1)?);
        check_index_type(indices.dtype())?;
        let plan = GatherNd::plan(cx.node, &x.shape, &indices.shape)?;
        let vals = int_values(indices)?;
        let offsets = nd_offsets(&x.shape, &indices.shape, plan.batch_dims, &vals)?;
        let slice: usize = x.shape[plan.batch_dims + plan.k..].iter().product();
        let mut idx = Vec::with_capacity(offsets.len() * slice);
        for base in offsets {
            idx.extend(base..base + slice);
        }
        Ok(vec![take(x, plan.out, idx)?])
    }
}

/// For each index tuple of an ND-indexed op (GatherND, ScatterND), the flat
/// offset in the data of the slice it selects. The tuples are the last axis
/// of `indices`; the first `batch_dims` axes pair data and indices batches.
pub(crate) fn nd_offsets(
    data: &[usize],
    indices: &[usize],
    batch_dims: usize,
    vals: &[i64],
) -> Result<Vec<usize>> {
    let Some(&k) = indices.last() else {
        bail!("indices must have rank >= 1")
    };
    let b = batch_dims;
    let st = strides(data);
    let batch_size: usize = data[b..].iter().product();
    let per_batch: usize = indices[b..indices.len() - 1].iter().product();
    // With empty tuples (k = 0) each index position selects a whole slice.
    let n_tuples = vals
        .len()
        .checked_div(k)
        .unwrap_or_else(|| indices[..indices.len() - 1].iter().product());
    let mut out = Vec::with_capacity(n_tuples);
    for t in 0..n_tuples {
        let batch = t.checked_div(per_batch).unwrap_or(0);
        let mut off = batch * batch_size;
        for j in 0..k {
            off += resolve_index(vals[t * k + j], data[b + j])? * st[b + j];
        }
        out.push(off);
    }
    Ok(out)
}
