//! Ops that create tensors rather than transform one: ConstantOfShape,
//! Range, OneHot, EyeLike, and the random generators (RandomUniform,
//! RandomNormal and their *Like forms, Bernoulli, Multinomial). The random
//! ops are not deterministic, so they are never folded at compile time; their
//! values come from kiln's own generator and cannot match other runtimes'.

use crate::ops::movement::common::{
    checked_numel, dims_from_i64, for_each_index, int_values, scalar_of, take, typed,
};
use crate::registry::Registry;
use crate::util::normalize_axis;
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{
    bail, dispatch_num, ensure, DType, Data, Elem, Node, Num, Result, Tensor, TensorType,
};

pub fn register(r: &mut Registry) {
    r.add("ConstantOfShape", ConstantOfShape);
    r.add("Range", Range);
    r.add("OneHot", OneHot);
    r.add("EyeLike", EyeLike);
    r.add(
        "RandomUniform",
        Random {
            dist: Dist::Uniform,
            like: false,
        },
    );
    r.add(
        "RandomNormal",
        Random {
            dist: Dist::Normal,
            like: false,
        },
    );
    r.add(
        "RandomUniformLike",
        Random {
            dist: Dist::Uniform,
            like: true,
        },
    );
    r.add(
        "RandomNormalLike",
        Random {
            dist: Dist::Normal,
            like: true,
        },
    );
    r.add("Bernoulli", Bernoulli);
    r.add("Multinomial", Multinomial);
}

/// The element type named by attribute `name` (an ONNX type code).
fn dtype_attr(node: &Node, name: &str) -> Result<Option<DType>> {
    match node.attr_int(name)? {
        None => Ok(None),
        Some(code) => match i32::try_from(code).ok().and_then(DType::from_onnx_code) {
            Some(d) => Ok(Some(d)),
            None => bail!(
                "attribute '{name}' names unsupported type {}",
                DType::onnx_code_name(code as i32)
            ),
        },
    }
}

/// A scalar input (or one-element tensor) given as data.
fn single(t: &Tensor, what: &str) -> Result<()> {
    ensure!(
        t.len() == 1,
        "{what} must have exactly one element, got shape {:?}",
        t.shape
    );
    Ok(())
}

struct ConstantOfShape;

impl ConstantOfShape {
    /// The fill value: the `value` attribute (one element), else f32 zero.
    fn value(node: &Node) -> Result<Tensor> {
        match node.attr_tensor("value")? {
            Some(t) => {
                single(t, "attribute 'value'")?;
                t.reshaped(vec![])
            }
            None => Ok(Tensor::scalar(0f32)),
        }
    }

    fn out_shape(shape: &Tensor) -> Result<Vec<usize>> {
        ensure!(
            shape.rank() == 1,
            "input must be 1-D, got shape {:?}",
            shape.shape
        );
        dims_from_i64(&int_values(shape)?, "shape")
    }
}

impl Op for ConstantOfShape {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = ConstantOfShape::value(cx.node)?.dtype();
        Ok(vec![typed(
            dtype,
            cx.value(0).map(ConstantOfShape::out_shape).transpose()?,
        )])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let value = ConstantOfShape::value(cx.node)?;
        let shape = ConstantOfShape::out_shape(arg(inputs, 0)?)?;
        let n = shape.iter().product();
        Ok(vec![take(&value, shape, vec![0; n])?])
    }
}

/// Range: `start, start + delta, ...` up to (excluding) `limit`.
/// Integer types are computed exactly; floats in f64 and rounded.
struct Range;

impl Range {
    fn eval_range(start: &Tensor, limit: &Tensor, delta: &Tensor) -> Result<Tensor> {
        let dtype = start.dtype();
        ensure!(
            limit.dtype() == dtype && delta.dtype() == dtype,
            "start, limit and delta must share a type"
        );
        for (t, what) in [(start, "start"), (limit, "limit"), (delta, "delta")] {
            single(t, what)?;
        }
        if dtype.is_int() {
            let [s, l, d] = [start, limit, delta].map(|t| int_values(t).map(|v| v[0] as i128));
            let (s, l, d) = (s?, l?, d?);
            ensure!(d != 0, "delta cannot be 0");
            let n = Range::count_int(s, l, d);
            checked_numel(&[n])?;
            let vals: Vec<i128> = (0..n as i128).map(|i| s + i * d).collect();
            return Tensor::new(vec![n], int_data(dtype, &vals)?);
        }
        let [s, l, d] = [start, limit, delta].map(|t| t.data.get_f64(0));
        ensure!(d != 0.0, "delta cannot be 0");
        let span = ((l - s) / d).ceil();
        ensure!(
            span.is_finite() || span.is_nan(),
            "range from {s} to {l} by {d} is infinite"
        );
        let n = if span > 0.0 { span as usize } else { 0 };
        checked_numel(&[n])?;
        let data = dispatch_num!(
            &Data::zeros(dtype, 0),
            |_z: T| T::wrap((0..n).map(|i| T::from_f64(s + i as f64 * d)).collect()),
            bail!("Range does not support {dtype}")
        );
        Tensor::new(vec![n], data)
    }

