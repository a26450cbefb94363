//! Matrix products: MatMul (numpy semantics: 1-D promotion, broadcast
//! batches), a primitive whose tensor expression is the sum of products
//! and whose direct kernel is the blocked gemm; and the quantized
//! MatMulInteger and QLinearMatMul. The kernel and Gemm (a compound of
//! MatMul) live in [`gemm`].

pub(crate) mod gemm;

use crate::ops::movement::common::input_shapes;
use crate::ops::quant::{combined_scale, saturate_round};
use crate::registry::Registry;
use crate::te::primitive::{broadcast_index, Prim, Primitive};
use crate::te::{Access, Combiner, Expr, IndexExpr, Reduction, TensorExpr};
use crate::util::{broadcast_shapes, broadcast_strides, for_each_offset};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use gemm::{batched_matmul, run_typed, Accepts, GemmElem, MatMulShape, TypedKernel};
use kiln_ir::{ensure, DType, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("MatMul", Prim(MatMul));
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

/// `out[b…, m, n] = sum[r0 < K] Mul(A[b…, m, r0], B[b…, r0, n])`, the
/// batch dims `b…` broadcast; a 1-D A is one row and a 1-D B one column,
/// whose dim the output drops.
struct MatMul;

struct MatMulKernel<'a>(&'a MatMulShape);

impl TypedKernel for MatMulKernel<'_> {
    fn run<T: GemmElem>(&self, inputs: &[&[T]]) -> Result<Vec<T>> {
        batched_matmul(self.0, inputs[0], inputs[1])
    }
}

