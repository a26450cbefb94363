//! Lowering a group of nodes to one kernel (APOLLO Layer I and II on the
//! CPU, with PANAMERA's reduction propagation).
//!
//! Needs: a [`GroupExpr`] (the group's tensor expressions wired to kernel
//! inputs, scalar constants and each other) and the target description
//! the loop schedules are for.
//! Guarantees: one scheduled [`Kernel`] whose buffers are the group's
//! inputs then its outputs, computing exactly what the nodes compute, in
//! one of five forms, or an error saying why the group cannot be one
//! kernel (the planner's feedback). A group holding a Winograd transform
//! takes that transform's own form first (`winograd.rs`). The others,
//! tried in this order after the scaled-operand gemm of
//! `operand_scale.rs`:
//! - **nests** — no reduction is read inside the group: each output is one
//!   loop nest with every producer inlined (element-wise, broadcast and
//!   data-movement chains; a reduction with its element-wise prologue,
//!   PANAMERA §3.2), each nest scheduled by the default rule. An output
//!   that is a plain contraction becomes a gemm (except on a scratchpad
//!   target, which has no gemm template and keeps every contraction a
//!   loop nest).
//! - **gemm + epilogue** — one contraction (matmul/conv) whose operands are
//!   kernel inputs, and one output computed from it element by element:
//!   the output's expression becomes the gemm's epilogue, applied to each
//!   result before it is stored (bias, activation, residual, scale). A
//!   trailing reshape stores the same bytes. An operand computed inside
//!   the group (an element-wise prologue: a scale, an activation, a
//!   residual sum, a transpose) becomes the gemm's computed factor, its
//!   value evaluated while the factor is packed; not over a padded window
//!   (whose padding must read zero), and not a concatenation or padding
//!   (a select per packed element costs more than copying them first). The contraction must then be the
//!   group's only reduction. Matrix-vector products are loops and inline
//!   such an operand.
//! - **window** (`window.rs`) — a small f32 window reduction (depthwise
//!   convolution, pooling) with one element-wise output of its shape: each
//!   output point accumulated in a register, then the epilogue, stored once.
//! - **reduce + epilogue** — a window or matrix-vector reduction (not a
//!   gemm) with one element-wise output: the reduction into the output
//!   buffer in its own vectorized loop order, then the epilogue in place,
//!   both under one outer loop where they share it.
//! - **rows** (memory stitching, APOLLO Table 2) — reductions whose
//!   results are read by later nodes: loops over the first reduction's
//!   output space (the rows), and inside each row, every reduction in
//!   order into a register (later ones may read earlier ones: LayerNorm's
//!   variance reads the mean), then each output over the rest of its
//!   dimensions reading those registers (Softmax, LayerNorm, RMSNorm). All
//!   reductions must have the same output space; each output that reads
//!   one must place the row's dimensions on some of its own (outputs that
//!   read none run as plain nests before the rows). Element-wise values are
//!   recomputed where read rather than stored (they are cheap next to the
//!   memory they would cost), except a reduced value an output reads at
//!   its own position (Softmax's exp), which the reduction stores into
//!   that output as it sums (`row_values.rs`).

mod independent;
pub(crate) mod rows;

use crate::auto_schedule::{default_schedule, work, PARALLEL_MIN_WORK};
use crate::contraction::{contraction_gemm, Factor as GemmFactor};
use crate::group::{Env, GroupExpr, Inliner, Src};
use crate::ir::{Atom, Buffer, Gemm, GemmInput, GemmOperand, Idx, Kernel, Scope, Stmt, Val};
use crate::lower::{flatten, loop_or_zero, node_nest, reduce_over, var_name};
use crate::operand_scale::{hoist_scales, Factor};
use crate::row_values::store_reduced_values;
use crate::schedule::{apply, fused_name, Directive, Schedule};
use crate::window::window_in_registers;
use crate::winograd::winograd_transform;
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_ops::te::classify::{classify, is_view, ApolloType};
use kiln_ops::te::{Combiner, Var};
use kiln_target::TargetDesc;
use rows::rows;

