//! C renderings of the element-wise ops' scalar rules.
//!
//! Needs: a call of an element-wise op (its name and attributes, as in a
//! tensor-expression body) with the C expressions and types of its
//! arguments.
//! Guarantees: a C expression of the type that op's shape inference gives
//! (the op's own `infer`, so the type rule is not restated here) that
//! computes what the op's scalar rule in kiln-ops computes, without
//! undefined behaviour: integer arithmetic wraps (computed unsigned),
//! integer division and remainder by zero give 0 (as the interpreter does),
//! float-to-integer casts truncate and saturate with NaN giving 0. Float
//! rules compute in the element type (`expf` for f32): within an ulp or two
//! of the interpreter, which computes in double and rounds once.
//! f16 and bf16 elements are stored as their bits (`uint16_t`,
//! [`storage_type`]) and computed in float ([`c_type`]): a load widens
//! (`kiln_f16_f32`), a store rounds to nearest even (`kiln_f32_f16`), as
//! the interpreter rounds each node's result; a cast to them rounds in
//! place, and so does a cast to their own type, by which a fused chain marks
//! another node's result (see `cast_c`).
//! A call with no rule here is an error naming the op and type; the
//! executor then runs that node on the reference interpreter.

use kiln_ir::{bail, Attr, DType, Result, TensorType};
use kiln_ops::ops::unary::EXP_NONPOSITIVE;
use kiln_ops::te::{Scalar, SCALAR_OPSET};
use kiln_ops::{InferCx, InputInfo};

/// The C type values of `dtype` are computed in: the element type, or
/// float for f16 and bf16 (see [`storage_type`]).
pub fn c_type(dtype: DType) -> Result<&'static str> {
    Ok(match dtype {
        DType::F32 | DType::F16 | DType::BF16 => "float",
        DType::F64 => "double",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::U8 => "uint8_t",
        DType::U16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::Bool => "uint8_t",
        other => bail!("the C backend has no element type for {other}"),
    })
}

/// The C type elements of `dtype` are stored as in buffers: their bits for
/// f16 and bf16, else [`c_type`].
pub fn storage_type(dtype: DType) -> Result<&'static str> {
    match half_codec(dtype) {
        Some(_) => Ok("uint16_t"),
        None => c_type(dtype),
    }
}

/// For a 16-bit float type, the name in the prelude's conversions
/// (`kiln_f16_f32`, `kiln_f32_f16`, `kiln_round_f16`); none for others.
pub fn half_codec(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F16 => Some("f16"),
        DType::BF16 => Some("bf16"),
        _ => None,
    }
}

/// `v`, a value of `dtype` read from its storage type, as computed (widened to float for
/// f16 and bf16).
pub fn widen(dtype: DType, v: &str) -> String {
    match half_codec(dtype) {
        Some(h) => format!("kiln_{h}_f32({v})"),
        None => v.to_string(),
    }
}

/// `v`, a computed value of `dtype`, in its storage type (rounded to nearest even for
/// f16 and bf16).
pub fn narrow(dtype: DType, v: &str) -> String {
    match half_codec(dtype) {
        Some(h) => format!("kiln_f32_{h}({v})"),
        None => v.to_string(),
    }
}

/// `v`, a computed value of `dtype`, rounded to a value `dtype` holds (the identity but for
/// f16 and bf16, which are computed in float).
pub fn round_to(dtype: DType, v: &str) -> String {
    match half_codec(dtype) {
        Some(h) => format!("kiln_round_{h}({v})"),
        None => v.to_string(),
    }
}

/// The unsigned type of the same width, for wrapping arithmetic.
fn unsigned_type(dtype: DType) -> &'static str {
    match dtype {
        DType::I8 | DType::U8 | DType::Bool => "uint8_t",
        DType::I16 | DType::U16 => "uint16_t",
        DType::I32 | DType::U32 => "uint32_t",
        _ => "uint64_t",
    }
}

