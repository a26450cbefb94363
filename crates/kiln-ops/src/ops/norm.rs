//! Normalizations and losses: Softmax, LogSoftmax, Hardmax (`softmax`);
//! LayerNormalization, RMSNormalization, GroupNormalization,
//! InstanceNormalization, BatchNormalization, MeanVarianceNormalization
//! (`standardize`); LpNormalization and LRN (`local`);
//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (`loss`).
//! Softmax, LogSoftmax, LpNormalization and the `standardize` family are
//! compounds that open into primitives; Hardmax, LRN and the losses are
//! library ops that compute in f64 and round once to the element type. The
//! helpers here convert float tensors and walk the lines along an axis.

mod local;
mod loss;
pub(crate) mod softmax;
mod standardize;

use crate::registry::Registry;
use crate::util::numel;
use crate::InferCx;
use kiln_ir::tensor::{bf16, f16};
use kiln_ir::{bail, DType, Data, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    softmax::register(r);
    standardize::register(r);
    local::register(r);
    loss::register(r);
}

/// The elements of a float tensor as f64.
pub(crate) fn float_values(t: &Tensor) -> Result<Vec<f64>> {
    if !t.dtype().is_float() {
        bail!("expected a float tensor, got {}", t.dtype());
    }
    t.data.to_f64_vec()
}

/// A float tensor of `dtype` from f64 values (rounded once).
pub(crate) fn float_tensor(dtype: DType, shape: Vec<usize>, vals: &[f64]) -> Result<Tensor> {
    let data = match dtype {
        DType::F32 => Data::F32(vals.iter().map(|&v| v as f32).collect()),
        DType::F64 => Data::F64(vals.into()),
        DType::F16 => Data::F16(vals.iter().map(|&v| f16::from_f64(v)).collect()),
        DType::BF16 => Data::BF16(vals.iter().map(|&v| bf16::from_f64(v)).collect()),
        other => bail!("expected a float type, got {other}"),
    };
    Tensor::new(shape, data)
}

/// Rounds an f64 to the precision of a float element type, for ops whose
/// definition computes in that type stage by stage.
pub(crate) fn rounder(dtype: DType) -> fn(f64) -> f64 {
    match dtype {
        DType::F32 => |x| x as f32 as f64,
        DType::F16 => |x| f16::from_f64(x).to_f64(),
        DType::BF16 => |x| bf16::from_f64(x).to_f64(),
        _ => |x| x,
    }
}

/// Type of input `i`, checked to be a float type.
pub(crate) fn float_input_type(cx: &InferCx, i: usize) -> Result<TensorType> {
    let ty = cx.input(i)?.ty.clone();
    if !ty.dtype.is_float() {
        bail!("input {i} must be a float tensor, got {}", ty.dtype);
    }
    Ok(ty)
}

/// The lines along one axis of a row-major tensor: `outer` blocks of `len`
/// elements, consecutive elements `inner` apart.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lines {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

impl Lines {
    /// Lines along `axis` of `shape`.
    pub fn along(shape: &[usize], axis: usize) -> Lines {
        Lines {
            outer: numel(&shape[..axis]),
            len: shape[axis],
            inner: numel(&shape[axis + 1..]),
        }
    }

    /// Lines over the flattened trailing dims `axis..` (the 2-D coercion of
    /// older Softmax-style ops).
    pub fn flattened_from(shape: &[usize], axis: usize) -> Lines {
        Lines {
            outer: numel(&shape[..axis]),
            len: numel(&shape[axis..]),
            inner: 1,
        }
    }