    /// max(ceil((limit - start) / delta), 0) in exact integer arithmetic.
    fn count_int(s: i128, l: i128, d: i128) -> usize {
        let (span, step) = if d > 0 { (l - s, d) } else { (s - l, -d) };
        if span <= 0 {
            0
        } else {
            ((span + step - 1) / step).min(usize::MAX as i128) as usize
        }
    }
}

/// Integer tensor data of `dtype` from exact values (which must fit).
fn int_data(dtype: DType, vals: &[i128]) -> Result<Data> {
    macro_rules! conv {
        ($t:ty) => {{
            let v: std::result::Result<Vec<$t>, _> =
                vals.iter().map(|&x| <$t>::try_from(x)).collect();
            match v {
                Ok(v) => <$t as Elem>::wrap(v),
                Err(_) => bail!("a value does not fit in {dtype}"),
            }
        }};
    }
    Ok(match dtype {
        DType::I8 => conv!(i8),
        DType::I16 => conv!(i16),
        DType::I32 => conv!(i32),
        DType::I64 => conv!(i64),
        DType::U8 => conv!(u8),
        DType::U16 => conv!(u16),
        DType::U32 => conv!(u32),
        DType::U64 => conv!(u64),
        other => bail!("{other} is not an integer type"),
    })
}

impl Op for Range {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![TensorType::unknown_shape(cx.input(0)?.ty.dtype)])
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![Range::eval_range(
            arg(inputs, 0)?,
            arg(inputs, 1)?,
            arg(inputs, 2)?,
        )?])
    }
}

struct OneHot;

impl OneHot {
    /// Depth (from a numeric one-element tensor) and the output shape.
    fn plan(node: &Node, indices: &[usize], depth: &Tensor) -> Result<(usize, usize, Vec<usize>)> {
        single(depth, "depth")?;
        let d = depth.data.get_f64(0);
        ensure!(
            d.is_finite() && d >= 0.0,
            "depth must be a non-negative number, got {d}"
        );
        let depth = d as usize;
        let axis = normalize_axis(node.attr_int_or("axis", -1)?, indices.len() + 1)?;
        let mut out = indices.to_vec();
        out.insert(axis, depth);
        checked_numel(&out)?;
        Ok((depth, axis, out))
    }
}

impl Op for OneHot {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(2)?.ty.dtype;
        let shape = match (cx.shape(0)?, cx.value(1)) {
            (Some(s), Some(d)) => Some(OneHot::plan(cx.node, s, d)?.2),
            _ => None,
        };
        Ok(vec![typed(dtype, shape)])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (indices, values) = (arg(inputs, 0)?, arg(inputs, 2)?);
        ensure!(
            values.len() == 2,
            "values must hold [off, on], got shape {:?}",
            values.shape
        );
        let (depth, axis, out) = OneHot::plan(cx.node, &indices.shape, arg(inputs, 1)?)?;
        // Indices may be any numeric type; fractional ones are truncated.
        let classes: Vec<i64> = indices
            .data
            .to_f64_vec()?
            .into_iter()
            .map(|v| v as i64)
            .map(|v| if v < 0 { v + depth as i64 } else { v })
            .collect();
        let inner: usize = indices.shape[axis..].iter().product();
        let mut pick = Vec::with_capacity(out.iter().product());
        for_each_index(&out, |o| {
            let pos = o[..axis]
                .iter()
                .zip(&indices.shape)
                .fold(0, |acc, (&i, &d)| acc * d + i)
                * inner
                + o[axis + 1..]
                    .iter()
                    .zip(&indices.shape[axis..])
                    .fold(0, |acc, (&i, &d)| acc * d + i);
            pick.push(usize::from(classes[pos] == o[axis] as i64));
        });
        Ok(vec![take(values, out, pick)?])
    }
}

