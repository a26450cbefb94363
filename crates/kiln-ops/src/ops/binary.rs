//! Broadcasting element-wise ops with two or more inputs: arithmetic (Add,
//! Sub, Mul, Div, Mod, Pow), bitwise and logical ops, BitShift, comparisons,
//! Where, and the variadic Sum, Max and Min (primitives), and the compounds
//! Clip (Max/Min with its bounds) and Mean (Add chain / count). Sum, Max
//! and Min of three or more inputs open into chains of two-input ones.
//!
//! Each primitive's semantics is one [`BinaryRule`] (a float rule computed
//! in f64 and an exact integer rule computed in i128); the kernels in
//! [`elementwise`] apply it to every dtype.

pub(crate) mod elementwise;

use crate::compound::{Comp, Compound};
use crate::ops::compose::reshape;
use crate::registry::Registry;
use crate::te::primitive::{Elementwise, Prim, Primitive};
use crate::util::{numel, zip3_map, zip_map};
use crate::{arg, inputs_id, Builder, EvalCx, InferCx, Op};
use elementwise::{by_class, zip_int, BinaryRule, Int};
use kiln_ir::{
    bail, dispatch_all, dispatch_num, ensure, DType, Num, Result, Tensor, TensorType, ValueId,
};
use std::cmp::Ordering;

pub use elementwise::broadcast_type;

pub fn register(r: &mut Registry) {
    for rule in [
        ADD,
        SUB,
        MUL,
        DIV,
        BITWISE_AND,
        BITWISE_OR,
        BITWISE_XOR,
        AND,
        OR,
        XOR,
    ] {
        r.add(rule.name, Prim(Elementwise(Binary(rule))));
    }
    r.add("Mod", Prim(Elementwise(Mod)));
    r.add("BitShift", Prim(Elementwise(BitShift)));
    r.add("Pow", Prim(Elementwise(Pow)));
    r.add(
        "Equal",
        Prim(Elementwise(Compare {
            name: "Equal",
            holds: |o| o == Ordering::Equal,
            strings: true,
        })),
    );
    r.add(
        "Greater",
        Prim(Elementwise(Compare {
            name: "Greater",
            holds: |o| o == Ordering::Greater,
            strings: false,
        })),
    );
    r.add(
        "Less",
        Prim(Elementwise(Compare {
            name: "Less",
            holds: |o| o == Ordering::Less,
            strings: false,
        })),
    );
    r.add(
        "GreaterOrEqual",
        Prim(Elementwise(Compare {
            name: "GreaterOrEqual",
            holds: |o| o != Ordering::Less,
            strings: false,
        })),
    );
    r.add(
        "LessOrEqual",
        Prim(Elementwise(Compare {
            name: "LessOrEqual",
            holds: |o| o != Ordering::Greater,
            strings: false,
        })),
    );
    r.add("Where", Prim(Elementwise(Where)));
    r.add("Clip", Comp(Clip));
    for (rule, pairwise) in [(SUM, "Add"), (MAX, "Max"), (MIN, "Min")] {
        r.add(
            rule.name,
            VariadicOp(Prim(Elementwise(Variadic(rule))), pairwise),
        );
    }
    r.add("Mean", Comp(Mean));
}

const fn arith(
    name: &'static str,
    float: fn(f64, f64) -> f64,
    int: fn(i128, i128) -> i128,
) -> BinaryRule {
    BinaryRule {
        name,
        float: Some(float),
        int: Some(int),
        boolean: None,
    }
}

const fn bitwise(name: &'static str, int: fn(i128, i128) -> i128) -> BinaryRule {
    BinaryRule {
        name,
        float: None,
        int: Some(int),
        boolean: None,
    }
}

const fn logical(name: &'static str, boolean: fn(bool, bool) -> bool) -> BinaryRule {
    BinaryRule {
        name,
        float: None,
        int: None,
        boolean: Some(boolean),
    }
}

