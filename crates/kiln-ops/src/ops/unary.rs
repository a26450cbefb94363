//! Element-wise ops of one tensor. Primitives (a scalar rule each): math
//! functions (Abs, Sqrt, Exp, Erf, the trigonometric family,
//! Floor/Ceil/Round, Sign, ...), Relu, Sigmoid, Tanh, Softplus, Not and
//! BitwiseNot, the IsNaN/IsInf tests. Compounds (activations written with
//! those primitives, comparisons and Where): LeakyRelu, Elu, Selu, Celu,
//! HardSigmoid, HardSwish, Softsign, ThresholdedRelu, Shrink, Gelu, Mish,
//! Swish, and PRelu (an activation with a broadcast slope input).
//!
//! Each primitive is one table row: a scalar function on f64 (floats
//! compute in f64 and round once to their type) and how integers and
//! booleans are handled. One generic path applies any row to any dtype.

use super::binary::elementwise::{by_class, map_float, map_int};
use crate::compound::{Comp, Compound};
use crate::ops::compose::{cast, reshape};
use crate::registry::Registry;
use crate::te::primitive::{Elementwise, Prim};
use crate::util::{broadcast_shapes, map};
use crate::{arg, inputs_id, Builder, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, Attr, DType, Node, Num, Result, Tensor, TensorType, ValueId};

/// An attribute kiln puts on an Exp node whose input is never positive
/// (`1`): a softmax's x - max(x). The value is unchanged; a code generator
/// may take a cheaper exp that is exact only there (no overflow to handle).
pub const EXP_NONPOSITIVE: &str = "kiln_nonpositive";

pub fn register(r: &mut Registry) {
    for op in UNARY {
        r.add(op.name, Prim(Elementwise(*op)));
    }
    for act in ACTIVATIONS {
        r.add(act.name, Comp(*act));
    }
    r.add(
        "IsNaN",
        Prim(Elementwise(FloatTest {
            name: "IsNaN",
            test: |x, _| x.is_nan(),
            params: &[],
        })),
    );
    r.add(
        "IsInf",
        Prim(Elementwise(FloatTest {
            name: "IsInf",
            test: is_inf,
            params: &[
                Param::Int("detect_positive", 1),
                Param::Int("detect_negative", 1),
            ],
        })),
    );
    r.add("PRelu", Comp(PRelu));
}

