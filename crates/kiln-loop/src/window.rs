//! Fused form *window in registers*: a small window reduction (depthwise
//! convolution, pooling) and the element-wise epilogue after it as one
//! loop nest, each output point accumulated in a register ("x-reduce").
//!
//! Needs: a [`GroupExpr`] whose only reduction is `r`, read inside the
//! group; its single output `v` (through trailing views) has `r`'s shape;
//! `r` is f32 with at most [`MAX_TAPS`] reduction steps per point, and its
//! loads walk the innermost output dimension with stride 1 or 2; and the
//! target description (its f32 lanes decide `peel_pays`).
//! Guarantees: one kernel computing the group: per output point, the
//! reduction into a local f32 accumulator over fully unrolled reduction
//! loops, then the epilogue applied to it and stored once. The schedule
//! (data) runs the outer output loops in parallel (coalescing the ones that
//! stay affine), vectorizes the innermost output loop and peels the padded
//! borders of the output loops (the parallel one too when it is a single
//! output loop: an image's first and last rows run serially apart), so
//! the interior runs without bounds checks (the vectorized loop only when
//! that leaves fewer scalar iterations, see `peel_pays`). Padded reads the
//! vector lanes share are cached per output point (`cache_read` at the
//! loop around the vectorized one). A vectorized loop whose weights would
//! take more than half of L1 runs in blocks, outermost and in parallel
//! (`channel_blocks`). Spatial windows larger than 5x5 do not take the
//! form (`MAX_SIDE_TAPS`): the caller's y-reduce form is faster there. A
//! lone window node of at most 3x3 is lowered as a group of one
//! (`lower_window_node`).
//!
//! Why: the *reduce + epilogue* form (y-reduce, `fused.rs`) adds each tap
//! into the output buffer, a read-modify-write pass over the output row per
//! tap and a last pass for the epilogue; here each output is written once.
//! The f32 accumulator rounds like the y-reduce form, which sums in the f32
//! output buffer (the interpreter sums in double; a window has few terms).

use crate::auto_schedule::{interior, load_strides, reads_along, work, PARALLEL_MIN_WORK};
use crate::fused::{output_buffer, reductions, single_output, LoweredGroup};
use crate::group::{Env, GroupExpr, Inliner};
use crate::ir::{find_loop, for_each_load, Buffer, Idx, Kernel, Loop, Stmt, Val};
use crate::lower::{flatten, loop_or_zero, reduce_over, single_node_group, var_name};
use crate::schedule::{apply, fused_name, has_div_mod_of, split_names, Directive, Schedule};
use kiln_ir::{DType, Result};
use kiln_ops::te::classify::{classify, ApolloType, OpaqueKind};
use kiln_ops::te::{TensorExpr, Var};
use kiln_target::TargetDesc;

/// Most reduction steps per output point (a 7x7 window is 49).
pub const MAX_TAPS: usize = 64;

/// A lone window node takes the form only with at most this many taps
/// (3x3; see `lower_window_node`).
const SMALL_SIDE_TAPS: i64 = 9;
/// Spatial windows (`window_side_taps`) of more taps than this (5x5) do
/// not take the form: 7x7 windows (ConvNeXt) ran 1.7-4x slower here than
/// in the y-reduce form at 56x56 and 14x14 points alike (Zen 5, 2 threads,
/// kernel profiles). A 5x5 window over 7x7 points, mostly border, ran 2.5x
/// slower here (0.62 ms against 0.25) while a jammed loop's last points ran
/// one by one; with them jammed too it runs 1.1-2x faster here
/// (MnasNet's and EfficientNet-B0's at batch 8, 1 thread, Zen 4:
/// BENCHMARKS.md, session 26).
const MAX_SIDE_TAPS: i64 = 25;