// i128 holds every sum and difference of two 64-bit values; products of two
// u64 can exceed it, but wrapping keeps the low 64 bits, which are all that
// survive the final wrap to the element type.
const ADD: BinaryRule = arith("Add", |a, b| a + b, |a, b| a.wrapping_add(b));
const SUB: BinaryRule = arith("Sub", |a, b| a - b, |a, b| a.wrapping_sub(b));
const MUL: BinaryRule = arith("Mul", |a, b| a * b, |a, b| a.wrapping_mul(b));
// Integer division truncates toward zero; division by zero gives 0 (as numpy,
// the ONNX reference, does) rather than trapping.
const DIV: BinaryRule = arith("Div", |a, b| a / b, |a, b| if b == 0 { 0 } else { a / b });
const BITWISE_AND: BinaryRule = bitwise("BitwiseAnd", |a, b| a & b);
const BITWISE_OR: BinaryRule = bitwise("BitwiseOr", |a, b| a | b);
const BITWISE_XOR: BinaryRule = bitwise("BitwiseXor", |a, b| a ^ b);
const AND: BinaryRule = logical("And", |a, b| a && b);
const OR: BinaryRule = logical("Or", |a, b| a || b);
const XOR: BinaryRule = logical("Xor", |a, b| a != b);
const SUM: BinaryRule = arith("Sum", |a, b| a + b, |a, b| a.wrapping_add(b));
// Max and Min propagate NaN, as numpy's maximum/minimum do.
const MAX: BinaryRule = arith(
    "Max",
    |a, b| {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else {
            a.max(b)
        }
    },
    |a, b| a.max(b),
);
const MIN: BinaryRule = arith(
    "Min",
    |a, b| {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else {
            a.min(b)
        }
    },
    |a, b| a.min(b),
);

/// Mod with the sign of the divisor (Python/numpy `%`, `fmod` = 0) or of the
/// dividend (C `fmod`, `fmod` = 1).
fn mod_rule(fmod: bool) -> BinaryRule {
    if fmod {
        arith("Mod", |a, b| a % b, |a, b| if b == 0 { 0 } else { a % b })
    } else {
        arith("Mod", floor_mod_f64, |a, b| {
            if b == 0 {
                return 0;
            }
            let r = a % b;
            if r != 0 && (r < 0) != (b < 0) {
                r + b
            } else {
                r
            }
        })
    }
}

/// numpy's float `mod`: the remainder takes the divisor's sign; a zero
/// remainder is a zero of the divisor's sign.
fn floor_mod_f64(a: f64, b: f64) -> f64 {
    let r = a % b;
    if b == 0.0 || r.is_nan() {
        r
    } else if r == 0.0 {
        0.0f64.copysign(b)
    } else if (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

/// Dtype checks and broadcast output type shared by rule-based binary ops.
fn rule_type(cx: &InferCx, rule: &BinaryRule) -> Result<Vec<TensorType>> {
    let (a, b) = (cx.input(0)?.ty.dtype, cx.input(1)?.ty.dtype);
    rule.check(a, b)?;
    Ok(vec![broadcast_type(cx, a)?])
}

/// An op fully described by one rule.
struct Binary(BinaryRule);

impl Op for Binary {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        rule_type(cx, &self.0)
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![self.0.apply(arg(inputs, 0)?, arg(inputs, 1)?)?])
    }
}

/// Mod: the rule depends on the `fmod` attribute.
struct Mod;

impl Mod {
    fn rule(node: &kiln_ir::Node) -> Result<BinaryRule> {
        match node.attr_int_or("fmod", 0)? {
            0 => Ok(mod_rule(false)),
            1 => Ok(mod_rule(true)),
            v => bail!("Mod: attribute 'fmod' must be 0 or 1, got {v}"),
        }
    }
}

impl Op for Mod {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        rule_type(cx, &Mod::rule(cx.node)?)
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![
            Mod::rule(cx.node)?.apply(arg(inputs, 0)?, arg(inputs, 1)?)?
        ])
    }
}

/// BitShift on integers. Shift amounts outside `0..bits` shift every bit out:
/// 0, or -1 for a right shift of a negative signed value.
struct BitShift;

impl BitShift {
    fn left(node: &kiln_ir::Node) -> Result<bool> {
        match node.attr_string("direction")? {
            Some("LEFT") => Ok(true),
            Some("RIGHT") => Ok(false),
            Some(d) => bail!("BitShift: direction must be LEFT or RIGHT, got '{d}'"),
            None => bail!("BitShift: attribute 'direction' is required"),
        }
    }

