//! Reductions. ReduceSum, ReduceMax, ReduceMin and ReduceProd are
//! primitives (tensor expressions); ReduceMean, ReduceL1, ReduceL2,
//! ReduceLogSum, ReduceLogSumExp and ReduceSumSquare are compounds that
//! open into them and element-wise ops. ArgMax/ArgMin (`arg`, arg-reductions),
//! CumSum/CumProd (`cumulative`) and TopK (`topk`) live in the submodules.
//! Float reductions accumulate in f64 (bfloat16 stepwise, see `te::eval`);
//! integer ones are exact (wrapped to the element type like integer
//! overflow).

mod arg;
mod cumulative;
mod topk;

use crate::compound::{Comp, Compound};
use crate::ops::compose::{attrs_of, cast};
use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, Combiner, Expr, IndexExpr, Reduction, TensorExpr};
use crate::util::{ints, numel};
use crate::Builder;
use crate::{inputs_id, InferCx};
use kiln_ir::tensor::{bf16, f16};
use kiln_ir::{bail, Attr, DType, Num, Result, ValueId};

pub fn register(r: &mut Registry) {
    for (name, combiner) in [
        ("ReduceSum", Combiner::Sum),
        ("ReduceMax", Combiner::Max),
        ("ReduceMin", Combiner::Min),
        ("ReduceProd", Combiner::Prod),
    ] {
        r.add(name, Prim(ReducePrim(combiner)));
    }
    r.add("ReduceMean", Comp(ReduceMean));
    for (name, norm) in [
        ("ReduceL1", Norm::L1),
        ("ReduceL2", Norm::L2),
        ("ReduceLogSum", Norm::LogSum),
        ("ReduceLogSumExp", Norm::LogSumExp),
        ("ReduceSumSquare", Norm::SumSquare),
    ] {
        r.add(name, Comp(norm));
    }
    arg::register(r);
    cumulative::register(r);
    topk::register(r);
}

/// Numeric element types with exact integer arithmetic: integers convert to
/// i128 without loss and back with two's-complement wrapping.
pub(crate) trait Exact: Num {
    fn to_i128(self) -> i128;
    fn from_i128(v: i128) -> Self;
}

macro_rules! exact_int {
    ($($t:ty),*) => {$(
        impl Exact for $t {
            fn to_i128(self) -> i128 { self as i128 }
            fn from_i128(v: i128) -> Self { v as $t }
        }
    )*};
}
exact_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! exact_float {
    ($($t:ty),*) => {$(
        impl Exact for $t {
            fn to_i128(self) -> i128 { Num::to_f64(self) as i128 }
            fn from_i128(v: i128) -> Self { <$t as Num>::from_f64(v as f64) }
        }
    )*};
}
exact_float!(f32, f64, f16, bf16);