struct EyeLike;

impl EyeLike {
    fn dtype(node: &Node, input: DType) -> Result<DType> {
        Ok(dtype_attr(node, "dtype")?.unwrap_or(input))
    }

    fn check(shape: &[usize]) -> Result<()> {
        ensure!(shape.len() == 2, "input must be 2-D, got shape {shape:?}");
        Ok(())
    }
}

impl Op for EyeLike {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = cx.input(0)?;
        if let Some(s) = &x.ty.shape {
            EyeLike::check(s)?;
        }
        Ok(vec![TensorType {
            dtype: EyeLike::dtype(cx.node, x.ty.dtype)?,
            shape: x.ty.shape.clone(),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        EyeLike::check(&x.shape)?;
        let dtype = EyeLike::dtype(cx.node, x.dtype())?;
        let k = cx.node.attr_int_or("k", 0)?;
        let zero_one = Tensor::new(
            vec![2],
            concat2(scalar_of(dtype, 0.0)?, scalar_of(dtype, 1.0)?)?,
        )?;
        let cols = x.shape[1];
        let pick = (0..x.len())
            .map(|o| usize::from((o % cols) as i64 - (o / cols) as i64 == k))
            .collect();
        Ok(vec![take(&zero_one, x.shape.clone(), pick)?])
    }
}

/// The elements of two same-typed scalars, in order.
fn concat2(a: Tensor, b: Tensor) -> Result<Data> {
    dispatch_num!(
        &a.data,
        |v: T| Ok(T::wrap(vec![v[0], b.as_slice::<T>()?[0]])),
        bail!("expected numeric scalars")
    )
}

/// A small deterministic generator (SplitMix64). Unseeded generators are
/// seeded from the clock and a counter, so separate runs differ.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: Option<u64>) -> Rng {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        Rng(seed.unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            t ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        }))
    }

