//! Spatial resampling: Resize (opsets 10, 11, 13, 18, 19) and Upsample
//! (7, 9), GridSample and AffineGrid, RoiAlign, and NonMaxSuppression.
//! Resize follows the ONNX coordinate formulas exactly (computed in f64);
//! its engine lives in `sample`. Where scales or sizes are constant, Resize
//! and Upsample open into gathers and weighted sums (`gathers`).

mod gathers;
mod grid;
mod nms;
mod roi;
mod sample;

use crate::registry::Registry;
use crate::util::normalize_axis;
use crate::{arg, inputs_id, opt_arg, Builder, EvalCx, InferCx, Op};
use kiln_ir::{
    bail, dispatch_num, ensure, DType, Data, Node, Num, Result, Tensor, TensorType, ValueId,
};
use sample::{Axis, Coord, Kernel, NearestRound, Sampler};

pub fn register(r: &mut Registry) {
    r.add("Resize", Resize);
    r.add("Upsample", Upsample);
    grid::register(r);
    roi::register(r);
    nms::register(r);
}

/// Converts f64 results to `dtype`. Integers round half to even when
/// `round` (Resize), else truncate (GridSample's "cast"); both saturate.
pub(crate) fn from_f64(values: Vec<f64>, dtype: DType, round: bool) -> Result<Data> {
    fn convert<T: Num>(values: Vec<f64>, round: bool) -> Data {
        T::wrap(
            values
                .into_iter()
                .map(|v| T::from_f64(if round { v.round_ties_even() } else { v }))
                .collect(),
        )
    }
    let round = round && dtype.is_int();
    // An empty tensor of `dtype` selects the element type.
    dispatch_num!(
        &Data::zeros(dtype, 0),
        |_v: T| Ok(convert::<T>(values, round)),
        bail!("cannot produce {dtype} values by interpolation")
    )
}

/// keep_aspect_ratio_policy (Resize-18+).
#[derive(Debug, Clone, Copy, PartialEq)]
enum AspectPolicy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Resize's or Upsample's attributes, normalized across opsets.
struct Params {
    sampler: Sampler,
    extrapolation: f64,
    /// Axes that roi/scales/sizes refer to (all axes when not given).
    axes: Option<Vec<i64>>,
    policy: AspectPolicy,
}

impl Params {
    fn mode(node: &Node, legacy: bool, cubic_a: f64) -> Result<Kernel> {
        Ok(match node.attr_string_or("mode", "nearest")? {
            "nearest" => Kernel::Nearest(if legacy {
                NearestRound::Legacy
            } else {
                match node.attr_string_or("nearest_mode", "round_prefer_floor")? {
                    "round_prefer_floor" => NearestRound::RoundPreferFloor,
                    "round_prefer_ceil" => NearestRound::RoundPreferCeil,
                    "floor" => NearestRound::Floor,
                    "ceil" => NearestRound::Ceil,
                    other => bail!("unknown nearest_mode '{other}'"),
                }
            }),
            // "bilinear" is Upsample-1's spelling.
            "linear" | "bilinear" => Kernel::Linear,
            "cubic" if !legacy => Kernel::Cubic(cubic_a),
            other => bail!("unknown mode '{other}'"),
        })
    }

    /// Resize-11+ attributes; `legacy` for Resize-10 and Upsample, which
    /// always use asymmetric coordinates.
    fn parse(node: &Node, legacy: bool) -> Result<Params> {
        if legacy {
            let kernel = Params::mode(node, true, -0.75)?;
            let sampler = Sampler {
                kernel,
                coord: Coord::Asymmetric,
                antialias: false,
                exclude_outside: false,
            };
            return Ok(Params {
                sampler,
                extrapolation: 0.0,
                axes: None,
                policy: AspectPolicy::Stretch,
            });
        }
        let kernel = Params::mode(
            node,
            false,
            node.attr_float_or("cubic_coeff_a", -0.75)? as f64,
        )?;
        let antialias = node.attr_int_or("antialias", 0)? != 0;
        ensure!(
            !(antialias && matches!(kernel, Kernel::Nearest(_))),
            "antialias is only defined for linear and cubic modes"
        );
        let sampler = Sampler {
            kernel,
            coord: Coord::parse(
                node.attr_string_or("coordinate_transformation_mode", "half_pixel")?,
            )?,
            antialias,
            exclude_outside: node.attr_int_or("exclude_outside", 0)? != 0,
        };
        let policy = match node.attr_string_or("keep_aspect_ratio_policy", "stretch")? {
            "stretch" => AspectPolicy::Stretch,
            "not_larger" => AspectPolicy::NotLarger,
            "not_smaller" => AspectPolicy::NotSmaller,
            other => bail!("unknown keep_aspect_ratio_policy '{other}'"),
        };
        Ok(Params {
            sampler,
            extrapolation: node.attr_float_or("extrapolation_value", 0.0)? as f64,
            axes: node.attr_ints("axes")?.map(<[i64]>::to_vec),
            policy,
        })
    }