    fn check(a: DType, b: DType) -> Result<()> {
        ensure!(a == b, "BitShift: operand types differ: {a} and {b}");
        ensure!(a.is_int(), "BitShift needs integer tensors, got {a}");
        Ok(())
    }

    fn shift<I: Int>(a: &Tensor, b: &Tensor, left: bool) -> Result<Tensor> {
        let bits = I::BITS as i128;
        zip_int::<I>(a, b, |x, s| match (left, (0..bits).contains(&s)) {
            (true, true) => x.wrapping_shl(s as u32),
            (false, true) => x >> s,
            (true, false) => 0,
            (false, false) => {
                if x < 0 {
                    -1
                } else {
                    0
                }
            }
        })
    }
}

impl Op for BitShift {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        BitShift::left(cx.node)?;
        let a = cx.input(0)?.ty.dtype;
        BitShift::check(a, cx.input(1)?.ty.dtype)?;
        Ok(vec![broadcast_type(cx, a)?])
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let left = BitShift::left(cx.node)?;
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        BitShift::check(a.dtype(), b.dtype())?;
        let out = by_class!(a.dtype(),
            float |F| unreachable!("checked integer"),
            int |I| BitShift::shift::<I>(a, b, left)?,
            bool => unreachable!("checked integer"),
            string => unreachable!("checked integer"),
        );
        Ok(vec![out])
    }
}

/// Pow: the result has the base's type; the exponent may be any numeric
/// type. Integer bases with integer exponents are exact (wrapping); with float
/// exponents the float power is converted back like Cast does.
struct Pow;

impl Pow {
    fn check(base: DType, exp: DType) -> Result<()> {
        ensure!(base.is_numeric(), "Pow: base must be numeric, got {base}");
        ensure!(exp.is_numeric(), "Pow: exponent must be numeric, got {exp}");
        Ok(())
    }

    fn float_base<F: Num>(a: &Tensor, b: &Tensor) -> Result<Tensor> {
        dispatch_num!(
            &b.data,
            |_e: E| zip_map::<F, E, F>(a, b, |x, y| F::from_f64(x.to_f64().powf(y.to_f64()))),
            unreachable!("checked numeric")
        )
    }

    fn int_base<I: Int>(a: &Tensor, b: &Tensor) -> Result<Tensor> {
        by_class!(b.dtype(),
            float |E| zip_map::<I, E, I>(a, b, |x, y| I::from_f64(x.to_f64().powf(y.to_f64()))),
            int |E| zip_map::<I, E, I>(a, b, |x, y| I::from_i128(int_pow(x.to_i128(), y.to_i128()))),
            bool => unreachable!("checked numeric"),
            string => unreachable!("checked numeric"),
        )
    }
}

/// `base^exp` in wrapping i128 arithmetic (the low bits are exact). A negative
/// exponent gives the truncated true value: only bases ±1 have a non-zero one.
fn int_pow(base: i128, exp: i128) -> i128 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 if exp % 2 != 0 => -1,
            -1 => 1,
            _ => 0,
        };
    }
    let (mut result, mut square, mut e) = (1i128, base, exp);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(square);
        }
        square = square.wrapping_mul(square);
        e >>= 1;
    }
    result
}

impl Op for Pow {
    fn transcendental(&self) -> bool {
        true
    }
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let base = cx.input(0)?.ty.dtype;
        Pow::check(base, cx.input(1)?.ty.dtype)?;
        Ok(vec![broadcast_type(cx, base)?])
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        Pow::check(a.dtype(), b.dtype())?;
        let out = by_class!(a.dtype(),
            float |F| Pow::float_base::<F>(a, b)?,
            int |I| Pow::int_base::<I>(a, b)?,
            bool => unreachable!("checked numeric"),
            string => unreachable!("checked numeric"),
        );
        Ok(vec![out])
    }
}

/// Comparisons: true where the operands' ordering satisfies `holds`. NaN is
/// unordered, so every comparison with it is false.
struct Compare {
    name: &'static str,
    holds: fn(Ordering) -> bool,
    /// Whether string operands are accepted (Equal only).
    strings: bool,
}