/// A lowered group.
#[derive(Debug, Clone)]
pub struct LoweredGroup {
    /// The scheduled kernel.
    pub kernel: Kernel,
    /// Which form it took: `nests`, `gemm`, `reduce+epilogue`, `window`
    /// (`window.rs`) or `rows`.
    pub form: &'static str,
    /// The schedules applied (one per nest).
    pub schedule: Schedule,
}

/// `group` as one kernel named `name`, scheduled for `target`, or why it
/// cannot be one (see the module doc).
pub fn lower_group(group: &GroupExpr, name: &str, target: &TargetDesc) -> Result<LoweredGroup> {
    let mut buffers = group.inputs.clone();
    for (i, &n) in group.outputs.iter().enumerate() {
        let te = &group.nodes[n].te;
        buffers.push(Buffer {
            name: format!("out{i}"),
            dtype: te.dtype,
            shape: te.shape.clone(),
            output: true,
            scope: Scope::Param,
        });
    }
    // A scratchpad target has no gemm template: its contractions stay
    // loop nests, which it tiles for its local buffers.
    let gemms = !target.is_scratchpad();
    if let Some(lowered) = winograd_transform(group, name, &buffers)? {
        return Ok(lowered);
    }
    if gemms {
        if let Some(lowered) = scaled_gemm(group, name, &buffers)? {
            return Ok(lowered);
        }
        if let Some(r) = contraction_with_prologue(group)? {
            return gemm_with_prologue(group, name, &buffers, r);
        }
    }
    let read_inside: Vec<usize> = reductions(group)
        .into_iter()
        .filter(|&r| is_read_inside(group, r))
        .collect();
    if read_inside.is_empty() {
        return nests(group, name, buffers, target);
    }
    if let [r] = read_inside[..] {
        if gemms {
            if let Some(lowered) = gemm_with_epilogue(group, name, &buffers, r, &[])? {
                return Ok(lowered);
            }
        }
        // Windows and matrix-vector products keep their own (vectorized,
        // y-reduce) loop order; plain reductions stitch into rows.
        let opaque = matches!(classify(&group.nodes[r].te).apollo, ApolloType::Opaque(_));
        // Both forms order loops for CPU vector lanes; a GPU's threads
        // take the rows form's output points instead, and a scratchpad
        // target tiles the rows form's plain nests.
        if opaque && !target.is_gpu() && !target.is_scratchpad() {
            if let Some(lowered) = window_in_registers(group, name, &buffers, r, target)? {
                return Ok(lowered);
            }
            if let Some(lowered) = reduce_then_epilogue(group, name, &buffers, r, target)? {
                return Ok(lowered);
            }
        }
    }
    rows(group, name, buffers, target)
}

/// A gemm whose operands were scaled by constants inside the group
/// (`operand_scale.rs`), the factors applied in its epilogue; `None` when
/// the group has no such contraction or it is not a gemm with the group's
/// one output as epilogue (the other forms then see the group unchanged).
fn scaled_gemm(group: &GroupExpr, name: &str, buffers: &[Buffer]) -> Result<Option<LoweredGroup>> {
    let (hoisted, scales) = hoist_scales(group);
    let [(&r, factors)] = scales.iter().collect::<Vec<_>>()[..] else {
        return Ok(None);
    };
    if reductions(&hoisted).len() != 1 {
        return Ok(None);
    }
    gemm_with_epilogue(&hoisted, name, buffers, r, factors)
}

/// The contraction of `group` that becomes a gemm although an operand is
/// computed inside the group (an element-wise prologue, applied while the
/// gemm packs that factor). Contractions too small for the gemm
/// (matrix-vector products) are loop nests, which inline such an operand,
/// and are not returned.
fn contraction_with_prologue(group: &GroupExpr) -> Result<Option<usize>> {
    for (n, node) in group.nodes.iter().enumerate() {
        let computed_operand = node
            .args
            .iter()
            .flatten()
            .any(|a| !matches!(a, Src::Input(_)));
        if node.is_contraction() && computed_operand && becomes_gemm(group, n)? {
            return Ok(Some(n));
        }
    }
    Ok(None)
}

