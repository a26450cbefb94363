//! Lowering a tensor expression to a loop nest (DESIGN.md layer 6).
//!
//! Needs: a primitive op's [`TensorExpr`] for static input shapes and the
//! input element types.
//! Guarantees: a [`Kernel`] whose parameters are the present inputs (in
//! position order) then the output, computing exactly what
//! `kiln_ops::te::eval::evaluate` computes: one loop per output dimension
//! (`i0, i1, …`) except dimensions of extent 1, whose index is 0; for a reduction, a local accumulator initialised to the
//! combiner's identity, one loop per reduction axis (`r0, …`) in order, and
//! a final store. Reads whose index can leave the input (padding windows)
//! are guarded so they never touch memory outside it and read zero, as the
//! expression's semantics say. Floats accumulate sums and products in
//! double (as the interpreter does) and round once.
//!
//! No scheduling happens here; see `schedule.rs`.

use crate::ir::{Atom, Buffer, Extent, Guard, Idx, Kernel, Loop, LoopKind, Stmt, Val};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_ops::te::{Combiner, Expr, IndexExpr, TensorExpr, Var};

/// Name of the loop variable of a tensor-expression index.
pub fn var_name(v: Var) -> String {
    match v {
        Var::Out(l) => format!("i{l}"),
        Var::Red(k) => format!("r{k}"),
    }
}

/// Row-major element strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1] as i64;
    }
    s
}

/// Lowers `te` into kernel `name`; `input_dtypes[i]` is input `i`'s type.
pub fn lower(te: &TensorExpr, name: &str, input_dtypes: &[Option<DType>]) -> Result<Kernel> {
    let cx = Lowering::new(te, input_dtypes)?;
    let mut buffers = cx.buffers.clone();
    let out = push_output(&mut buffers, te);
    let outs: Vec<Idx> = (0..te.shape.len())
        .map(|l| Idx::var(&var_name(Var::Out(l))))
        .collect();
    let out_offset = flatten(&outs, &te.shape);
    let body = cx.val(&te.body)?;
    let mut inner = match &te.reduction {
        None => vec![Stmt::Store {
            buf: out,
            offset: out_offset,
            value: body,
        }],
        Some(r) => {
            let acc = accumulator_type(te.dtype, r.combiner);
            let mut update = vec![Stmt::Update {
                name: "acc".into(),
                combiner: r.combiner,
                value: body,
            }];
            for (k, &e) in r.extents.iter().enumerate().rev() {
                update = loop_or_zero(&var_name(Var::Red(k)), e as i64, update);
            }
            let mut stmts = vec![Stmt::Let {
                name: "acc".into(),
                dtype: acc,
                value: Val::Const(identity(acc, r.combiner)?),
            }];
            stmts.extend(update);
            stmts.push(Stmt::Store {
                buf: out,
                offset: out_offset,
                value: Val::Local("acc".into()),
            });
            stmts
        }
    };
    for (l, &e) in te.shape.iter().enumerate().rev() {
        inner = loop_or_zero(&var_name(Var::Out(l)), e as i64, inner);
    }
    Ok(Kernel {
        name: name.to_string(),
        buffers,
        body: inner,
    })
}

/// A loop over `var`, or for extent 1 the body with `var` = 0 (no loop
/// that runs once is left to stop coalescing and parallelisation).
fn loop_or_zero(var: &str, extent: i64, body: Vec<Stmt>) -> Vec<Stmt> {
    if extent == 1 {
        body.iter()
            .map(|s| s.substitute(var, &Idx::constant(0)))
            .collect()
    } else {
        vec![serial(var, extent, body)]
    }
}

pub fn serial(var: &str, extent: i64, body: Vec<Stmt>) -> Stmt {
    Stmt::Loop(Loop {
        var: var.to_string(),
        extent: Extent::Const(extent),
        kind: LoopKind::Serial,
        body,
    })
}

/// The accumulator type of a reduction producing `dtype`.
fn accumulator_type(dtype: DType, combiner: Combiner) -> DType {
    let widens = matches!(combiner, Combiner::Sum | Combiner::Prod);
    if widens && dtype.is_float() && dtype != DType::BF16 {
        DType::F64
    } else {
        dtype
    }
}

/// The combiner's identity as a 0-d tensor of `dtype` (integer extremes for
/// integer min/max).
fn identity(dtype: DType, c: Combiner) -> Result<Tensor> {
    let v = c.identity();
    let v = if dtype.is_float() || v.is_finite() {
        v
    } else {
        match (dtype, c) {
            (DType::Bool, Combiner::Min) => 1.0,
            (DType::Bool, _) => 0.0,
            (_, Combiner::Min) => int_max(dtype)?,
            _ => int_min(dtype)?,
        }
    };
    let data = kiln_ir::Data::from_f64(dtype, &[v])?;
    Tensor::new(vec![], data)
}

fn int_max(dtype: DType) -> Result<f64> {
    Ok(match dtype {
        DType::I8 => i8::MAX as f64,
        DType::I16 => i16::MAX as f64,
        DType::I32 => i32::MAX as f64,
        DType::I64 => i64::MAX as f64,
        DType::U8 => u8::MAX as f64,
        DType::U16 => u16::MAX as f64,
        DType::U32 => u32::MAX as f64,
        DType::U64 => u64::MAX as f64,
        _ => bail!("no integer maximum for {dtype}"),
    })
}

fn int_min(dtype: DType) -> Result<f64> {
    Ok(match dtype {
        DType::I8 => i8::MIN as f64,
        DType::I16 => i16::MIN as f64,
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => 0.0,
        _ => bail!("no integer minimum for {dtype}"),
    })
}

