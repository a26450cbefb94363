//! Tensor expressions of a group of nodes, read through one another
//! (inlining): the values fused kernels are built from.
//!
//! Needs: a [`GroupExpr`]: the group's nodes (tensor expressions, in
//! topological order) with, for each input position, where it comes from
//! (a kernel input buffer, a scalar constant, or an earlier node).
//! Guarantees: [`Inliner::read`] gives the scalar value of any source at
//! any index (loop-IR [`Idx`] per dimension) as a loop-IR [`Val`]: kernel
//! inputs become loads (guarded where the index may leave the buffer, by
//! the ranges of the loop variables in scope); a node without reduction
//! is inlined (its body with its output indices replaced by the index
//! read); a node computed earlier in the kernel (a reduction's register,
//! or a result already stored) is read only at the index it was computed
//! at ([`Inliner::computed`]). Reading a reduction anywhere else
//! is an error naming the node: the caller then cannot fuse the group.
//! Padded reads of an inlined node (`Where(InBounds, Load, 0)`) keep the
//! `Where`, so the zero outside is exact whatever the node computes there.

use crate::ir::{Atom, Buffer, Guard, Idx, Val};
use crate::lower::flatten;
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_ops::te::{Expr, IndexExpr, TensorExpr, Var};
use std::collections::HashMap;

/// Where one tensor-expression input comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Src {
    /// Kernel input buffer `j`.
    Input(usize),
    /// A one-element constant (any shape of one element).
    Const(Tensor),
    /// The output of group node `n`.
    Node(usize),
}

/// One node of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupNode {
    pub te: TensorExpr,
    /// Source of each input position (`None`: absent optional input).
    pub args: Vec<Option<Src>>,
    /// For messages: the node's op and name.
    pub label: String,
    /// The node's op type, `domain.op` outside the default domain
    /// (`kiln.WinogradInput`); empty for an expression without a node.
    pub op: String,
}

/// A node's op type as [`GroupNode::op`] holds it: `domain.op`, or the
/// op alone in the default domain.
pub fn op_type(domain: &str, op: &str) -> String {
    match domain {
        "" | "ai.onnx" => op.to_string(),
        d => format!("{d}.{op}"),
    }
}

impl GroupNode {
    /// Whether the node is op `op` of `domain`.
    pub fn is_op(&self, domain: &str, op: &str) -> bool {
        self.op == op_type(domain, op)
    }

    /// A matmul or convolution.
    pub fn is_contraction(&self) -> bool {
        kiln_ops::te::classify::classify(&self.te)
            .apollo
            .is_contraction()
    }
}

/// A group of nodes to become one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupExpr {
    /// Kernel input buffers.
    pub inputs: Vec<Buffer>,
    /// Nodes in topological order.
    pub nodes: Vec<GroupNode>,
    /// The node computing each kernel output, in order.
    pub outputs: Vec<usize>,
}

/// Values of a node's loop variables: output index `l` is `out[l]`,
/// reduction index `k` is `red[k]`.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub out: Vec<Idx>,
    pub red: Vec<Idx>,
}

impl Env {
    fn get(&self, v: Var) -> Result<&Idx> {
        let got = match v {
            Var::Out(l) => self.out.get(l),
            Var::Red(k) => self.red.get(k),
        };
        match got {
            Some(i) => Ok(i),
            None => bail!("tensor expression uses {v:?}, which has no loop"),
        }
    }
}

/// Reads group values at loop-IR indices (see the module doc).
pub struct Inliner<'a> {
    pub group: &'a GroupExpr,
    /// Value range of each loop variable in scope.
    pub ranges: HashMap<String, (i64, i64)>,
    /// Values computed so far: node → (how to read it: a local, or a load
    /// of the buffer it was stored in; the index it was computed at).
    pub computed: HashMap<usize, (Val, Vec<Idx>)>,
}