/// A gemm with a prologue: `r` must be the group's only reduction, with
/// at most an element-wise epilogue after it.
fn gemm_with_prologue(
    group: &GroupExpr,
    name: &str,
    buffers: &[Buffer],
    r: usize,
) -> Result<LoweredGroup> {
    let label = &group.nodes[r].label;
    if reductions(group).len() != 1 {
        bail!("{label}: a matmul/convolution with a prologue and another reduction in one kernel");
    }
    match gemm_with_epilogue(group, name, buffers, r, &[])? {
        Some(lowered) => Ok(lowered),
        None => bail!(
            "{label}: a matmul/convolution with a prologue and more than one element-wise output"
        ),
    }
}

/// Whether node `n` would be lowered as a gemm were its operands in memory.
fn becomes_gemm(group: &GroupExpr, n: usize) -> Result<bool> {
    let node = &group.nodes[n];
    let buffer_of: Vec<Option<usize>> = (0..node.args.len())
        .map(|i| node.args[i].as_ref().map(|_| i))
        .collect();
    let dtypes = operand_dtypes(group, n);
    Ok(contraction_gemm(&node.te, &dtypes, &buffer_of, node.args.len())?.is_some())
}

/// The type of each of node `n`'s operands, wherever it comes from.
fn operand_dtypes(group: &GroupExpr, n: usize) -> Vec<Option<DType>> {
    group.nodes[n]
        .args
        .iter()
        .map(|a| {
            a.as_ref().map(|src| match src {
                Src::Input(j) => group.inputs[*j].dtype,
                Src::Node(p) => group.nodes[*p].te.dtype,
                Src::Const(t) => t.dtype(),
            })
        })
        .collect()
}

pub(crate) fn reductions(group: &GroupExpr) -> Vec<usize> {
    (0..group.nodes.len())
        .filter(|&n| group.nodes[n].te.reduction.is_some())
        .collect()
}

fn is_read_inside(group: &GroupExpr, n: usize) -> bool {
    group
        .nodes
        .iter()
        .any(|m| m.args.iter().flatten().any(|s| *s == Src::Node(n)))
}

/// Kernel buffer of each input position, when every present input is a
/// kernel input (a contraction's operands must be in memory).
fn input_buffers_of(group: &GroupExpr, n: usize) -> Option<Vec<Option<usize>>> {
    group.nodes[n]
        .args
        .iter()
        .map(|a| match a {
            None => Some(None),
            Some(Src::Input(j)) => Some(Some(*j)),
            Some(_) => None,
        })
        .collect()
}

/// Stands for a computed factor's buffer in a contraction until
/// [`compute_prologues`] replaces the read by the prologue.
const COMPUTED: usize = usize::MAX;

/// Kernel buffer of each input position of node `n`, [`COMPUTED`] for
/// operands computed inside the group.
fn factor_buffers(group: &GroupExpr, n: usize) -> Vec<Option<usize>> {
    group.nodes[n]
        .args
        .iter()
        .map(|a| {
            a.as_ref().map(|src| match src {
                Src::Input(j) => *j,
                Src::Node(_) | Src::Const(_) => COMPUTED,
            })
        })
        .collect()
}

