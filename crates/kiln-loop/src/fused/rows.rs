//! The rows form (APOLLO §3.4 Layer II memory stitching): per row of the
//! reductions' output space, every reduction into a register, then the
//! outputs over the rest of their dimensions (Softmax, LayerNorm). When
//! the reductions read consecutive elements along the rows rather than
//! along the reduced axis, the schedule runs strips of rows across vector
//! lanes (`rows_across.rs`).

use super::*;
use crate::reciprocal::multiply_by_reciprocals;
use crate::schedule::split_names;

/// The row program (memory stitching; see the module doc).
pub(super) fn rows(
    group: &GroupExpr,
    name: &str,
    mut buffers: Vec<Buffer>,
    target: &TargetDesc,
) -> Result<LoweredGroup> {
    let reds = reductions(group);
    if let Some(&c) = reds.iter().find(|&&r| group.nodes[r].is_contraction()) {
        bail!(
            "{}: a matmul/convolution whose result is read other than element by element (only element-wise epilogues are fused)",
            group.nodes[c].label
        );
    }
    let first = &group.nodes[reds[0]].te;
    let row_extents: Vec<usize> = real_dims(&first.shape)
        .into_iter()
        .map(|l| first.shape[l])
        .collect();
    let row_vars: Vec<String> = (0..row_extents.len()).map(|t| format!("o{t}")).collect();
    let mut inliner = Inliner::new(group);
    for (v, &e) in row_vars.iter().zip(&row_extents) {
        inliner.bind(v, e as i64);
    }
    let after_reduction = reads_reductions(group);
    let rows_of = (row_vars.as_slice(), row_extents.as_slice());
    let mut row_body = row_reductions(&mut inliner, &reds, &after_reduction, rows_of)?;
    let mut before_schedule = Schedule::default();
    let before = outputs_before_rows(
        group,
        name,
        &after_reduction,
        &mut buffers,
        &mut before_schedule,
        target,
    )?;
    for (k, &n) in group.outputs.iter().enumerate() {
        if group.nodes[n].te.reduction.is_none() && after_reduction[n] {
            row_body.extend(row_output(
                &mut inliner,
                group,
                n,
                k,
                &row_vars,
                &row_extents,
            )?);
        }
    }
    store_reduced_values(&mut row_body, &|b| buffers[b].dtype);
    multiply_by_reciprocals(&mut row_body);
    let mut body = row_body;
    for (v, &e) in row_vars.iter().zip(&row_extents).rev() {
        body = loop_or_zero(v, e as i64, body);
    }
    let kernel = Kernel {
        name: name.to_string(),
        buffers,
        body,
    };
    refuse_strided_epilogue(group, &kernel, rows_of, &after_reduction, target)?;
    let schedule = if row_vars.is_empty() {
        // One row (all dimensions reduced): no output loops, which the
        // default rule schedules for the target.
        default_schedule(&kernel, target)
    } else {
        row_schedule(&kernel, &row_vars, target)
    };
    let mut kernel = apply(&kernel, &schedule)?;
    kernel.body.splice(0..0, before);
    before_schedule.0.extend(schedule.0);
    Ok(LoweredGroup {
        kernel,
        form: "rows",
        schedule: before_schedule,
    })
}

/// The outputs that read no reduction, as plain scheduled nests that run
/// before the rows (their schedules appended to `schedule`).
fn outputs_before_rows(
    group: &GroupExpr,
    name: &str,
    after_reduction: &[bool],
    buffers: &mut Vec<Buffer>,
    schedule: &mut Schedule,
    target: &TargetDesc,
) -> Result<Vec<Stmt>> {
    let mut before = Vec::new();
    for (k, &n) in group.outputs.iter().enumerate() {
        if group.nodes[n].te.reduction.is_none() && !after_reduction[n] {
            let nest = node_nest(&mut Inliner::new(group), n, output_buffer(group, k), "acc")?;
            before.extend(scheduled_nest(name, nest, buffers, schedule, target)?);
        }
    }
    Ok(before)
}