    fn axes(&self, rank: usize) -> Result<Vec<usize>> {
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a
                .iter()
                .map(|&x| normalize_axis(x, rank))
                .collect::<Result<_>>()?,
            None => (0..rank).collect(),
        };
        for (i, a) in axes.iter().enumerate() {
            ensure!(!axes[..i].contains(a), "axis {a} is repeated in 'axes'");
        }
        Ok(axes)
    }
}

/// How the output size is given.
enum Target {
    Scales(Vec<f64>),
    Sizes(Vec<i64>),
}

/// Per-axis plan for an input of `shape` (roi left at its default).
fn plan(
    shape: &[usize],
    axes: &[usize],
    target: &Target,
    policy: AspectPolicy,
) -> Result<Vec<Axis>> {
    let mut out: Vec<Axis> = shape
        .iter()
        .map(|&n| Axis {
            in_len: n,
            out_len: n,
            scale: 1.0,
            resized_len: n as f64,
            roi: (0.0, 1.0),
        })
        .collect();
    let given = match target {
        Target::Scales(s) => s.len(),
        Target::Sizes(s) => s.len(),
    };
    ensure!(
        given == axes.len(),
        "{given} scales/sizes given for {} axes",
        axes.len()
    );
    match target {
        Target::Scales(scales) => {
            for (&d, &s) in axes.iter().zip(scales) {
                ensure!(s > 0.0 && s.is_finite(), "scales must be positive, got {s}");
                let len = s * shape[d] as f64;
                ensure!(
                    len < (1u64 << 40) as f64,
                    "resized length {len} is too large"
                );
                out[d] = Axis {
                    in_len: shape[d],
                    out_len: len.floor() as usize,
                    scale: s,
                    resized_len: len,
                    roi: (0.0, 1.0),
                };
            }
        }
        Target::Sizes(sizes) => {
            for (&d, &s) in axes.iter().zip(sizes) {
                ensure!(s >= 0, "sizes must not be negative, got {s}");
                ensure!(
                    shape[d] > 0 || s == 0,
                    "cannot resize an empty axis {d} to length {s}"
                );
            }
            let ratio = |i: usize| {
                if shape[axes[i]] == 0 {
                    1.0
                } else {
                    sizes[i] as f64 / shape[axes[i]] as f64
                }
            };
            let common = match policy {
                AspectPolicy::Stretch => None,
                AspectPolicy::NotLarger => (0..axes.len()).map(ratio).reduce(f64::min),
                AspectPolicy::NotSmaller => (0..axes.len()).map(ratio).reduce(f64::max),
            };
            for (i, &d) in axes.iter().enumerate() {
                let (len, scale) = match common {
                    // round_int: halfway cases round up.
                    Some(s) => ((s * shape[d] as f64 + 0.5).floor() as usize, s),
                    None => (sizes[i] as usize, ratio(i)),
                };
                let resized_len = if common.is_some() {
                    scale * shape[d] as f64
                } else {
                    len as f64
                };
                out[d] = Axis {
                    in_len: shape[d],
                    out_len: len,
                    scale,
                    resized_len,
                    roi: (0.0, 1.0),
                };
            }
        }
    }
    Ok(out)
}

/// The f64 values of a float tensor (scales, roi).
fn floats(t: &Tensor, what: &str) -> Result<Vec<f64>> {
    ensure!(
        t.dtype().is_float(),
        "{what} must be a float tensor, got {}",
        t.dtype()
    );
    t.data.to_f64_vec()
}