/// An attribute a unary op reads, with its default. A `Choice` is a string
/// attribute whose allowed values become 0, 1, ... (the first is the default).
#[derive(Clone, Copy)]
enum Param {
    Float(&'static str, f32),
    Int(&'static str, i64),
    Choice(&'static str, &'static [&'static str]),
}

/// The values of `params` on `node`, in order, as f64.
fn read_params(node: &Node, params: &[Param]) -> Result<Vec<f64>> {
    params
        .iter()
        .map(|p| match *p {
            Param::Float(name, default) => Ok(node.attr_float_or(name, default)? as f64),
            Param::Int(name, default) => Ok(node.attr_int_or(name, default)? as f64),
            Param::Choice(name, values) => {
                let v = node.attr_string_or(name, values[0])?;
                match values.iter().position(|c| *c == v) {
                    Some(i) => Ok(i as f64),
                    None => bail!("attribute '{name}' must be one of {values:?}, got '{v}'"),
                }
            }
        })
        .collect()
}

/// How a unary op treats integer tensors.
#[derive(Clone, Copy)]
enum IntRule {
    Unsupported,
    /// Exact, in i128, wrapped to the element width.
    Exact(fn(i128) -> i128),
}

/// One primitive unary op's semantics.
#[derive(Clone, Copy)]
struct Unary {
    name: &'static str,
    float: Option<fn(f64) -> f64>,
    int: IntRule,
    boolean: Option<fn(bool) -> bool>,
    /// See [`Op::transcendental`].
    transcendental: bool,
}

const fn float(name: &'static str, f: fn(f64) -> f64) -> Unary {
    Unary {
        name,
        float: Some(f),
        int: IntRule::Unsupported,
        boolean: None,
        transcendental: false,
    }
}

impl Unary {
    const fn with_int(self, f: fn(i128) -> i128) -> Unary {
        Unary {
            int: IntRule::Exact(f),
            ..self
        }
    }

    const fn as_transcendental(self) -> Unary {
        Unary {
            transcendental: true,
            ..self
        }
    }

    fn check(&self, dtype: DType) -> Result<()> {
        let ok = if dtype.is_float() {
            self.float.is_some()
        } else if dtype.is_int() {
            matches!(self.int, IntRule::Exact(_))
        } else {
            dtype == DType::Bool && self.boolean.is_some()
        };
        ensure!(ok, "{} does not support {dtype} tensors", self.name);
        Ok(())
    }

    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        self.check(x.dtype())?;
        by_class!(x.dtype(),
            float |F| match self.float {
                Some(f) => map_float::<F>(x, f),
                None => unreachable!("checked"),
            },
            int |I| match self.int {
                IntRule::Exact(f) => map_int::<I>(x, f),
                IntRule::Unsupported => unreachable!("checked"),
            },
            bool => match self.boolean {
                Some(f) => map::<bool, bool>(x, |v| f(*v)),
                None => unreachable!("checked"),
            },
            string => unreachable!("checked"),
        )
    }
}

impl Op for Unary {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let ty = cx.input(0)?.ty.clone();
        self.check(ty.dtype)?;
        Ok(vec![ty])
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![self.apply(arg(inputs, 0)?)?])
    }
    fn transcendental(&self) -> bool {
        self.transcendental
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// ln(1 + e^x) without overflow for large x.
fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x // 0, -0 or NaN
    }
}

fn is_inf(x: f64, p: &[f64]) -> bool {
    (x == f64::INFINITY && p[0] != 0.0) || (x == f64::NEG_INFINITY && p[1] != 0.0)
}

const UNARY: &[Unary] = &[
    // math
    float("Abs", f64::abs).with_int(|x| x.abs()),
    float("Neg", |x| -x).with_int(|x| -x),
    float("Sign", sign).with_int(|x| x.signum()),
    float("Reciprocal", |x| 1.0 / x),
    float("Sqrt", f64::sqrt),
    float("Exp", f64::exp).as_transcendental(),
    float("Log", f64::ln).as_transcendental(),
    float("Sin", f64::sin).as_transcendental(),
    float("Cos", f64::cos).as_transcendental(),
    float("Tan", f64::tan).as_transcendental(),
    float("Asin", f64::asin).as_transcendental(),
    float("Acos", f64::acos).as_transcendental(),
    float("Atan", f64::atan).as_transcendental(),
    float("Sinh", f64::sinh).as_transcendental(),
    float("Cosh", f64::cosh).as_transcendental(),
    float("Asinh", f64::asinh).as_transcendental(),
    float("Acosh", f64::acosh).as_transcendental(),
    float("Atanh", f64::atanh).as_transcendental(),
    float("Erf", libm::erf).as_transcendental(),
    float("Floor", f64::floor),
    float("Ceil", f64::ceil),
    float("Round", f64::round_ties_even),
    Unary {
        name: "Not",
        float: None,
        int: IntRule::Unsupported,
        boolean: Some(|x| !x),
        transcendental: false,
    },
    Unary {
        name: "BitwiseNot",
        float: None,
        int: IntRule::Exact(|x| !x),
        boolean: None,
        transcendental: false,
    },
    // activations that stay primitive
    float("Relu", |x| if x < 0.0 { 0.0 } else { x }).with_int(|x| x.max(0)),
    float("Sigmoid", sigmoid).as_transcendental(),
    float("Tanh", f64::tanh).as_transcendental(),
    float("Softplus", softplus).as_transcendental(),
];

/// An activation defined by a decomposition into element-wise primitives.
#[derive(Clone, Copy)]
struct Activation {
    name: &'static str,
    params: &'static [Param],
    /// Builds the activation of `x` (a float tensor) given the attribute
    /// values in `params` order.
    build: fn(&mut Ew, ValueId, &[f64]) -> Result<ValueId>,
    /// Integer inputs compute in f64 and convert back like Cast (Shrink,
    /// whose attributes are floats); other activations take floats only.
    /// (16-bit floats compute in f32, see `decompose`.)
    ints_via_float: bool,
}

const fn act(
    name: &'static str,
    params: &'static [Param],
    build: fn(&mut Ew, ValueId, &[f64]) -> Result<ValueId>,
) -> Activation {
    Activation {
        name,
        params,
        build,
        ints_via_float: false,
    }
}

impl Compound for Activation {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let x = inputs_id(inputs, 0)?;
        let dtype = b.ty(x).dtype;
        let via_float = self.ints_via_float && dtype.is_int();
        ensure!(
            dtype.is_float() || via_float,
            "{} does not support {dtype} tensors",
            self.name
        );
        let p = read_params(cx.node, self.params)?;
        // 16-bit floats compute in f32 and round once at the end: rounding
        // every stage (exp(x) - 1 in bfloat16) loses the small results.
        let compute = match dtype {
            DType::F16 | DType::BF16 => DType::F32,
            _ if via_float => DType::F64,
            d => d,
        };
        let xf = cast(b, x, compute)?;
        let mut ew = Ew {
            dtype: b.ty(xf).dtype,
            b: &mut *b,
        };
        let y = (self.build)(&mut ew, xf, &p)?;
        Ok(vec![Some(cast(b, y, dtype)?)])
    }
}