/// The result type of `s` applied to arguments of `args` types, from the
/// op's shape inference.
pub fn call_dtype(s: &Scalar, args: &[DType]) -> Result<DType> {
    let Some(op) = kiln_ops::registry::lookup("", &s.op) else {
        bail!("unknown element-wise op '{}'", s.op);
    };
    let node = s.node();
    let cx = InferCx {
        node: &node,
        opset: SCALAR_OPSET,
        inputs: args
            .iter()
            .map(|&d| {
                Some(InputInfo {
                    ty: TensorType::new(d, vec![]),
                    value: None,
                })
            })
            .collect(),
        scope: &|_| None,
    };
    match op.infer(&cx)?.first() {
        Some(t) => Ok(t.dtype),
        None => bail!("'{}' has no output", s.op),
    }
}

fn int_attr(s: &Scalar, name: &str, default: i64) -> i64 {
    match s.attrs.get(name) {
        Some(Attr::Int(v)) => *v,
        _ => default,
    }
}

/// A C expression for `s(args)`; `types` are the argument types.
pub fn call_c(s: &Scalar, types: &[DType], args: &[String]) -> Result<(String, DType)> {
    let out = call_dtype(s, types)?;
    let unsupported = || -> Result<(String, DType)> {
        bail!(
            "the C backend has no rule for {} on {}",
            s.op,
            types.first().map(|t| t.to_string()).unwrap_or_default()
        )
    };
    let t0 = match types.first() {
        Some(t) => *t,
        None => return unsupported(),
    };
    let a = |i: usize| args[i].as_str();
    let expr = if s.op == "Cast" {
        cast_c(t0, out, a(0))?
    } else if s.op == "Where" {
        format!("({} ? {} : {})", a(0), a(1), a(2))
    } else if s.op == "Identity"
        || (args.len() == 1 && matches!(s.op.as_str(), "Sum" | "Max" | "Min"))
    {
        a(0).to_string()
    } else if let Some(cmp) = comparison(&s.op) {
        format!("(uint8_t)({} {cmp} {})", a(0), a(1))
    } else if t0.is_float() {
        match float_rule(s, t0, args)? {
            Some(e) => e,
            None => return unsupported(),
        }
    } else if t0 == DType::Bool {
        match bool_rule(&s.op, args) {
            Some(e) => e,
            None => return unsupported(),
        }
    } else {
        match int_rule(s, t0, args)? {
            Some(e) => e,
            None => return unsupported(),
        }
    };
    Ok((expr, out))
}

fn comparison(op: &str) -> Option<&'static str> {
    Some(match op {
        "Equal" => "==",
        "Less" => "<",
        "Greater" => ">",
        "LessOrEqual" => "<=",
        "GreaterOrEqual" => ">=",
        _ => return None,
    })
}

