//! Det: determinants of the square matrices in the last two dims, by LU
//! decomposition with partial pivoting (in f64).

use crate::ops::norm::{float_input_type, float_tensor, float_values};
use crate::registry::Registry;
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("Det", Det);
}

struct Det;

/// Batch shape and matrix size of a (..., M, M) shape.
fn batch_shape(shape: &[usize]) -> Result<(Vec<usize>, usize)> {
    let r = shape.len();
    if r < 2 || shape[r - 1] != shape[r - 2] {
        bail!("Det needs square matrices in the last two dims, got shape {shape:?}");
    }
    Ok((shape[..r - 2].to_vec(), shape[r - 1]))
}

impl Op for Det {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let ty = float_input_type(cx, 0)?;
        Ok(vec![match &ty.shape {
            Some(s) => TensorType::new(ty.dtype, batch_shape(s)?.0),
            None => TensorType::unknown_shape(ty.dtype),
        }])
    }

    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let (batch, m) = batch_shape(&x.shape)?;
        let v = float_values(x)?;
        let dets: Vec<f64> = if m == 0 {
            vec![1.0; batch.iter().product()]
        } else {
            v.chunks_exact(m * m)
                .map(|a| determinant(a.to_vec(), m))
                .collect()
        };
        Ok(vec![float_tensor(x.dtype(), batch, &dets)?])
    }
}

/// Determinant of the row-major m×m matrix `a` (consumed as scratch).
fn determinant(mut a: Vec<f64>, m: usize) -> f64 {
    let mut det = 1.0;
    for col in 0..m {
        let pivot = (col..m)
            .max_by(|&i, &j| a[i * m + col].abs().total_cmp(&a[j * m + col].abs()))
            .unwrap_or(col);
        if a[pivot * m + col] == 0.0 {
            return 0.0;
        }
        if pivot != col {
            for k in 0..m {
                a.swap(pivot * m + k, col * m + k);
            }
            det = -det;
        }
        let p = a[col * m + col];
        det *= p;
        for row in col + 1..m {
            let f = a[row * m + col] / p;
            for k in col..m {
                a[row * m + k] -= f * a[col * m + k];
            }
        }
    }
    det
}