/// Reads scales/sizes: an absent or empty tensor means "not given".
fn target(scales: Option<&Tensor>, sizes: Option<&Tensor>) -> Result<Target> {
    let scales = scales.filter(|t| !t.is_empty());
    let sizes = sizes.filter(|t| !t.is_empty());
    match (scales, sizes) {
        (Some(_), Some(_)) => bail!("only one of 'scales' and 'sizes' may be given"),
        (Some(s), None) => Ok(Target::Scales(floats(s, "scales")?)),
        (None, Some(s)) => Ok(Target::Sizes(crate::util::ints(s)?)),
        (None, None) => bail!("one of 'scales' and 'sizes' must be given"),
    }
}

/// Resizes `x` per `axes` (a full per-dimension plan) with `params`.
fn resize(x: &Tensor, axes: &[Axis], params: &Params) -> Result<Tensor> {
    let out_shape: Vec<usize> = axes.iter().map(|a| a.out_len).collect();
    if out_shape.contains(&0) {
        return Ok(Tensor::zeros(x.dtype(), out_shape));
    }
    let s = &params.sampler;
    if let Kernel::Nearest(_) = s.kernel {
        let index: Vec<Vec<Option<usize>>> = axes
            .iter()
            .map(|a| s.taps(a).into_iter().map(|t| t.map(|t| t[0].0)).collect())
            .collect();
        let data = sample::gather_nearest(&x.data, &x.shape, &index, params.extrapolation)?;
        return Tensor::new(out_shape, data);
    }
    ensure!(
        x.dtype() != DType::Str,
        "linear and cubic Resize need a numeric tensor, got strings"
    );
    let mut data = x.data.to_f64_vec()?;
    let mut shape = x.shape.clone();
    for (d, a) in axes.iter().enumerate() {
        if !a.is_identity(s.coord) {
            data = sample::resample_axis(&data, &shape, d, &s.taps(a), params.extrapolation);
            shape[d] = a.out_len;
        }
    }
    Tensor::new(out_shape, from_f64(data, x.dtype(), true)?)
}

/// Input `i` of `inputs` when it is absent (`Some(None)`) or constant
/// (`Some(Some(value))`); `None` when it is computed at run time.
fn constant_input(
    b: &mut Builder,
    inputs: &[Option<ValueId>],
    i: Option<usize>,
) -> Result<Option<Option<Tensor>>> {
    match i.and_then(|i| inputs.get(i).copied().flatten()) {
        None => Ok(Some(None)),
        Some(v) => Ok(b.value(v)?.map(Some)),
    }
}

/// Input 0 of `inputs` resized to `target` along `dims` (every axis when
/// `None`) as gathers and sums, or `None` where its shape is not static
/// or `gathers` declines.
fn decomposed(
    b: &mut Builder,
    inputs: &[Option<ValueId>],
    params: &Params,
    target: &Target,
    dims: Option<Vec<usize>>,
) -> Result<Option<Vec<Option<ValueId>>>> {
    let x = inputs_id(inputs, 0)?;
    let Ok(shape) = b.shape(x) else {
        return Ok(None);
    };
    let dims = match dims {
        Some(d) => d,
        None => params.axes(shape.len())?,
    };
    let axes = plan(&shape, &dims, target, params.policy)?;
    Ok(gathers::resized(b, x, &axes, &params.sampler)?.map(|y| vec![Some(y)]))
}

struct Resize;

impl Resize {
    /// Node input positions of (roi, scales, sizes) for `opset`.
    fn positions(opset: i64) -> (Option<usize>, usize, Option<usize>) {
        if opset < 11 {
            (None, 1, None)
        } else {
            (Some(1), 2, Some(3))
        }
    }
}

