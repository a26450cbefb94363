//! Element-wise ops of one tensor: math functions (Abs, Sqrt, Exp, Erf, the
//! trigonometric family, Floor/Ceil/Round, Sign, ...), activations (Relu,
//! Sigmoid, Gelu, Selu, ...), Not and BitwiseNot, the IsNaN/IsInf tests, and
//! PRelu (an activation with a broadcast slope input).
//!
//! Each op is one table row: a scalar function on f64 (floats compute in f64
//! and round once to their type), how integers are handled, and the float
//! attributes it reads. One generic path applies any row to any dtype.

use super::binary::elementwise::{by_class, map_float, map_int, BinaryRule};
use crate::registry::Registry;
use crate::te::primitive::{Elementwise, Prim};
use crate::util::{broadcast_shapes, map};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, DType, Node, Num, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    for op in UNARY {
        r.add(op.name, Prim(Elementwise(*op)));
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
    r.add("PRelu", PRelu);
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
    /// Through the float function, converted back like Cast (Shrink: its
    /// attributes are floats).
    ViaFloat,
}

/// One unary op's semantics.
#[derive(Clone, Copy)]
struct Unary {
    name: &'static str,
    /// `f(x, params)` for float tensors.
    float: Option<fn(f64, &[f64]) -> f64>,
    int: IntRule,
    boolean: Option<fn(bool) -> bool>,
    params: &'static [Param],
}

const fn float(name: &'static str, f: fn(f64, &[f64]) -> f64) -> Unary {
    Unary {
        name,
        float: Some(f),
        int: IntRule::Unsupported,
        boolean: None,
        params: &[],
    }
}

impl Unary {
    const fn with_params(self, params: &'static [Param]) -> Unary {
        Unary { params, ..self }
    }
    const fn with_int(self, f: fn(i128) -> i128) -> Unary {
        Unary {
            int: IntRule::Exact(f),
            ..self
        }
    }
    const fn with_int_via_float(self) -> Unary {
        Unary {
            int: IntRule::ViaFloat,
            ..self
        }
    }

    fn check(&self, dtype: DType) -> Result<()> {
        let ok = if dtype.is_float() {
            self.float.is_some()
        } else if dtype.is_int() {
            !matches!(self.int, IntRule::Unsupported)
        } else {
            dtype == DType::Bool && self.boolean.is_some()
        };
        ensure!(ok, "{} does not support {dtype} tensors", self.name);
        Ok(())
    }