/// Replaces each factor of contraction `r`'s `gemm` that the group
/// computes by its prologue: the producer's value at the factor's index
/// (`factors`), evaluated while the gemm packs it, or, when the producers
/// only move data, a read of their input at the composed index. A padded
/// window read cannot be computed (the padding must read zero, not the
/// prologue of zero).
fn compute_prologues(
    group: &GroupExpr,
    r: usize,
    factors: &[GemmFactor; 2],
    gemm: &mut Gemm,
) -> Result<()> {
    let node = &group.nodes[r];
    let window_factor = gemm.window.as_ref().map(|w| usize::from(!w.layout.is_a()));
    let extents = [[gemm.batch, gemm.m, gemm.k], [gemm.batch, gemm.k, gemm.n]];
    for (i, input) in [&mut gemm.a, &mut gemm.b].into_iter().enumerate() {
        let Some(src) = node.args[factors[i].input].as_ref() else {
            continue;
        };
        if matches!(src, Src::Input(_)) {
            continue;
        }
        let padded = input.read().is_some_and(|o| !o.guard.is_empty());
        if padded || window_factor == Some(i) {
            bail!(
                "{}: a padded window over an operand computed inside the group",
                node.label
            );
        }
        let mut inliner = Inliner::new(group);
        for (var, n) in ["b", "r", "c"].into_iter().zip(extents[i]) {
            inliner.bind(var, n);
        }
        *input = match inliner.read(src, &factors[i].index)? {
            // A packing routine has no error flag for an index out of range.
            value if reads_data_index(&value) => {
                bail!("{}: a gather in a matmul/convolution prologue", node.label)
            }
            // Data movement only (transposes, reshapes, slices, a gather
            // of a constant index): the factor is read in place through
            // the composed index.
            Val::Load { buf, offset, guard } if guard.is_empty() => {
                GemmInput::Read(GemmOperand { buf, offset, guard })
            }
            value if reads_guarded(&value) => bail!(
                "{}: a concatenation or padding in a matmul/convolution prologue (a select per packed element; as its own kernel it is a copy)",
                node.label
            ),
            value => GemmInput::Computed(value),
        };
    }
    Ok(())
}

/// Whether `v` reads under a guard: a concatenation's or a padding's
/// select between sources.
fn reads_guarded(v: &Val) -> bool {
    let mut guarded = false;
    v.for_each_load(&mut |_, _, guard| guarded |= !guard.is_empty());
    guarded
}

pub(crate) fn output_buffer(group: &GroupExpr, k: usize) -> usize {
    group.inputs.len() + k
}

/// One loop nest (or gemm) per output.
fn nests(
    group: &GroupExpr,
    name: &str,
    mut buffers: Vec<Buffer>,
    target: &TargetDesc,
) -> Result<LoweredGroup> {
    let mut body = Vec::new();
    let mut schedule = Schedule::default();
    for (k, &n) in group.outputs.iter().enumerate() {
        let out = output_buffer(group, k);
        if let Some(buffer_of) = input_buffers_of(group, n).filter(|_| !target.is_scratchpad()) {
            let te = &group.nodes[n].te;
            if let Some(c) = contraction_gemm(te, &operand_dtypes(group, n), &buffer_of, out)? {
                body.push(Stmt::Gemm(Box::new(c.gemm)));
                continue;
            }
        }
        let mut inliner = Inliner::new(group);
        let acc = if k == 0 {
            "acc".to_string()
        } else {
            format!("acc{k}")
        };
        let nest = node_nest(&mut inliner, n, out, &acc)?;
        body.extend(scheduled_nest(
            name,
            nest,
            &mut buffers,
            &mut schedule,
            target,
        )?);
    }
    if body.len() > 1 && body.iter().any(|s| matches!(s, Stmt::Gemm(_))) {
        bail!("a matmul/convolution and other outputs in one kernel");
    }
    let body = independent::fuse_independent_reductions(body);
    Ok(LoweredGroup {
        kernel: Kernel {
            name: name.to_string(),
            buffers,
            body,
        },
        form: "nests",
        schedule,
    })
}