/// The group as a window in registers, scheduled for `target`; `None` when
/// it does not have the shape the module doc needs (the caller then tries
/// the other forms).
pub fn window_in_registers(
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
    let Some(red) = &rt.reduction else {
        return Ok(None);
    };
    let taps: usize = red.extents.iter().product();
    if reductions(group) != [r] || vt.shape != rt.shape || rt.dtype != DType::F32 || taps > MAX_TAPS
    {
        return Ok(None);
    }
    let mut inliner = Inliner::new(group);
    let outs: Vec<Idx> = (0..rt.shape.len())
        .map(|l| Idx::var(&var_name(Var::Out(l))))
        .collect();
    for (l, &e) in rt.shape.iter().enumerate() {
        inliner.bind(&var_name(Var::Out(l)), e as i64);
    }
    for (k, &e) in red.extents.iter().enumerate() {
        inliner.bind(&var_name(Var::Red(k)), e as i64);
    }
    let env = Env {
        out: outs.clone(),
        red: (0..red.extents.len())
            .map(|k| Idx::var(&var_name(Var::Red(k))))
            .collect(),
    };
    let value = inliner.body(r, &env)?;
    let mut point = reduce_over("acc", DType::F32, red, value, &|k| var_name(Var::Red(k)))?;
    inliner
        .computed
        .insert(r, (Val::Local("acc".into()), outs.clone()));
    // A group of one (`lower_window_node`) stores the accumulator itself.
    let epilogue = match v == r {
        true => Val::Local("acc".into()),
        false => inliner.body(
            v,
            &Env {
                out: outs.clone(),
                red: Vec::new(),
            },
        )?,
    };
    point.push(Stmt::Store {
        buf: output_buffer(group, 0),
        offset: flatten(&outs, &vt.shape),
        value: epilogue,
    });
    let mut body = point;
    for (l, &e) in rt.shape.iter().enumerate().rev() {
        body = loop_or_zero(&var_name(Var::Out(l)), e as i64, body);
    }
    let kernel = Kernel {
        name: name.to_string(),
        buffers: buffers.to_vec(),
        body,
    };
    let Some(schedule) = register_schedule(&kernel, target) else {
        return Ok(None);
    };
    Ok(Some(LoweredGroup {
        kernel: apply(&kernel, &schedule)?,
        form: "window",
        schedule,
    }))
}

/// A lone window reduction node (a depthwise convolution or a pooling
/// whose epilogue went to another kernel) in this form, as a group of one
/// whose output is the reduction itself; `None` where the form does not
/// apply (the default lowering then takes it).
pub fn lower_window_node(
    te: &TensorExpr,
    name: &str,
    input_dtypes: &[Option<DType>],
    target: &TargetDesc,
) -> Result<Option<LoweredGroup>> {
    let windowed = matches!(
        classify(te).apollo,
        ApolloType::Opaque(OpaqueKind::Conv | OpaqueKind::Window)
    );
    // Only 3x3 windows or smaller: a lone 5x5 depthwise convolution over
    // 28x28 points (MobileNetV3) measured 0.116 ms in this form against
    // 0.042 in the y-reduce one (Zen 5, 2 threads, batch 1).
    let small = te
        .reduction
        .as_ref()
        .is_some_and(|r| r.extents.iter().product::<usize>() as i64 <= SMALL_SIDE_TAPS);
    if !windowed || !small {
        return Ok(None);
    }
    let (group, buffers) = single_node_group(te, name, input_dtypes)?;
    window_in_registers(&group, name, &buffers, 0, target)
}

