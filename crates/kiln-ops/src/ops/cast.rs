//! Cast (a primitive) and CastLike (a compound that opens into Cast):
//! conversion between any two element types, following the ONNX Cast rules.
//!
//! - float -> float rounds to nearest (±inf out of range); float -> integer
//!   truncates toward zero and saturates (NaN gives 0; ONNX leaves out-of-range
//!   values undefined); float -> bool is `x != 0` (NaN is true).
//! - integer -> integer keeps the low bits (two's complement); integer ->
//!   float rounds to nearest; integer -> bool is `x != 0`.
//! - bool -> number is 0 or 1.
//! - string -> number parses plain or scientific notation and INF/NaN in any
//!   case; number -> string writes the shortest text that reads back as the
//!   same value (as the ONNX reference, numpy, does: "0.1", "1e+20", "True").
//!
//! The `saturate` and `round_mode` attributes only concern float8 types,
//! which kiln does not support.

use crate::compound::{Comp, Compound};
use crate::ops::compose;
use crate::registry::Registry;
use crate::te::primitive::{Elementwise, Prim};
use crate::{arg, inputs_id, Builder, EvalCx, InferCx, Op};
use kiln_ir::tensor::{bf16, f16};
use kiln_ir::{
    bail, dispatch_all, with_dtype, DType, Data, Elem, Node, Num, Result, Tensor, TensorType,
    ValueId,
};

pub fn register(r: &mut Registry) {
    r.add("Cast", Prim(Elementwise(Cast)));
    r.add("CastLike", Comp(CastLike));
}

/// Converts `t` to element type `to` by the ONNX Cast rules.
pub fn cast_tensor(t: &Tensor, to: DType) -> Result<Tensor> {
    if t.dtype() == to {
        return Ok(t.clone());
    }
    let data = dispatch_all!(&t.data, |v: S| with_dtype!(to, |U| convert::<S, U>(v)?));
    Tensor::new(t.shape.clone(), data)
}

fn convert<S: CastElem, U: CastElem>(v: &[S]) -> Result<Data> {
    Ok(U::wrap(
        v.iter().map(U::from_elem).collect::<Result<Vec<U>>>()?,
    ))
}

/// The exact value an element stands for, independent of its type.
#[derive(Clone, Copy)]
enum Value {
    Float(f64),
    Int(i128),
    Bool(bool),
}

/// An element type Cast converts from and to.
trait CastElem: Elem {
    fn value(&self) -> Result<Value>;
    fn from_value(v: Value) -> Self;
    /// The element's text form (number -> string casts).
    fn to_text(&self) -> String;
    fn from_elem<S: CastElem>(s: &S) -> Result<Self> {
        Ok(Self::from_value(s.value()?))
    }
}

/// Rounds an integer to float type `F`. i128 -> f32 rounds once; going
/// through f64 would round twice for |i| > 2^53. (f16/bf16 still go through
/// f64; that can differ from a single rounding only beyond 2^53.)
fn int_to_float<F: Num>(i: i128) -> F {
    if F::DTYPE == DType::F32 {
        F::from_f32(i as f32)
    } else {
        F::from_f64(i as f64)
    }
}

macro_rules! impl_cast_float {
    ($($t:ty),*) => {$(
        impl CastElem for $t {
            fn value(&self) -> Result<Value> {
                Ok(Value::Float(Num::to_f64(*self)))
            }
            fn from_value(v: Value) -> Self {
                match v {
                    Value::Float(f) => <$t as Num>::from_f64(f),
                    Value::Int(i) => int_to_float::<$t>(i),
                    Value::Bool(b) => <$t as Num>::from_f64(if b { 1.0 } else { 0.0 }),
                }
            }
            fn to_text(&self) -> String {
                format_float(*self)
            }
        }
    )*};
}
impl_cast_float!(f32, f64, f16, bf16);