impl<'a> Inliner<'a> {
    pub fn new(group: &'a GroupExpr) -> Inliner<'a> {
        Inliner {
            group,
            ranges: HashMap::new(),
            computed: HashMap::new(),
        }
    }

    /// Declares loop variable `var` with values `0..extent`.
    pub fn bind(&mut self, var: &str, extent: i64) {
        self.ranges.insert(var.to_string(), (0, extent.max(1) - 1));
    }

    /// Shape of a source.
    pub fn shape_of<'s>(&'s self, src: &'s Src) -> &'s [usize] {
        match src {
            Src::Input(j) => &self.group.inputs[*j].shape,
            Src::Const(t) => &t.shape,
            Src::Node(n) => &self.group.nodes[*n].te.shape,
        }
    }

    /// The value of `src` at `idx`.
    pub fn read(&self, src: &Src, idx: &[Idx]) -> Result<Val> {
        match src {
            Src::Input(j) => {
                let shape = &self.group.inputs[*j].shape;
                Ok(Val::Load {
                    buf: *j,
                    // Reading through reshapes leaves `d*(v floordiv d) + (v mod d)`.
                    offset: flatten(idx, shape).merge_div_mod(),
                    guard: self.guard(idx, shape),
                })
            }
            Src::Const(t) => Ok(Val::Const(Tensor::new(vec![], t.data.clone())?)),
            Src::Node(n) => self.read_node(*n, idx),
        }
    }

    /// Node `n`'s value at `idx`, as the node's own result: a value of a 16-bit float type
    /// is rounded to it (see [`rounded_to`]).
    fn read_node(&self, n: usize, idx: &[Idx]) -> Result<Val> {
        Ok(rounded_to(
            self.group.nodes[n].te.dtype,
            self.node_value(n, idx)?,
        ))
    }

    fn node_value(&self, n: usize, idx: &[Idx]) -> Result<Val> {
        let node = &self.group.nodes[n];
        if let Some((value, at)) = self.computed.get(&n) {
            if same_point(idx, at, &node.te.shape) {
                return Ok(value.clone());
            }
            bail!(
                "{} is read at another index than the one it is computed at",
                node.label
            );
        }
        if node.te.reduction.is_some() {
            bail!(
                "{} (a reduction) is read before it is computed in this kernel",
                node.label
            );
        }
        let env = Env {
            out: idx.to_vec(),
            red: Vec::new(),
        };
        self.body(n, &env)
    }

    /// Node `n`'s body with its loop variables given by `env`.
    pub fn body(&self, n: usize, env: &Env) -> Result<Val> {
        self.expr(n, &self.group.nodes[n].te.body, env)
    }

    fn expr(&self, n: usize, e: &Expr, env: &Env) -> Result<Val> {
        if let Some(k) = e.as_padded_load() {
            let (src, idx) = self.access(n, k, env)?;
            // A kernel input reads zero outside by its guard; an inlined
            // node keeps the explicit selection.
            if !matches!(src, Src::Node(_)) {
                return self.read(&src, &idx);
            }
        }
        Ok(match e {
            Expr::Load(k) => {
                let (src, idx) = self.access(n, *k, env)?;
                self.read(&src, &idx)?
            }
            Expr::InBounds(k) => {
                let (src, idx) = self.access(n, *k, env)?;
                Val::InBounds(self.guard(&idx, self.shape_of(&src)))
            }
            Expr::Const(t) => Val::Const(t.clone()),
            Expr::Index(i) => Val::Index(self.index(n, i, env)?),
            Expr::Call(s, args) => Val::Call(
                s.clone(),
                args.iter()
                    .map(|a| self.expr(n, a, env))
                    .collect::<Result<_>>()?,
            ),
        })
    }

    /// The source access `k` of node `n` reads, and its index.
    fn access(&self, n: usize, k: usize, env: &Env) -> Result<(Src, Vec<Idx>)> {
        let node = &self.group.nodes[n];
        let Some(a) = node.te.accesses.get(k) else {
            bail!("{}: tensor expression has no access {k}", node.label);
        };
        let src = self.source(n, a.input)?;
        let idx = a
            .index
            .iter()
            .map(|i| self.index(n, i, env))
            .collect::<Result<_>>()?;
        Ok((src, idx))
    }

    fn source(&self, n: usize, input: usize) -> Result<Src> {
        let node = &self.group.nodes[n];
        match node.args.get(input).cloned().flatten() {
            Some(src) => Ok(src),
            None => bail!(
                "{}: tensor expression reads absent input {input}",
                node.label
            ),
        }
    }

    fn index(&self, n: usize, e: &IndexExpr, env: &Env) -> Result<Idx> {
        Ok(match e {
            IndexExpr::Affine(a) => {
                let mut acc = Idx::constant(a.constant);
                for &(v, c) in &a.terms {
                    acc = acc.plus(&env.get(v)?.clone().scale(c));
                }
                acc
            }
            IndexExpr::Div(e, d) => self.index(n, e, env)?.floordiv(*d),
            IndexExpr::Mod(e, d) => self.index(n, e, env)?.modulo(*d),
            IndexExpr::Data {
                input,
                index,
                extent,
            } => {
                let src = self.source(n, *input)?;
                let idx: Vec<Idx> = index
                    .iter()
                    .map(|i| self.index(n, i, env))
                    .collect::<Result<_>>()?;
                let value = match self.read(&src, &idx)? {
                    // A data index is read unguarded: it lies inside by
                    // construction (the access is the index tensor's own).
                    Val::Load { buf, offset, .. } => Val::Load {
                        buf,
                        offset,
                        guard: Vec::new(),
                    },
                    v => v,
                };
                constant_index(&value, *extent).unwrap_or_else(|| {
                    Idx::atom(Atom::Data {
                        value: Box::new(value),
                        extent: *extent,
                    })
                })
            }
        })
    }

    /// The bounds of `idx` in `shape` that the loop ranges do not prove.
    pub fn guard(&self, idx: &[Idx], shape: &[usize]) -> Guard {
        let range = |v: &str| {
            self.ranges
                .get(v)
                .copied()
                .unwrap_or((i64::MIN / 4, i64::MAX / 4))
        };
        idx.iter()
            .zip(shape)
            .filter(|(i, &d)| {
                let (lo, hi) = i.range(&range);
                lo < 0 || hi >= d as i64
            })
            .map(|(i, &d)| (i.clone(), d as i64))
            .collect()
    }
}

/// Whether two indices into a tensor of `shape` name the same element:
/// equal as integer expressions in every dimension of extent > 1
/// (dimensions of extent 1 hold 0 in any valid read).
/// `v`, a value of `dtype`, as a Cast to `dtype` when that is f16 or bf16: the identity
/// in the loop IR's semantics, but where a printer computes those types in a wider one
/// (the C printers compute them in float) the cast rounds, so a node inlined into another
/// gives it the same value as the interpreter, which rounds every node's result.
fn rounded_to(dtype: DType, v: Val) -> Val {
    let rounded = matches!(&v, Val::Call(s, _) if s.op == "Cast"
        && s.attrs.get("to") == Some(&kiln_ir::Attr::Int(dtype.onnx_code() as i64)));
    if !dtype.is_half_float() || rounded {
        return v;
    }
    Val::cast(dtype, v)
}

fn same_point(a: &[Idx], b: &[Idx], shape: &[usize]) -> bool {
    a.len() == b.len()
        && a.len() == shape.len()
        && (0..a.len()).all(|d| {
            shape[d] == 1 || a[d].clone().plus(&b[d].clone().scale(-1)).as_constant() == Some(0)
        })
}

/// A data index that is a constant in range (a Gather of a scalar constant
/// index, as in selecting q, k or v): the plain index, negative values
/// counted from `extent`, so the read stays affine. `None` for anything
/// else, including an index out of range (the kernel reports that).
fn constant_index(value: &Val, extent: i64) -> Option<Idx> {
    let Val::Const(t) = value else {
        return None;
    };
    let v = t.data.to_i64_vec().ok()?;
    let [v] = v[..] else {
        return None;
    };
    let v = if v < 0 { v + extent } else { v };
    (0..extent).contains(&v).then(|| Idx::constant(v))
}