/// Float rules; `f` suffixes the libm names for f32.
fn float_rule(s: &Scalar, t: DType, args: &[String]) -> Result<Option<String>> {
    let ty = c_type(t)?;
    // f16 and bf16 compute in float, with float's functions.
    let single = ty == "float";
    let f = if single { "f" } else { "" };
    let a = args[0].as_str();
    let b = args.get(1).map(|s| s.as_str()).unwrap_or("");
    let libm = |name: &str| format!("{name}{f}({a})");
    Ok(Some(match s.op.as_str() {
        "Add" | "Sum" => format!("({a} + {b})"),
        "Sub" => format!("({a} - {b})"),
        "Mul" => format!("({a} * {b})"),
        "Div" => format!("({a} / {b})"),
        "Pow" => format!("pow{f}({a}, ({ty}){b})"),
        "Max" => format!("kiln_max{f}({a}, {b})"),
        "Min" => format!("kiln_min{f}({a}, {b})"),
        "Mod" if int_attr(s, "fmod", 0) == 1 => format!("fmod{f}({a}, {b})"),
        "Mod" => format!("kiln_floor_mod{f}({a}, {b})"),
        "Abs" => libm("fabs"),
        "Neg" => format!("(-{a})"),
        "Sign" => format!("kiln_sign{f}({a})"),
        "Reciprocal" => format!("(({ty})1 / {a})"),
        "Sqrt" => libm("sqrt"),
        "Exp" if single && int_attr(s, EXP_NONPOSITIVE, 0) == 1 => format!("kiln_expf_nonpos({a})"),
        "Exp" if single => format!("kiln_expf({a})"),
        "Exp" => libm("exp"),
        "Log" => libm("log"),
        "Erf" if single => format!("kiln_erff({a})"),
        "Erf" => libm("erf"),
        "Floor" => libm("floor"),
        "Ceil" => libm("ceil"),
        "Round" => libm("nearbyint"),
        "Relu" => format!("({a} < 0 ? ({ty})0 : {a})"),
        "Sigmoid" if single => format!("kiln_sigmoidf({a})"),
        "Sigmoid" => format!("(({ty})1 / (({ty})1 + exp{f}(-{a})))"),
        "Tanh" if single => format!("kiln_tanhf({a})"),
        "Tanh" => libm("tanh"),
        "Softplus" => format!("kiln_softplus{f}({a})"),
        "IsNaN" => format!("(uint8_t)isnan({a})"),
        "IsInf" => {
            let pos = (int_attr(s, "detect_positive", 1) != 0) as i32;
            let neg = (int_attr(s, "detect_negative", 1) != 0) as i32;
            format!("(uint8_t)(isinf({a}) && (({a} > 0 && {pos}) || ({a} < 0 && {neg})))")
        }
        "Sin" | "Cos" | "Tan" | "Asin" | "Acos" | "Atan" | "Sinh" | "Cosh" | "Asinh" | "Acosh"
        | "Atanh" => libm(&s.op.to_lowercase()),
        _ => return Ok(None),
    }))
}

fn bool_rule(op: &str, args: &[String]) -> Option<String> {
    let a = args[0].as_str();
    let b = args.get(1).map(|s| s.as_str()).unwrap_or("");
    Some(match op {
        "And" | "Min" => format!("(uint8_t)({a} && {b})"),
        "Or" | "Max" => format!("(uint8_t)({a} || {b})"),
        "Xor" => format!("(uint8_t)(!{a} != !{b})"),
        "Not" => format!("(uint8_t)!{a}"),
        _ => return None,
    })
}

/// Integer rules: wrapping arithmetic through the unsigned type of the
/// same width, division by zero gives 0, `MIN / -1` wraps.
fn int_rule(s: &Scalar, t: DType, args: &[String]) -> Result<Option<String>> {
    let ty = c_type(t)?;
    let u = unsigned_type(t);
    let a = args[0].as_str();
    let b = args.get(1).map(|s| s.as_str()).unwrap_or("");
    let wrap = |op: &str| format!("(({ty})(({u}){a} {op} ({u}){b}))");
    let signed = !t.is_unsigned_int();
    Ok(Some(match s.op.as_str() {
        "Add" | "Sum" => wrap("+"),
        "Sub" => wrap("-"),
        "Mul" => wrap("*"),
        "Div" if signed => format!("(({ty})kiln_sdiv((int64_t){a}, (int64_t){b}))"),
        "Div" => format!("({b} == 0 ? ({ty})0 : ({ty})({a} / {b}))"),
        "Mod" if signed && int_attr(s, "fmod", 0) == 1 => {
            format!("(({ty})kiln_srem((int64_t){a}, (int64_t){b}))")
        }
        "Mod" if signed => format!("(({ty})kiln_floor_mod_i((int64_t){a}, (int64_t){b}))"),
        "Mod" => format!("({b} == 0 ? ({ty})0 : ({ty})({a} % {b}))"),
        "Max" => format!("({a} > {b} ? {a} : {b})"),
        "Min" => format!("({a} < {b} ? {a} : {b})"),
        "Neg" => format!("(({ty})(-({u}){a}))"),
        "Abs" if signed => format!("({a} < 0 ? ({ty})(-({u}){a}) : {a})"),
        "Abs" => a.to_string(),
        "Relu" => format!("({a} < 0 ? ({ty})0 : {a})"),
        "Sign" => format!("(({ty})(({a} > 0) - ({a} < 0)))"),
        "BitwiseAnd" => format!("(({ty})({a} & {b}))"),
        "BitwiseOr" => format!("(({ty})({a} | {b}))"),
        "BitwiseXor" => format!("(({ty})({a} ^ {b}))"),
        "BitwiseNot" => format!("(({ty})~{a})"),
        _ => return Ok(None),
    }))
}