    /// Applies `f` to every line of `v` in place.
    pub fn for_each(self, v: &mut [f64], mut f: impl FnMut(&mut [f64])) {
        if self.inner == 1 {
            for line in v.chunks_exact_mut(self.len.max(1)) {
                f(line);
            }
            return;
        }
        let mut buf = vec![0.0; self.len];
        for o in 0..self.outer {
            for i in 0..self.inner {
                let at = |k: usize| (o * self.len + k) * self.inner + i;
                for (k, b) in buf.iter_mut().enumerate() {
                    *b = v[at(k)];
                }
                f(&mut buf);
                for (k, b) in buf.iter().enumerate() {
                    v[at(k)] = *b;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::compose::eval_op;
    use kiln_ir::{Attr, Tensor};

    fn f32s(t: &Tensor) -> Vec<f32> {
        t.as_slice::<f32>().unwrap().to_vec()
    }

    #[test]
    fn softmax_before_13_coerces_to_2d() {
        let x = Tensor::from_vec(
            vec![2, 2, 2],
            vec![1.0f32, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0, 1.0],
        )
        .unwrap();
        let y = f32s(
            &eval_op("Softmax", 11, vec![("axis", Attr::Int(1))], &[x.clone()], 1).unwrap()[0],
        );
        // Each row of 4 (the flattened dims 1..) sums to one.
        assert!((y[..4].iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((y[4] - 0.25).abs() < 1e-6);
        let y13 = f32s(&eval_op("Softmax", 13, vec![("axis", Attr::Int(1))], &[x], 1).unwrap()[0]);
        assert!((y13[0] + y13[2] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn softmax_of_large_inputs_does_not_overflow() {
        let x = Tensor::from_vec(vec![2, 2], vec![1000.0f32, 999.0, -1000.0, -1e30]).unwrap();
        let y = f32s(&eval_op("Softmax", 13, vec![], std::slice::from_ref(&x), 1).unwrap()[0]);
        let e = (-1.0f32).exp();
        let want = [1.0 / (1.0 + e), e / (1.0 + e), 1.0, 0.0];
        for (g, w) in y.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{y:?}");
        }
        let y = f32s(&eval_op("LogSoftmax", 13, vec![], &[x], 1).unwrap()[0]);
        let l = (1.0 + e).ln();
        assert!(
            (y[0] + l).abs() < 1e-5 && (y[1] + 1.0 + l).abs() < 1e-5,
            "{y:?}"
        );
        assert_eq!(y[2], 0.0);
        assert!(y[3] < -1e29, "{y:?}");
    }

    #[test]
    fn layer_norm_returns_mean_and_inverse_std_in_stash_type() {
        let x = Tensor::from_vec(vec![2, 2], vec![1.0f32, 3.0, -2.0, -2.0]).unwrap();
        let one = Tensor::from_vec(vec![2], vec![1.0f32, 1.0]).unwrap();
        let attrs = vec![("epsilon", Attr::Float(0.0))];
        let out = eval_op("LayerNormalization", 17, attrs, &[x, one], 3).unwrap();
        assert_eq!(f32s(&out[0])[..2], [-1.0, 1.0]);
        assert_eq!(out[1].shape, vec![2, 1]);
        assert_eq!(f32s(&out[1]), vec![2.0, -2.0]);
        assert_eq!(f32s(&out[2])[0], 1.0);
        assert!(f32s(&out[2])[1].is_infinite());
    }

    #[test]
    fn group_norm_18_scales_per_group() {
        let x = Tensor::from_vec(vec![1, 4, 1], vec![1.0f32, 3.0, 5.0, 9.0]).unwrap();
        let scale = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]).unwrap();
        let bias = Tensor::from_vec(vec![2], vec![0.0f32, 10.0]).unwrap();
        let attrs = || vec![("num_groups", Attr::Int(2)), ("epsilon", Attr::Float(0.0))];
        let y = f32s(
            &eval_op(
                "GroupNormalization",
                18,
                attrs(),
                &[x.clone(), scale, bias],
                1,
            )
            .unwrap()[0],
        );
        assert_eq!(y, vec![-1.0, 1.0, 8.0, 12.0]);
        // Opset 21 wants one value per channel.
        let scale4 = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]).unwrap();
        assert!(eval_op(
            "GroupNormalization",
            21,
            attrs(),
            &[x, scale4.clone(), scale4],
            1
        )
        .is_err());
    }

    #[test]
    fn lrn_window_for_even_size() {
        // size 4: channel c sums channels c-1 ..= c+2.
        let x = Tensor::from_vec(vec![1, 4, 1, 1], vec![1.0f32, 1.0, 1.0, 1.0]).unwrap();
        let attrs = vec![
            ("size", Attr::Int(4)),
            ("alpha", Attr::Float(4.0)),
            ("beta", Attr::Float(1.0)),
            ("bias", Attr::Float(0.0)),
        ];
        let y = f32s(&eval_op("LRN", 13, attrs, &[x], 1).unwrap()[0]);
        assert_eq!(y, vec![1.0 / 3.0, 1.0 / 4.0, 1.0 / 3.0, 1.0 / 2.0]);
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let x = Tensor::from_vec(vec![2, 3], vec![0.0f32; 6]).unwrap();
        let t = Tensor::from_vec(vec![2], vec![0i64, 7]).unwrap();
        assert!(eval_op("NegativeLogLikelihoodLoss", 13, vec![], &[x.clone(), t], 1).is_err());
        assert!(eval_op(
            "LpNormalization",
            13,
            vec![("p", Attr::Int(3))],
            &[x.clone()],
            1
        )
        .is_err());
        assert!(eval_op(
            "GroupNormalization",
            21,
            vec![("num_groups", Attr::Int(0))],
            &[x.clone(), x.clone(), x],
            1
        )
        .is_err());
    }
}