/// The schedule of the module doc for `target` (its f32 lanes and L1);
/// `None` when the nest has fewer than two output loops or the innermost
/// one is not read along (then vectorizing it would gather).
fn register_schedule(k: &Kernel, target: &TargetDesc) -> Option<Schedule> {
    let lanes = target.f32_lanes() as i64;
    let (outputs, reductions) = loop_vars(&k.body);
    let [.., innermost] = &outputs[..] else {
        return None;
    };
    if outputs.len() < 2 || !reads_along(&k.body, innermost) {
        return None;
    }
    let side = window_side_taps(&k.body, innermost)?;
    if side > MAX_SIDE_TAPS {
        return None;
    }
    let mut schedule = channel_blocks(k, &outputs, target).unwrap_or_default();
    let mut current = apply(k, &schedule).ok()?;
    let (outputs, _) = loop_vars(&current.body);
    let innermost = outputs.last()?;
    let mut outer = outputs[0].clone();
    let mut fused_count = 1;
    for next in &outputs[1..outputs.len() - 1] {
        let d = Directive::Fuse {
            outer: outer.clone(),
            inner: next.clone(),
        };
        let fused = apply(&current, &Schedule(vec![d.clone()])).ok()?;
        let name = fused_name(&outer, next);
        if has_div_mod_of(&fused.body, &name) {
            break;
        }
        schedule.0.push(d);
        current = fused;
        outer = name;
        fused_count += 1;
    }
    if work(&k.body) >= PARALLEL_MIN_WORK {
        schedule.0.push(Directive::Parallel(outer));
    }
    for r in reductions {
        schedule.0.push(Directive::Unroll(r));
    }
    schedule.0.push(Directive::Vectorize(innermost.clone()));
    // Padded taps the vector lanes share (an image read channels-first,
    // vectorized along output channels): read once per output point into
    // a local buffer, bounds checks there, instead of a masked load per
    // lane and tap.
    let enclosing = enclosing_loop(&current.body, innermost);
    if let Some(at) = &enclosing {
        for buf in shared_padded_reads(&current.body, innermost) {
            let buf = k.buffers[buf].name.clone();
            schedule.0.push(Directive::CacheRead {
                buf,
                at: at.clone(),
            });
        }
    }
    // Padded borders of the output loops inside the parallel one, and of
    // the parallel one when it is a single output loop (an image's rows).
    let first = if fused_count == 1 { 0 } else { fused_count };
    schedule
        .0
        .extend(border_peels(&current, &outputs[first..], innermost, lanes)?);
    // Neighbouring output points computed together share the window's
    // weights and overlapping taps; the loop around the vectorized one
    // must hold it alone (no cached reads, the vectorized loop unpeeled).
    let alone = !schedule.0.iter().any(|d| match d {
        Directive::CacheRead { .. } => true,
        Directive::Peel { var, .. } => var == innermost,
        _ => false,
    });
    if let (Some(var), true) = (enclosing, alone) {
        schedule.0.push(Directive::Jam {
            var,
            factor: JAMMED_POINTS,
        });
    }
    Some(schedule)
}

/// Peels the padded borders off the loops `vars` of `k`, so the interior
/// rows and columns read without bounds checks (the vectorized loop
/// `innermost` only where `peel_pays`).
fn border_peels(
    k: &Kernel,
    vars: &[String],
    innermost: &str,
    lanes: i64,
) -> Option<Vec<Directive>> {
    let mut peels = Vec::new();
    for var in vars {
        let extent = find_loop(&k.body, var)?.extent.max();
        let Some((lo, hi)) = interior(&k.body, var, extent) else {
            continue;
        };
        if var == innermost && !peel_pays(&k.body, var, extent, hi - lo, lanes) {
            continue;
        }
        peels.push(Directive::Peel {
            var: var.clone(),
            at: vec![lo, hi],
        });
    }
    Some(peels)
}

/// Splits the vectorized loop (channels, in a channels-last depthwise
/// convolution) into blocks and runs the blocks outermost, when the
/// window's weights over all of it would take more than half of L1: each
/// block's weights then stay in L1 over every output point instead of
/// streaming from L2 for each (MnasNet's 5x5 depthwise convolutions over
/// 1152 channels read 115 KB of weights per point). A block is a whole
/// number of vectors dividing the loop whose weights take at most a
/// quarter of L1 (the rest holds the window's input rows), the one that
/// shares the blocks most evenly among the cores; `None` when no split is
/// needed or none divides.
fn channel_blocks(k: &Kernel, outputs: &[String], target: &TargetDesc) -> Option<Schedule> {
    let innermost = outputs.last()?;
    let extent = find_loop(&k.body, innermost)?.extent.max();
    let taps = window_taps(&k.body, innermost)?;
    let lanes = target.f32_lanes() as i64;
    let l1 = target.l1_per_core() as i64;
    let bytes_per_channel = taps * std::mem::size_of::<f32>() as i64;
    if extent * bytes_per_channel <= l1 / 2 {
        return None;
    }
    // The blocks run in parallel: the fewest channels per core (the
    // largest block among equals).
    let widest = l1 / 4 / bytes_per_channel;
    let cores = target.cores.max(1) as i64;
    let block = (1..=widest / lanes)
        .map(|vectors| vectors * lanes)
        .filter(|block| extent % block == 0 && *block < extent)
        .min_by_key(|block| ((extent / block + cores - 1) / cores * block, -block))?;
    let (blocks, _) = split_names(innermost);
    let mut directives = vec![Directive::Split {
        var: innermost.clone(),
        factor: block,
    }];
    // Out past every other output loop, innermost first.
    directives.extend(
        outputs[..outputs.len() - 1]
            .iter()
            .rev()
            .map(|outer| Directive::Reorder {
                outer: outer.clone(),
                inner: blocks.clone(),
            }),
    );
    Some(Schedule(directives))
}

