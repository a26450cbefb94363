//! Reductions. ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
//! ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp and ReduceSumSquare all
//! run through one engine ([`ReducePlan`] + [`Reduction`]); ArgMax/ArgMin
//! (`arg`), CumSum/CumProd (`cumulative`) and TopK (`topk`) live in the
//! submodules. Float reductions accumulate in f64; integer ones are exact
//! (i128 accumulators, wrapped to the element type like integer overflow).

mod arg;
mod cumulative;
mod topk;

use crate::compound::{Comp, Compound};
use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, Combiner, Expr, IndexExpr, Reduction as TeReduction, TensorExpr};
use crate::util::{for_each_offset, ints, numel, strides};
use crate::Builder;
use crate::{arg, inputs_id, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::tensor::{bf16, f16};
use kiln_ir::ValueId;
use kiln_ir::{bail, dispatch_num, Data, Num, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    use Reduction::*;
    for (name, combiner) in [
        ("ReduceSum", Combiner::Sum),
        ("ReduceMax", Combiner::Max),
        ("ReduceMin", Combiner::Min),
        ("ReduceProd", Combiner::Prod),
    ] {
        r.add(name, Prim(ReducePrim(combiner)));
    }
    r.add("ReduceMean", Comp(ReduceMean));
    for (name, how) in [
        ("ReduceL1", L1),
        ("ReduceL2", L2),
        ("ReduceLogSum", LogSum),
        ("ReduceLogSumExp", LogSumExp),
        ("ReduceSumSquare", SumSquare),
    ] {
        r.add(name, Reduce(how));
    }
    arg::register(r);
    cumulative::register(r);
    topk::register(r);
}

/// Numeric element types with exact integer arithmetic: integers convert to
/// i128 without loss and back with two's-complement wrapping.
pub(crate) trait Exact: Num {
    /// Smallest and largest values (±infinity for floats): the identities of Max and Min.
    const LOWEST: Self;
    const HIGHEST: Self;
    fn to_i128(self) -> i128;
    fn from_i128(v: i128) -> Self;
}

macro_rules! exact_int {
    ($($t:ty),*) => {$(
        impl Exact for $t {
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            fn to_i128(self) -> i128 { self as i128 }
            fn from_i128(v: i128) -> Self { v as $t }
        }
    )*};
}
exact_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! exact_float {
    ($($t:ty),*) => {$(
        impl Exact for $t {
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            fn to_i128(self) -> i128 { Num::to_f64(self) as i128 }
            fn from_i128(v: i128) -> Self { <$t as Num>::from_f64(v as f64) }
        }
    )*};
}
exact_float!(f32, f64, f16, bf16);

impl Exact for bool {
    const LOWEST: Self = false;
    const HIGHEST: Self = true;
    fn to_i128(self) -> i128 {
        self as i128
    }
    fn from_i128(v: i128) -> Self {
        v != 0
    }
}

/// Splits a tensor's index space into kept and reduced parts: element `j`
/// of the reduction group of output `k` is at flat offset `kept[k] + reduced[j]`.
/// Both lists are in row-major order, so one pass visits every element once.
pub(crate) struct ReducePlan {
    pub kept: Vec<usize>,
    pub reduced: Vec<usize>,
}

impl ReducePlan {
    /// `reduce[i]` says whether axis `i` of `shape` is reduced.
    pub fn new(shape: &[usize], reduce: &[bool]) -> ReducePlan {
        let st = strides(shape);
        let offsets = |want: bool| {
            let axes: Vec<usize> = (0..shape.len()).filter(|&i| reduce[i] == want).collect();
            let dims: Vec<usize> = axes.iter().map(|&i| shape[i]).collect();
            let step: Vec<usize> = axes.iter().map(|&i| st[i]).collect();
            let mut offs = Vec::with_capacity(numel(&dims));
            for_each_offset(&dims, [&step], |_, [o]| offs.push(o));
            offs
        };
        ReducePlan {
            kept: offsets(false),
            reduced: offsets(true),
        }
    }

    /// The plan that reduces the single axis `axis`.
    pub fn along(shape: &[usize], axis: usize) -> ReducePlan {
        let mask: Vec<bool> = (0..shape.len()).map(|i| i == axis).collect();
        ReducePlan::new(shape, &mask)
    }
}

/// Maps an axis into `0..rank` (rank-0 tensors have no axes).
pub(crate) fn checked_axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        bail!("axis {axis} is out of range for rank {rank}");
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// The reduced-axis mask of a Reduce* node, or `None` when the node is a
/// no-op (no axes and `noop_with_empty_axes`). No axes otherwise means all.
pub(crate) fn reduce_mask(
    rank: usize,
    axes: Option<&[i64]>,
    noop_with_empty_axes: bool,
) -> Result<Option<Vec<bool>>> {
    let axes = axes.unwrap_or(&[]);
    if axes.is_empty() {
        return Ok(if noop_with_empty_axes {
            None
        } else {
            Some(vec![true; rank])
        });
    }
    let mut mask = vec![false; rank];
    for &a in axes {
        let i = checked_axis(a, rank)?;
        if mask[i] {
            bail!("axis {a} is listed twice in axes {axes:?}");
        }
        mask[i] = true;
    }
    Ok(Some(mask))
}

/// Shape after reducing the masked axes (kept as 1 with `keepdims`).
pub(crate) fn reduced_shape(shape: &[usize], mask: &[bool], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .zip(mask)
        .filter_map(|(&d, &m)| match (m, keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// What a Reduce* op computes over each group of elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Reduction {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

impl Reduction {
    /// Folds float values (in f64). Empty groups give the identity (0 for
    /// sums, 1 for Prod, ∓inf for Max/Min, -inf for the logs).
    fn fold_f64<I: Iterator<Item = f64> + Clone>(self, vals: I) -> f64 {
        use Reduction::*;
        match self {
            Sum => vals.sum(),
            Mean => {
                let (s, n) = vals.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
                s / n as f64
            }
            // NaN propagates, as in numpy's maximum/minimum.
            Max => vals.fold(f64::NEG_INFINITY, |m, x| {
                if m.is_nan() || x.is_nan() {
                    f64::NAN
                } else {
                    m.max(x)
                }
            }),
            Min => vals.fold(f64::INFINITY, |m, x| {
                if m.is_nan() || x.is_nan() {
                    f64::NAN
                } else {
                    m.min(x)
                }
            }),
            Prod => vals.product(),
            L1 => vals.map(f64::abs).sum(),
            L2 => vals.map(|x| x * x).sum::<f64>().sqrt(),
            SumSquare => vals.map(|x| x * x).sum(),
            LogSum => vals.sum::<f64>().ln(),
            LogSumExp => log_sum_exp(vals),
        }
    }

    /// Folds integer values exactly, wrapping on overflow. The float-valued
    /// reductions (L2, logs) go through f64 and truncate like a cast.
    fn fold_i128<I: Iterator<Item = i128> + Clone>(
        self,
        vals: I,
        lowest: i128,
        highest: i128,
    ) -> i128 {
        use Reduction::*;
        match self {
            Sum => vals.fold(0i128, |a, x| a.wrapping_add(x)),
            Mean => {
                let (s, n) = vals.fold((0i128, 0i128), |(s, n), x| (s.wrapping_add(x), n + 1));
                if n == 0 {
                    0
                } else {
                    s / n
                }
            }
            Max => vals.fold(lowest, i128::max),
            Min => vals.fold(highest, i128::min),
            Prod => vals.fold(1i128, |a, x| a.wrapping_mul(x)),
            L1 => vals.fold(0i128, |a, x| a.wrapping_add(x.abs())),
            SumSquare => vals.fold(0i128, |a, x| a.wrapping_add(x.wrapping_mul(x))),
            L2 | LogSum | LogSumExp => {
                let v = self.fold_f64(vals.map(|x| x as f64));
                if v.is_finite() {
                    v as i128
                } else {
                    0
                }
            }
        }
    }
}

/// log(sum(exp(x))), shifted by the largest finite value for stability.
pub(crate) fn log_sum_exp<I: Iterator<Item = f64> + Clone>(vals: I) -> f64 {
    let m = vals
        .clone()
        .filter(|x| x.is_finite())
        .fold(f64::NEG_INFINITY, f64::max);
    let m = if m.is_finite() { m } else { 0.0 };
    m + vals.map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// Reduces the masked axes of `x`; the result has `x`'s element type.
pub(crate) fn reduce(x: &Tensor, mask: &[bool], keepdims: bool, how: Reduction) -> Result<Tensor> {
    let plan = ReducePlan::new(&x.shape, mask);
    let data = dispatch_num!(
        &x.data,
        |v: T| reduce_typed::<T>(v, &plan, how),
        bail!("cannot reduce a string tensor")
    );
    Tensor::new(reduced_shape(&x.shape, mask, keepdims), data)
}

fn reduce_typed<T: Exact>(v: &[T], plan: &ReducePlan, how: Reduction) -> Data {
    let out: Vec<T> = if T::DTYPE.is_float() {
        plan.kept
            .iter()
            .map(|&base| {
                T::from_f64(how.fold_f64(plan.reduced.iter().map(|&o| v[base + o].to_f64())))
            })
            .collect()
    } else {
        let (lo, hi) = (T::LOWEST.to_i128(), T::HIGHEST.to_i128());
        plan.kept
            .iter()
            .map(|&base| {
                T::from_i128(how.fold_i128(
                    plan.reduced.iter().map(|&o| v[base + o].to_i128()),
                    lo,
                    hi,
                ))
            })
            .collect()
    };
    T::wrap(out)
}

/// A Reduce* operator: data, optional axes input (the importer turns the
/// older `axes` attribute into it), `keepdims`, `noop_with_empty_axes`.
struct Reduce(Reduction);

impl Reduce {
    fn flags(node: &kiln_ir::Node) -> Result<(bool, bool)> {
        Ok((
            node.attr_int_or("keepdims", 1)? != 0,
            node.attr_int_or("noop_with_empty_axes", 0)? != 0,
        ))
    }
}

/// Output shape of a Reduce* node.
fn reduce_output_shape(
    shape: &[usize],
    axes: Option<&[i64]>,
    keepdims: bool,
    noop: bool,
) -> Result<Vec<usize>> {
    Ok(match reduce_mask(shape.len(), axes, noop)? {
        None => shape.to_vec(),
        Some(mask) => reduced_shape(shape, &mask, keepdims),
    })
}

impl Op for Reduce {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let (keepdims, noop) = Reduce::flags(cx.node)?;
        let ty = &cx.input(0)?.ty;
        if ty.dtype == kiln_ir::DType::Str {
            bail!("cannot reduce a string tensor");
        }
        let axes = match cx.opt_input(1) {
            None => None,
            Some(info) => match info.value {
                Some(t) => Some(ints(t)?),
                None => return Ok(vec![TensorType::unknown_shape(ty.dtype)]),
            },
        };
        Ok(vec![match &ty.shape {
            Some(s) => TensorType::new(
                ty.dtype,
                reduce_output_shape(s, axes.as_deref(), keepdims, noop)?,
            ),
            None => TensorType::unknown_shape(ty.dtype),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (keepdims, noop) = Reduce::flags(cx.node)?;
        let x = arg(inputs, 0)?;
        let axes = opt_arg(inputs, 1).map(ints).transpose()?;
        match reduce_mask(x.rank(), axes.as_deref(), noop)? {
            None => Ok(vec![x.clone()]),
            Some(mask) => Ok(vec![reduce(x, &mask, keepdims, self.0)?]),
        }
    }
}

/// ReduceMean = ReduceSum / (number of elements reduced). Integer means
/// truncate, as the reference's `mean().astype(dtype)` does.
struct ReduceMean;

impl Compound for ReduceMean {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let x = cx.input(0)?;
        let attrs: Vec<(&str, kiln_ir::Attr)> = cx
            .node
            .attrs
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let sum = b.op_opt("ReduceSum", inputs, &attrs)?;
        let (n_in, n_out) = (b.shape(inputs_id(inputs, 0)?)?, b.shape(sum)?);
        let count = match numel(&n_out) {
            0 => 1,
            n => numel(&n_in) / n,
        };
        let count = b.scalar(x.ty.dtype, count as f64)?;
        Ok(vec![Some(b.op("Div", &[sum, count], &[])?)])
    }
}

/// ReduceSum/Prod/Min/Max as a tensor expression:
/// `out[kept dims] = combine over reduced dims of in0[...]`. On booleans,
/// Max and Min are Or and And.
struct ReducePrim(Combiner);

impl Primitive for ReducePrim {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (keepdims, noop) = Reduce::flags(cx.node)?;
        let ty = &cx.input(0)?.ty;
        let combiner = match (self.0, ty.dtype) {
            (_, kiln_ir::DType::Str) => bail!("cannot reduce a string tensor"),
            (Combiner::Max, kiln_ir::DType::Bool) => Combiner::Or,
            (Combiner::Min, kiln_ir::DType::Bool) => Combiner::And,
            (_, kiln_ir::DType::Bool) => bail!("{} does not support bool tensors", cx.node.op),
            (c, _) => c,
        };
        let Some(shape) = ty.shape.clone() else {
            return Ok(None);
        };
        let axes = match cx.opt_input(1) {
            None => None,
            Some(info) => match info.value {
                Some(t) => Some(ints(t)?),
                None => return Ok(None),
            },
        };
        let mask = reduce_mask(shape.len(), axes.as_deref(), noop)?
            .unwrap_or_else(|| vec![false; shape.len()]);
        let (mut index, mut extents, mut kept) = (Vec::new(), Vec::new(), 0);
        for (j, (&d, &m)) in shape.iter().zip(&mask).enumerate() {
            if m {
                index.push(IndexExpr::red(extents.len()));
                extents.push(d);
            } else {
                index.push(IndexExpr::out(if keepdims { j } else { kept }));
            }
            kept += usize::from(!m);
        }
        let reduction = (!extents.is_empty()).then_some(TeReduction { extents, combiner });
        Ok(Some(
            TensorExpr {
                dtype: ty.dtype,
                shape: reduced_shape(&shape, &mask, keepdims),
                inputs: vec![
                    Some(shape),
                    cx.opt_input(1).and_then(|i| i.ty.shape.clone()),
                ],
                accesses: vec![Access { input: 0, index }],
                reduction,
                body: Expr::Load(0),
            }
            .simplified(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_sums_are_exact_and_wrap() {
        let big = (1i64 << 53) + 1;
        let x = Tensor::from_vec(vec![2], vec![big, 2]).unwrap();
        let y = reduce(&x, &[true], false, Reduction::Sum).unwrap();
        assert_eq!(y.as_slice::<i64>().unwrap(), &[big + 2]);
        let x = Tensor::from_vec(vec![2], vec![100i8, 100]).unwrap();
        let y = reduce(&x, &[true], false, Reduction::Sum).unwrap();
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-56]);
    }

    #[test]
    fn empty_groups_give_identities() {
        let x = Tensor::from_vec(vec![2, 0], Vec::<i32>::new()).unwrap();
        let max = reduce(&x, &[false, true], true, Reduction::Max).unwrap();
        assert_eq!(max.shape, vec![2, 1]);
        assert_eq!(max.as_slice::<i32>().unwrap(), &[i32::MIN, i32::MIN]);
        let prod = reduce(&x, &[false, true], false, Reduction::Prod).unwrap();
        assert_eq!(prod.as_slice::<i32>().unwrap(), &[1, 1]);
    }

    #[test]
    fn max_propagates_nan() {
        let x = Tensor::from_vec(vec![3], vec![1.0f32, f32::NAN, 3.0]).unwrap();
        let y = reduce(&x, &[true], false, Reduction::Max).unwrap();
        assert!(y.as_slice::<f32>().unwrap()[0].is_nan());
    }
}