/// A builder of element-wise expressions in one float type: `k(v)` is the
/// constant v, `f(op, args)` applies an op.
struct Ew<'a, 'g> {
    b: &'a mut Builder<'g>,
    dtype: DType,
}

impl Ew<'_, '_> {
    fn k(&mut self, v: f64) -> Result<ValueId> {
        self.b.scalar(self.dtype, v)
    }
    fn f(&mut self, op: &str, args: &[ValueId]) -> Result<ValueId> {
        self.b.op(op, args, &[])
    }
    /// `where(cond(x, t), a, b)` for comparison `cond` against the constant `t`.
    fn select(
        &mut self,
        cond: &str,
        x: ValueId,
        t: f64,
        a: ValueId,
        b: ValueId,
    ) -> Result<ValueId> {
        let t = self.k(t)?;
        let c = self.f(cond, &[x, t])?;
        self.f("Where", &[c, a, b])
    }
}

const SELU_ALPHA: f32 = 1.673_263_2;
const SELU_GAMMA: f32 = 1.050_701;

const ACTIVATIONS: &[Activation] = &[
    // x < 0 ? alpha * x : x
    act("LeakyRelu", &[Param::Float("alpha", 0.01)], |e, x, p| {
        let a = e.k(p[0])?;
        let ax = e.f("Mul", &[x, a])?;
        e.select("Less", x, 0.0, ax, x)
    }),
    // x < 0 ? alpha * (exp(x) - 1) : x
    act("Elu", &[Param::Float("alpha", 1.0)], |e, x, p| {
        let neg = exp_minus_one(e, x, p[0])?;
        e.select("Less", x, 0.0, neg, x)
    }),
    // x <= 0 ? gamma * (alpha * exp(x) - alpha) : gamma * x
    act(
        "Selu",
        &[
            Param::Float("alpha", SELU_ALPHA),
            Param::Float("gamma", SELU_GAMMA),
        ],
        |e, x, p| {
            let (alpha, gamma) = (e.k(p[0])?, e.k(p[1])?);
            let ex = e.f("Exp", &[x])?;
            let aex = e.f("Mul", &[alpha, ex])?;
            let neg = e.f("Sub", &[aex, alpha])?;
            let neg = e.f("Mul", &[gamma, neg])?;
            let pos = e.f("Mul", &[gamma, x])?;
            e.select("LessOrEqual", x, 0.0, neg, pos)
        },
    ),
    // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    act("Celu", &[Param::Float("alpha", 1.0)], |e, x, p| {
        let (alpha, zero) = (e.k(p[0])?, e.k(0.0)?);
        let xa = e.f("Div", &[x, alpha])?;
        let neg = exp_minus_one(e, xa, p[0])?;
        let neg = e.f("Min", &[neg, zero])?;
        let pos = e.f("Max", &[x, zero])?;
        e.f("Add", &[pos, neg])
    }),
    // max(0, min(1, alpha * x + beta))
    act(
        "HardSigmoid",
        &[Param::Float("alpha", 0.2), Param::Float("beta", 0.5)],
        |e, x, p| {
            let (alpha, beta) = (e.k(p[0])?, e.k(p[1])?);
            let ax = e.f("Mul", &[x, alpha])?;
            let y = e.f("Add", &[ax, beta])?;
            let (zero, one) = (e.k(0.0)?, e.k(1.0)?);
            let y = e.f("Min", &[y, one])?;
            e.f("Max", &[y, zero])
        },
    ),
    // x * HardSigmoid(x) with alpha 1/6, beta 0.5 (its function body)
    act("HardSwish", &[], |e, x, _| {
        let attrs = [
            ("alpha", Attr::Float(1.0 / 6.0)),
            ("beta", Attr::Float(0.5)),
        ];
        let hs = e.b.op("HardSigmoid", &[x], &attrs)?;
        e.f("Mul", &[x, hs])
    }),
    // x / (1 + |x|)
    act("Softsign", &[], |e, x, _| {
        let (abs, one) = (e.f("Abs", &[x])?, e.k(1.0)?);
        let d = e.f("Add", &[abs, one])?;
        e.f("Div", &[x, d])
    }),
    // x > alpha ? x : 0
    act(
        "ThresholdedRelu",
        &[Param::Float("alpha", 1.0)],
        |e, x, p| {
            let zero = e.k(0.0)?;
            e.select("Greater", x, p[0], x, zero)
        },
    ),
    Activation {
        ints_via_float: true,
        // x < -lambd ? x + bias : x > lambd ? x - bias : 0
        ..act(
            "Shrink",
            &[Param::Float("lambd", 0.5), Param::Float("bias", 0.0)],
            |e, x, p| {
                let (bias, zero) = (e.k(p[1])?, e.k(0.0)?);
                let up = e.f("Add", &[x, bias])?;
                let down = e.f("Sub", &[x, bias])?;
                let high = e.select("Greater", x, p[0], down, zero)?;
                e.select("Less", x, -p[0], up, high)
            },
        )
    },
    // 0.5 * x * (1 + erf(x / sqrt 2)), or with tanh(sqrt(2/pi) * (x + 0.044715 x³))
    act(
        "Gelu",
        &[Param::Choice("approximate", &["none", "tanh"])],
        |e, x, p| {
            let inner = if p[0] == 0.0 {
                let r2 = e.k(std::f64::consts::SQRT_2)?;
                let t = e.f("Div", &[x, r2])?;
                e.f("Erf", &[t])?
            } else {
                let (k, c) = (e.k((2.0 / std::f64::consts::PI).sqrt())?, e.k(0.044715)?);
                let x2 = e.f("Mul", &[x, x])?;
                let x3 = e.f("Mul", &[x2, x])?;
                let cx3 = e.f("Mul", &[c, x3])?;
                let t = e.f("Add", &[x, cx3])?;
                let t = e.f("Mul", &[k, t])?;
                e.f("Tanh", &[t])?
            };
            let (half, one) = (e.k(0.5)?, e.k(1.0)?);
            let hx = e.f("Mul", &[half, x])?;
            let s = e.f("Add", &[one, inner])?;
            e.f("Mul", &[hx, s])
        },
    ),
    // x * tanh(softplus(x))
    act("Mish", &[], |e, x, _| {
        let sp = e.f("Softplus", &[x])?;
        let t = e.f("Tanh", &[sp])?;
        e.f("Mul", &[x, t])
    }),
    // x * sigmoid(alpha * x)
    act("Swish", &[Param::Float("alpha", 1.0)], |e, x, p| {
        let ax = if p[0] == 1.0 {
            x
        } else {
            let a = e.k(p[0])?;
            e.f("Mul", &[x, a])?
        };
        let s = e.f("Sigmoid", &[ax])?;
        e.f("Mul", &[x, s])
    }),
];