    fn apply(&self, node: &Node, x: &Tensor) -> Result<Tensor> {
        self.check(x.dtype())?;
        let p = read_params(node, self.params)?;
        let (float, int, boolean) = (self.float, self.int, self.boolean);
        let float_fn =
            || float.ok_or_else(|| kiln_ir::Error::new(format!("{} has no float rule", self.name)));
        by_class!(x.dtype(),
            float |F| {
                let f = float_fn()?;
                map_float::<F>(x, |v| f(v, &p))
            },
            int |I| match int {
                IntRule::Exact(f) => map_int::<I>(x, f),
                IntRule::ViaFloat => {
                    let f = float_fn()?;
                    map::<I, I>(x, |v| I::from_f64(f(v.to_f64(), &p)))
                }
                IntRule::Unsupported => unreachable!("checked"),
            },
            bool => match boolean {
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
        read_params(cx.node, self.params)?;
        Ok(vec![ty])
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![self.apply(cx.node, arg(inputs, 0)?)?])
    }
}

const SELU_ALPHA: f32 = 1.673_263_2;
const SELU_GAMMA: f32 = 1.050_701;

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

fn gelu(x: f64, p: &[f64]) -> f64 {
    if p[0] == 0.0 {
        0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
    } else {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
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
    float("Abs", |x, _| x.abs()).with_int(|x| x.abs()),
    float("Neg", |x, _| -x).with_int(|x| -x),
    float("Sign", |x, _| sign(x)).with_int(|x| x.signum()),
    float("Reciprocal", |x, _| 1.0 / x),
    float("Sqrt", |x, _| x.sqrt()),
    float("Exp", |x, _| x.exp()),
    float("Log", |x, _| x.ln()),
    float("Sin", |x, _| x.sin()),
    float("Cos", |x, _| x.cos()),
    float("Tan", |x, _| x.tan()),
    float("Asin", |x, _| x.asin()),
    float("Acos", |x, _| x.acos()),
    float("Atan", |x, _| x.atan()),
    float("Sinh", |x, _| x.sinh()),
    float("Cosh", |x, _| x.cosh()),
    float("Asinh", |x, _| x.asinh()),
    float("Acosh", |x, _| x.acosh()),
    float("Atanh", |x, _| x.atanh()),
    float("Erf", |x, _| libm::erf(x)),
    float("Floor", |x, _| x.floor()),
    float("Ceil", |x, _| x.ceil()),
    float("Round", |x, _| x.round_ties_even()),
    Unary {
        name: "Not",
        float: None,
        int: IntRule::Unsupported,
        boolean: Some(|x| !x),
        params: &[],
    },
    Unary {
        name: "BitwiseNot",
        float: None,
        int: IntRule::Exact(|x| !x),
        boolean: None,
        params: &[],
    },
    // activations
    float("Relu", |x, _| if x < 0.0 { 0.0 } else { x }).with_int(|x| x.max(0)),
    float("LeakyRelu", |x, p| if x < 0.0 { p[0] * x } else { x })
        .with_params(&[Param::Float("alpha", 0.01)]),
    float("Elu", |x, p| if x < 0.0 { p[0] * x.exp_m1() } else { x })
        .with_params(&[Param::Float("alpha", 1.0)]),
    float("Selu", |x, p| {
        if x <= 0.0 {
            p[1] * (p[0] * x.exp() - p[0])
        } else {
            p[1] * x
        }
    })
    .with_params(&[
        Param::Float("alpha", SELU_ALPHA),
        Param::Float("gamma", SELU_GAMMA),
    ]),
    float("Celu", |x, p| {
        x.max(0.0) + (p[0] * (x / p[0]).exp_m1()).min(0.0)
    })
    .with_params(&[Param::Float("alpha", 1.0)]),
    float("Sigmoid", |x, _| sigmoid(x)),
    float("HardSigmoid", |x, p| (p[0] * x + p[1]).clamp(0.0, 1.0))
        .with_params(&[Param::Float("alpha", 0.2), Param::Float("beta", 0.5)]),
    float("HardSwish", |x, _| x * (x / 6.0 + 0.5).clamp(0.0, 1.0)),
    float("Tanh", |x, _| x.tanh()),
    float("Softplus", |x, _| softplus(x)),
    float("Softsign", |x, _| x / (1.0 + x.abs())),
    float("ThresholdedRelu", |x, p| if x > p[0] { x } else { 0.0 })
        .with_params(&[Param::Float("alpha", 1.0)]),
    float("Shrink", |x, p| {
        if x < -p[0] {
            x + p[1]
        } else if x > p[0] {
            x - p[1]
        } else {
            0.0
        }
    })
    .with_params(&[Param::Float("lambd", 0.5), Param::Float("bias", 0.0)])
    .with_int_via_float(),
    float("Gelu", gelu).with_params(&[Param::Choice("approximate", &["none", "tanh"])]),
    float("Mish", |x, _| x * softplus(x).tanh()),
    float("Swish", |x, p| x * sigmoid(p[0] * x)).with_params(&[Param::Float("alpha", 1.0)]),
];

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

/// PRelu(x, slope): x where x > 0, else x * slope. The slope broadcasts to
/// x's shape (unidirectionally).
struct PRelu;

const PRELU: BinaryRule = BinaryRule {
    name: "PRelu",
    float: Some(|x, s| if x > 0.0 { x } else { x * s }),
    int: Some(|x, s| if x > 0 { x } else { x.wrapping_mul(s) }),
    boolean: None,
};

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

impl Op for PRelu {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let (x, slope) = (&cx.input(0)?.ty, &cx.input(1)?.ty);
        PRELU.check(x.dtype, slope.dtype)?;
        if let (Some(xs), Some(ss)) = (&x.shape, &slope.shape) {
            PRelu::slope_shape(xs, ss)?;
        }
        Ok(vec![x.clone()])
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, slope) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let slope = slope.reshaped(PRelu::slope_shape(&x.shape, &slope.shape)?)?;
        Ok(vec![PRELU.apply(x, &slope)?])
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