impl Exact for bool {
    fn to_i128(self) -> i128 {
        self as i128
    }
    fn from_i128(v: i128) -> Self {
        v != 0
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

/// The `keepdims` and `noop_with_empty_axes` flags of a Reduce* node.
fn reduce_flags(node: &kiln_ir::Node) -> Result<(bool, bool)> {
    Ok((
        node.attr_int_or("keepdims", 1)? != 0,
        node.attr_int_or("noop_with_empty_axes", 0)? != 0,
    ))
}

/// Whether a Reduce* node leaves its input as it is: no axes (absent or
/// empty) and `noop_with_empty_axes`. Needs the axes input to be constant
/// only when the flag is set.
fn is_noop(cx: &InferCx, b: &mut Builder, inputs: &[Option<ValueId>]) -> Result<bool> {
    if !reduce_flags(cx.node)?.1 {
        return Ok(false);
    }
    match inputs.get(1).copied().flatten() {
        None => Ok(true),
        Some(axes) => Ok(b.require_value(axes)?.is_empty()),
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
        let sum = b.op_opt("ReduceSum", inputs, &attrs_of(cx.node))?;
        let (n_in, n_out) = (b.shape(inputs_id(inputs, 0)?)?, b.shape(sum)?);
        let count = match numel(&n_out) {
            0 => 1,
            n => numel(&n_in) / n,
        };
        let count = b.scalar(x.ty.dtype, count as f64)?;
        Ok(vec![Some(b.op("Div", &[sum, count], &[])?)])
    }
}

/// The reductions that are ReduceSum (ReduceMax for the shift of
/// LogSumExp) wrapped in element-wise ops. They take the node's axes input
/// and flags as they are, so the axes need not be known at compile time.
#[derive(Clone, Copy, PartialEq)]
enum Norm {
    /// sum |x|
    L1,
    /// sqrt(sum x²)
    L2,
    /// log(sum x)
    LogSum,
    /// m + log(sum exp(x - m)), m the largest element (0 where it is
    /// infinite), so large inputs do not overflow.
    LogSumExp,
    /// sum x²
    SumSquare,
}

impl Compound for Norm {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let x = inputs_id(inputs, 0)?;
        let dtype = b.ty(x).dtype;
        if !dtype.is_numeric() {
            bail!("{} needs a numeric tensor, got {dtype}", cx.node.op);
        }
        if is_noop(cx, b, inputs)? {
            return Ok(vec![Some(x)]);
        }
        // Integer inputs of the float-valued reductions compute in f64 and
        // convert back like Cast; L1 and SumSquare stay exact integers.
        let via_float = !dtype.is_float() && !matches!(self, Norm::L1 | Norm::SumSquare);
        let xf = if via_float {
            cast(b, x, DType::F64)?
        } else {
            x
        };
        let y = self.build(cx, b, xf, inputs.get(1).copied().flatten())?;
        Ok(vec![Some(cast(b, y, dtype)?)])
    }
}

impl Norm {
    fn build(
        self,
        cx: &InferCx,
        b: &mut Builder,
        x: ValueId,
        axes: Option<ValueId>,
    ) -> Result<ValueId> {
        let attrs = attrs_of(cx.node);
        let reduce = |b: &mut Builder, op: &str, v: ValueId, keepdims: Option<bool>| {
            let mut attrs = attrs.clone();
            if let Some(k) = keepdims {
                attrs.retain(|(name, _)| *name != "keepdims");
                attrs.push(("keepdims", Attr::Int(k as i64)));
            }
            b.op_opt(op, &[Some(v), axes], &attrs)
        };
        Ok(match self {
            Norm::L1 => {
                let abs = b.op("Abs", &[x], &[])?;
                reduce(b, "ReduceSum", abs, None)?
            }
            Norm::SumSquare | Norm::L2 => {
                let sq = b.op("Mul", &[x, x], &[])?;
                let sum = reduce(b, "ReduceSum", sq, None)?;
                match self {
                    Norm::L2 => b.op("Sqrt", &[sum], &[])?,
                    _ => sum,
                }
            }
            Norm::LogSum => {
                let sum = reduce(b, "ReduceSum", x, None)?;
                b.op("Log", &[sum], &[])?
            }
            Norm::LogSumExp => {
                let max = reduce(b, "ReduceMax", x, Some(true))?;
                // An infinite max (all -inf, or +inf present) shifts by 0:
                // x - max would be NaN where the true result is ±inf.
                let inf = b.op("IsInf", &[max], &[])?;
                let dtype = b.ty(x).dtype;
                let zero = b.scalar(dtype, 0.0)?;
                let shift = b.op("Where", &[inf, zero, max], &[])?;
                let shifted = b.op("Sub", &[x, shift], &[])?;
                let exp = b.op("Exp", &[shifted], &[])?;
                let sum = reduce(b, "ReduceSum", exp, None)?;
                let log = b.op("Log", &[sum], &[])?;
                // Reducing the kept size-1 axes drops them (keepdims = 0).
                let shift = match reduce_flags(cx.node)?.0 {
                    true => shift,
                    false => reduce(b, "ReduceMax", shift, None)?,
                };
                b.op("Add", &[log, shift], &[])?
            }
        })
    }
}

/// ReduceSum/Prod/Min/Max as a tensor expression:
/// `out[kept dims] = combine over reduced dims of in0[...]`. On booleans,
/// Max and Min are Or and And.
struct ReducePrim(Combiner);

impl Primitive for ReducePrim {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (keepdims, noop) = reduce_flags(cx.node)?;
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
        let reduction = (!extents.is_empty()).then_some(Reduction {
            extents,
            combiner,
            widened: false,
            arg: None,
        });
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
    use crate::ops::compose::eval_op;
    use kiln_ir::{Attr, Tensor};

