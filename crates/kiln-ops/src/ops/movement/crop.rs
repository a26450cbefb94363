//! Ops that cut out or extend a tensor's box along each axis. Slice
//! (`start + step·i` per axis) and Pad in constant mode (a shifted read,
//! the fill value where it falls outside) are primitives; Pad's edge,
//! reflect and wrap modes open into one Gather per padded axis, whose
//! constant indices say which input coordinate feeds each output one.
//! CenterCropPad and Compress stay library ops.

use super::common::{gather_fill, input_shapes, int_values, moved, normalize_axes, take, typed};
use crate::compound::{Comp, Compound, PerNode};
use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, Expr, IndexExpr, TensorExpr, Var};
use crate::util::normalize_axis;
use crate::{arg, inputs_id, Builder, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, Attr, DType, Node, Result, Tensor, TensorType, ValueId};

pub fn register(r: &mut Registry) {
    r.add("Slice", Prim(Slice));
    r.add(
        "Pad",
        PerNode {
            main: Prim(Pad),
            other: Comp(PadByGather),
            uses_other: |node| Pad::mode(node).is_ok_and(|m| m != PadMode::Constant),
        },
    );
    r.add("CenterCropPad", CenterCropPad);
    r.add("Compress", Compress);
}

/// Builds the output of shape `maps[d].len()` per axis where output
/// coordinate `o` on axis `d` reads input coordinate `maps[d][o]`, or the
/// dtype's zero when any axis gives `None`.
fn remap(x: &Tensor, maps: &[Vec<Option<usize>>]) -> Result<Tensor> {
    let out_shape: Vec<usize> = maps.iter().map(|m| m.len()).collect();
    let st = crate::util::strides(&x.shape);
    let mut idx = Vec::with_capacity(super::common::checked_numel(&out_shape)?);
    super::common::for_each_index(&out_shape, |o| {
        let mut off = Some(0);
        for (d, &i) in o.iter().enumerate() {
            off = match (off, maps[d][i]) {
                (Some(acc), Some(src)) => Some(acc + src * st[d]),
                _ => None,
            };
        }
        idx.push(off);
    });
    Tensor::new(out_shape, gather_fill(&x.data, &idx)?)
}

/// The values of optional integer input `i` of an infer call: `Ok(None)` when
/// the input is absent, `Err(())` (as `None` in the outer option) when it is
/// present but not constant.
fn known_ints(cx: &InferCx, i: usize) -> Result<Option<Option<Vec<i64>>>> {
    match cx.opt_input(i) {
        None => Ok(Some(None)),
        Some(x) => match x.value {
            Some(t) => Ok(Some(Some(int_values(t)?))),
            None => Ok(None),
        },
    }
}

/// The values of optional integer input `i` of a decomposition (`None` when
/// absent); a present one must be constant.
fn required_ints(
    b: &mut Builder,
    inputs: &[Option<ValueId>],
    i: usize,
) -> Result<Option<Vec<i64>>> {
    match inputs.get(i).copied().flatten() {
        Some(id) => Ok(Some(int_values(&b.require_value(id)?)?)),
        None => Ok(None),
    }
}

struct Slice;

/// The slice along one axis: first input coordinate, step and length.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AxisSlice {
    start: i64,
    step: i64,
    len: usize,
}

impl Slice {
    /// Per-axis slices for `shape` from the starts/ends/axes/steps values.
    fn plan(
        shape: &[usize],
        starts: &[i64],
        ends: &[i64],
        axes: Option<&[i64]>,
        steps: Option<&[i64]>,
    ) -> Result<Vec<AxisSlice>> {
        let n = starts.len();
        ensure!(
            ends.len() == n,
            "starts has {n} entries but ends has {}",
            ends.len()
        );
        let axes = match axes {
            Some(a) => normalize_axes(a, shape.len())?,
            None => (0..n).collect(),
        };
        ensure!(
            axes.len() == n,
            "axes has {} entries but starts has {n}",
            axes.len()
        );
        ensure!(
            n <= shape.len(),
            "{n} slice axes for a tensor of rank {}",
            shape.len()
        );
        let ones = vec![1; n];
        let steps = steps.unwrap_or(&ones);
        ensure!(
            steps.len() == n,
            "steps has {} entries but starts has {n}",
            steps.len()
        );
        let mut plan: Vec<AxisSlice> = shape
            .iter()
            .map(|&d| AxisSlice {
                start: 0,
                step: 1,
                len: d,
            })
            .collect();
        for k in 0..n {
            plan[axes[k]] = Slice::axis(shape[axes[k]], starts[k], ends[k], steps[k])?;
        }
        Ok(plan)
    }