/// alpha * (exp(x) - 1).
fn exp_minus_one(e: &mut Ew, x: ValueId, alpha: f64) -> Result<ValueId> {
    let (one, alpha) = (e.k(1.0)?, e.k(alpha)?);
    let ex = e.f("Exp", &[x])?;
    let em1 = e.f("Sub", &[ex, one])?;
    e.f("Mul", &[alpha, em1])
}

/// IsNaN / IsInf: a bool per element of a float tensor.
struct FloatTest {
    name: &'static str,
    test: fn(f64, &[f64]) -> bool,
    params: &'static [Param],
}

impl Op for FloatTest {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let ty = &cx.input(0)?.ty;
        ensure!(
            ty.dtype.is_float(),
            "{} needs a float tensor, got {}",
            self.name,
            ty.dtype
        );
        read_params(cx.node, self.params)?;
        Ok(vec![TensorType {
            dtype: DType::Bool,
            shape: ty.shape.clone(),
        }])
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let p = read_params(cx.node, self.params)?;
        let test = self.test;
        let out = by_class!(x.dtype(),
            float |F| map::<F, bool>(x, |v| test(v.to_f64(), &p))?,
            int |I| bail!("{} needs a float tensor, got {}", self.name, x.dtype()),
            bool => bail!("{} needs a float tensor, got bool", self.name),
            string => bail!("{} needs a float tensor, got strings", self.name),
        );
        Ok(vec![out])
    }
}