/// `(to)v` with ONNX's rules: floats to integers truncate and saturate
/// (NaN gives 0), anything to bool is `v != 0`. A cast to f16 or bf16
/// rounds to that type (they compute in float), the cast of such a value
/// to its own type too: the loop IR's mark of a node's result, which may
/// carry float's extra precision until then (`kiln_loop::group`); a cast
/// to a wider type keeps the value as computed.
fn cast_c(from: DType, to: DType, v: &str) -> Result<String> {
    let ty = c_type(to)?;
    c_type(from)?;
    if from == to {
        return Ok(round_to(to, v));
    }
    Ok(if half_codec(to).is_some() {
        round_to(to, &format!("((float){v})"))
    } else if to == DType::Bool {
        format!("(uint8_t)({v} != 0)")
    } else if from.is_float() && !to.is_float() {
        format!("kiln_f2{}({v})", to.name())
    } else {
        format!("(({ty}){v})")
    })
}

/// Helpers the expressions above call; emitted once per C file.
///
/// `kiln_expf`, `kiln_sigmoidf`, `kiln_tanhf` and `kiln_erff` are branch-free float
/// arithmetic (no libm calls), so loops calling them vectorize: `expf` by
/// range reduction `x = n·ln2 + r`, a degree-6 polynomial for `e^r` fitted
/// by kiln (`scripts/fit_rational.py`; six multiply-adds, two fewer than
/// the degree-7 Cephes form it replaced: BENCHMARKS.md, session 20) and
/// `2^n` as two factors built in exponent bits, the first added to the
/// polynomial's (relative error ≈ 1 ulp; overflow to inf, gradual underflow
/// to 0, NaN kept); `tanh` and `erf` as `x·P(x²)/Q(x²)`
/// on a clamped range, rational functions kiln fitted by iteratively
/// reweighted least squares on the relative error
/// (`scripts/fit_rational.py`; tanh: degrees 4/3 in x² on [-9, 9], erf:
/// 5/4 on [-4, 4]; within 2.2e-6 relative error in f32, checked by
/// `tests/transcendental.rs`): a division and a dozen multiply-adds, no
/// `expf`, so a GELU epilogue stays cheap next to its matmul.
pub const PRELUDE: &str = r#"
KILN_INLINE float kiln_exp_reduced(float r) {
  /* e^r for |r| <= ln2 / 2 (what is left of x once n ln2 is taken off): 1 + r (1 + r q(r)),
     q fitted by scripts/fit_rational.py: six multiply-adds */
  float q = 0.0013901895144954324f;
  q = q * r + 0.008367503061890602f;
  q = q * r + 0.04166682809591293f;
  q = q * r + 0.16666531562805176f;
  q = q * r + 0.5f;
  return (q * r + 1.0f) * r + 1.0f;
}
KILN_INLINE float kiln_expf(float x) {
  /* clamped where e^x overflows (88.72283935546875 = 0x42b17218) and where it rounds to 0
     (-104 = 0xc2d00000), so 2^n splits into two normal factors and the multiplications
     overflow and underflow as e^x does (no selects after them). The clamps compare the bits:
     as signed integers, floats order as their values up to the positive bound; as unsigned
     ones, every positive float sits below the negative bound and negative floats order by
     magnitude. Compilers keep these integer min/max as single instructions, where a float
     compare against a constant became mask and blend chains. NaN is put back at the end. */
  union { float f; int32_t i; uint32_t u; } b;
  b.f = x;
  b.i = b.i < 0x42b17218 ? b.i : 0x42b17218;
  b.u = b.u < 0xc2d00000u ? b.u : 0xc2d00000u;
  float c = b.f;
  /* round to nearest by adding 1.5*2^23 (vectorizes where floorf does not) */
  float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = c - n * 0.693359375f + n * 2.12194440e-4f;
  float p = kiln_exp_reduced(r);
  /* p 2^n as (p 2^half) 2^(n - half): the first factor is exact and normal whatever n, so it
     is added to p's exponent bits; the multiplication by the second rounds once, overflowing
     and underflowing (gradually) as e^x does */
  int32_t ni = (int32_t)n;
  int32_t half = ni >> 1;
  union { float f; uint32_t u; } ph, s2;
  ph.f = p;
  ph.u += (uint32_t)half << 23; /* unsigned: a negative half wraps, where a signed shift is UB */
  s2.u = (uint32_t)(ni - half + 127) << 23;
  float y = ph.f * s2.f;
  /* e^x > x for every x, so this keeps y, but for NaN (a compare false) and +inf: one max
     instruction where `x != x ? x : y` was a compare and a blend */
  return y > x ? y : x;
}
KILN_INLINE float kiln_expf_nonpos(float x) {
  /* kiln_expf for x <= 0 or NaN (a softmax's x - max): 2^n is one factor read from the
     rounding sum's low bits (n + 1.5*2^23), taken 25 higher, so p 2^(n + 25) stays normal down
     to the clamp at -104 (n >= -150; p >= 2^-1), and the multiplication by 2^-25 rounds once,
     underflowing gradually as e^x does. Three integer and one float operation where kiln_expf
     takes eight for its two factors, which it needs only above 2^103. */
  union { float f; uint32_t u; } b, e, bits;
  b.f = x;
  b.u = b.u < 0xc2d00000u ? b.u : 0xc2d00000u;
  float c = b.f;
  float t = c * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = c - n * 0.693359375f + n * 2.12194440e-4f;
  e.f = kiln_exp_reduced(r);
  bits.f = t;
  e.u += (bits.u + 25u) << 23; /* unsigned: the shift drops the sum's high bits without UB */
  float y = e.f * 2.98023223876953125e-8f; /* 2^-25 */
  return y > x ? y : x; /* NaN back, as in kiln_expf */
}
KILN_INLINE float kiln_sigmoidf(float x) {
  /* 1 / (1 + e^-x), with e^-x as in kiln_expf but cheaper where the sum makes it safe:
     -x clamped to [-86, 88] (bits compared as there), so 2^n is one factor added to the
     polynomial's exponent bits, read from the rounding sum's low bits (n + 1.5 2^23): below
     -86, e^-x is under 2^-124 and 1 + e^-x is 1 either way; above 88, the result (under
     2^-126) is 0 as when e^-x overflows. NaN is put back last. */
  union { float f; int32_t i; uint32_t u; } b;
  b.f = -x;
  b.i = b.i < 0x42b00000 ? b.i : 0x42b00000;
  b.u = b.u < 0xc2ac0000u ? b.u : 0xc2ac0000u;
  float c = b.f;
  float t = c * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = c - n * 0.693359375f + n * 2.12194440e-4f;
  float p = kiln_exp_reduced(r);
  union { float f; uint32_t u; } e, bits;
  e.f = p;
  bits.f = t;
  e.u += bits.u << 23; /* unsigned: the shift drops the sum's high bits without UB */
  float y = 1.0f / (1.0f + e.f);
  y = x < -88.0f ? 0.0f : y;
  return x != x ? x : y;
}
KILN_INLINE float kiln_tanhf(float x) {
  /* x P(x^2) / Q(x^2) below |x| = 9, sign(x) from there (tanh(9) = 1 - 3e-8); odd, so it is
     computed on |x| and the sign copied back: every select is one compare
     and one blend (nested ternaries became chains of mask operations) */
  float a = fabsf(x);
  float c = a < 9.0f ? x : 0.0f;
  float t = c * c;
  float p = (((-5.2575375e-09f * t + 6.649916e-06f) * t + 0.0026265313f) * t + 0.12643154f) * t + 0.9999997f;
  float q = ((0.00018785353f * t + 0.022551253f) * t + 0.45976177f) * t + 1.0f;
  float y = fabsf(c * p / q);
  y = y < 1.0f ? y : 1.0f;
  y = a < 9.0f ? y : 1.0f;
  y = copysignf(y, x);
  return x != x ? x : y;
}
KILN_INLINE float kiln_erff(float x) {
  /* x P(x^2) / Q(x^2) below |x| = 4, sign(x) from there (erf(4) = 1 - 2e-8); as kiln_tanhf */
  float a = fabsf(x);
  float c = a < 4.0f ? x : 0.0f;
  float t = c * c;
  float p = ((((-1.4093106e-06f * t + 0.00024562128f) * t + 0.009741057f) * t + 0.07086216f) * t + 0.35364833f) * t + 1.1283791f;
  float q = (((0.0022808933f * t + 0.027168766f) * t + 0.17841128f) * t + 0.64674103f) * t + 1.0f;
  float y = fabsf(c * p / q);
  y = y < 1.0f ? y : 1.0f;
  y = a < 4.0f ? y : 1.0f;
  y = copysignf(y, x);
  return x != x ? x : y;
}
/* NaN-propagating max/min without branches: the NaN operand (if any) is
   selected with integer masks, which compilers keep branch-free in scalar
   code too. A ternary on `a != a` became a compare-and-jump in the scalar
   remainders of vectorized loops, and its comparison with 0 in ReLU/Clip
   mispredicts on real data (a fused depthwise convolution ran 2.7x slower
   on fresh inputs than on repeated ones). */
