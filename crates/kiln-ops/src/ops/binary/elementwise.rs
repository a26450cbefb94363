//! Element-type classes and the broadcasting kernels shared by the
//! element-wise op families (unary, binary, cast).
//!
//! Floats (f32, f64, f16, bf16) compute in f64 and round once to their own
//! type: for +, -, *, / and sqrt this is exactly the correctly rounded result
//! of the narrower type, because f64 carries more than twice their precision.
//! Integers compute exactly in i128 and wrap to their width, so every integer
//! dtype (u64 and i64 included) gets exact two's-complement arithmetic.

use crate::util::{broadcast_shapes, map, zip_map};
use crate::InferCx;
use kiln_ir::{bail, DType, Num, Result, Tensor, TensorType};

/// An integer element type, computed on exactly through i128.
pub(crate) trait Int: Num {
    const BITS: u32;
    fn to_i128(self) -> i128;
    /// Two's-complement truncation of `v` to this type's width.
    fn from_i128(v: i128) -> Self;
}

macro_rules! impl_int {
    ($($t:ty),*) => {$(
        impl Int for $t {
            const BITS: u32 = <$t>::BITS;
            fn to_i128(self) -> i128 {
                self as i128
            }
            fn from_i128(v: i128) -> Self {
                v as $t
            }
        }
    )*};
}
impl_int!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Runs one of four arms by the class of `$dtype`: `float` with `$F` bound to
/// the float element type, `int` with `$I` bound to the integer type (which
/// implements [`Int`]), or the `bool` / `string` arms.
macro_rules! by_class {
    ($dtype:expr, float |$F:ident| $fb:expr, int |$I:ident| $ib:expr, bool => $bb:expr, string => $sb:expr $(,)?) => {{
        use kiln_ir::DType as D;
        match $dtype {
            D::F32 => {
                #[allow(dead_code)]
                type $F = f32;
                $fb
            }
            D::F64 => {
                #[allow(dead_code)]
                type $F = f64;
                $fb
            }
            D::F16 => {
                #[allow(dead_code)]
                type $F = kiln_ir::tensor::f16;
                $fb
            }
            D::BF16 => {
                #[allow(dead_code)]
                type $F = kiln_ir::tensor::bf16;
                $fb
            }
            D::I8 => {
                #[allow(dead_code)]
                type $I = i8;
                $ib
            }
            D::I16 => {
                #[allow(dead_code)]
                type $I = i16;
                $ib
            }
            D::I32 => {
                #[allow(dead_code)]
                type $I = i32;
                $ib
            }
            D::I64 => {
                #[allow(dead_code)]
                type $I = i64;
                $ib
            }
            D::U8 => {
                #[allow(dead_code)]
                type $I = u8;
                $ib
            }
            D::U16 => {
                #[allow(dead_code)]
                type $I = u16;
                $ib
            }
            D::U32 => {
                #[allow(dead_code)]
                type $I = u32;
                $ib
            }
            D::U64 => {
                #[allow(dead_code)]
                type $I = u64;
                $ib
            }
            D::Bool => $bb,
            D::Str => $sb,
        }
    }};
}
pub(crate) use by_class;

/// Applies a float rule to each element of a float tensor of type `F`.
pub(crate) fn map_float<F: Num>(x: &Tensor, f: impl Fn(f64) -> f64) -> Result<Tensor> {
    map::<F, F>(x, |v| F::from_f64(f(v.to_f64())))
}

/// Applies an integer rule to each element of an integer tensor of type `I`.
pub(crate) fn map_int<I: Int>(x: &Tensor, f: impl Fn(i128) -> i128) -> Result<Tensor> {
    map::<I, I>(x, |v| I::from_i128(f(v.to_i128())))
}

/// Broadcasting float rule over two tensors of type `F`.
pub(crate) fn zip_float<F: Num>(
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(f64, f64) -> f64,
) -> Result<Tensor> {
    zip_map::<F, F, F>(a, b, |x, y| F::from_f64(f(x.to_f64(), y.to_f64())))
}

/// Broadcasting integer rule over two tensors of type `I`.
pub(crate) fn zip_int<I: Int>(
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(i128, i128) -> i128,
) -> Result<Tensor> {
    zip_map::<I, I, I>(a, b, |x, y| I::from_i128(f(x.to_i128(), y.to_i128())))
}

/// How a binary element-wise op computes on each class of element type;
/// `None` marks a class the op does not accept.
#[derive(Clone, Copy)]
pub(crate) struct BinaryRule {
    pub name: &'static str,
    pub float: Option<fn(f64, f64) -> f64>,
    pub int: Option<fn(i128, i128) -> i128>,
    pub boolean: Option<fn(bool, bool) -> bool>,
}

impl BinaryRule {
    pub fn supports(&self, dtype: DType) -> bool {
        if dtype.is_float() {
            self.float.is_some()
        } else if dtype.is_int() {
            self.int.is_some()
        } else if dtype == DType::Bool {
            self.boolean.is_some()
        } else {
            false
        }
    }

    /// Fails unless both operands have the same dtype and this rule accepts it.
    pub fn check(&self, a: DType, b: DType) -> Result<()> {
        if a != b {
            bail!("{}: operand types differ: {a} and {b}", self.name);
        }
        if !self.supports(a) {
            bail!("{} does not support {a} tensors", self.name);
        }
        Ok(())
    }

    /// Computes the broadcast result of this rule on `a` and `b`.
    pub fn apply(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.check(a.dtype(), b.dtype())?;
        let unsupported = || {
            kiln_ir::Error::new(format!(
                "{} does not support {} tensors",
                self.name,
                a.dtype()
            ))
        };
        by_class!(a.dtype(),
            float |F| zip_float::<F>(a, b, self.float.ok_or_else(unsupported)?),
            int |I| zip_int::<I>(a, b, self.int.ok_or_else(unsupported)?),
            bool => {
                let f = self.boolean.ok_or_else(unsupported)?;
                zip_map::<bool, bool, bool>(a, b, |x, y| f(*x, *y))
            },
            string => Err(unsupported()),
        )
    }
}

/// Output type of a broadcasting op over all of the node's present inputs:
/// `dtype` with the broadcast shape (unknown when an input's shape is).
pub fn broadcast_type(cx: &InferCx, dtype: DType) -> Result<TensorType> {
    let mut shapes = Vec::new();
    for input in cx.inputs.iter().flatten() {
        match &input.ty.shape {
            Some(s) => shapes.push(s.as_slice()),
            None => return Ok(TensorType::unknown_shape(dtype)),
        }
    }
    Ok(TensorType::new(dtype, broadcast_shapes(&shapes)?))
}
