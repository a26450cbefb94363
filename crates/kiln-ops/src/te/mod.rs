//! Tensor expressions: the one definition of every primitive op (layer 3 of
//! DESIGN.md).
//!
//! A [`TensorExpr`] says, for one node with known input shapes:
//! - the output index space (`dtype[shape]`, indices `i0, i1, …`);
//! - optional reduction axes `r0, r1, …` with a [`Combiner`] and its
//!   identity;
//! - for each read of an input, an index map ([`Access`]), one
//!   [`IndexExpr`] per input dimension;
//! - a scalar body ([`Expr`]) over those reads, built from the element-wise
//!   ops' scalar rules.
//!
//! `out[i] = combine_{r} body(i, r)` (or `body(i)` without reduction).
//! Shape inference ([`primitive`]), the reference interpreter ([`eval`]),
//! both papers' classifications ([`classify`]) and the loop lowering all
//! read this one value.

pub mod classify;
pub mod eval;
pub mod examples;
pub mod index;
pub mod layout;
pub mod primitive;

pub use index::{Affine, IndexExpr, Var};

use index::write_list;
use kiln_ir::{Attr, DType, Tensor};
use std::collections::BTreeMap;
use std::fmt;

/// The opset scalar rules are evaluated at: calls in a body are written in
/// today's form of each element-wise op (attributes, not legacy inputs).
pub const SCALAR_OPSET: i64 = 22;

/// One primitive op instance as a tensor expression.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorExpr {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Shapes of the node's inputs by position (`None`: input absent).
    pub inputs: Vec<Option<Vec<usize>>>,
    pub accesses: Vec<Access>,
    pub reduction: Option<Reduction>,
    pub body: Expr,
}

/// A read of input `input` at one index per input dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub input: usize,
    pub index: Vec<IndexExpr>,
}

/// Reduction axes and how their values combine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reduction {
    pub extents: Vec<usize>,
    pub combiner: Combiner,
    /// Whether a bf16 sum or product accumulates in a wider type and rounds once, as the
    /// reference's matrix products and convolutions do; otherwise it rounds every step in
    /// reduction order, as ReduceSum's reference (numpy on ml_dtypes' bfloat16) sums. Other
    /// float types always accumulate wide ([`Reduction::accumulator_type`]).
    pub widened: bool,
    /// `Some` for an arg-reduction (ArgMax, ArgMin): see [`ArgIndex`].
    pub arg: Option<ArgIndex>,
}

/// What makes a Max or Min reduction an arg-reduction: its result is not the extreme
/// value but where it is, an i64 index row-major over the reduction axes. The values
/// compared are the body's, of type `value`. NaN counts as the extreme under Max and
/// Min alike (both propagate it) and NaNs are equal to each other; among equal
/// extremes the first index wins, or the last with `last` (ONNX `select_last_index`),
/// as in numpy. [`ArgIndex::beats`] is the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgIndex {
    pub value: DType,
    pub last: bool,
}

impl ArgIndex {
    /// Whether the value `candidate`, met after `best` in reduction order, takes its
    /// place under `combiner` (Max or Min) and this rule for ties and NaN.
    pub fn beats<T: kiln_ir::Num>(self, combiner: Combiner, candidate: T, best: T) -> bool {
        #[allow(clippy::eq_op)]
        let is_nan = |x: T| x != x;
        match (is_nan(candidate), is_nan(best)) {
            (c, true) => c && self.last,
            (true, false) => true,
            (false, false) => {
                let better = match combiner {
                    Combiner::Min => candidate < best,
                    _ => candidate > best,
                };
                better || (self.last && candidate == best)
            }
        }
    }
}

impl Reduction {
    /// The type a reduction producing `dtype` accumulates in: f64 for float sums and
    /// products (rounded once at the end), except in-order bf16 ones (see
    /// [`Reduction::widened`]); `dtype` itself otherwise (min and max are exact). An
    /// arg-reduction keeps its running extreme in the type of the values it compares.
    pub fn accumulator_type(&self, dtype: DType) -> DType {
        if let Some(arg) = self.arg {
            return arg.value;
        }
        let sums = matches!(self.combiner, Combiner::Sum | Combiner::Prod);
        if sums && dtype.is_float() && (dtype != DType::BF16 || self.widened) {
            DType::F64
        } else {
            dtype
        }
    }