impl Compare {
    fn check(&self, a: DType, b: DType) -> Result<()> {
        ensure!(a == b, "{}: operand types differ: {a} and {b}", self.name);
        ensure!(
            a != DType::Str || self.strings,
            "{} does not support string tensors",
            self.name
        );
        Ok(())
    }
}

impl Op for Compare {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        self.check(cx.input(0)?.ty.dtype, cx.input(1)?.ty.dtype)?;
        Ok(vec![broadcast_type(cx, DType::Bool)?])
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        self.check(a.dtype(), b.dtype())?;
        let holds = self.holds;
        let out = dispatch_all!(&a.data, |_v: T| zip_map::<T, T, bool>(a, b, |x, y| x
            .partial_cmp(y)
            .is_some_and(holds))?);
        Ok(vec![out])
    }
}

/// Where(condition, x, y): x where the condition holds, else y, broadcast.
struct Where;

impl Where {
    fn check(cond: DType, x: DType, y: DType) -> Result<()> {
        ensure!(
            cond == DType::Bool,
            "Where: condition must be bool, got {cond}"
        );
        ensure!(x == y, "Where: X and Y types differ: {x} and {y}");
        Ok(())
    }
}

impl Op for Where {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = cx.input(1)?.ty.dtype;
        Where::check(cx.input(0)?.ty.dtype, x, cx.input(2)?.ty.dtype)?;
        Ok(vec![broadcast_type(cx, x)?])
    }
    // `clone` is needed for strings; the other dtypes are Copy.
    #[allow(clippy::clone_on_copy)]
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (c, x, y) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        Where::check(c.dtype(), x.dtype(), y.dtype())?;
        let out = dispatch_all!(&x.data, |_v: T| zip3_map::<bool, T, T, T>(
            c,
            x,
            y,
            |c, x, y| if *c { x.clone() } else { y.clone() }
        )?);
        Ok(vec![out])
    }
}

/// Clip(x, min, max) = Min(Max(x, min), max): bounds are optional scalar
/// inputs (opset 11+) or float attributes (before 11); a missing bound
/// does not clip. A NaN element stays NaN; when min > max every element
/// becomes max (numpy's clip). Max and Min propagate NaN, so a NaN bound
/// gives NaN, as numpy's clip, the ONNX reference, does.
struct Clip;

impl Clip {
    /// The bound in input `i` (opset 11+) or attribute `name` (older), as a
    /// 0-d value of x's type.
    fn bound(
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
        dtype: DType,
        i: usize,
        name: &str,
    ) -> Result<Option<ValueId>> {
        if cx.opset < 11 {
            return match cx.node.attr_float(name)? {
                Some(v) => Ok(Some(b.scalar(dtype, v as f64)?)),
                None => Ok(None),
            };
        }
        let Some(t) = inputs.get(i).copied().flatten() else {
            return Ok(None);
        };
        let bt = b.ty(t).dtype;
        ensure!(
            bt == dtype,
            "Clip: bound type {bt} differs from input type {dtype}"
        );
        let n = numel(&b.shape(t)?);
        ensure!(n == 1, "Clip: '{name}' must be a scalar, got {n} elements");
        Ok(Some(reshape(b, t, &[])?))
    }
}

impl Compound for Clip {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let x = inputs_id(inputs, 0)?;
        let dtype = b.ty(x).dtype;
        ensure!(
            dtype.is_numeric(),
            "Clip needs a numeric tensor, got {dtype}"
        );
        ensure!(
            cx.opset >= 11 || dtype.is_float(),
            "Clip before opset 11 needs a float tensor, got {dtype}"
        );
        let mut y = x;
        for (i, name, op) in [(1, "min", "Max"), (2, "max", "Min")] {
            if let Some(bound) = Clip::bound(cx, b, inputs, dtype, i, name)? {
                y = b.op(op, &[y, bound], &[])?;
            }
        }
        Ok(vec![Some(y)])
    }
}

/// The scalar rule of Sum, Max and Min over one or more inputs broadcast
/// together: a fold of the op's rule.
struct Variadic(BinaryRule);