KILN_INLINE float kiln_nan_orf(float a, float m) { uint32_t ia, im; memcpy(&ia, &a, 4); memcpy(&im, &m, 4); uint32_t k = 0u - (uint32_t)(a != a); uint32_t r = (ia & k) | (im & ~k); float f; memcpy(&f, &r, 4); return f; }
KILN_INLINE double kiln_nan_or(double a, double m) { uint64_t ia, im; memcpy(&ia, &a, 8); memcpy(&im, &m, 8); uint64_t k = 0u - (uint64_t)(a != a); uint64_t r = (ia & k) | (im & ~k); double f; memcpy(&f, &r, 8); return f; }
/* Branch-free selects for guarded reads where the C printer reads unconditionally
   (c.rs `Printer::conditional_read`): `kiln_keep_T(g, v)` is `g ? v : 0` and
   `kiln_select_T(c, a, b)` is `c ? a : b`, with integer masks, so no branch on the
   guard lets GCC move the read back under it (and make it a masked load). */
#define KILN_SELECT_INT(T, U, N) \
  KILN_INLINE T kiln_select_##N(int c, T a, T b) { U m = (U)((U)0 - (U)(c != 0)); return (T)(((U)a & m) | ((U)b & (U)~m)); } \
  KILN_INLINE T kiln_keep_##N(int c, T a) { return kiln_select_##N(c, a, (T)0); }