    /// One axis of the spec's rule: negative bounds count from the end, then
    /// they are clamped to the valid range for the step's direction.
    fn axis(dim: usize, start: i64, end: i64, step: i64) -> Result<AxisSlice> {
        ensure!(step != 0, "slice step cannot be 0");
        if dim == 0 {
            return Ok(AxisSlice {
                start: 0,
                step,
                len: 0,
            });
        }
        let d = dim as i64;
        let from_end = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (s, e) = (from_end(start), from_end(end));
        let (s, e) = if step > 0 {
            (s.clamp(0, d), e.clamp(0, d))
        } else {
            (s.clamp(0, d - 1), e.clamp(-1, d - 1))
        };
        let span = if step > 0 { e - s } else { s - e };
        let mag = step.unsigned_abs() as i128;
        let len = if span <= 0 {
            0
        } else {
            ((span as i128 + mag - 1) / mag) as usize
        };
        Ok(AxisSlice {
            start: s,
            step,
            len,
        })
    }

    fn out_shape(plan: &[AxisSlice]) -> Vec<usize> {
        plan.iter().map(|p| p.len).collect()
    }
}

/// `out[i] = in0[start + step·i]` per axis.
impl Primitive for Slice {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (
            Some(inputs),
            Some(shape),
            Some(Some(starts)),
            Some(Some(ends)),
            Some(axes),
            Some(steps),
        ) = (
            input_shapes(cx),
            cx.shape(0)?,
            known_ints(cx, 1)?,
            known_ints(cx, 2)?,
            known_ints(cx, 3)?,
            known_ints(cx, 4)?,
        )
        else {
            return Ok(None);
        };
        let plan = Slice::plan(shape, &starts, &ends, axes.as_deref(), steps.as_deref())?;
        let index = plan
            .iter()
            .enumerate()
            .map(|(l, p)| IndexExpr::affine([(Var::Out(l), p.step)], p.start))
            .collect();
        let out = Slice::out_shape(&plan);
        Ok(Some(moved(cx.input(0)?.ty.dtype, out, inputs, index)))
    }
}

/// Pad. In constant mode a primitive: `out[i] = in0[i - begin]` where that
/// lies inside the input, the fill value elsewhere (negative pads crop).
struct Pad;

#[derive(Debug, Clone, Copy, PartialEq)]
enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

impl Pad {
    fn mode(node: &Node) -> Result<PadMode> {
        Ok(match node.attr_string_or("mode", "constant")? {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" => PadMode::Wrap,
            m => bail!("unsupported pad mode '{m}'"),
        })
    }

    /// (begin, end) padding of every axis from the pads and axes inputs.
    fn per_axis(rank: usize, pads: &[i64], axes: Option<&[i64]>) -> Result<Vec<(i64, i64)>> {
        let axes = match axes {
            Some(a) => normalize_axes(a, rank)?,
            None => (0..rank).collect(),
        };
        let n = axes.len();
        ensure!(
            pads.len() == 2 * n,
            "pads has {} entries but {n} axes need {}",
            pads.len(),
            2 * n
        );
        let mut out = vec![(0, 0); rank];
        for (k, &a) in axes.iter().enumerate() {
            out[a] = (pads[k], pads[n + k]);
        }
        Ok(out)
    }