/// An error (the planner's feedback) for a group whose only readers of
/// its reductions are per-row nodes (APOLLO rule 7's output-space
/// consumers) when the rows form would read one element per row: a
/// reduction along an outer axis whose locals cannot run in strips across
/// lanes. Split off, the reduction keeps its own vectorized nest.
fn refuse_strided_epilogue(
    group: &GroupExpr,
    kernel: &Kernel,
    (row_vars, row_extents): (&[String], &[usize]),
    after_reduction: &[bool],
    target: &TargetDesc,
) -> Result<()> {
    let Some(last) = row_vars.last() else {
        return Ok(());
    };
    let row_shaped_only = (0..group.nodes.len())
        .all(|n| !after_reduction[n] || row_shaped(&group.nodes[n].te.shape, row_extents));
    let strided = reads_across_rows(kernel, last) && !reduces_across_rows(kernel, last);
    if row_shaped_only && strided && !target.is_gpu() && !target.is_scratchpad() {
        bail!(
            "{}: a reduction along an outer axis with only a per-row epilogue: as rows it would read one element per row (its own nest reads vectors)",
            group.nodes[reductions(group)[0]].label
        );
    }
    Ok(())
}

/// For each node, whether it reads a reduction of the group, directly or
/// through other nodes (one pass: nodes are in topological order).
fn reads_reductions(group: &GroupExpr) -> Vec<bool> {
    let mut reads = vec![false; group.nodes.len()];
    for (n, node) in group.nodes.iter().enumerate() {
        reads[n] = node.args.iter().flatten().any(|a| match a {
            Src::Node(p) => group.nodes[*p].te.reduction.is_some() || reads[*p],
            _ => false,
        });
    }
    reads
}

/// Every reduction `reds` of a row program in order, each followed by
/// the per-row values that it completes.
fn row_reductions(
    inliner: &mut Inliner,
    reds: &[usize],
    after_reduction: &[bool],
    (row_vars, row_extents): (&[String], &[usize]),
) -> Result<Vec<Stmt>> {
    let group = inliner.group;
    let mut body = Vec::new();
    for (j, &r) in reds.iter().enumerate() {
        body.extend(row_reduction(inliner, group, j, r, row_vars, row_extents)?);
        body.extend(row_level_values(
            inliner,
            after_reduction,
            row_vars,
            row_extents,
        ));
    }
    Ok(body)
}

/// Nodes of the row's own shape computed from the reductions so far and
/// read inside the group (LogSoftmax's `Log(sum)`, LayerNorm's
/// `Sqrt(var + eps)`): each once per row, as a local the nodes reading it
/// take, rather than inlined into every element of the row. A node that
/// still reads a reduction not yet computed waits for a later call.
fn row_level_values(
    inliner: &mut Inliner,
    after_reduction: &[bool],
    row_vars: &[String],
    row_extents: &[usize],
) -> Vec<Stmt> {
    let group = inliner.group;
    let mut lets = Vec::new();
    for (n, node) in group.nodes.iter().enumerate() {
        let te = &node.te;
        let dims = real_dims(&te.shape);
        let candidate =
            te.reduction.is_none() && after_reduction[n] && row_shaped(&te.shape, row_extents);
        if !candidate || inliner.computed.contains_key(&n) || !is_read_inside(group, n) {
            continue;
        }
        let point = row_point(&te.shape, &dims, row_vars);
        let Ok(value) = inliner.read(&Src::Node(n), &point) else {
            continue;
        };
        let value = if matches!(value, Val::Local(_) | Val::Const(_)) {
            value
        } else {
            let name = format!("w{n}");
            lets.push(Stmt::Let {
                name: name.clone(),
                dtype: te.dtype,
                value,
            });
            Val::Local(name)
        };
        inliner.computed.insert(n, (value, point));
    }
    lets
}

/// Whether a node of `shape` holds one value per row (its dimensions
/// other than 1 are the rows').
fn row_shaped(shape: &[usize], row_extents: &[usize]) -> bool {
    real_dims(shape)
        .iter()
        .map(|&l| shape[l])
        .eq(row_extents.iter().copied())
}

/// The index of a node of the row's shape at the row being computed: its
/// real dimensions (`dims`, in order) are the row variables.
fn row_point(shape: &[usize], dims: &[usize], row_vars: &[String]) -> Vec<Idx> {
    (0..shape.len())
        .map(|l| match dims.iter().position(|&d| d == l) {
            Some(t) => Idx::var(&row_vars[t]),
            None => Idx::constant(0),
        })
        .collect()
}