KILN_SELECT_INT(int8_t, uint8_t, i8)
KILN_SELECT_INT(int16_t, uint16_t, i16)
KILN_SELECT_INT(int32_t, uint32_t, i32)
KILN_SELECT_INT(int64_t, uint64_t, i64)
KILN_SELECT_INT(uint8_t, uint8_t, u8)
KILN_SELECT_INT(uint16_t, uint16_t, u16)
KILN_SELECT_INT(uint32_t, uint32_t, u32)
KILN_SELECT_INT(uint64_t, uint64_t, u64)
KILN_INLINE float kiln_select_f32(int c, float a, float b) { uint32_t ia, ib; memcpy(&ia, &a, 4); memcpy(&ib, &b, 4); uint32_t m = 0u - (uint32_t)(c != 0); uint32_t r = (ia & m) | (ib & ~m); float f; memcpy(&f, &r, 4); return f; }
KILN_INLINE float kiln_keep_f32(int c, float a) { return kiln_select_f32(c, a, 0.0f); }
KILN_INLINE double kiln_select_f64(int c, double a, double b) { uint64_t ia, ib; memcpy(&ia, &a, 8); memcpy(&ib, &b, 8); uint64_t m = (uint64_t)0 - (uint64_t)(c != 0); uint64_t r = (ia & m) | (ib & ~m); double f; memcpy(&f, &r, 8); return f; }
KILN_INLINE double kiln_keep_f64(int c, double a) { return kiln_select_f64(c, a, 0.0); }
/* `b >= a ? b : a` is already `a` when `a` is NaN (the comparison is false), so only `b`
   needs the mask, and with a constant `b` none does: ReLU and Clip are a compare and a
   blend per vector. The results equal `a > b ? a : b` with both operands masked bit for
   bit (NaN payloads and signed zeros included: on a tie both give `b`). */
