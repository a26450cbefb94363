//! Index-driven reads: Gather, GatherElements and GatherND. Indices may be
//! negative (counted from the end); out-of-range indices are errors.
//! Gather and GatherElements are primitives whose index along the axis is
//! read from the indices input; GatherND (index tuples) stays a library op.

use super::common::{input_shapes, int_values, resolve_index, take, typed};
use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, Expr, IndexExpr, TensorExpr};
use crate::util::{normalize_axis, strides};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, DType, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("Gather", Prim(Gather));
    r.add("GatherElements", Prim(GatherElements));
    r.add("GatherND", GatherNd);
}

/// `out[i] = in0[index]`, where the dims of `index` are output indices except
/// along `axis`, where it is the value of the indices input at `picks`
/// (negative values counting from the end of the axis).
fn gather_te(
    cx: &InferCx,
    shape: Vec<usize>,
    inputs: Vec<Option<Vec<usize>>>,
    axis: usize,
    lead: Vec<IndexExpr>,
    picks: Vec<IndexExpr>,
    trail: Vec<IndexExpr>,
) -> Result<TensorExpr> {
    let data = cx.input(0)?.ty.clone();
    let extent = data.shape.as_ref().map_or(0, |s| s[axis]) as i64;
    let pick = IndexExpr::Data {
        input: 1,
        index: picks,
        extent,
    };
    let index = lead.into_iter().chain([pick]).chain(trail).collect();
    Ok(TensorExpr {
        dtype: data.dtype,
        shape,
        inputs,
        accesses: vec![Access { input: 0, index }],
        reduction: None,
        body: Expr::Load(0),
    }
    .simplified())
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

/// `out[a, j, b] = data[a, indices[j], b]` (`a`: the dims before the axis,
/// `j`: the indices' dims, `b`: the dims after it).
impl Primitive for Gather {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        check_index_type(cx.input(1)?.ty.dtype)?;
        let (Some(inputs), Some(data), Some(indices)) =
            (input_shapes(cx), cx.shape(0)?, cx.shape(1)?)
        else {
            return Ok(None);
        };
        let axis = Gather::axis(cx.node, data.len())?;
        let q = indices.len();
        let out = Gather::out_shape(data, indices, axis);
        let lead = (0..axis).map(IndexExpr::out).collect();
        let picks = (axis..axis + q).map(IndexExpr::out).collect();
        let trail = (axis + q..out.len()).map(IndexExpr::out).collect();
        gather_te(cx, out, inputs, axis, lead, picks, trail).map(Some)
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

/// `out[i] = data[i with dim axis replaced by indices[i]]`.
impl Primitive for GatherElements {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        check_index_type(cx.input(1)?.ty.dtype)?;
        let (Some(inputs), Some(data), Some(indices)) =
            (input_shapes(cx), cx.shape(0)?, cx.shape(1)?)
        else {
            return Ok(None);
        };
        let axis = GatherElements::axis(cx.node, data, indices)?;
        let r = indices.len();
        let out = indices.to_vec();
        let lead = (0..axis).map(IndexExpr::out).collect();
        let picks = (0..r).map(IndexExpr::out).collect();
        let trail = (axis + 1..r).map(IndexExpr::out).collect();
        gather_te(cx, out, inputs, axis, lead, picks, trail).map(Some)
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