/// Reduction `r` (the `j`-th) of a row program: accumulate into a local,
/// round it to the node's type, record where it is computed, and store it
/// when it is an output.
fn row_reduction(
    inliner: &mut Inliner,
    group: &GroupExpr,
    j: usize,
    r: usize,
    row_vars: &[String],
    row_extents: &[usize],
) -> Result<Vec<Stmt>> {
    let te = &group.nodes[r].te;
    let dims = real_dims(&te.shape);
    let extents: Vec<usize> = dims.iter().map(|&l| te.shape[l]).collect();
    if extents != row_extents {
        bail!(
            "{}: reductions of different output shapes ({:?} and {:?}) in one kernel",
            group.nodes[r].label,
            extents,
            row_extents
        );
    }
    let point = row_point(&te.shape, &dims, row_vars);
    let Some(red) = te.reduction.clone() else {
        bail!("{} is not a reduction", group.nodes[r].label);
    };
    let var = |k: usize| format!("r{k}_{j}");
    for (k, &e) in red.extents.iter().enumerate() {
        inliner.bind(&var(k), e as i64);
    }
    let env = Env {
        out: point.clone(),
        red: (0..red.extents.len()).map(|k| Idx::var(&var(k))).collect(),
    };
    let value = inliner.body(r, &env)?;
    let acc = format!("acc{j}");
    let acc_type = red.accumulator_type(te.dtype);
    let mut stmts = reduce_over(&acc, acc_type, &red, value, &var)?;
    let local = format!("v{j}");
    stmts.push(Stmt::Let {
        name: local.clone(),
        dtype: te.dtype,
        value: Val::Local(acc),
    });
    if let Some(k) = group.outputs.iter().position(|&o| o == r) {
        stmts.push(Stmt::Store {
            buf: output_buffer(group, k),
            offset: flatten(&point, &te.shape),
            value: Val::Local(local.clone()),
        });
    }
    inliner.computed.insert(r, (Val::Local(local), point));
    Ok(stmts)
}

/// Output `n` (kernel output `k`) of a row program: its dimensions that
/// hold the row are the row variables, the others loop inside the row.
/// Tries each way of placing the row on the output's dimensions (in
/// order, matching extents) until every reduction it reads is read at
/// the row being computed.
fn row_output(
    inliner: &mut Inliner,
    group: &GroupExpr,
    n: usize,
    k: usize,
    row_vars: &[String],
    row_extents: &[usize],
) -> Result<Vec<Stmt>> {
    let te = &group.nodes[n].te;
    let dims = real_dims(&te.shape);
    let mut last_error = None;
    for placement in placements(&dims, &te.shape, row_extents) {
        let inner: Vec<usize> = dims
            .iter()
            .copied()
            .filter(|l| !placement.contains(l))
            .collect();
        let index: Vec<Idx> = (0..te.shape.len())
            .map(|l| {
                if let Some(t) = placement.iter().position(|&p| p == l) {
                    Idx::var(&row_vars[t])
                } else if inner.contains(&l) {
                    Idx::var(&format!("j{l}"))
                } else {
                    Idx::constant(0)
                }
            })
            .collect();
        for &l in &inner {
            inliner.bind(&format!("j{l}"), te.shape[l] as i64);
        }
        match inliner.read(&Src::Node(n), &index) {
            Ok(value) => {
                let mut stmts = vec![Stmt::Store {
                    buf: output_buffer(group, k),
                    offset: flatten(&index, &te.shape),
                    value,
                }];
                for &l in inner.iter().rev() {
                    stmts = loop_or_zero(&format!("j{l}"), te.shape[l] as i64, stmts);
                }
                return Ok(stmts);
            }
            Err(e) => last_error = Some(e),
        }
    }
    match last_error {
        Some(e) => Err(e),
        None => bail!(
            "{}: no dimensions of its shape {:?} hold the row {:?}",
            group.nodes[n].label,
            te.shape,
            row_extents
        ),
    }
}