KILN_INLINE float kiln_maxf(float a, float b) { return kiln_nan_orf(b, b >= a ? b : a); }
KILN_INLINE float kiln_minf(float a, float b) { return kiln_nan_orf(b, b <= a ? b : a); }
KILN_INLINE double kiln_max(double a, double b) { return kiln_nan_or(b, b >= a ? b : a); }
KILN_INLINE double kiln_min(double a, double b) { return kiln_nan_or(b, b <= a ? b : a); }
/* The same max/min as OpenMP reductions, so max/min loops vectorize with
   per-lane partials and keep propagating NaN (OpenMP's own max/min do not). */
#ifdef _OPENMP
#pragma omp declare reduction(kiln_rmaxf : float : omp_out = kiln_maxf(omp_out, omp_in)) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(kiln_rminf : float : omp_out = kiln_minf(omp_out, omp_in)) initializer(omp_priv = INFINITY)
#pragma omp declare reduction(kiln_rmax : double : omp_out = kiln_max(omp_out, omp_in)) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(kiln_rmin : double : omp_out = kiln_min(omp_out, omp_in)) initializer(omp_priv = INFINITY)
#endif
KILN_INLINE float kiln_signf(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : x); }
KILN_INLINE double kiln_sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : x); }
KILN_INLINE float kiln_softplusf(float x) { return x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x)); }
KILN_INLINE double kiln_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
KILN_INLINE float kiln_floor_modf(float a, float b) { float r = fmodf(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
KILN_INLINE double kiln_floor_mod(double a, double b) { double r = fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
KILN_INLINE int64_t kiln_sdiv(int64_t a, int64_t b) { if (b == 0) return 0; if (b == -1) return (int64_t)(0 - (uint64_t)a); return a / b; }
KILN_INLINE int64_t kiln_srem(int64_t a, int64_t b) { if (b == 0 || b == -1) return 0; return a % b; }
KILN_INLINE int64_t kiln_floor_mod_i(int64_t a, int64_t b) { int64_t r = kiln_srem(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
#define KILN_F2I(name, T, LO, HI) KILN_INLINE T name(double v) { if (isnan(v)) return 0; if (v <= (double)(LO)) return LO; if (v >= (double)(HI)) return HI; return (T)v; }
KILN_F2I(kiln_f2i8, int8_t, INT8_MIN, INT8_MAX)
KILN_F2I(kiln_f2i16, int16_t, INT16_MIN, INT16_MAX)
KILN_F2I(kiln_f2i32, int32_t, INT32_MIN, INT32_MAX)
KILN_F2I(kiln_f2i64, int64_t, INT64_MIN, INT64_MAX)
KILN_F2I(kiln_f2u8, uint8_t, 0, UINT8_MAX)
KILN_F2I(kiln_f2u16, uint16_t, 0, UINT16_MAX)
KILN_F2I(kiln_f2u32, uint32_t, 0, UINT32_MAX)
KILN_F2I(kiln_f2u64, uint64_t, 0, UINT64_MAX)
/* f16 and bf16 are stored as their bits and computed in float. The conversions are integer
   and float arithmetic with selects, no branches and no tables, so loops over them vectorize
   on any target; float to f16/bf16 rounds to nearest even, overflows to infinity and keeps
   NaN a (quiet) NaN, as the interpreter's `half` crate does. */
KILN_INLINE float kiln_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
KILN_INLINE uint32_t kiln_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
KILN_INLINE float kiln_f16_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t a = ((uint32_t)h & 0x7fffu) << 13;
  /* the f16 fields in place as a float are the value times 2^-112, subnormals included
     (as a float subnormal): one exact multiplication rebiases every finite value */
  float finite = kiln_bits_f32(a) * 5.192296858534828e33f; /* 2^112 */
  float special = kiln_bits_f32(a | 0x7f800000u); /* infinity, NaN */
  float r = a >= (0x7c00u << 13) ? special : finite;
  return kiln_bits_f32(kiln_f32_bits(r) | sign);
}
KILN_INLINE uint16_t kiln_f32_f16(float f) {
  uint32_t x = kiln_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  /* normal results: rebias the exponent and round the 13 dropped bits to nearest even
     (a carry out of the mantissa steps the exponent, as it should) */
  uint32_t normal = (a - ((127u - 15u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  /* below 2^-14: 0.5 + |f| is rounded by the float addition to a multiple of 2^-24, the
     f16 subnormal step, whose count is then the low bits (0x400 is the smallest normal) */
  uint32_t tiny = kiln_f32_bits(kiln_bits_f32(a) + 0.5f) - 0x3f000000u;
  uint32_t h = a < 0x38800000u ? tiny : normal;
  h = a >= 0x477ff000u ? 0x7c00u : h; /* 65520 and above round to infinity */
  h = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : h;
  return (uint16_t)(sign | h);
}
KILN_INLINE float kiln_bf16_f32(uint16_t h) { return kiln_bits_f32((uint32_t)h << 16); }
KILN_INLINE uint16_t kiln_f32_bf16(float f) {
  uint32_t x = kiln_f32_bits(f);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) | 0x40u) : rounded);
}
/* f rounded to the nearest f16 (bf16) value, kept in float: the same values as narrowing
   and widening, in fewer operations. f16: |f| + m - m rounds |f| to a multiple of ulp(m),
   to nearest even, for a power of two m; with m = 2^(e + 13) for |f|'s exponent e that is
   f16's 11 significant bits, and with e raised to f16's smallest normal exponent, -14, it is
   f16's subnormal step 2^-24 below it (e is capped at 16 so that m stays finite for huge and
   infinite |f|). Above the largest f16, 65504, the result is infinity; NaN passes through
   the additions and the compare; the sign is put back last. It gave the former bit-level
   form's bits on all 2^32 inputs (NaN: a NaN); tests/half_conversions.rs checks ties,
   subnormals, overflow and NaN against the half crate.
   bf16: the float's mantissa rounded in place (a carry steps the exponent). */
KILN_INLINE float kiln_round_f16(float f) {
  uint32_t x = kiln_f32_bits(f);
  uint32_t a = x & 0x7fffffffu;
  uint32_t e = a & 0x7f800000u;
  e = e > 0x38800000u ? e : 0x38800000u;
  e = e < 0x47800000u ? e : 0x47800000u;
  float m = kiln_bits_f32(e + 0x06800000u);
  float r = (kiln_bits_f32(a) + m) - m;
  r = r > 65504.0f ? INFINITY : r;
  return kiln_bits_f32(kiln_f32_bits(r) | (x & 0x80000000u));
}
KILN_INLINE float kiln_round_bf16(float f) {
  uint32_t x = kiln_f32_bits(f);
  float r = kiln_bits_f32((x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u);
  return (x & 0x7fffffffu) > 0x7f800000u ? f : r;
}
"#;