    /// The reduction's name in text: the combiner's, or for an arg-reduction `argmax`,
    /// `argmin` with `_last` when ties pick the last index.
    pub fn name(&self) -> String {
        match self.arg {
            None => self.combiner.name().to_string(),
            Some(a) => format!(
                "arg{}{}",
                self.combiner.name(),
                if a.last { "_last" } else { "" }
            ),
        }
    }
}

/// The associative, commutative operators a reduction combines with
/// (PANAMERA's set). And/Or are Min/Max on booleans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combiner {
    Sum,
    Prod,
    Min,
    Max,
    And,
    Or,
}

/// The scalar body. Values are computed on whole blocks of output elements
/// at once by the interpreter, one element at a time by generated code.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// The element that access `k` reads. A read outside the input gives a
    /// zero of its type; bodies that can read outside guard it with
    /// [`Expr::InBounds`] (padding), so the zero is never observed.
    Load(usize),
    /// Whether access `k`'s index lies inside its input (bool).
    InBounds(usize),
    /// A scalar constant (a 0-d tensor).
    Const(Tensor),
    /// The value of an index expression (i64), e.g. for Trilu's mask.
    Index(IndexExpr),
    /// An element-wise op's scalar rule applied to the arguments.
    Call(Scalar, Vec<Expr>),
}

/// A reference to an element-wise op's scalar rule: its ONNX name and the
/// attributes it reads (Cast's `to`, Mod's `fmod`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    pub op: String,
    pub attrs: BTreeMap<String, Attr>,
}

impl Scalar {
    pub fn new(op: &str) -> Scalar {
        Scalar {
            op: op.to_string(),
            attrs: BTreeMap::new(),
        }
    }

    pub fn with_attr(mut self, name: &str, value: Attr) -> Scalar {
        self.attrs.insert(name.to_string(), value);
        self
    }

    /// A detached node of this op with these attributes, for calling the
    /// op's definition (`infer`, `eval`) on scalars.
    pub fn node(&self) -> kiln_ir::Node {
        kiln_ir::Node {
            name: String::new(),
            op: self.op.clone(),
            domain: String::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            attrs: self.attrs.clone(),
        }
    }
}

impl Combiner {
    pub const ALL: [Combiner; 6] = [
        Combiner::Sum,
        Combiner::Prod,
        Combiner::Min,
        Combiner::Max,
        Combiner::And,
        Combiner::Or,
    ];

    /// The combiner called [`Combiner::name`] `name`.
    pub fn from_name(name: &str) -> Option<Combiner> {
        Combiner::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The element-wise op that combines two partial results.
    pub fn scalar(self) -> Scalar {
        Scalar::new(match self {
            Combiner::Sum => "Add",
            Combiner::Prod => "Mul",
            Combiner::Min => "Min",
            Combiner::Max => "Max",
            Combiner::And => "And",
            Combiner::Or => "Or",
        })
    }

    /// The identity element as an f64 (±inf for Min/Max; callers convert to
    /// integer extremes for integer types).
    pub fn identity(self) -> f64 {
        match self {
            Combiner::Sum | Combiner::Or => 0.0,
            Combiner::Prod | Combiner::And => 1.0,
            Combiner::Min => f64::INFINITY,
            Combiner::Max => f64::NEG_INFINITY,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Combiner::Sum => "sum",
            Combiner::Prod => "prod",
            Combiner::Min => "min",
            Combiner::Max => "max",
            Combiner::And => "and",
            Combiner::Or => "or",
        }
    }
}

impl Expr {
    pub fn call(op: &str, args: Vec<Expr>) -> Expr {
        Expr::Call(Scalar::new(op), args)
    }

    /// A scalar constant of `dtype`.
    pub fn constant(dtype: DType, v: f64) -> kiln_ir::Result<Expr> {
        let data = kiln_ir::Data::from_f64(dtype, &[v])?;
        Ok(Expr::Const(Tensor::new(vec![], data)?))
    }

    /// Calls `f` on this expression and every sub-expression.
    pub fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        if let Expr::Call(_, args) = self {
            for a in args {
                a.visit(f);
            }
        }
    }