    fn reduce(op: &str, x: Tensor, axes: &[i64], keepdims: i64) -> Tensor {
        let axes = Tensor::from_vec(vec![axes.len()], axes.to_vec()).unwrap();
        let attrs = vec![("keepdims", Attr::Int(keepdims))];
        eval_op(op, 18, attrs, &[x, axes], 1).unwrap().remove(0)
    }

    #[test]
    fn integer_sums_are_exact_and_wrap() {
        let big = (1i64 << 53) + 1;
        let x = Tensor::from_vec(vec![2], vec![big, 2]).unwrap();
        let y = reduce("ReduceSum", x, &[0], 0);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[big + 2]);
        let x = Tensor::from_vec(vec![2], vec![100i8, 100]).unwrap();
        let y = reduce("ReduceSum", x.clone(), &[0], 0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-56]);
        let y = reduce("ReduceSumSquare", x.clone(), &[0], 0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[(20000i32 as i8)]);
        let y = reduce("ReduceL1", x, &[0], 0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-56]);
    }

    #[test]
    fn empty_groups_give_identities() {
        let x = Tensor::from_vec(vec![2, 0], Vec::<i32>::new()).unwrap();
        let max = reduce("ReduceMax", x.clone(), &[1], 1);
        assert_eq!(max.shape, vec![2, 1]);
        assert_eq!(max.as_slice::<i32>().unwrap(), &[i32::MIN, i32::MIN]);
        let prod = reduce("ReduceProd", x, &[1], 0);
        assert_eq!(prod.as_slice::<i32>().unwrap(), &[1, 1]);
        let x = Tensor::from_vec(vec![2, 0], Vec::<f32>::new()).unwrap();
        let lse = reduce("ReduceLogSumExp", x, &[1], 0);
        assert_eq!(lse.as_slice::<f32>().unwrap(), &[f32::NEG_INFINITY; 2]);
    }

    #[test]
    fn max_propagates_nan() {
        let x = Tensor::from_vec(vec![3], vec![1.0f32, f32::NAN, 3.0]).unwrap();
        let y = reduce("ReduceMax", x, &[0], 0);
        assert!(y.as_slice::<f32>().unwrap()[0].is_nan());
    }

    #[test]
    fn log_sum_exp_does_not_overflow() {
        let x = Tensor::from_vec(vec![2, 2], vec![1000.0f32, 1000.0, -1000.0, -1000.0]).unwrap();
        let y = reduce("ReduceLogSumExp", x, &[1], 0);
        let want = [1000.0 + 2f32.ln(), -1000.0 + 2f32.ln()];
        assert_eq!(y.shape, vec![2]);
        for (g, w) in y.as_slice::<f32>().unwrap().iter().zip(want) {
            assert!((g - w).abs() < 1e-3, "{g} != {w}");
        }
        let inf = f32::INFINITY;
        let x = Tensor::from_vec(vec![2, 2], vec![-inf, -inf, inf, 1.0]).unwrap();
        let y = reduce("ReduceLogSumExp", x, &[1], 1);
        assert_eq!(y.shape, vec![2, 1]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[-inf, inf]);
    }

    #[test]
    fn integer_l2_goes_through_float() {
        let x = Tensor::from_vec(vec![2], vec![3i32, 4]).unwrap();
        let y = reduce("ReduceL2", x, &[0], 1);
        assert_eq!(y.as_slice::<i32>().unwrap(), &[5]);
    }

    #[test]
    fn noop_with_empty_axes_returns_the_input() {
        let x = Tensor::from_vec(vec![2], vec![-3.0f32, 4.0]).unwrap();
        let attrs = vec![("noop_with_empty_axes", Attr::Int(1))];
        let y = eval_op("ReduceL2", 18, attrs, &[x.clone()], 1).unwrap();
        assert_eq!(y[0], x);
    }
}