    fn out_shape(shape: &[usize], pads: &[(i64, i64)]) -> Result<Vec<usize>> {
        let out = shape
            .iter()
            .zip(pads)
            .map(|(&d, &(b, e))| {
                let n = (d as i64)
                    .checked_add(b)
                    .and_then(|n| n.checked_add(e))
                    .and_then(|n| usize::try_from(n).ok());
                match n {
                    Some(n) => Ok(n),
                    None => bail!("pads ({b}, {e}) give a dimension of size {d} an invalid size"),
                }
            })
            .collect::<Result<Vec<usize>>>()?;
        super::common::checked_numel(&out)?;
        Ok(out)
    }

    /// The input coordinate feeding output coordinate `o` of an axis of size
    /// `n` padded by `begin` in front.
    fn source(mode: PadMode, o: usize, begin: i64, n: usize) -> Result<Option<usize>> {
        let i = (o as i64).saturating_sub(begin);
        let n_i = n as i64;
        if (0..n_i).contains(&i) {
            return Ok(Some(i as usize));
        }
        if mode != PadMode::Constant && n == 0 {
            bail!("cannot pad an empty axis in {mode:?} mode");
        }
        Ok(match mode {
            PadMode::Constant => None,
            PadMode::Edge => Some(i.clamp(0, n_i - 1) as usize),
            PadMode::Wrap => Some(i.rem_euclid(n_i) as usize),
            PadMode::Reflect if n == 1 => Some(0),
            PadMode::Reflect => {
                // Reflection without repeating the edge is periodic in 2(n-1).
                let period = 2 * (n_i - 1);
                let m = i.rem_euclid(period);
                Some(if m < n_i { m } else { period - m } as usize)
            }
        })
    }

    /// The fill value for constant mode: the float `value` attribute of
    /// opsets before 11, else a read of the constant_value input (zero when
    /// it is absent or empty), added to `accesses`.
    fn fill(
        cx: &InferCx,
        dtype: DType,
        inputs: &[Option<Vec<usize>>],
        accesses: &mut Vec<Access>,
    ) -> Result<Expr> {
        if cx.opset < 11 {
            return Expr::constant(dtype, cx.node.attr_float_or("value", 0.0)? as f64);
        }
        let Some(Some(shape)) = inputs.get(2) else {
            return Expr::constant(dtype, 0.0);
        };
        match shape.iter().product::<usize>() {
            0 => Expr::constant(dtype, 0.0),
            1 => {
                let fill_type = cx.input(2)?.ty.dtype;
                ensure!(
                    fill_type == dtype,
                    "constant_value has type {fill_type} but the data has {dtype}"
                );
                accesses.push(Access {
                    input: 2,
                    index: vec![IndexExpr::constant(0); shape.len()],
                });
                Ok(Expr::Load(accesses.len() - 1))
            }
            n => bail!("constant_value must have one element, got {n}"),
        }
    }

    /// (begin, end) padding of every axis, when the pads and axes are known.
    fn known_per_axis(cx: &InferCx, rank: usize) -> Result<Option<Vec<(i64, i64)>>> {
        let (Some(pads), Some(axes)) = (known_ints(cx, 1)?, known_ints(cx, 3)?) else {
            return Ok(None);
        };
        let Some(pads) = pads else {
            bail!("input 'pads' is required")
        };
        Pad::per_axis(rank, &pads, axes.as_deref()).map(Some)
    }
}