macro_rules! impl_cast_int {
    ($($t:ty),*) => {$(
        impl CastElem for $t {
            fn value(&self) -> Result<Value> {
                Ok(Value::Int(*self as i128))
            }
            fn from_value(v: Value) -> Self {
                match v {
                    // `as` truncates toward zero and saturates (NaN -> 0).
                    Value::Float(f) => f as $t,
                    // `as` keeps the low bits.
                    Value::Int(i) => i as $t,
                    Value::Bool(b) => b as $t,
                }
            }
            fn to_text(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
impl_cast_int!(i8, i16, i32, i64, u8, u16, u32, u64);

impl CastElem for bool {
    fn value(&self) -> Result<Value> {
        Ok(Value::Bool(*self))
    }
    fn from_value(v: Value) -> Self {
        match v {
            Value::Float(f) => f != 0.0,
            Value::Int(i) => i != 0,
            Value::Bool(b) => b,
        }
    }
    fn to_text(&self) -> String {
        if *self { "True" } else { "False" }.to_string()
    }
}

impl CastElem for String {
    /// Integers parse exactly; other numbers (plain, scientific, INF, NaN in
    /// any case) as f64; "true"/"false" as bools.
    fn value(&self) -> Result<Value> {
        let s = self.trim();
        if let Ok(i) = s.parse::<i128>() {
            return Ok(Value::Int(i));
        }
        if let Ok(f) = s.parse::<f64>() {
            return Ok(Value::Float(f));
        }
        match s.to_ascii_lowercase().as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => bail!("Cast: string {self:?} is not a number"),
        }
    }
    fn from_value(v: Value) -> Self {
        match v {
            Value::Float(f) => format_float(f),
            Value::Int(i) => i.to_string(),
            Value::Bool(b) => b.to_text(),
        }
    }
    fn to_text(&self) -> String {
        self.clone()
    }
    /// Text keeps the source type's precision (f32 0.1 is "0.1", not its f64 digits).
    fn from_elem<S: CastElem>(s: &S) -> Result<Self> {
        Ok(s.to_text())
    }
}

/// The shortest decimal text that reads back as `x` in its own type, in
/// Python's `repr` layout: positional for 1e-4 <= |x| < 1e16, else
/// scientific with a signed, at least two-digit exponent.
fn format_float<F: Num>(x: F) -> String {
    let v = x.to_f64();
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let sci = (0..17)
        .map(|p| format!("{v:.p$e}"))
        .find(|s| s.parse::<f64>().is_ok_and(|r| F::from_f64(r) == x))
        .unwrap_or_else(|| format!("{v:e}"));
    python_layout(&sci)
}

/// Rewrites Rust scientific text ("-1.25e-7") in Python's repr layout.
fn python_layout(sci: &str) -> String {
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        if point <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
        } else {
            let point = point as usize;
            let int_part = format!("{digits:0<point$}");
            let (int_part, frac) = int_part.split_at(point);
            let frac = if frac.is_empty() { "0" } else { frac };
            format!("{sign}{int_part}.{frac}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{exp_sign}{:02}", exp.abs())
    }
}

/// The target of Cast's `to` attribute: an ONNX type code, or (Cast-1) a
/// type name.
fn cast_target(node: &Node) -> Result<DType> {
    if let Some(name) = node.attr_string("to").ok().flatten() {
        return dtype_from_onnx_name(name);
    }
    let Some(code) = node.attr_int("to")? else {
        bail!("Cast: attribute 'to' is required")
    };
    let code = i32::try_from(code)
        .map_err(|_| kiln_ir::Error::new(format!("Cast: bad type code {code}")))?;
    match DType::from_onnx_code(code) {
        Some(d) => Ok(d),
        None => bail!("Cast to {} is not supported", DType::onnx_code_name(code)),
    }
}

fn dtype_from_onnx_name(name: &str) -> Result<DType> {
    const NAMES: [(&str, DType); 14] = [
        ("FLOAT", DType::F32),
        ("DOUBLE", DType::F64),
        ("FLOAT16", DType::F16),
        ("BFLOAT16", DType::BF16),
        ("INT8", DType::I8),
        ("INT16", DType::I16),
        ("INT32", DType::I32),
        ("INT64", DType::I64),
        ("UINT8", DType::U8),
        ("UINT16", DType::U16),
        ("UINT32", DType::U32),
        ("UINT64", DType::U64),
        ("BOOL", DType::Bool),
        ("STRING", DType::Str),
    ];
    match NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
        Some((_, d)) => Ok(*d),
        None => bail!("Cast to {name} is not supported"),
    }
}

struct Cast;

impl Op for Cast {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let to = cast_target(cx.node)?;
        Ok(vec![TensorType {
            dtype: to,
            shape: cx.input(0)?.ty.shape.clone(),
        }])
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![cast_tensor(arg(inputs, 0)?, cast_target(cx.node)?)?])
    }
}