    /// Seed from an ONNX float `seed` attribute.
    fn from_attr(node: &Node) -> Result<Rng> {
        Ok(Rng::new(
            node.attr_float("seed")?.map(|s| s.to_bits() as u64),
        ))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // in (0, 1], so the log is finite
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Floating-point data of `dtype` from f64 samples.
fn float_data(dtype: DType, vals: impl Iterator<Item = f64>) -> Result<Data> {
    ensure!(
        dtype.is_float(),
        "random values must be a floating-point type, got {dtype}"
    );
    dispatch_num!(
        &Data::zeros(dtype, 0),
        |_z: T| Ok(T::wrap(vals.map(T::from_f64).collect())),
        bail!("unreachable string type")
    )
}

#[derive(Clone, Copy)]
enum Dist {
    Uniform,
    Normal,
}

/// RandomUniform/RandomNormal (shape from the `shape` attribute) and their
/// *Like forms (shape, and by default type, from the input).
struct Random {
    dist: Dist,
    like: bool,
}

impl Random {
    fn out_type(&self, node: &Node, input: Option<&TensorType>) -> Result<TensorType> {
        let dtype = dtype_attr(node, "dtype")?;
        if self.like {
            let Some(x) = input else {
                bail!("input 0 is required")
            };
            return Ok(TensorType {
                dtype: dtype.unwrap_or(x.dtype),
                shape: x.shape.clone(),
            });
        }
        let Some(shape) = node.attr_ints("shape")? else {
            bail!("attribute 'shape' is required")
        };
        Ok(TensorType::new(
            dtype.unwrap_or(DType::F32),
            dims_from_i64(shape, "shape")?,
        ))
    }
}

impl Op for Random {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![self.out_type(cx.node, cx.opt_input(0).map(|x| &x.ty))?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let input = crate::opt_arg(inputs, 0).map(|t| t.ty());
        let ty = self.out_type(cx.node, input.as_ref())?;
        let shape = ty.shape.unwrap_or_default();
        let mut rng = Rng::from_attr(cx.node)?;
        let n = shape.iter().product();
        let node = cx.node;
        let vals: Vec<f64> = match self.dist {
            Dist::Uniform => {
                let (lo, hi) = (
                    node.attr_float_or("low", 0.0)? as f64,
                    node.attr_float_or("high", 1.0)? as f64,
                );
                (0..n).map(|_| lo + (hi - lo) * rng.uniform()).collect()
            }
            Dist::Normal => {
                let (mean, scale) = (
                    node.attr_float_or("mean", 0.0)? as f64,
                    node.attr_float_or("scale", 1.0)? as f64,
                );
                (0..n).map(|_| mean + scale * rng.normal()).collect()
            }
        };
        Ok(vec![Tensor::new(
            shape,
            float_data(ty.dtype, vals.into_iter())?,
        )?])
    }

    fn deterministic(&self) -> bool {
        false
    }
}

/// Bernoulli: 1 with the probability given by each input element, else 0.
struct Bernoulli;

impl Op for Bernoulli {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = &cx.input(0)?.ty;
        Ok(vec![TensorType {
            dtype: dtype_attr(cx.node, "dtype")?.unwrap_or(x.dtype),
            shape: x.shape.clone(),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let dtype = dtype_attr(cx.node, "dtype")?.unwrap_or(x.dtype());
        let mut rng = Rng::from_attr(cx.node)?;
        let draws: Vec<f64> = x
            .data
            .to_f64_vec()?
            .into_iter()
            .map(|p| if rng.uniform() < p { 1.0 } else { 0.0 })
            .collect();
        let data = dispatch_num!(
            &Data::zeros(dtype, 0),
            |_z: T| T::wrap(draws.iter().map(|&v| T::from_f64(v)).collect()),
            bail!("Bernoulli cannot produce {dtype}")
        );
        Ok(vec![Tensor::new(x.shape.clone(), data)?])
    }

    fn deterministic(&self) -> bool {
        false
    }
}

/// Multinomial: `sample_size` class indices per batch row, drawn from the
/// distribution given by the row's unnormalized log-probabilities.
struct Multinomial;

impl Multinomial {
    fn out_type(node: &Node, x: &TensorType) -> Result<TensorType> {
        let dtype = dtype_attr(node, "dtype")?.unwrap_or(DType::I32);
        ensure!(
            matches!(dtype, DType::I32 | DType::I64),
            "dtype must be int32 or int64, got {dtype}"
        );
        let samples = node.attr_int_or("sample_size", 1)?;
        let samples = dims_from_i64(&[samples], "sample_size")?[0];
        let shape = match &x.shape {
            Some(s) => {
                ensure!(
                    s.len() == 2,
                    "input must be [batch, classes], got shape {s:?}"
                );
                Some(vec![s[0], samples])
            }
            None => None,
        };
        Ok(typed(dtype, shape))
    }
}

impl Op for Multinomial {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![Multinomial::out_type(cx.node, &cx.input(0)?.ty)?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let ty = Multinomial::out_type(cx.node, &x.ty())?;
        let shape = ty.shape.unwrap_or_default();
        let (batch, samples, classes) = (shape[0], shape[1], x.shape[1]);
        let logits = x.data.to_f64_vec()?;
        ensure!(
            classes > 0 || samples == 0,
            "cannot sample from zero classes"
        );
        let mut rng = Rng::from_attr(cx.node)?;
        let mut out = Vec::with_capacity(batch * samples);
        for b in 0..batch {
            let row = &logits[b * classes..(b + 1) * classes];
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = row.iter().map(|&l| (l - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            for _ in 0..samples {
                let mut target = rng.uniform() * total;
                let pick = weights.iter().position(|&w| {
                    target -= w;
                    target < 0.0
                });
                out.push(pick.unwrap_or(classes.saturating_sub(1)) as i128);
            }
        }
        Ok(vec![Tensor::new(shape, int_data(ty.dtype, &out)?)?])
    }

    fn deterministic(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_computed_from_data_beyond_any_memory_is_an_error() {
        let err = Range::eval_range(
            &Tensor::scalar(0i64),
            &Tensor::scalar(1i64 << 60),
            &Tensor::scalar(1i64),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("memory budget"), "{err}");
    }

    #[test]
    fn range_counts() {
        assert_eq!(Range::count_int(0, 10, 3), 4);
        assert_eq!(Range::count_int(10, 4, -3), 2);
        assert_eq!(Range::count_int(0, 0, 1), 0);
        assert_eq!(Range::count_int(5, 0, 1), 0);
        let big = Range::eval_range(
            &Tensor::scalar(i64::MAX - 2),
            &Tensor::scalar(i64::MAX),
            &Tensor::scalar(1i64),
        )
        .unwrap();
        assert_eq!(
            big.as_slice::<i64>().unwrap(),
            &[i64::MAX - 2, i64::MAX - 1]
        );
    }
}