impl Primitive for Pad {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let mode = Pad::mode(cx.node)?;
        ensure!(
            mode == PadMode::Constant,
            "Pad in {mode:?} mode has no tensor expression: it opens into Gathers"
        );
        let (Some(inputs), Some(shape)) = (input_shapes(cx), cx.shape(0)?) else {
            return Ok(None);
        };
        let Some(per_axis) = Pad::known_per_axis(cx, shape.len())? else {
            return Ok(None);
        };
        let dtype = cx.input(0)?.ty.dtype;
        let out = Pad::out_shape(shape, &per_axis)?;
        let index = per_axis
            .iter()
            .zip(out.iter().zip(shape))
            .enumerate()
            .map(|(l, (&(begin, _), (&len, &n)))| {
                // Offsets beyond either end read only outside; clamped, they
                // still do, and index arithmetic cannot overflow.
                let offset = begin.saturating_neg().clamp(-(len as i64), n as i64);
                IndexExpr::affine([(Var::Out(l), 1)], offset)
            })
            .collect();
        let mut accesses = vec![Access { input: 0, index }];
        let fill = Pad::fill(cx, dtype, &inputs, &mut accesses)?;
        let body = Expr::call("Where", vec![Expr::InBounds(0), Expr::Load(0), fill]);
        Ok(Some(
            TensorExpr {
                dtype,
                shape: out,
                inputs,
                accesses,
                reduction: None,
                body,
            }
            .simplified(),
        ))
    }
}

/// Pad in edge, reflect or wrap mode: along each padded axis in turn, a
/// Gather of the input coordinates [`Pad::source`] gives.
struct PadByGather;

impl Compound for PadByGather {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let mode = Pad::mode(cx.node)?;
        let x = inputs_id(inputs, 0)?;
        let shape = b.shape(x)?;
        let pads = required_ints(b, inputs, 1)?.unwrap_or_default();
        let axes = required_ints(b, inputs, 3)?;
        let per_axis = Pad::per_axis(shape.len(), &pads, axes.as_deref())?;
        let out = Pad::out_shape(&shape, &per_axis)?;
        let mut y = x;
        for (d, (&(begin, end), (&len, &n))) in
            per_axis.iter().zip(out.iter().zip(&shape)).enumerate()
        {
            if (begin, end) == (0, 0) {
                continue;
            }
            let sources = (0..len)
                .map(|o| match Pad::source(mode, o, begin, n)? {
                    Some(i) => Ok(i as i64),
                    None => bail!("Pad in {mode:?} mode has no source for output {o}"),
                })
                .collect::<Result<Vec<i64>>>()?;
            let indices = b.ints(&sources);
            y = b.op("Gather", &[y, indices], &[("axis", Attr::Int(d as i64))])?;
        }
        Ok(vec![Some(y)])
    }
}

struct CenterCropPad;

impl CenterCropPad {
    /// Target size per axis (the input's size on axes not listed).
    fn targets(node: &Node, shape: &[usize], sizes: &Tensor) -> Result<Vec<usize>> {
        let sizes = super::common::dims_from_i64(&int_values(sizes)?, "shape")?;
        let axes = match node.attr_ints("axes")? {
            Some(a) => normalize_axes(a, shape.len())?,
            None => (0..shape.len()).collect(),
        };
        ensure!(
            sizes.len() == axes.len(),
            "shape has {} entries for {} axes",
            sizes.len(),
            axes.len()
        );
        let mut out = shape.to_vec();
        for (&a, &s) in axes.iter().zip(&sizes) {
            out[a] = s;
        }
        Ok(out)
    }

    /// Input coordinate for output `o` when an axis of size `n` becomes
    /// `target`, both centered (the extra odd element goes at the end).
    fn source(o: usize, n: usize, target: usize) -> Option<usize> {
        let i = if target <= n {
            o + (n - target) / 2
        } else {
            o.checked_sub((target - n) / 2)?
        };
        (i < n).then_some(i)
    }
}

