//! Broadcasting binary arithmetic (Add, Sub, Mul, Div).

use crate::registry::Registry;
use crate::util::{broadcast_shapes, zip_map};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, dispatch_num, Result, Tensor, TensorType};
use kiln_ir::Num;

pub fn register(r: &mut Registry) {
    r.add("Add", Arith(|a, b| a + b, |a, b| a.wrapping_add(b)));
    r.add("Sub", Arith(|a, b| a - b, |a, b| a.wrapping_sub(b)));
    r.add("Mul", Arith(|a, b| a * b, |a, b| a.wrapping_mul(b)));
    r.add("Div", Arith(|a, b| a / b, |a, b| if b == 0 { 0 } else { a.wrapping_div(b) }));
}

/// Arithmetic with a float rule (applied in f64 for floats) and an integer
/// rule (wrapping, in i128 so every integer dtype fits).
struct Arith(fn(f64, f64) -> f64, fn(i128, i128) -> i128);

/// Output type of a broadcasting op: `dtype` with the broadcast shape.
pub fn broadcast_type(cx: &InferCx, dtype: kiln_ir::DType) -> Result<TensorType> {
    let mut shapes = Vec::new();
    for i in 0..cx.inputs.len() {
        match cx.shape(i)? {
            Some(s) => shapes.push(s),
            None => return Ok(TensorType::unknown_shape(dtype)),
        }
    }
    Ok(TensorType::new(dtype, broadcast_shapes(&shapes)?))
}

impl Op for Arith {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let (a, b) = (cx.input(0)?.ty.dtype, cx.input(1)?.ty.dtype);
        if a != b {
            bail!("input types differ: {a} and {b}");
        }
        Ok(vec![broadcast_type(cx, a)?])
    }

    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        if a.dtype() != b.dtype() {
            bail!("input types differ: {} and {}", a.dtype(), b.dtype());
        }
        let (ff, fi) = (self.0, self.1);
        let out = match (&a.data, &b.data) {
            (kiln_ir::Data::F32(_), _) => zip_map::<f32, f32, f32>(a, b, |x, y| ff(*x as f64, *y as f64) as f32)?,
            (d, _) if d.dtype().is_float() => {
                dispatch_num!(d, |_v: T| zip_map::<T, T, T>(a, b, |x, y| T::from_f64(ff(x.to_f64(), y.to_f64())))?, unreachable!())
            }
            (d, _) if d.dtype().is_int() => {
                dispatch_num!(d, |_v: T| zip_map::<T, T, T>(a, b, |x, y| T::from_f64(fi(x.to_f64() as i128, y.to_f64() as i128) as f64))?, unreachable!())
            }
            (d, _) => bail!("unsupported type {}", d.dtype()),
        };
        Ok(vec![out])
    }
}
