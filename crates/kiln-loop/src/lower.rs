//! Lowering a tensor expression to a loop nest (DESIGN.md layer 6).
//!
//! Needs: a primitive op's [`TensorExpr`] for static input shapes and the
//! input element types.
//! Guarantees: a [`Kernel`] whose parameters are the present inputs (in
//! position order) then the output, computing exactly what
//! `kiln_ops::te::eval::evaluate` computes: one loop per output dimension
//! (`i0, i1, …`) except dimensions of extent 1, whose index is 0; for a reduction, a local accumulator initialised to the
//! combiner's identity, one loop per reduction axis (`r0, …`) in order, and
//! a final store (an arg-reduction's accumulator is the index, the extreme
//! beside it). Reads whose index can leave the input (padding windows)
//! are guarded so they never touch memory outside it and read zero, as the
//! expression's semantics say. Floats accumulate sums and products in
//! double (as the interpreter does) and round once.
//!
//! No scheduling happens here; see `schedule.rs`.

use crate::group::{Env, GroupExpr, GroupNode, Inliner, Src};
use crate::ir::{ArgStep, Buffer, Extent, Idx, Kernel, Loop, LoopKind, Scope, Stmt, Val};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_ops::te::{Combiner, TensorExpr, Var};

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
    let (group, buffers) = single_node_group(te, name, input_dtypes)?;
    let mut inliner = Inliner::new(&group);
    let body = node_nest(&mut inliner, 0, buffers.len() - 1, "acc")?;
    Ok(Kernel {
        name: name.to_string(),
        buffers,
        body,
    })
}

/// `te` as a group of one node reading the kernel's inputs, and the
/// kernel's buffers: its present inputs, then its output.
pub(crate) fn single_node_group(
    te: &TensorExpr,
    name: &str,
    input_dtypes: &[Option<DType>],
) -> Result<(GroupExpr, Vec<Buffer>)> {
    let (mut buffers, buffer_of) = input_buffers(te, input_dtypes)?;
    let group = GroupExpr {
        inputs: buffers.clone(),
        nodes: vec![GroupNode {
            te: te.clone(),
            args: buffer_of.iter().map(|b| b.map(Src::Input)).collect(),
            label: name.to_string(),
            op: String::new(),
        }],
        outputs: vec![0],
    };
    push_output(&mut buffers, te);
    Ok((group, buffers))
}

/// The loop nest computing group node `n` over its whole index space into
/// buffer `out` (one loop per output dimension `i0, i1, …` of extent > 1;
/// a reduction accumulates in local `acc` over loops `r0, r1, …`).
pub(crate) fn node_nest(inl: &mut Inliner, n: usize, out: usize, acc: &str) -> Result<Vec<Stmt>> {
    let te = &inl.group.nodes[n].te;
    let outs: Vec<Idx> = (0..te.shape.len())
        .map(|l| Idx::var(&var_name(Var::Out(l))))
        .collect();
    for (l, &e) in te.shape.iter().enumerate() {
        inl.bind(&var_name(Var::Out(l)), e as i64);
    }
    let red_extents = te
        .reduction
        .as_ref()
        .map(|r| r.extents.clone())
        .unwrap_or_default();
    for (k, &e) in red_extents.iter().enumerate() {
        inl.bind(&var_name(Var::Red(k)), e as i64);
    }
    let env = Env {
        out: outs.clone(),
        red: (0..red_extents.len())
            .map(|k| Idx::var(&var_name(Var::Red(k))))
            .collect(),
    };
    let out_offset = flatten(&outs, &te.shape);
    let body = inl.body(n, &env)?;
    let te = &inl.group.nodes[n].te;
    let mut inner = match &te.reduction {
        None => vec![Stmt::Store {
            buf: out,
            offset: out_offset,
            value: body,
        }],
        Some(r) => {
            let mut stmts = reduce_into(acc, te.dtype, r, body)?;
            stmts.push(Stmt::Store {
                buf: out,
                offset: out_offset,
                value: Val::Local(acc.into()),
            });
            stmts
        }
    };
    for (l, &e) in te.shape.iter().enumerate().rev() {
        inner = loop_or_zero(&var_name(Var::Out(l)), e as i64, inner);
    }
    Ok(inner)
}

/// `let acc = identity; for r… { acc = combine(acc, value) }` over the
/// reduction loops `r0, r1, …` (floats sum and multiply in double).
pub(crate) fn reduce_into(
    acc: &str,
    dtype: DType,
    r: &kiln_ops::te::Reduction,
    value: Val,
) -> Result<Vec<Stmt>> {
    let acc_type = r.accumulator_type(dtype);
    reduce_over(acc, acc_type, r, value, &|k| var_name(Var::Red(k)))
}

/// [`reduce_into`] with an accumulator of type `acc_type` and the
/// reduction loop variables named by `name`. An arg-reduction keeps its
/// extreme in `{acc}_best` (of type `acc_type`) and the extreme's index,
/// row-major over the reduction loops, in `acc` (i64, from 0).
pub(crate) fn reduce_over(
    acc: &str,
    acc_type: DType,
    r: &kiln_ops::te::Reduction,
    value: Val,
    name: &dyn Fn(usize) -> String,
) -> Result<Vec<Stmt>> {
    let start = Val::Const(identity(acc_type, r.combiner)?);
    let (mut stmts, step) = match r.arg {
        None => (
            vec![Stmt::Let {
                name: acc.into(),
                dtype: acc_type,
                value: start,
            }],
            Stmt::Update {
                name: acc.into(),
                combiner: r.combiner,
                value,
            },
        ),
        Some(arg) => {
            let best = format!("{acc}_best");
            let vars: Vec<Idx> = (0..r.extents.len()).map(|k| Idx::var(&name(k))).collect();
            let first = Val::Const(Tensor::scalar(0i64));
            let step = ArgStep {
                name: acc.into(),
                best: best.clone(),
                combiner: r.combiner,
                last: arg.last,
                value,
                index: flatten(&vars, &r.extents),
            };
            (
                vec![
                    Stmt::Let {
                        name: best,
                        dtype: acc_type,
                        value: start,
                    },
                    Stmt::Let {
                        name: acc.into(),
                        dtype: DType::I64,
                        value: first,
                    },
                ],
                Stmt::ArgUpdate(Box::new(step)),
            )
        }
    };
    let mut update = vec![step];
    for (k, &e) in r.extents.iter().enumerate().rev() {
        update = loop_or_zero(&name(k), e as i64, update);
    }
    stmts.extend(update);
    Ok(stmts)
}

/// A loop over `var`, or for extent 1 the body with `var` = 0 (no loop
/// that runs once is left to stop coalescing and parallelisation).
pub(crate) fn loop_or_zero(var: &str, extent: i64, body: Vec<Stmt>) -> Vec<Stmt> {
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

/// The combiner's identity as a 0-d tensor of `dtype` (integer extremes for
/// integer min/max).
pub fn identity(dtype: DType, c: Combiner) -> Result<Tensor> {
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
        scope: Scope::Param,
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
                    scope: Scope::Param,
                });
            }
            (None, _) => buffer_of.push(None),
            (Some(_), None) => bail!("input {i} has no element type"),
        }
    }
    Ok((buffers, buffer_of))
}