/// Taps of the window's spatial extent: the reduction loops inside the
/// vectorized loop `var` that a bounds check reads (a convolution's kernel
/// rows and columns, not its input channels); all of them where nothing
/// is padded.
fn window_side_taps(body: &[Stmt], var: &str) -> Option<i64> {
    let l = find_loop(body, var)?;
    let (_, reductions) = loop_vars(&l.body);
    let mut checked: Vec<Idx> = Vec::new();
    for_each_load(&l.body, &mut |_, _, guard| {
        checked.extend(guard.iter().map(|(index, _)| index.clone()))
    });
    reductions
        .iter()
        .filter(|r| checked.is_empty() || checked.iter().any(|index| index.uses(r)))
        .map(|r| find_loop(&l.body, r).map(|r| r.extent.max()))
        .product()
}

/// Reduction steps per output point of the nest whose vectorized loop is
/// `var`: the product of the extents of the loops inside it.
fn window_taps(body: &[Stmt], var: &str) -> Option<i64> {
    let l = find_loop(body, var)?;
    let (_, reductions) = loop_vars(&l.body);
    reductions
        .iter()
        .map(|r| find_loop(&l.body, r).map(|r| r.extent.max()))
        .product()
}

/// Output points per iteration of the loop around the vectorized one (see
/// `jam.rs`): a 3x3 depthwise convolution over 144 channels at 56x56 ran
/// 0.121 ms with one, 0.095-0.102 with two, 0.101-0.106 with three and
/// 0.072 with six (hand-edited C of its kernel, Zen 4, 2 threads). A
/// measurement, kept for every target: what bounds it is the register
/// file, which the target description does not carry.
const JAMMED_POINTS: i64 = 6;

/// The loop whose body holds the loop over `var`.
fn enclosing_loop(body: &[Stmt], var: &str) -> Option<String> {
    body.iter().find_map(|s| match s {
        Stmt::Loop(l)
            if l.body
                .iter()
                .any(|s| matches!(s, Stmt::Loop(i) if i.var == var)) =>
        {
            Some(l.var.clone())
        }
        Stmt::Loop(l) => enclosing_loop(&l.body, var),
        _ => None,
    })
}

/// Buffers read with a guard at offsets that do not depend on `var`.
fn shared_padded_reads(body: &[Stmt], var: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for_each_load(body, &mut |buf, offset, guard| {
        let shared = !offset.uses(var) && !guard.iter().any(|(g, _)| g.uses(var));
        if shared && !guard.is_empty() && !out.contains(&buf) {
            out.push(buf);
        }
    });
    out
}

/// Scalar iterations a vectorized loop of `n` iterations leaves with
/// vectors of `lanes` f32 lanes (the target's): the compiler runs the
/// remainder as one half-width vector, then scalars.
fn scalar_remainder(n: i64, lanes: i64) -> i64 {
    n % lanes % (lanes / 2)
}

/// Whether peeling the padded borders off the vectorized loop `var` (of
/// `extent`, interior `interior`, vectors of `lanes`) beats keeping its
/// bounds checks as vector selects. Peeled borders and the interior's
/// remainder run as scalars (a 56-wide row with 16 lanes: 2 + 6 scalars
/// peeled, none unpeeled, measured 3x slower peeled); unpeeled, every tap
/// is a masked load, which only stride-1 reads make cheap (stride 2
/// unpeeled measured 3x slower).
fn peel_pays(body: &[Stmt], var: &str, extent: i64, interior: i64, lanes: i64) -> bool {
    let peeled = extent - interior + scalar_remainder(interior, lanes);
    load_strides(body, var).iter().any(|c| c.abs() != 1)
        || peeled <= scalar_remainder(extent, lanes)
}