impl Op for Resize {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = &cx.input(0)?.ty;
        let params = Params::parse(cx.node, cx.opset < 11)?;
        let (_, scales, sizes) = Resize::positions(cx.opset);
        let (Some(shape), true) = (
            &x.shape,
            cx.opt_input(scales).is_none_or(|i| i.value.is_some()),
        ) else {
            return Ok(vec![TensorType::unknown_shape(x.dtype)]);
        };
        let sizes = sizes.and_then(|i| cx.opt_input(i));
        if sizes.is_some_and(|i| i.value.is_none()) {
            return Ok(vec![TensorType::unknown_shape(x.dtype)]);
        }
        let target = target(cx.value(scales), sizes.and_then(|i| i.value))?;
        let axes = plan(shape, &params.axes(shape.len())?, &target, params.policy)?;
        Ok(vec![TensorType::new(
            x.dtype,
            axes.iter().map(|a| a.out_len).collect(),
        )])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let params = Params::parse(cx.node, cx.opset < 11)?;
        let (roi, scales, sizes) = Resize::positions(cx.opset);
        let target = target(
            opt_arg(inputs, scales),
            sizes.and_then(|i| opt_arg(inputs, i)),
        )?;
        let dims = params.axes(x.rank())?;
        let mut axes = plan(&x.shape, &dims, &target, params.policy)?;
        if params.sampler.coord == Coord::TfCropAndResize {
            let Some(roi) = roi
                .and_then(|i| opt_arg(inputs, i))
                .filter(|t| !t.is_empty())
            else {
                bail!("tf_crop_and_resize needs the 'roi' input")
            };
            let roi = floats(roi, "roi")?;
            ensure!(
                roi.len() == 2 * dims.len(),
                "roi has {} values, expected {} (starts then ends)",
                roi.len(),
                2 * dims.len()
            );
            for (i, &d) in dims.iter().enumerate() {
                axes[d].roi = (roi[i], roi[dims.len() + i]);
            }
        }
        Ok(vec![resize(x, &axes, &params)?])
    }

    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        let params = Params::parse(cx.node, cx.opset < 11)?;
        let (_, scales, sizes) = Resize::positions(cx.opset);
        let scales = constant_input(b, inputs, Some(scales))?;
        let sizes = constant_input(b, inputs, sizes)?;
        let (Some(scales), Some(sizes)) = (scales, sizes) else {
            return Ok(None);
        };
        if params.sampler.coord == Coord::TfCropAndResize {
            return Ok(None);
        }
        let target = target(scales.as_ref(), sizes.as_ref())?;
        decomposed(b, inputs, &params, &target, None)
    }
}

/// Upsample-7 (scales attribute) and -9/10 (scales input): Resize-10's
/// semantics, output length floor(length * scale).
struct Upsample;

impl Upsample {
    fn scales(node: &Node, opset: i64, input: Option<&Tensor>) -> Result<Option<Vec<f64>>> {
        if opset < 9 {
            let Some(s) = node.attr_floats("scales")? else {
                bail!("attribute 'scales' is required")
            };
            return Ok(Some(s.iter().map(|&v| v as f64).collect()));
        }
        input.map(|t| floats(t, "scales")).transpose()
    }
}

impl Op for Upsample {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = &cx.input(0)?.ty;
        let scales = Upsample::scales(cx.node, cx.opset, cx.value(1))?;
        let (Some(shape), Some(scales)) = (&x.shape, scales) else {
            return Ok(vec![TensorType::unknown_shape(x.dtype)]);
        };
        let axes = plan(
            shape,
            &(0..shape.len()).collect::<Vec<_>>(),
            &Target::Scales(scales),
            AspectPolicy::Stretch,
        )?;
        Ok(vec![TensorType::new(
            x.dtype,
            axes.iter().map(|a| a.out_len).collect(),
        )])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let params = Params::parse(cx.node, true)?;
        let Some(scales) = Upsample::scales(cx.node, cx.opset, opt_arg(inputs, 1))? else {
            bail!("input 1 (scales) is required")
        };
        let axes = plan(
            &x.shape,
            &(0..x.rank()).collect::<Vec<_>>(),
            &Target::Scales(scales),
            AspectPolicy::Stretch,
        )?;
        Ok(vec![resize(x, &axes, &params)?])
    }

    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        let params = Params::parse(cx.node, true)?;
        let Some(given) = constant_input(b, inputs, (cx.opset >= 9).then_some(1))? else {
            return Ok(None);
        };
        let Some(scales) = Upsample::scales(cx.node, cx.opset, given.as_ref())? else {
            return Ok(None);
        };
        let rank = b.shape(inputs_id(inputs, 0)?).map_or(0, |s| s.len());
        let all = (0..rank).collect();
        decomposed(b, inputs, &params, &Target::Scales(scales), Some(all))
    }
}