impl Primitive for MatMul {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (a, b) = (&cx.input(0)?.ty, &cx.input(1)?.ty);
        ensure!(
            a.dtype == b.dtype,
            "input types differ: {} and {}",
            a.dtype,
            b.dtype
        );
        let (Some(inputs), Some(sa), Some(sb)) = (input_shapes(cx), cx.shape(0)?, cx.shape(1)?)
        else {
            return Ok(None);
        };
        let sh = MatMulShape::new(sa, sb)?;
        // Output dims: the batch, then m (unless A is 1-D), then n (unless B is).
        let m = sh.batch.len();
        let n = m + usize::from(sa.len() > 1);
        let mut ia = broadcast_index(&sh.a_batch, &sh.batch);
        if sa.len() > 1 {
            ia.push(IndexExpr::out(m));
        }
        ia.push(IndexExpr::red(0));
        let mut ib = broadcast_index(&sh.b_batch, &sh.batch);
        ib.push(IndexExpr::red(0));
        if sb.len() > 1 {
            ib.push(IndexExpr::out(n));
        }
        Ok(Some(
            TensorExpr {
                dtype: a.dtype,
                shape: sh.out.clone(),
                inputs,
                accesses: vec![
                    Access {
                        input: 0,
                        index: ia,
                    },
                    Access {
                        input: 1,
                        index: ib,
                    },
                ],
                reduction: Some(Reduction {
                    extents: vec![sh.k],
                    combiner: Combiner::Sum,
                    widened: true,
                    arg: None,
                }),
                body: Expr::call("Mul", vec![Expr::Load(0), Expr::Load(1)]),
            }
            .simplified(),
        ))
    }

    /// The blocked gemm per batch (floats accumulate in their own type).
    fn kernel(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Option<Result<Tensor>> {
        let run = || {
            let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
            let sh = MatMulShape::new(&a.shape, &b.shape)?;
            let data = run_typed(&MatMulKernel(&sh), &[a, b], Accepts::Numbers)?;
            Tensor::new(sh.out, data)
        };
        Some(run())
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

/// Test support for primitives with a direct kernel: runs the kernel and
/// the evaluated tensor expression on the same inputs.
#[cfg(test)]
pub(crate) mod kernel_check {
    use crate::te::classify::classify;
    use crate::te::eval::evaluate;
    use crate::te::primitive::{define_for_inputs, Primitive};
    use crate::{registry, EvalCx, SubgraphRunner};
    use kiln_ir::{Attr, Graph, Node, Result, Tensor};

    struct NoSubgraphs;

    impl SubgraphRunner for NoSubgraphs {
        fn run(&self, _g: &Graph, _inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
            kiln_ir::bail!("no subgraphs here")
        }
    }

    /// Runs `f` with the primitive `op`, a context for a node with `attrs`
    /// and `inputs`.
    fn with_primitive<R>(
        domain: &str,
        op: &str,
        attrs: &[(&str, Attr)],
        inputs: &[&Tensor],
        f: impl FnOnce(&dyn Primitive, &EvalCx, &[Option<&Tensor>]) -> R,
    ) -> R {
        let node = Node {
            name: "check".into(),
            op: op.into(),
            domain: String::new(),
            inputs: vec![],
            outputs: vec![],
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        let cx = EvalCx {
            node: &node,
            opset: 22,
            subgraphs: &NoSubgraphs,
        };
        let p = registry::lookup(domain, op)
            .and_then(|o| o.primitive())
            .expect("a registered primitive");
        let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
        f(p, &cx, &ins)
    }

    /// (kernel output, expression output) of the registered op `op` with
    /// `attrs` on `inputs`.
    pub fn both(op: &str, attrs: &[(&str, Attr)], inputs: &[&Tensor]) -> (Tensor, Tensor) {
        both_in("", op, attrs, inputs)
    }

    /// [`both`] for an op of `domain`.
    pub fn both_in(
        domain: &str,
        op: &str,
        attrs: &[(&str, Attr)],
        inputs: &[&Tensor],
    ) -> (Tensor, Tensor) {
        with_primitive(domain, op, attrs, inputs, |p, cx, ins| {
            let kernel = p.kernel(cx, ins).expect("a direct kernel").unwrap();
            let te = define_for_inputs(p, cx, ins).unwrap();
            (kernel, evaluate(&te, ins).unwrap())
        })
    }

    /// The registered op `op` of `domain` with `attrs` run on `inputs` (its
    /// direct kernel where it has one, else its expression evaluated).
    pub fn run_in(domain: &str, op: &str, attrs: &[(&str, Attr)], inputs: &[&Tensor]) -> Tensor {
        with_primitive(domain, op, attrs, inputs, |p, cx, ins| {
            match p.kernel(cx, ins) {
                Some(out) => out.unwrap(),
                None => evaluate(&define_for_inputs(p, cx, ins).unwrap(), ins).unwrap(),
            }
        })
    }

    /// "APOLLO type / mapping type" of `op` with `attrs` on `inputs`.
    pub fn classes(op: &str, attrs: &[(&str, Attr)], inputs: &[&Tensor]) -> String {
        classes_in("", op, attrs, inputs)
    }

    /// [`classes`] for an op of `domain`.
    pub fn classes_in(
        domain: &str,
        op: &str,
        attrs: &[(&str, Attr)],
        inputs: &[&Tensor],
    ) -> String {
        with_primitive(domain, op, attrs, inputs, |p, cx, ins| {
            let c = classify(&define_for_inputs(p, cx, ins).unwrap());
            format!("{} / {}", c.apollo, c.mapping)
        })
    }

    /// A deterministic pseudo-random f32 tensor with values in [-1, 1).
    pub fn random(shape: &[usize], seed: &mut u64) -> Tensor {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        Tensor::from_vec(shape.to_vec(), v).unwrap()
    }

    /// Same shape, and every element within `tol·(1 + |want|)`.
    pub fn assert_close(got: &Tensor, want: &Tensor, tol: f64, what: &str) {
        assert_eq!(got.shape, want.shape, "{what}: shapes");
        assert_eq!(got.dtype(), want.dtype(), "{what}: dtypes");
        let (g, w) = (
            got.data.to_f64_vec().unwrap(),
            want.data.to_f64_vec().unwrap(),
        );
        for (i, (g, w)) in g.iter().zip(&w).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "{what}: element {i}: kernel {g} vs expression {w}"
            );
        }
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

    /// The gemm kernel computes what the tensor expression says, for batch
    /// broadcasting, 1-D operands on either side and an empty inner dim.
    #[test]
    fn matmul_kernel_matches_its_expression() {
        use super::kernel_check::{assert_close, both, random};
        let cases: &[(&[usize], &[usize])] = &[
            (&[3, 4], &[4, 5]),
            (&[2, 3, 4], &[4, 5]),
            (&[2, 1, 3, 4], &[5, 4, 2]),
            (&[1, 3, 4], &[2, 4, 2]),
            (&[4], &[2, 4, 5]),
            (&[2, 3, 4], &[4]),
            (&[7], &[7]),
            (&[2, 3, 0], &[0, 4]),
        ];
        let mut seed = 7;
        for (sa, sb) in cases {
            let (a, b) = (random(sa, &mut seed), random(sb, &mut seed));
            let (got, want) = both("MatMul", &[], &[&a, &b]);
            assert_close(&got, &want, 1e-5, &format!("MatMul {sa:?} x {sb:?}"));
        }
        let (a, b) = (random(&[2, 3, 4], &mut seed), random(&[4, 5], &mut seed));
        assert_eq!(
            super::kernel_check::classes("MatMul", &[], &[&a, &b]),
            "opaque(matmul) / many-to-many"
        );
        let a = Tensor::from_vec(vec![2, 3], vec![1i64 << 40, -2, 3, 4, 5, -6]).unwrap();
        let b = Tensor::from_vec(vec![3, 1], vec![3i64, 1, -1]).unwrap();
        let (got, want) = both("MatMul", &[], &[&a, &b]);
        assert_eq!(got, want);
    }
}
