//! Matrix products: MatMul (numpy semantics: 1-D promotion, broadcast
//! batches), and the quantized MatMulInteger and QLinearMatMul. The kernel
//! and Gemm (a compound of MatMul) live in [`gemm`].

pub(crate) mod gemm;

use crate::ops::quant::{combined_scale, saturate_round};
use crate::registry::Registry;
use crate::util::{broadcast_shapes, broadcast_strides, for_each_offset};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use gemm::{batched_matmul, run_typed, Accepts, GemmElem, MatMulShape, TypedKernel};
use kiln_ir::{ensure, DType, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("MatMul", MatMul);
    gemm::register(r);
    r.add("MatMulInteger", MatMulInteger);
    r.add("QLinearMatMul", QLinearMatMul);
}

/// Output type from the shapes of the inputs at `positions`, or an unknown
/// shape when one of them is not known.
pub(crate) fn infer_from(
    cx: &InferCx,
    dtype: DType,
    positions: &[usize],
    f: impl FnOnce(&[&[usize]]) -> Result<Vec<usize>>,
) -> Result<TensorType> {
    let mut shapes = Vec::new();
    for &p in positions {
        match cx.shape(p)? {
            Some(s) => shapes.push(s),
            None => return Ok(TensorType::unknown_shape(dtype)),
        }
    }
    Ok(TensorType::new(dtype, f(&shapes)?))
}

struct MatMul;

struct MatMulKernel<'a>(&'a MatMulShape);

impl TypedKernel for MatMulKernel<'_> {
    fn run<T: GemmElem>(&self, inputs: &[&[T]]) -> Result<Vec<T>> {
        batched_matmul(self.0, inputs[0], inputs[1])
    }
}

impl Op for MatMul {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let (a, b) = (&cx.input(0)?.ty, &cx.input(1)?.ty);
        ensure!(
            a.dtype == b.dtype,
            "input types differ: {} and {}",
            a.dtype,
            b.dtype
        );
        Ok(vec![infer_from(cx, a.dtype, &[0, 1], |s| {
            Ok(MatMulShape::new(s[0], s[1])?.out)
        })?])
    }

    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let sh = MatMulShape::new(&a.shape, &b.shape)?;
        let data = run_typed(&MatMulKernel(&sh), &[a, b], Accepts::Numbers)?;
        Ok(vec![Tensor::new(sh.out, data)?])
    }
}

/// Which operand of a quantized matmul a zero point or scale belongs to:
/// a 1-D parameter is per row of A (shape `[M, 1]`) or per column of B
/// (shape `[N]`); scalars apply to the whole tensor; N-D ones broadcast.
#[derive(Clone, Copy)]
enum Side {
    A,
    B,
}

/// The shape a quantization parameter of `side` broadcasts with.
fn param_shape(p: &Tensor, side: Side) -> Vec<usize> {
    match (side, p.rank()) {
        _ if p.len() == 1 => vec![],
        (Side::A, 1) => vec![p.shape[0], 1],
        _ => p.shape.clone(),
    }
}

/// Strides to read parameter `p`, viewed with shape `p_shape`, for each
/// element of `shape`, checking that it broadcasts to exactly `shape`.
fn fit_strides(p: &Tensor, p_shape: &[usize], shape: &[usize]) -> Result<Vec<usize>> {
    let ok = p_shape.iter().product::<usize>() == p.len()
        && p_shape.len() <= shape.len()
        && broadcast_shapes(&[shape, p_shape]).is_ok_and(|s| s == shape);
    ensure!(
        ok,
        "quantization parameter of shape {:?} does not fit an operand of shape {shape:?}",
        p.shape
    );
    Ok(broadcast_strides(p_shape, shape))
}

/// `x - zero_point` as exact i32 values; `zp_shape` is the shape the zero
/// point broadcasts with against `x`.
pub(crate) fn centered(x: &Tensor, zp: Option<&Tensor>, zp_shape: &[usize]) -> Result<Vec<i32>> {
    ensure!(
        matches!(x.dtype(), DType::I8 | DType::U8 | DType::I16 | DType::U16),
        "unsupported quantized type {}",
        x.dtype()
    );
    let xs: Vec<i32> = x.data.to_i64_vec()?.into_iter().map(|v| v as i32).collect();
    let Some(zp) = zp else { return Ok(xs) };
    ensure!(
        zp.dtype() == x.dtype(),
        "zero point type {} differs from its input's {}",
        zp.dtype(),
        x.dtype()
    );
    let zs = zp.data.to_i64_vec()?;
    let strides = fit_strides(zp, zp_shape, &x.shape)?;
    let mut out = xs;
    for_each_offset(&x.shape, [&strides], |i, [iz]| out[i] -= zs[iz] as i32);
    Ok(out)
}

/// `(a - a_zp) @ (b - b_zp)` in exact i32 arithmetic.
fn integer_matmul(
    a: &Tensor,
    a_zp: Option<&Tensor>,
    b: &Tensor,
    b_zp: Option<&Tensor>,
) -> Result<(MatMulShape, Vec<i32>)> {
    let sh = MatMulShape::new(&a.shape, &b.shape)?;
    let zp_shape = |zp: Option<&Tensor>, side| zp.map_or(vec![], |z| param_shape(z, side));
    let (ca, cb) = (
        centered(a, a_zp, &zp_shape(a_zp, Side::A))?,
        centered(b, b_zp, &zp_shape(b_zp, Side::B))?,
    );
    let out = batched_matmul(&sh, &ca, &cb)?;
    Ok((sh, out))
}