/// Ordered choices of `row.len()` dimensions among `dims` whose extents
/// are `row` (at most a few dozen for real shapes).
fn placements(dims: &[usize], shape: &[usize], row: &[usize]) -> Vec<Vec<usize>> {
    if row.is_empty() {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for (i, &l) in dims.iter().enumerate() {
        if shape[l] != row[0] {
            continue;
        }
        for mut rest in placements(&dims[i + 1..], shape, &row[1..]) {
            rest.insert(0, l);
            out.push(rest);
        }
    }
    out
}

/// Coalesce the row loops, run them in parallel when the kernel does
/// enough work, and vectorize the innermost loop of each output store
/// (on a GPU only the coalescing).
fn row_schedule(k: &Kernel, row_vars: &[String], target: &TargetDesc) -> Schedule {
    if target.is_scratchpad() {
        return Schedule::default();
    }
    match row_vars.first() {
        Some(v) if k.body.iter().any(|s| loop_named(s, v)) => {}
        _ => return Schedule::default(),
    }
    if target.is_gpu() {
        // Blocks and threads take the one coalesced row loop (`gpu_map.rs`); strips,
        // vector lanes and lane partial sums are CPU forms, which a GPU would run as
        // per-thread arrays in local memory (the parallel mark it ignores).
        return Schedule(fused_parallel(k, row_vars));
    }
    if let Some(schedule) = strips_across_rows(k, row_vars, target) {
        return schedule;
    }
    let mut directives = fused_parallel(k, row_vars);
    let mut inner_loops = Vec::new();
    for s in &k.body {
        innermost_store_loops(s, &mut inner_loops);
        innermost_reduction_loops(s, &mut inner_loops);
    }
    let f32_row = crate::auto_schedule::f32_in_and_out(k);
    let mut inner_extents = Vec::new();
    for var in inner_loops {
        let extent = crate::ir::find_loop(&k.body, &var).map(|l| l.extent.max());
        inner_extents.extend(extent);
        match extent {
            // A row's f32 values summed in f32 lanes, block by block, each block once
            // into the f64 sum (`partial_sums.rs`): every element converted to f64
            // would halve the vector width.
            Some(extent) if f32_row && crate::auto_schedule::sums_f32_values(k, &var) => directives
                .extend(crate::auto_schedule::vector_partial_sums(
                    k, &var, extent, target,
                )),
            _ => directives.push(Directive::Vectorize(var)),
        }
    }
    directives.extend(row_jam(k, &directives, &inner_extents, target));
    Schedule(directives)
}

/// Two rows jammed (`jam.rs`) when a parallel row program's rows are short: each of its
/// innermost loops (`extents`) at most [`TargetDesc::short_row_vectors`] vectors. Such a
/// row waits on the latency of its reductions' last steps (a vector's lanes summed, the
/// row's max broadcast into an exp) more than on its work, and a second row's chains
/// overlap it. Not where the row keeps partial sums in local buffers (long rows: `jam`
/// refuses them), nor where it reads back a buffer it stores while a loop ends in a
/// partial vector: a Softmax over rows of 20 or 24 ran slower jammed (BENCHMARKS.md,
/// session 32).
fn row_jam(
    k: &Kernel,
    directives: &[Directive],
    extents: &[i64],
    target: &TargetDesc,
) -> Option<Directive> {
    let lanes = target.f32_lanes() as i64;
    let longest = target.short_row_vectors() as i64 * lanes;
    let short = extents.iter().all(|&e| e <= longest);
    let whole_vectors = extents.iter().all(|&e| e % lanes == 0);
    if !short || (!whole_vectors && crate::jam::reads_what_it_stores(&k.body)) {
        return None;
    }
    let var = directives.iter().find_map(|d| match d {
        Directive::Parallel(var) => Some(var),
        _ => None,
    })?;
    crate::jam::jammed_after(k, &Schedule(directives.to_vec()), var, 2)
}

/// Row loops `vars` coalesced into one, run in parallel when the kernel does enough work.
fn fused_parallel(k: &Kernel, vars: &[String]) -> Vec<Directive> {
    let mut directives = Vec::new();
    let Some(mut outer) = vars.first().cloned() else {
        return directives;
    };
    for v in &vars[1..] {
        directives.push(Directive::Fuse {
            outer: outer.clone(),
            inner: v.clone(),
        });
        outer = fused_name(&outer, v);
    }
    if work(&k.body) >= PARALLEL_MIN_WORK {
        directives.push(Directive::Parallel(outer));
    }
    directives
}

/// PANAMERA's y-reduce for row programs whose reductions read along the rows
/// ([`reduces_across_rows`]): the innermost row loop in strips of a column strip's width,
/// the other row loops and the strips coalesced and parallel, each strip's statements
/// across its rows in vector lanes (`rows_across.rs`). `None` for other row programs.
pub(crate) fn strips_across_rows(
    k: &Kernel,
    row_vars: &[String],
    target: &TargetDesc,
) -> Option<Schedule> {
    let (last, outer) = row_vars.split_last()?;
    if !reduces_across_rows(k, last) {
        return None;
    }
    let extent = loop_extent(k, last);
    let width = crate::auto_schedule::column_strip(extent, target);
    let mut outer = outer.to_vec();
    let mut directives = Vec::new();
    let rows = if extent > width {
        directives.push(Directive::Split {
            var: last.clone(),
            factor: width,
        });
        let (strips, rows) = split_names(last);
        // A last, partial strip's bound names the strip loop, which a
        // loop fused with it would no longer have: it then runs inside.
        if extent % width == 0 || outer.is_empty() {
            outer.push(strips);
        }
        rows
    } else {
        last.clone()
    };
    directives.extend(fused_parallel(k, &outer));
    directives.push(Directive::RowsAcross(rows.clone()));
    directives.push(Directive::Vectorize(rows));
    Some(Schedule(directives))
}

/// The extent of loop `var` of `k` (1 if there is none).
fn loop_extent(k: &Kernel, var: &str) -> i64 {
    crate::ir::find_loop(&k.body, var).map_or(1, |l| l.extent.max())
}

/// Whether the reductions of row program `k` read consecutive elements along its rows (loop
/// `last`, the innermost row variable) and none along their own innermost loops: a row's
/// reduction would gather, a strip of rows reads vectors (`rows_across.rs`).
fn reduces_across_rows(k: &Kernel, last: &str) -> bool {
    let mut arg_locals = Vec::new();
    arg_step_locals(&k.body, &mut arg_locals);
    let wide_locals = crate::ir::declared_locals(&k.body)
        .iter()
        .all(|(n, d)| !d.is_half_float() || arg_locals.contains(n));
    wide_locals && reads_across_rows(k, last)
}

/// The locals of `body`'s arg-reduction steps: an index, and an extreme that only ever
/// copies a value already in its type, so a row array of that type holds both exactly.
fn arg_step_locals<'a>(body: &'a [Stmt], out: &mut Vec<&'a str>) {
    for s in body {
        match s {
            Stmt::ArgUpdate(step) => out.extend([step.name.as_str(), step.best.as_str()]),
            Stmt::Loop(l) => arg_step_locals(&l.body, out),
            _ => {}
        }
    }
}