/// The contraction `r` as a gemm whose epilogue computes the group's one
/// output; `None` when `r` is not a contraction the gemm handles.
fn gemm_with_epilogue(
    group: &GroupExpr,
    name: &str,
    buffers: &[Buffer],
    r: usize,
    factors: &[Factor],
) -> Result<Option<LoweredGroup>> {
    let Some(v) = single_output(group) else {
        return Ok(None);
    };
    let te = &group.nodes[r].te;
    if real_dims_of(&group.nodes[v].te.shape) != real_dims_of(&te.shape) {
        return Ok(None);
    }
    let out = output_buffer(group, 0);
    let buffer_of = factor_buffers(group, r);
    let Some(c) = contraction_gemm(te, &operand_dtypes(group, r), &buffer_of, out)? else {
        return Ok(None);
    };
    let mut gemm = c.gemm;
    compute_prologues(group, r, &c.factors, &mut gemm)?;
    let mut inliner = Inliner::new(group);
    for (var, n) in [("b", gemm.batch), ("r", gemm.m), ("c", gemm.n)] {
        inliner.bind(var, n);
    }
    let product = factors
        .iter()
        .map(|(op, s)| Ok((op, Tensor::new(vec![], s.data.clone())?)))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .fold(Val::Local("acc".to_string()), |acc, (op, s)| {
            Val::Call(op.clone(), vec![acc, Val::Const(s)])
        });
    inliner
        .computed
        .insert(r, (product.clone(), c.out_index.clone()));
    if v == r && !factors.is_empty() {
        gemm.epilogue = Some(product);
    }
    if v != r {
        let at = reindex(&c.out_index, &te.shape, &group.nodes[v].te.shape);
        let epilogue = inliner.read(&Src::Node(v), &at)?;
        if reads_data_index(&epilogue) {
            bail!("a gather in a matmul/convolution epilogue");
        }
        gemm.epilogue = Some(epilogue);
    }
    Ok(Some(LoweredGroup {
        kernel: Kernel {
            name: name.to_string(),
            buffers: buffers.to_vec(),
            body: vec![Stmt::Gemm(Box::new(gemm))],
        },
        form: "gemm",
        schedule: Schedule::default(),
    }))
}

/// Reduction `r` into the output buffer, then the group's one output
/// computed in place from it element by element (a second, vectorized
/// pass): for reductions that are not gemms (depthwise convolutions,
/// matrix-vector products) with an element-wise epilogue. `None` unless
/// the output has `r`'s shape and type.
fn reduce_then_epilogue(
    group: &GroupExpr,
    name: &str,
    buffers: &[Buffer],
    r: usize,
    target: &TargetDesc,
) -> Result<Option<LoweredGroup>> {
    let Some(v) = single_output(group) else {
        return Ok(None);
    };
    let (rt, vt) = (&group.nodes[r].te, &group.nodes[v].te);
    if v == r || real_dims_of(&vt.shape) != real_dims_of(&rt.shape) || vt.dtype != rt.dtype {
        return Ok(None);
    }
    let out = output_buffer(group, 0);
    let mut body = Vec::new();
    let mut schedule = Schedule::default();
    let mut buffers = buffers.to_vec();
    let mut first = Inliner::new(group);
    let reduce = node_nest(&mut first, r, out, "acc")?;
    let mut second = Inliner::new(group);
    let own: Vec<Idx> = (0..vt.shape.len())
        .map(|l| Idx::var(&var_name(Var::Out(l))))
        .collect();
    let point = reindex(&own, &vt.shape, &rt.shape);
    let stored = Val::Load {
        buf: out,
        offset: flatten(&point, &rt.shape),
        guard: Vec::new(),
    };
    second.computed.insert(r, (stored, point));
    // The epilogue may be a reduction too (over extent-1 axes only, as its
    // shape is `r`'s): its accumulator must not clash with `r`'s when the
    // two nests' loops merge.
    let epilogue = node_nest(&mut second, v, out, "acc1")?;
    for nest in [reduce, epilogue] {
        body.extend(scheduled_nest(
            name,
            nest,
            &mut buffers,
            &mut schedule,
            target,
        )?);
    }
    if vt.shape == rt.shape {
        body = merge_outer_loops(body);
    }
    Ok(Some(LoweredGroup {
        kernel: Kernel {
            name: name.to_string(),
            buffers,
            body,
        },
        form: "reduce+epilogue",
        schedule,
    }))
}

