//! Linear quantization: QuantizeLinear and DequantizeLinear (per-tensor,
//! per-axis and blocked scales and zero points; 8-, 16- and 32-bit integer
//! targets) and DynamicQuantizeLinear, plus the rounding helpers the
//! quantized matmul and convolution share. Float8 and 4-bit types are not
//! supported.

use crate::registry::Registry;
use crate::util::normalize_axis;
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::tensor::{bf16, f16};
use kiln_ir::{bail, ensure, DType, Data, Node, Num, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("QuantizeLinear", QuantizeLinear);
    r.add("DequantizeLinear", DequantizeLinear);
    r.add("DynamicQuantizeLinear", DynamicQuantizeLinear);
}

/// The smallest and largest value of an integer quantization type.
fn int_range(dtype: DType) -> Result<(f64, f64)> {
    Ok(match dtype {
        DType::U8 => (0.0, u8::MAX as f64),
        DType::I8 => (i8::MIN as f64, i8::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::I16 => (i16::MIN as f64, i16::MAX as f64),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        other => bail!(
            "unsupported quantized type {other} (kiln quantizes to 8-, 16- and 32-bit integers)"
        ),
    })
}

/// Rounds each value half to even and saturates it into `dtype`.
pub(crate) fn saturate_round(dtype: DType, values: impl Iterator<Item = f64>) -> Result<Data> {
    let (lo, hi) = int_range(dtype)?;
    fn collect<T: Num>(v: impl Iterator<Item = f64>, lo: f64, hi: f64) -> Data {
        T::wrap(
            v.map(|x| T::from_f64(x.round_ties_even().clamp(lo, hi)))
                .collect(),
        )
    }
    let v = values;
    Ok(match dtype {
        DType::U8 => collect::<u8>(v, lo, hi),
        DType::I8 => collect::<i8>(v, lo, hi),
        DType::U16 => collect::<u16>(v, lo, hi),
        DType::I16 => collect::<i16>(v, lo, hi),
        _ => collect::<i32>(v, lo, hi),
    })
}

/// Values converted to float type `dtype`.
pub(crate) fn floats_to(dtype: DType, values: impl Iterator<Item = f64>) -> Result<Data> {
    fn collect<T: Num>(v: impl Iterator<Item = f64>) -> Data {
        T::wrap(v.map(T::from_f64).collect())
    }
    Ok(match dtype {
        DType::F32 => collect::<f32>(values),
        DType::F64 => collect::<f64>(values),
        DType::F16 => collect::<f16>(values),
        DType::BF16 => collect::<bf16>(values),
        other => bail!("expected a float type, got {other}"),
    })
}

/// `v` rounded to the precision of float type `dtype` (as numpy computes
/// each operation in its operands' type).
pub(crate) fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F32 => v as f32 as f64,
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// The requantization multiplier `a * b / y`, each step in `dtype`.
pub(crate) fn combined_scale(dtype: DType, a: f64, b: f64, y: f64) -> f64 {
    round_to(dtype, round_to(dtype, a * b) / y)
}

/// How a scale (and its zero point) maps onto the elements of the input.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// One value for the whole tensor.
    Tensor,
    /// One value per index along the axis; `inner` is the axis' stride.
    Axis { inner: usize, len: usize },
    /// One value per `block` consecutive indices along the axis.
    Blocked {
        inner: usize,
        len: usize,
        block: usize,
        blocks: usize,
    },
}

impl Layout {
    fn new(x_shape: &[usize], scale: &Tensor, axis: i64, block_size: i64) -> Result<Layout> {
        if scale.len() == 1 {
            return Ok(Layout::Tensor);
        }
        let axis = normalize_axis(axis, x_shape.len())?;
        let (len, inner) = (x_shape[axis], x_shape[axis + 1..].iter().product());
        if block_size <= 0 {
            ensure!(scale.rank() == 1 && scale.shape[0] == len, "scale of shape {:?} is neither a scalar nor one value per index of axis {axis} of shape {x_shape:?}", scale.shape);
            return Ok(Layout::Axis { inner, len });
        }
        let block = block_size as usize;
        let blocks = len.div_ceil(block);
        let mut want = x_shape.to_vec();
        want[axis] = blocks;
        ensure!(
            scale.shape == want,
            "blocked scale must have shape {want:?} (block_size {block}), got {:?}",
            scale.shape
        );
        Ok(Layout::Blocked {
            inner,
            len,
            block,
            blocks,
        })
    }