/// `Σ index[d]·stride[d]` for a row-major `shape`.
pub fn flatten(index: &[Idx], shape: &[usize]) -> Idx {
    index
        .iter()
        .zip(strides(shape))
        .fold(Idx::constant(0), |acc, (i, s)| {
            acc.plus(&i.clone().scale(s))
        })
}

/// Appends the output buffer of `te`; returns its number.
pub fn push_output(buffers: &mut Vec<Buffer>, te: &TensorExpr) -> usize {
    buffers.push(Buffer {
        name: "out0".into(),
        dtype: te.dtype,
        shape: te.shape.clone(),
        output: true,
    });
    buffers.len() - 1
}

/// The present inputs of `te` as buffers (in position order) and the
/// buffer number of each input position.
pub fn input_buffers(
    te: &TensorExpr,
    input_dtypes: &[Option<DType>],
) -> Result<(Vec<Buffer>, Vec<Option<usize>>)> {
    let mut buffers = Vec::new();
    let mut buffer_of = Vec::new();
    for (i, shape) in te.inputs.iter().enumerate() {
        match (shape, input_dtypes.get(i).copied().flatten()) {
            (Some(shape), Some(dtype)) => {
                buffer_of.push(Some(buffers.len()));
                buffers.push(Buffer {
                    name: format!("in{i}"),
                    dtype,
                    shape: shape.clone(),
                    output: false,
                });
            }
            (None, _) => buffer_of.push(None),
            (Some(_), None) => bail!("input {i} has no element type"),
        }
    }
    Ok((buffers, buffer_of))
}

/// The inputs of one expression as buffers, and how to read them.
struct Lowering<'a> {
    te: &'a TensorExpr,
    buffers: Vec<Buffer>,
    /// Buffer number of each input position.
    buffer_of: Vec<Option<usize>>,
}

impl<'a> Lowering<'a> {
    fn new(te: &'a TensorExpr, input_dtypes: &[Option<DType>]) -> Result<Lowering<'a>> {
        let (buffers, buffer_of) = input_buffers(te, input_dtypes)?;
        Ok(Lowering {
            te,
            buffers,
            buffer_of,
        })
    }

    fn buffer(&self, input: usize) -> Result<usize> {
        match self.buffer_of.get(input).copied().flatten() {
            Some(b) => Ok(b),
            None => bail!("tensor expression reads absent input {input}"),
        }
    }

    fn val(&self, e: &Expr) -> Result<Val> {
        // A padded load is the guarded load itself (it reads zero outside).
        if let Some(k) = e.as_padded_load() {
            return self.load(k);
        }
        Ok(match e {
            Expr::InBounds(k) => {
                let (_, _, guard) = self.access(*k)?;
                Val::InBounds(guard)
            }
            Expr::Load(k) => self.load(*k)?,
            Expr::Const(t) => Val::Const(t.clone()),
            Expr::Index(i) => Val::Index(self.index(i)?),
            Expr::Call(s, args) => Val::Call(
                s.clone(),
                args.iter().map(|a| self.val(a)).collect::<Result<_>>()?,
            ),
        })
    }

    fn load(&self, k: usize) -> Result<Val> {
        let (buf, offset, guard) = self.access(k)?;
        Ok(Val::Load { buf, offset, guard })
    }

    /// Buffer, flat offset and the bounds that may fail, of access `k`.
    fn access(&self, k: usize) -> Result<(usize, Idx, Guard)> {
        let Some(a) = self.te.accesses.get(k) else {
            bail!("tensor expression has no access {k}");
        };
        let buf = self.buffer(a.input)?;
        let shape = &self.buffers[buf].shape;
        let index: Vec<Idx> = a
            .index
            .iter()
            .map(|i| self.index(i))
            .collect::<Result<_>>()?;
        let guard = index
            .iter()
            .zip(shape)
            .filter(|(i, &d)| {
                let (lo, hi) = i.range(&|v| self.var_range(v));
                lo < 0 || hi >= d as i64
            })
            .map(|(i, &d)| (i.clone(), d as i64))
            .collect();
        Ok((buf, flatten(&index, shape), guard))
    }

    fn var_range(&self, name: &str) -> (i64, i64) {
        let extent = |v: Var| self.te.extent(v).max(1) - 1;
        let parsed = name[1..].parse::<usize>().ok();
        match (name.as_bytes().first(), parsed) {
            (Some(b'i'), Some(l)) => (0, extent(Var::Out(l))),
            (Some(b'r'), Some(k)) => (0, extent(Var::Red(k))),
            _ => (i64::MIN / 4, i64::MAX / 4),
        }
    }

    fn index(&self, e: &IndexExpr) -> Result<Idx> {
        Ok(match e {
            IndexExpr::Affine(a) => a
                .terms
                .iter()
                .fold(Idx::constant(a.constant), |acc, (v, c)| {
                    acc.plus(&Idx::var(&var_name(*v)).scale(*c))
                }),
            IndexExpr::Div(e, d) => self.index(e)?.floordiv(*d),
            IndexExpr::Mod(e, d) => self.index(e)?.modulo(*d),
            IndexExpr::Data {
                input,
                index,
                extent,
            } => {
                let buf = self.buffer(*input)?;
                let shape = &self.buffers[buf].shape;
                let idx: Vec<Idx> = index.iter().map(|i| self.index(i)).collect::<Result<_>>()?;
                Idx::atom(Atom::Data {
                    value: Box::new(Val::Load {
                        buf,
                        offset: flatten(&idx, shape),
                        guard: Vec::new(),
                    }),
                    extent: *extent,
                })
            }
        })
    }
}