struct MatMulInteger;

impl Op for MatMulInteger {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![infer_from(cx, DType::I32, &[0, 1], |s| {
            Ok(MatMulShape::new(s[0], s[1])?.out)
        })?])
    }

    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (sh, out) = integer_matmul(
            arg(inputs, 0)?,
            opt_arg(inputs, 2),
            arg(inputs, 1)?,
            opt_arg(inputs, 3),
        )?;
        Ok(vec![Tensor::from_vec(sh.out, out)?])
    }
}

/// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp).
struct QLinearMatMul;

impl Op for QLinearMatMul {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = match cx.opt_input(7) {
            Some(zp) => zp.ty.dtype,
            None => cx.input(0)?.ty.dtype,
        };
        Ok(vec![infer_from(cx, dtype, &[0, 3], |s| {
            Ok(MatMulShape::new(s[0], s[1])?.out)
        })?])
    }

    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (a, a_scale, b, b_scale, y_scale) = (
            arg(inputs, 0)?,
            arg(inputs, 1)?,
            arg(inputs, 3)?,
            arg(inputs, 4)?,
            arg(inputs, 6)?,
        );
        let y_zp = opt_arg(inputs, 7);
        let (sh, acc) = integer_matmul(a, opt_arg(inputs, 2), b, opt_arg(inputs, 5))?;
        let out_shape = sh.out;
        ensure!(
            y_scale.len() == 1,
            "QLinearMatMul y_scale must be a scalar, got shape {:?}",
            y_scale.shape
        );
        let sa = fit_strides(a_scale, &param_shape(a_scale, Side::A), &out_shape)?;
        let sb = fit_strides(b_scale, &param_shape(b_scale, Side::B), &out_shape)?;
        let scale_dtype = a_scale.dtype();
        ensure!(
            scale_dtype.is_float()
                && b_scale.dtype() == scale_dtype
                && y_scale.dtype() == scale_dtype,
            "QLinearMatMul scales must share one float type"
        );
        let (va, vb, vy) = (
            a_scale.data.to_f64_vec()?,
            b_scale.data.to_f64_vec()?,
            y_scale.data.get_f64(0),
        );
        let zp = match y_zp {
            Some(z) => {
                ensure!(
                    z.len() == 1,
                    "QLinearMatMul y_zero_point must be a scalar, got shape {:?}",
                    z.shape
                );
                z.data.get_f64(0)
            }
            None => 0.0,
        };
        let mut values = vec![0.0; acc.len()];
        for_each_offset(&out_shape, [&sa, &sb], |i, [ia, ib]| {
            values[i] = acc[i] as f64 * combined_scale(scale_dtype, va[ia], vb[ib], vy) + zp;
        });
        let dtype = y_zp.map_or(a.dtype(), |z| z.dtype());
        Ok(vec![Tensor::new(
            out_shape,
            saturate_round(dtype, values.into_iter())?,
        )?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook triple loop, accumulating in f64.
    fn naive_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for p in 0..k {
                    s += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
                c[i * n + j] = s as f32;
            }
        }
        c
    }

    #[test]
    fn matmul_matches_naive_triple_loop() {
        let (m, k, n) = (64, 96, 80);
        // Deterministic pseudo-random values in [-1, 1).
        let mut seed = 0x2545_f491u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
        let ta = Tensor::from_vec(vec![m, k], a.clone()).unwrap();
        let tb = Tensor::from_vec(vec![k, n], b.clone()).unwrap();
        let sh = MatMulShape::new(&ta.shape, &tb.shape).unwrap();
        let got = run_typed(&MatMulKernel(&sh), &[&ta, &tb], Accepts::Numbers).unwrap();
        let got = Tensor::new(sh.out, got).unwrap();
        assert_eq!(got.shape, vec![m, n]);
        let want = naive_matmul(&a, &b, m, k, n);
        for (i, (g, w)) in got.as_slice::<f32>().unwrap().iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "element {i}: {g} vs {w}"
            );
        }
    }

    #[test]
    fn integer_matmul_is_exact_and_promotes_vectors() {
        let big = 1i64 << 60;
        let a = Tensor::from_vec(vec![2], vec![big, 3]).unwrap();
        let b = Tensor::from_vec(vec![2, 1, 2, 2], vec![1i64, 0, 0, 1, 2, 0, 0, 2]).unwrap();
        let sh = MatMulShape::new(&a.shape, &b.shape).unwrap();
        assert_eq!(sh.out, vec![2, 1, 2]);
        let got = Tensor::new(
            sh.out.clone(),
            run_typed(&MatMulKernel(&sh), &[&a, &b], Accepts::Numbers).unwrap(),
        )
        .unwrap();
        assert_eq!(got.as_slice::<i64>().unwrap(), &[big, 3, 2 * big, 6]);
        assert!(MatMulShape::new(&[2, 3], &[2, 3]).is_err());
        assert!(MatMulShape::new(&[], &[3]).is_err());
    }
}