impl Op for CenterCropPad {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = cx.input(0)?;
        Ok(vec![match (x.ty.shape.as_deref(), cx.value(1)) {
            (Some(s), Some(v)) => {
                TensorType::new(x.ty.dtype, CenterCropPad::targets(cx.node, s, v)?)
            }
            _ => TensorType::unknown_shape(x.ty.dtype),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let targets = CenterCropPad::targets(cx.node, &x.shape, arg(inputs, 1)?)?;
        let maps: Vec<Vec<Option<usize>>> = targets
            .iter()
            .zip(&x.shape)
            .map(|(&t, &n)| (0..t).map(|o| CenterCropPad::source(o, n, t)).collect())
            .collect();
        Ok(vec![remap(x, &maps)?])
    }
}

struct Compress;

impl Compress {
    /// The kept positions along the compressed axis (or the flattened input).
    fn kept(cond: &Tensor, len: usize) -> Result<Vec<usize>> {
        ensure!(
            cond.rank() == 1,
            "condition must be 1-D, got shape {:?}",
            cond.shape
        );
        let c = cond.as_slice::<bool>()?;
        if let Some(p) = c.iter().skip(len).position(|&b| b) {
            bail!(
                "condition selects position {} beyond the axis length {len}",
                p + len
            );
        }
        Ok(c.iter()
            .take(len)
            .enumerate()
            .filter(|(_, &b)| b)
            .map(|(i, _)| i)
            .collect())
    }

    /// Normalized axis (None: flatten first) and the output shape.
    fn plan(
        node: &Node,
        shape: &[usize],
        cond: &Tensor,
    ) -> Result<(Option<usize>, Vec<usize>, Vec<usize>)> {
        match node.attr_int("axis")? {
            Some(a) => {
                let axis = normalize_axis(a, shape.len())?;
                ensure!(!shape.is_empty(), "cannot compress a scalar along an axis");
                let kept = Compress::kept(cond, shape[axis])?;
                let mut out = shape.to_vec();
                out[axis] = kept.len();
                Ok((Some(axis), out, kept))
            }
            None => {
                let kept = Compress::kept(cond, shape.iter().product())?;
                Ok((None, vec![kept.len()], kept))
            }
        }
    }
}

impl Op for Compress {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = cx.input(0)?;
        let shape = match (x.ty.shape.as_deref(), cx.value(1)) {
            (Some(s), Some(c)) => Some(Compress::plan(cx.node, s, c)?.1),
            _ => None,
        };
        Ok(vec![typed(x.ty.dtype, shape)])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let (axis, out, kept) = Compress::plan(cx.node, &x.shape, arg(inputs, 1)?)?;
        let Some(axis) = axis else {
            return Ok(vec![take(x, out, kept)?]);
        };
        let inner: usize = x.shape[axis + 1..].iter().product();
        let outer: usize = x.shape[..axis].iter().product();
        let dim = x.shape[axis];
        let mut idx = Vec::with_capacity(out.iter().product());
        for o in 0..outer {
            for &k in &kept {
                let base = (o * dim + k) * inner;
                idx.extend(base..base + inner);
            }
        }
        Ok(vec![take(x, out, idx)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_axis_rules() {
        // Reverse whole axis with the usual INT_MIN end.
        assert_eq!(
            Slice::axis(4, -1, i64::MIN, -1).unwrap(),
            AxisSlice {
                start: 3,
                step: -1,
                len: 4
            }
        );
        assert_eq!(
            Slice::axis(4, 0, i64::MAX, 2).unwrap(),
            AxisSlice {
                start: 0,
                step: 2,
                len: 2
            }
        );
        assert_eq!(Slice::axis(4, 10, 20, 1).unwrap().len, 0);
        assert!(Slice::axis(4, 0, 1, 0).is_err());
    }

    #[test]
    fn pad_sources() {
        let src = |m, o| Pad::source(m, o, 2, 3).unwrap();
        // input [a b c] padded by 2 in front
        assert_eq!(
            (0..7).map(|o| src(PadMode::Reflect, o)).collect::<Vec<_>>(),
            [2, 1, 0, 1, 2, 1, 0].map(Some)
        );
        assert_eq!(
            (0..7).map(|o| src(PadMode::Edge, o)).collect::<Vec<_>>(),
            [0, 0, 0, 1, 2, 2, 2].map(Some)
        );
        assert_eq!(
            (0..7).map(|o| src(PadMode::Wrap, o)).collect::<Vec<_>>(),
            [1, 2, 0, 1, 2, 0, 1].map(Some)
        );
        assert_eq!(src(PadMode::Constant, 0), None);
    }
}