impl Variadic {
    fn check(&self, dtypes: &[DType]) -> Result<()> {
        let Some(&first) = dtypes.first() else {
            bail!("{} needs at least one input", self.0.name)
        };
        for &d in dtypes {
            self.0.check(first, d)?;
        }
        Ok(())
    }
}

impl Op for Variadic {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtypes: Vec<DType> = cx.inputs.iter().flatten().map(|i| i.ty.dtype).collect();
        self.check(&dtypes)?;
        Ok(vec![broadcast_type(cx, dtypes[0])?])
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let present: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
        self.check(&present.iter().map(|t| t.dtype()).collect::<Vec<_>>())?;
        let mut acc = present[0].clone();
        for t in &present[1..] {
            acc = self.0.apply(&acc, t)?;
        }
        Ok(vec![acc])
    }
}

/// Sum, Max or Min: primitive with one or two inputs; with more it opens
/// into a chain of the two-input op (`.1`: Add for Sum).
struct VariadicOp(Prim<Elementwise<Variadic>>, &'static str);

impl Op for VariadicOp {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        self.0.infer(cx)
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        self.0.eval(cx, inputs)
    }
    fn primitive(&self) -> Option<&dyn Primitive> {
        self.0.primitive()
    }
    fn scalar_kernel(&self) -> Option<&dyn Op> {
        self.0.scalar_kernel()
    }
    fn decompose(
        &self,
        _cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        let present: Vec<ValueId> = inputs.iter().flatten().copied().collect();
        if present.len() <= 2 {
            return Ok(None);
        }
        Ok(Some(vec![Some(chain(b, self.1, &present)?)]))
    }
}

/// `op(op(v0, v1), v2) …`; the first value alone for one.
fn chain(b: &mut Builder, op: &str, values: &[ValueId]) -> Result<ValueId> {
    let Some((&first, rest)) = values.split_first() else {
        bail!("{op} chain needs at least one input")
    };
    rest.iter()
        .try_fold(first, |acc, &v| b.op(op, &[acc, v], &[]))
}

/// Mean of one or more float inputs broadcast together: their sum (an Add
/// chain) divided by the count.
struct Mean;