/// Whether the reductions of row program `k` read consecutive elements along its rows (loop
/// `last`) and none along their own innermost loops.
fn reads_across_rows(k: &Kernel, last: &str) -> bool {
    let mut reductions = Vec::new();
    for s in &k.body {
        innermost_reduction_loops(s, &mut reductions);
        innermost_arg_loops(s, &mut reductions);
    }
    let along_rows = |var: &String| {
        let Some(l) = crate::ir::find_loop(&k.body, var) else {
            return false;
        };
        let mut loads = Vec::new();
        crate::ir::for_each_load(&l.body, &mut |_, offset, _| loads.push(offset.clone()));
        let along_reduction = loads.iter().any(|o| o.unit_stride_aligned(var, 1));
        let rowwise = loads.iter().filter(|o| o.uses(last));
        !along_reduction
            && loads.iter().any(|o| o.uses(last))
            && rowwise.clone().all(|o| o.unit_stride_aligned(last, 1))
    };
    !reductions.is_empty() && reductions.iter().all(along_rows)
}

fn loop_named(s: &Stmt, v: &str) -> bool {
    matches!(s, Stmt::Loop(l) if l.var == v)
}

/// Variables of the innermost reduction loops whose body is one sum,
/// product, max or min update, possibly after locals and stores
/// (`row_values.rs`), vectorized with partial results per lane (the C
/// printer's max/min reductions propagate NaN as the serial loop does).
fn innermost_reduction_loops(s: &Stmt, out: &mut Vec<String>) {
    if let Stmt::Loop(l) = s {
        if let [before @ .., Stmt::Update { combiner, .. }] = l.body.as_slice() {
            let plain = before
                .iter()
                .all(|s| matches!(s, Stmt::Let { .. } | Stmt::Store { .. }));
            if plain
                && matches!(
                    combiner,
                    Combiner::Sum | Combiner::Prod | Combiner::Max | Combiner::Min
                )
            {
                out.push(l.var.clone());
            }
        }
        l.body
            .iter()
            .for_each(|s| innermost_reduction_loops(s, out));
    }
}

/// Variables of the innermost loops whose body ends in an arg-reduction step (they run in
/// order: across rows only, never in lanes of their own).
fn innermost_arg_loops(s: &Stmt, out: &mut Vec<String>) {
    if let Stmt::Loop(l) = s {
        if matches!(l.body.last(), Some(Stmt::ArgUpdate(_))) {
            out.push(l.var.clone());
        }
        l.body.iter().for_each(|s| innermost_arg_loops(s, out));
    }
}

/// Variables of the innermost `j` loops whose body is one store.
fn innermost_store_loops(s: &Stmt, out: &mut Vec<String>) {
    if let Stmt::Loop(l) = s {
        if l.var.starts_with('j') && matches!(l.body.as_slice(), [Stmt::Store { .. }]) {
            out.push(l.var.clone());
        }
        l.body.iter().for_each(|s| innermost_store_loops(s, out));
    }
}
