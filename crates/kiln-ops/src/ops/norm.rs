//! Normalizations and losses: Softmax, LogSoftmax, Hardmax (`softmax`);
//! LayerNormalization, RMSNormalization, GroupNormalization,
//! InstanceNormalization, BatchNormalization, MeanVarianceNormalization
//! (`standardize`); LpNormalization and LRN (`local`);
//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (`loss`).
//! All compute in f64 and round once to the element type; the helpers here
//! convert float tensors and walk the lines along an axis.

mod local;
mod loss;
mod softmax;
mod standardize;

use crate::registry::Registry;
use crate::util::numel;
use crate::InferCx;
use kiln_ir::tensor::{bf16, f16};
use kiln_ir::{bail, Data, DType, Result, Tensor, TensorType};

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
        Lines { outer: numel(&shape[..axis]), len: shape[axis], inner: numel(&shape[axis + 1..]) }
    }

    /// Lines over the flattened trailing dims `axis..` (the 2-D coercion of
    /// older Softmax-style ops).
    pub fn flattened_from(shape: &[usize], axis: usize) -> Lines {
        Lines { outer: numel(&shape[..axis]), len: numel(&shape[axis..]), inner: 1 }
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