    /// Index of the parameter for input element `i`.
    fn index(&self, i: usize) -> usize {
        match *self {
            Layout::Tensor => 0,
            Layout::Axis { inner, len } => (i / inner) % len,
            Layout::Blocked {
                inner,
                len,
                block,
                blocks,
            } => {
                let (outer, a, rest) = (i / (inner * len), (i / inner) % len, i % inner);
                (outer * blocks + a / block) * inner + rest
            }
        }
    }
}

/// The zero point's values (checked to match the scale's shape), or zeros.
fn zero_points(zp: Option<&Tensor>, scale: &Tensor) -> Result<Vec<i64>> {
    match zp {
        Some(z) => {
            ensure!(
                z.shape == scale.shape || z.len() == 1 && scale.len() == 1,
                "zero point shape {:?} differs from scale shape {:?}",
                z.shape,
                scale.shape
            );
            z.data.to_i64_vec()
        }
        None => Ok(vec![0; scale.len()]),
    }
}

/// Attributes shared by QuantizeLinear and DequantizeLinear.
fn layout_attrs(node: &Node) -> Result<(i64, i64)> {
    Ok((
        node.attr_int_or("axis", 1)?,
        node.attr_int_or("block_size", 0)?,
    ))
}

/// The dtype named by an `output_dtype` style attribute (0 = unset).
fn dtype_attr(node: &Node, name: &str) -> Result<Option<DType>> {
    match node.attr_int_or(name, 0)? {
        0 => Ok(None),
        code => match DType::from_onnx_code(code as i32) {
            Some(d) => Ok(Some(d)),
            None => bail!("unsupported {name} {}", DType::onnx_code_name(code as i32)),
        },
    }
}

/// QuantizeLinear(x, y_scale, y_zero_point?): `saturate(round(x / scale) + zp)`.
struct QuantizeLinear;

impl QuantizeLinear {
    fn out_dtype(node: &Node, zp: Option<DType>) -> Result<DType> {
        let attr = dtype_attr(node, "output_dtype")?;
        let dtype = match (zp, attr) {
            (Some(z), Some(a)) if z != a => {
                bail!("output_dtype {a} differs from the zero point's type {z}")
            }
            (Some(z), _) => z,
            (None, Some(a)) => a,
            (None, None) => DType::U8,
        };
        int_range(dtype)?;
        Ok(dtype)
    }

    /// The precision numpy divides in: the `precision` attribute, else the
    /// wider float of x and the scale (f64 when x is an integer).
    fn division_dtype(node: &Node, x: DType, scale: DType) -> Result<DType> {
        if let Some(p) = dtype_attr(node, "precision")? {
            return Ok(p);
        }
        Ok(match (x, scale) {
            (x, _) if !x.is_float() => DType::F64,
            (x, s) if x == s => x,
            (DType::F64, _) | (_, DType::F64) => DType::F64,
            _ => DType::F32,
        })
    }
}