impl Compound for Mean {
    fn decompose(
        &self,
        _cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let present: Vec<ValueId> = inputs.iter().flatten().copied().collect();
        let Some(&first) = present.first() else {
            bail!("Mean needs at least one input")
        };
        let dtype = b.ty(first).dtype;
        ensure!(dtype.is_float(), "Mean needs float tensors, got {dtype}");
        let sum = chain(b, "Add", &present)?;
        let n = b.scalar(dtype, present.len() as f64)?;
        Ok(vec![Some(b.op("Div", &[sum, n], &[])?)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::compose::eval_op;

    fn apply<T: kiln_ir::Elem + Clone>(rule: BinaryRule, a: Vec<T>, b: Vec<T>) -> Vec<T> {
        let n = a.len();
        let (a, b) = (
            Tensor::from_vec(vec![n], a).unwrap(),
            Tensor::from_vec(vec![n], b).unwrap(),
        );
        rule.apply(&a, &b)
            .unwrap()
            .as_slice::<T>()
            .unwrap()
            .to_vec()
    }

    #[test]
    fn integer_division_is_exact_and_total() {
        assert_eq!(
            apply(DIV, vec![7i64, -7, i64::MIN, 5], vec![2, 2, -1, 0]),
            vec![3, -3, i64::MIN, 0]
        );
        // Beyond 2^53 an f64 detour would lose the low bits.
        assert_eq!(apply(ADD, vec![u64::MAX - 1], vec![1]), vec![u64::MAX]);
        assert_eq!(apply(MUL, vec![u64::MAX], vec![u64::MAX]), vec![1]);
    }

    #[test]
    fn integer_mod_follows_divisor_sign_unless_fmod() {
        assert_eq!(
            apply(mod_rule(false), vec![-4i32, 7, -7, 3], vec![3, -3, 3, 0]),
            vec![2, -2, 2, 0]
        );
        assert_eq!(
            apply(mod_rule(true), vec![-4i32, 7, -7, 3], vec![3, -3, 3, 0]),
            vec![-1, 1, -1, 0]
        );
    }

    #[test]
    fn float_mod_matches_numpy_edge_cases() {
        assert_eq!(floor_mod_f64(-3.0, f64::INFINITY), f64::INFINITY);
        assert_eq!(floor_mod_f64(3.0, f64::INFINITY), 3.0);
        assert!(floor_mod_f64(-0.0, 2.0).is_sign_positive());
        assert!(floor_mod_f64(0.0, -2.0).is_sign_negative());
        assert!(floor_mod_f64(1.0, 0.0).is_nan());
    }

    fn f32s(t: &Tensor) -> Vec<f32> {
        t.as_slice::<f32>().unwrap().to_vec()
    }

    #[test]
    fn clip_before_opset_11_reads_attributes() {
        let x = Tensor::from_vec(vec![3], vec![-5.0f32, 0.5, 9.0]).unwrap();
        let attrs = vec![("min", kiln_ir::Attr::Float(-1.0))];
        let out = eval_op("Clip", 6, attrs, &[x], 1).unwrap();
        assert_eq!(f32s(&out[0]), &[-1.0, 0.5, 9.0]);
    }

    #[test]
    fn clip_keeps_nan_elements_and_prefers_max_bound() {
        let nan = f32::NAN;
        let x = Tensor::from_vec(vec![4], vec![nan, -5.0f32, 0.5, 9.0]).unwrap();
        let lo = Tensor::from_vec(vec![], vec![-1.0f32]).unwrap();
        let hi = Tensor::from_vec(vec![1], vec![1.0f32]).unwrap();
        let y = f32s(&eval_op("Clip", 13, vec![], &[x.clone(), lo, hi.clone()], 1).unwrap()[0]);
        assert!(y[0].is_nan());
        assert_eq!(y[1..], [-1.0, 0.5, 1.0]);
        // min > max: everything becomes max.
        let big = Tensor::from_vec(vec![], vec![5.0f32]).unwrap();
        let y = f32s(&eval_op("Clip", 13, vec![], &[x.clone(), big, hi], 1).unwrap()[0]);
        assert!(y[0].is_nan());
        assert_eq!(y[1..], [1.0, 1.0, 1.0]);
        // No bounds: the input as it is (a scalar stays a scalar).
        let s = Tensor::from_vec(vec![], vec![nan]).unwrap();
        let y = eval_op("Clip", 13, vec![], &[s], 1).unwrap();
        assert!(y[0].shape.is_empty() && f32s(&y[0])[0].is_nan());
        let wide = Tensor::from_vec(vec![2], vec![0.0f32, 1.0]).unwrap();
        assert!(eval_op("Clip", 13, vec![], &[x, wide], 1).is_err());
    }

    #[test]
    fn variadic_ops_chain_and_mean_divides() {
        let t = |v: Vec<f32>| Tensor::from_vec(vec![v.len()], v).unwrap();
        let ins = [t(vec![1.0, 5.0]), t(vec![4.0, 2.0]), t(vec![3.0])];
        let sum = eval_op("Sum", 13, vec![], &ins, 1).unwrap();
        assert_eq!(f32s(&sum[0]), &[8.0, 10.0]);
        let max = eval_op("Max", 13, vec![], &ins, 1).unwrap();
        assert_eq!(f32s(&max[0]), &[4.0, 5.0]);
        let mean = eval_op("Mean", 13, vec![], &ins, 1).unwrap();
        assert_eq!(f32s(&mean[0]), &[8.0 / 3.0, 10.0 / 3.0]);
        let one = eval_op("Mean", 13, vec![], &ins[..1], 1).unwrap();
        assert_eq!(f32s(&one[0]), &[1.0, 5.0]);
    }

    #[test]
    fn integer_pow_wraps_and_truncates_negative_exponents() {
        assert_eq!(int_pow(3, 4), 81);
        assert_eq!(i8::from_i128(int_pow(2, 7)), i8::MIN);
        assert_eq!(int_pow(-1, -3), -1);
        assert_eq!(int_pow(2, -1), 0);
    }
}