/// CastLike(x, like) = Cast(x, to = like's element type); `like`'s values
/// are not read.
struct CastLike;

impl Compound for CastLike {
    fn decompose(
        &self,
        _cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let (x, like) = (inputs_id(inputs, 0)?, inputs_id(inputs, 1)?);
        let to = b.ty(like).dtype;
        Ok(vec![Some(compose::cast(b, x, to)?)])
    }

    fn dtypes(&self, cx: &InferCx) -> Result<Vec<DType>> {
        Ok(vec![cx.input(1)?.ty.dtype])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cast<S: Elem, U: Elem>(v: Vec<S>, to: DType) -> Vec<U> {
        let t = Tensor::from_vec(vec![v.len()], v).unwrap();
        cast_tensor(&t, to)
            .unwrap()
            .as_slice::<U>()
            .unwrap()
            .to_vec()
    }

    #[test]
    fn float_to_int_truncates_and_saturates() {
        assert_eq!(
            cast::<f32, i8>(vec![2.9, -2.9, 300.0, -300.0, f32::NAN], DType::I8),
            vec![2, -2, 127, -128, 0]
        );
    }

    #[test]
    fn int_to_int_keeps_low_bits() {
        assert_eq!(
            cast::<i16, i8>(vec![200, -1, 256], DType::I8),
            vec![-56, -1, 0]
        );
        assert_eq!(cast::<i64, u64>(vec![-1], DType::U64), vec![u64::MAX]);
    }

    #[test]
    fn large_int_to_f32_rounds_once() {
        // 2^53 + 2^29 + 1 is just above the f32 midpoint 2^53 + 2^29 (f32 spacing
        // there is 2^30): rounding through f64 first would land on the tie and
        // round to even (down); one rounding goes up.
        let i = (1i64 << 53) + (1 << 29) + 1;
        assert_eq!(
            cast::<i64, f32>(vec![i], DType::F32),
            vec![((1u64 << 53) + (1 << 30)) as f32]
        );
    }

    #[test]
    fn strings_round_trip() {
        let s = cast::<String, f32>(
            vec![
                "3.5".into(),
                "1e-5".into(),
                "+INF".into(),
                "-inf".into(),
                "NaN".into(),
            ],
            DType::F32,
        );
        assert_eq!(&s[..4], &[3.5, 1e-5, f32::INFINITY, f32::NEG_INFINITY]);
        assert!(s[4].is_nan());
        assert_eq!(
            cast::<String, i64>(vec!["9007199254740993".into(), "100.5".into()], DType::I64),
            vec![9007199254740993, 100]
        );
        let text = cast::<f32, String>(vec![0.1, 100.0, 1e20, 1.5e-7, -0.0, 0.001], DType::Str);
        assert_eq!(
            text,
            vec!["0.1", "100.0", "1e+20", "1.5e-07", "-0.0", "0.001"]
        );
        assert_eq!(cast::<bool, String>(vec![true], DType::Str), vec!["True"]);
    }
}
