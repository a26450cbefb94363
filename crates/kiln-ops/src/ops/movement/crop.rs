//! Ops that cut out or extend a tensor's box along each axis: Slice, Pad,
//! CenterCropPad and Compress. Each computes, per axis, which input
//! coordinate feeds every output coordinate (or none, for fill), so the
//! shape rule and the evaluation come from the same plan.

use super::common::{
    affine_offsets, gather_fill, int_values, normalize_axes, scalar_of, strides_i64, take, typed,
};
use crate::registry::Registry;
use crate::util::normalize_axis;
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, DType, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("Slice", Slice);
    r.add("Pad", Pad);
    r.add("CenterCropPad", CenterCropPad);
    r.add("Compress", Compress);
}

/// Builds the output of shape `maps[d].len()` per axis where output
/// coordinate `o` on axis `d` reads input coordinate `maps[d][o]`, or `fill`
/// when any axis gives `None`.
fn remap(x: &Tensor, maps: &[Vec<Option<usize>>], fill: Option<&Tensor>) -> Result<Tensor> {
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
    Tensor::new(out_shape, gather_fill(&x.data, &idx, fill)?)
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

fn opt_ints(inputs: &[Option<&Tensor>], i: usize) -> Result<Option<Vec<i64>>> {
    opt_arg(inputs, i).map(int_values).transpose()
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

impl Op for Slice {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = cx.input(0)?;
        let (Some(shape), Some(Some(starts)), Some(Some(ends)), Some(axes), Some(steps)) = (
            x.ty.shape.as_deref(),
            known_ints(cx, 1)?,
            known_ints(cx, 2)?,
            known_ints(cx, 3)?,
            known_ints(cx, 4)?,
        ) else {
            return Ok(vec![TensorType::unknown_shape(x.ty.dtype)]);
        };
        let plan = Slice::plan(shape, &starts, &ends, axes.as_deref(), steps.as_deref())?;
        Ok(vec![TensorType::new(x.ty.dtype, Slice::out_shape(&plan))])
    }

    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let (starts, ends) = (int_values(arg(inputs, 1)?)?, int_values(arg(inputs, 2)?)?);
        let (axes, steps) = (opt_ints(inputs, 3)?, opt_ints(inputs, 4)?);
        let plan = Slice::plan(&x.shape, &starts, &ends, axes.as_deref(), steps.as_deref())?;
        let st = strides_i64(&x.shape);
        let base: i64 = plan
            .iter()
            .zip(&st)
            .map(|(p, s)| if p.len == 0 { 0 } else { p.start * s })
            .sum();
        let steps: Vec<i64> = plan.iter().zip(&st).map(|(p, s)| p.step * s).collect();
        let shape = Slice::out_shape(&plan);
        let idx = affine_offsets(&shape, base, &steps);
        Ok(vec![take(x, shape, idx)?])
    }
}

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

    /// The fill value for constant mode: the constant_value input, or the
    /// float `value` attribute of opsets before 11.
    fn fill(
        node: &Node,
        opset: i64,
        dtype: DType,
        input: Option<&Tensor>,
    ) -> Result<Option<Tensor>> {
        if opset < 11 {
            let v = node.attr_float_or("value", 0.0)? as f64;
            return Ok(Some(scalar_of(dtype, v)?));
        }
        match input {
            Some(t) if !t.is_empty() => {
                ensure!(
                    t.len() == 1,
                    "constant_value must have one element, got {}",
                    t.len()
                );
                Ok(Some(t.reshaped(vec![])?))
            }
            _ => Ok(None),
        }
    }
}

impl Op for Pad {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = cx.input(0)?;
        Pad::mode(cx.node)?;
        let (Some(shape), Some(Some(pads)), Some(axes)) = (
            x.ty.shape.as_deref(),
            known_ints(cx, 1)?,
            known_ints(cx, 3)?,
        ) else {
            return Ok(vec![TensorType::unknown_shape(x.ty.dtype)]);
        };
        let per_axis = Pad::per_axis(shape.len(), &pads, axes.as_deref())?;
        Ok(vec![TensorType::new(
            x.ty.dtype,
            Pad::out_shape(shape, &per_axis)?,
        )])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let mode = Pad::mode(cx.node)?;
        let pads = int_values(arg(inputs, 1)?)?;
        let per_axis = Pad::per_axis(x.rank(), &pads, opt_ints(inputs, 3)?.as_deref())?;
        let out = Pad::out_shape(&x.shape, &per_axis)?;
        let maps = out
            .iter()
            .zip(&per_axis)
            .zip(&x.shape)
            .map(|((&len, &(begin, _)), &n)| {
                (0..len)
                    .map(|o| Pad::source(mode, o, begin, n))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let fill = Pad::fill(cx.node, cx.opset, x.dtype(), opt_arg(inputs, 2))?;
        Ok(vec![remap(x, &maps, fill.as_ref())?])
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
        Ok(vec![remap(x, &maps, None)?])
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