/// The output loops (outermost first) of the perfect nest at the top of
/// `body`, and the reduction loops inside it.
fn loop_vars(body: &[Stmt]) -> (Vec<String>, Vec<String>) {
    let (mut outputs, mut reductions) = (Vec::new(), Vec::new());
    let mut todo: Vec<&Loop> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::Loop(l) => Some(l),
            _ => None,
        })
        .collect();
    while let Some(l) = todo.pop() {
        if l.var.starts_with('i') {
            outputs.push(l.var.clone());
        } else {
            reductions.push(l.var.clone());
        }
        todo.extend(l.body.iter().filter_map(|s| match s {
            Stmt::Loop(l) => Some(l),
            _ => None,
        }));
    }
    (outputs, reductions)
}

#[cfg(test)]
mod tests {
    use crate::fused::lower_group;
    use crate::group::{GroupExpr, GroupNode, Src};
    use crate::lower::input_buffers;
    use crate::schedule::{Directive, Schedule};
    use kiln_ir::DType;
    use kiln_ops::te::classify::node_expr;
    use kiln_target::CpuPreset;

    /// A 3x3 depthwise convolution (padding 1) over rows 12 wide, then a
    /// ReLU, as one group.
    fn depthwise_relu() -> GroupExpr {
        let g = kiln_ir::text::parse(
            r#"graph "g" opsets [""=17] {
  input %x: f32[1,8,6,12]
  input %w: f32[8,1,3,3]
  node "dw" %y: f32[1,8,6,12] = Conv(%x, %w) {group=8, pads=[1,1,1,1]}
  node "relu" %o: f32[1,8,6,12] = Relu(%y)
  output %o
}"#,
        )
        .expect("test graph parses");
        let te = |n: usize| node_expr(&g, &g.nodes[n]).unwrap().expect("expression");
        let (conv, relu) = (te(0), te(1));
        let (inputs, buffer_of) = input_buffers(&conv, &[Some(DType::F32); 2]).unwrap();
        let node = |te, args| GroupNode {
            te,
            args,
            label: String::new(),
            op: String::new(),
        };
        GroupExpr {
            inputs,
            nodes: vec![
                node(conv, buffer_of.iter().map(|b| b.map(Src::Input)).collect()),
                node(relu, vec![Some(Src::Node(0))]),
            ],
            outputs: vec![1],
        }
    }

    fn window_schedule(preset: CpuPreset) -> Schedule {
        let lowered = lower_group(&depthwise_relu(), "k", &preset.desc(2)).unwrap();
        assert_eq!(lowered.form, "window");
        lowered.schedule
    }

    /// The 12-wide vectorized row, peeled, runs 2 border scalars and the
    /// 10-wide interior's remainder as scalars. With 16 lanes that is
    /// 2 + 2 against 4 unpeeled (12 = a half-width vector of 8 + 4
    /// scalars): x86-64-v4 peels. With 8 lanes it is 2 + 2 against none
    /// (12 = 8 + a half-width 4): x86-64-v3 keeps the row's bounds checks
    /// and jams neighbouring points instead.
    #[test]
    fn peeling_the_vectorized_row_follows_the_targets_lanes() {
        let peel_i3 = Directive::Peel {
            var: "i3".into(),
            at: vec![1, 11],
        };
        let jam = Directive::Jam {
            var: "i2".into(),
            factor: 6,
        };
        let v4 = window_schedule(CpuPreset::X86_64V4);
        assert!(v4.0.contains(&peel_i3) && !v4.0.contains(&jam), "{v4:?}");
        let v3 = window_schedule(CpuPreset::X86_64V3);
        assert!(!v3.0.contains(&peel_i3) && v3.0.contains(&jam), "{v3:?}");
        for s in [&v4, &v3] {
            assert!(s.0.contains(&Directive::Vectorize("i3".into())), "{s:?}");
        }
    }
}