/// PRelu(x, slope): x where x > 0, else x * slope (wrapping for integers).
/// The slope broadcasts to x's shape (unidirectionally).
struct PRelu;

impl PRelu {
    /// The shape the slope is read with. A slope that does not broadcast to
    /// x but is 1-D with a length matching exactly one of x's dimensions
    /// applies along that dimension (as the ONNX reference implementation
    /// accepts, for models exported with per-channel slopes).
    fn slope_shape(x: &[usize], slope: &[usize]) -> Result<Vec<usize>> {
        if broadcast_shapes(&[x, slope]).is_ok_and(|s| s == x) {
            return Ok(slope.to_vec());
        }
        if let [n] = slope {
            let matches: Vec<usize> = (0..x.len()).filter(|&i| x[i] == *n).collect();
            if let [axis] = matches[..] {
                return Ok((0..x.len())
                    .map(|i| if i == axis { *n } else { 1 })
                    .collect());
            }
        }
        bail!("PRelu: slope shape {slope:?} does not broadcast to input shape {x:?}")
    }
}

impl Compound for PRelu {
    fn decompose(
        &self,
        _cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let (x, slope) = (inputs_id(inputs, 0)?, inputs_id(inputs, 1)?);
        let (dtype, sdtype) = (b.ty(x).dtype, b.ty(slope).dtype);
        ensure!(
            dtype == sdtype,
            "PRelu: operand types differ: {dtype} and {sdtype}"
        );
        ensure!(
            dtype.is_float() || dtype.is_int(),
            "PRelu does not support {dtype} tensors"
        );
        let shape = PRelu::slope_shape(&b.shape(x)?, &b.shape(slope)?)?;
        let slope = reshape(b, slope, &shape)?;
        let neg = b.op("Mul", &[x, slope], &[])?;
        let zero = b.scalar(dtype, 0.0)?;
        let pos = b.op("Greater", &[x, zero], &[])?;
        Ok(vec![Some(b.op("Where", &[pos, x, neg], &[])?)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_abs_and_neg_wrap_like_twos_complement() {
        let x = Tensor::from_vec(vec![3], vec![i8::MIN, -5, 7]).unwrap();
        let abs = map_int::<i8>(&x, |v| v.abs()).unwrap();
        assert_eq!(abs.as_slice::<i8>().unwrap(), &[i8::MIN, 5, 7]);
        let neg = map_int::<i8>(&x, |v| -v).unwrap();
        assert_eq!(neg.as_slice::<i8>().unwrap(), &[i8::MIN, 5, -7]);
    }

    #[test]
    fn softplus_is_stable_for_large_inputs() {
        assert_eq!(softplus(1000.0), 1000.0);
        assert!(softplus(-1000.0) >= 0.0 && softplus(-1000.0) < 1e-300);
    }

    #[test]
    fn prelu_slope_per_channel_fallback() {
        assert_eq!(
            PRelu::slope_shape(&[2, 3, 4, 5], &[3]).unwrap(),
            vec![1, 3, 1, 1]
        );
        assert_eq!(PRelu::slope_shape(&[2, 3, 4, 5], &[5]).unwrap(), vec![5]);
        assert!(PRelu::slope_shape(&[2, 3, 3], &[3, 1, 2]).is_err());
    }
}