impl Op for QuantizeLinear {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = Self::out_dtype(cx.node, cx.opt_input(2).map(|z| z.ty.dtype))?;
        Ok(vec![TensorType {
            dtype,
            shape: cx.input(0)?.ty.shape.clone(),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, scale, zp) = (arg(inputs, 0)?, arg(inputs, 1)?, opt_arg(inputs, 2));
        let dtype = Self::out_dtype(cx.node, zp.map(|z| z.dtype()))?;
        ensure!(
            scale.dtype().is_float(),
            "y_scale must be a float tensor, got {}",
            scale.dtype()
        );
        ensure!(
            x.dtype().is_float() || x.dtype() == DType::I32,
            "QuantizeLinear input must be a float or int32 tensor, got {}",
            x.dtype()
        );
        ensure!(
            cx.opset >= 13 || scale.len() == 1,
            "QuantizeLinear-{} needs a scalar scale",
            cx.opset
        );
        let (axis, block_size) = layout_attrs(cx.node)?;
        let layout = Layout::new(&x.shape, scale, axis, block_size)?;
        let div = Self::division_dtype(cx.node, x.dtype(), scale.dtype())?;
        let scales: Vec<f64> = scale
            .data
            .to_f64_vec()?
            .into_iter()
            .map(|s| round_to(div, s))
            .collect();
        let zps = zero_points(zp, scale)?;
        let xs = x.data.to_f64_vec()?;
        let values = xs.iter().enumerate().map(|(i, &v)| {
            let p = layout.index(i);
            round_to(div, round_to(div, v) / scales[p]).round_ties_even() + zps[p] as f64
        });
        Ok(vec![Tensor::new(
            x.shape.clone(),
            saturate_round(dtype, values)?,
        )?])
    }
}

/// DequantizeLinear(x, x_scale, x_zero_point?): `(x - zp) * scale`.
struct DequantizeLinear;

impl DequantizeLinear {
    fn out_dtype(node: &Node, scale: DType) -> Result<DType> {
        let dtype = dtype_attr(node, "output_dtype")?.unwrap_or(scale);
        ensure!(
            dtype.is_float(),
            "DequantizeLinear output must be a float type, got {dtype}"
        );
        Ok(dtype)
    }
}

impl Op for DequantizeLinear {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = Self::out_dtype(cx.node, cx.input(1)?.ty.dtype)?;
        Ok(vec![TensorType {
            dtype,
            shape: cx.input(0)?.ty.shape.clone(),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, scale, zp) = (arg(inputs, 0)?, arg(inputs, 1)?, opt_arg(inputs, 2));
        let dtype = Self::out_dtype(cx.node, scale.dtype())?;
        int_range(x.dtype())?;
        if let Some(z) = zp {
            ensure!(
                z.dtype() == x.dtype(),
                "zero point type {} differs from x's {}",
                z.dtype(),
                x.dtype()
            );
        }
        ensure!(
            scale.dtype().is_float(),
            "x_scale must be a float tensor, got {}",
            scale.dtype()
        );
        ensure!(
            cx.opset >= 13 || scale.len() == 1,
            "DequantizeLinear-{} needs a scalar scale",
            cx.opset
        );
        let (axis, block_size) = layout_attrs(cx.node)?;
        let layout = Layout::new(&x.shape, scale, axis, block_size)?;
        let scales = scale.data.to_f64_vec()?;
        let zps = zero_points(zp, scale)?;
        let xs = x.data.to_i64_vec()?;
        // The product is taken in f32 unless the scale is f64 (as numpy does).
        let wide = scale.dtype() == DType::F64;
        let values = xs.iter().enumerate().map(|(i, &v)| {
            let p = layout.index(i);
            let centered = (v - zps[p]) as f64;
            if wide {
                centered * scales[p]
            } else {
                (centered as f32 * scales[p] as f32) as f64
            }
        });
        Ok(vec![Tensor::new(
            x.shape.clone(),
            floats_to(dtype, values)?,
        )?])
    }
}

/// DynamicQuantizeLinear(x) -> (y: u8, y_scale, y_zero_point): scale and
/// zero point chosen so the range [min(x, 0), max(x, 0)] maps onto 0..=255.
struct DynamicQuantizeLinear;

impl Op for DynamicQuantizeLinear {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = &cx.input(0)?.ty;
        ensure!(
            x.dtype == DType::F32,
            "DynamicQuantizeLinear needs f32 input, got {}",
            x.dtype
        );
        Ok(vec![
            TensorType {
                dtype: DType::U8,
                shape: x.shape.clone(),
            },
            TensorType::new(DType::F32, vec![]),
            TensorType::new(DType::U8, vec![]),
        ])
    }

    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let xs = x.as_slice::<f32>()?;
        let max = xs
            .iter()
            .fold(0.0f32, |m, &v| if v > m || v.is_nan() { v } else { m });
        let min = xs
            .iter()
            .fold(0.0f32, |m, &v| if v < m || v.is_nan() { v } else { m });
        let scale = if max == min { 1.0f32 } else { max - min } / 255.0f32;
        let zp = (0.0f32 - min / scale).clamp(0.0, 255.0).round_ties_even();
        let y = saturate_round(
            DType::U8,
            xs.iter()
                .map(|&v| ((v / scale).round_ties_even() + zp) as f64),
        )?;
        Ok(vec![
            Tensor::new(x.shape.clone(), y)?,
            Tensor::scalar(scale),
            Tensor::scalar(zp as u8),
        ])
    }
}