    /// The access a load reads, for a plain load or a padded one,
    /// `Where(InBounds(k), Load(k), +0)`: a load outside its input reads
    /// zero anyway, so both are the load of `k`.
    pub fn as_padded_load(&self) -> Option<usize> {
        match self {
            Expr::Load(k) => Some(*k),
            Expr::Call(s, args) if s.op == "Where" => match args.as_slice() {
                [Expr::InBounds(k), Expr::Load(j), Expr::Const(z)]
                    if k == j && z.data.len() == 1 && z.data.get_f64(0).to_bits() == 0 =>
                {
                    Some(*k)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// The same expression with the variables of its index values renamed
    /// by `f`.
    pub fn renamed(&self, f: &dyn Fn(Var) -> Var) -> Expr {
        match self {
            Expr::Index(i) => Expr::Index(i.renamed(f)),
            Expr::Call(s, args) => {
                Expr::Call(s.clone(), args.iter().map(|a| a.renamed(f)).collect())
            }
            e => e.clone(),
        }
    }

    /// Access numbers this expression loads from.
    pub fn loads(&self) -> Vec<usize> {
        let mut v = Vec::new();
        self.visit(&mut |e| {
            if let Expr::Load(k) = e {
                v.push(*k);
            }
        });
        v
    }
}

impl TensorExpr {
    /// Extent of loop variable `v` (0 for variables the expression lacks).
    pub fn extent(&self, v: Var) -> i64 {
        let e = match v {
            Var::Out(l) => self.shape.get(l).copied(),
            Var::Red(k) => self
                .reduction
                .as_ref()
                .and_then(|r| r.extents.get(k).copied()),
        };
        e.unwrap_or(0) as i64
    }

    /// Whether the expression reads input `input`'s elements (through an
    /// access, or as data in an index): an input it does not read is a
    /// parameter its constructor took in (a Slice's bounds, a Reshape's
    /// shape).
    pub fn reads_input(&self, input: usize) -> bool {
        self.accesses
            .iter()
            .any(|a| a.input == input || a.index.iter().any(|i| i.reads_input(input)))
    }

    /// Shape of the input that access `k` reads.
    pub fn access_shape(&self, k: usize) -> &[usize] {
        let input = self.accesses[k].input;
        self.inputs[input].as_deref().unwrap_or(&[])
    }

    /// Simplifies every index map against the loop ranges (see
    /// [`IndexExpr::simplified`]). Constructors call this last.
    pub fn simplified(mut self) -> TensorExpr {
        let extents = |v: Var| self.extent(v);
        let accesses: Vec<Access> = self
            .accesses
            .iter()
            .map(|a| Access {
                input: a.input,
                index: a.index.iter().map(|e| e.simplified(&extents)).collect(),
            })
            .collect();
        self.accesses = accesses;
        self
    }
}

impl fmt::Display for TensorExpr {
    /// `out[i0, i1] = sum[r0 < 4] Mul(in0[i0, r0], in1[r0, i1])`
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        write_list(f, &self.shape)?;
        write!(f, "] out[")?;
        let outs: Vec<Var> = (0..self.shape.len()).map(Var::Out).collect();
        write_list(f, &outs)?;
        write!(f, "] = ")?;
        if let Some(r) = &self.reduction {
            write!(f, "{}[", r.name())?;
            let bounds: Vec<String> = r
                .extents
                .iter()
                .enumerate()
                .map(|(k, e)| format!("r{k} < {e}"))
                .collect();
            write_list(f, &bounds)?;
            write!(f, "] ")?;
        }
        self.write_expr(f, &self.body)
    }
}

impl TensorExpr {
    fn write_access(&self, f: &mut fmt::Formatter, k: usize) -> fmt::Result {
        let a = &self.accesses[k];
        write!(f, "in{}[", a.input)?;
        write_list(f, &a.index)?;
        write!(f, "]")
    }

    fn write_expr(&self, f: &mut fmt::Formatter, e: &Expr) -> fmt::Result {
        match e {
            Expr::Load(k) => self.write_access(f, *k),
            Expr::InBounds(k) => {
                write!(f, "inbounds(")?;
                self.write_access(f, *k)?;
                write!(f, ")")
            }
            Expr::Const(t) => write!(f, "{}", kiln_ir::text::format_scalar(t)),
            Expr::Index(i) => write!(f, "index({i})"),
            Expr::Call(s, args) => {
                write!(f, "{}", s.op)?;
                for (name, v) in &s.attrs {
                    write!(f, "{{{name}={}}}", kiln_ir::text::format_attr(v))?;
                }
                write!(f, "(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    self.write_expr(f, a)?;
                }
                write!(f, ")")
            }
        }
    }
}