/// Two nests over the same output whose outermost loops are the same
/// (variable, extent, kind) become one loop running both bodies: the
/// epilogue of each slice then runs while the slice is in cache. Legal
/// because the second nest reads, at each point, only what the first
/// wrote at that point, and one outer iteration covers the same points in
/// both (same variable of the same shape).
/// `nest` (one output's loops, over `buffers`) under its default schedule, which is
/// appended to `schedule`; local buffers the schedule declares join `buffers`.
pub(super) fn scheduled_nest(
    name: &str,
    nest: Vec<Stmt>,
    buffers: &mut Vec<Buffer>,
    schedule: &mut Schedule,
    target: &TargetDesc,
) -> Result<Vec<Stmt>> {
    let k = Kernel {
        name: name.to_string(),
        buffers: std::mem::take(buffers),
        body: nest,
    };
    let s = default_schedule(&k, target);
    let scheduled = apply(&k, &s)?;
    *buffers = scheduled.buffers;
    schedule.0.extend(s.0);
    Ok(scheduled.body)
}

fn merge_outer_loops(body: Vec<Stmt>) -> Vec<Stmt> {
    match <[Stmt; 2]>::try_from(body) {
        Ok([Stmt::Loop(mut a), Stmt::Loop(b)])
            if a.var == b.var && a.extent == b.extent && a.kind == b.kind =>
        {
            a.body.extend(b.body);
            vec![Stmt::Loop(a)]
        }
        Ok(pair) => pair.into(),
        Err(body) => body,
    }
}

/// The node computing a group's one output: the output node, or the node
/// a trailing chain of views reshapes (it has the output's bytes).
/// `None` for a group of several outputs.
pub(crate) fn single_output(group: &GroupExpr) -> Option<usize> {
    match group.outputs[..] {
        [output] => Some(strip_views(group, output)),
        _ => None,
    }
}

/// The node whose bytes `n` has: `n` itself, or for a chain of views
/// (reshapes) the node they reshape.
fn strip_views(group: &GroupExpr, mut n: usize) -> usize {
    while is_view(&group.nodes[n].te) {
        match group.nodes[n].args.first() {
            Some(Some(Src::Node(p))) => n = *p,
            _ => break,
        }
    }
    n
}

fn reads_data_index(v: &Val) -> bool {
    let idx_has = |i: &Idx| i.terms.iter().any(|(a, _)| has_data(a));
    match v {
        Val::Load { offset, guard, .. } => idx_has(offset) || guard.iter().any(|(i, _)| idx_has(i)),
        Val::Index(i) => idx_has(i),
        Val::InBounds(g) => g.iter().any(|(i, _)| idx_has(i)),
        Val::Call(_, args) => args.iter().any(reads_data_index),
        Val::Const(_) | Val::Local(_) => false,
    }
}

fn has_data(a: &Atom) -> bool {
    match a {
        Atom::Data { .. } => true,
        Atom::Div(i, _) | Atom::Mod(i, _) => i.terms.iter().any(|(a, _)| has_data(a)),
        Atom::Var(_) => false,
    }
}

/// The extents of the dimensions of extent other than 1.
fn real_dims_of(shape: &[usize]) -> Vec<usize> {
    shape.iter().copied().filter(|&e| e != 1).collect()
}

/// An index into a tensor of shape `from` as an index into the same
/// element of shape `to`, for shapes that differ only in dimensions of
/// extent 1 (those hold 0).
fn reindex(index: &[Idx], from: &[usize], to: &[usize]) -> Vec<Idx> {
    let mut real = real_dims(from).into_iter().map(|l| index[l].clone());
    to.iter()
        .map(|&e| match e {
            1 => Idx::constant(0),
            _ => real.next().unwrap_or_else(|| Idx::constant(0)),
        })
        .collect()
}

/// Dimensions of extent other than 1 (an empty dimension is kept: it
/// makes an empty loop, where an index fixed at 0 would write outside an
/// empty output).
fn real_dims(shape: &[usize]) -> Vec<usize> {
    (0..shape.len()).filter(|&l| shape[l] != 1).collect()
}
