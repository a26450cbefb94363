//! The layout choice (`kiln_passes::passes::channels_last`): a small
//! depthwise-separable network, and its twin with a dense 3x3 convolution
//! in place of the depthwise one (a stride-2 first convolution over the
//! channels-first input, bias and clip, a depthwise convolution, a
//! pointwise one, a residual add, max pooling, a global sum and a
//! classifier) rewritten to channels-last runs on the CPU backend under
//! every planner and on the interpreter with the results of the original
//! graph on the interpreter.

mod common;

use common::{assert_close, inputs, load, values};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_fuse::PlannerKind;
use kiln_ir::{Graph, Result};
use kiln_passes::passes::channels_last::prefers_channels_last;
use kiln_passes::{optimize, Layout, Options};

fn network() -> String {
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,3,17,15]
  init %w0: f32[24,3,3,3] = [{}]
  init %b0: f32[24,1,1] = [{}]
  init %wd: f32[24,1,3,3] = [{}]
  init %bd: f32[24,1,1] = [{}]
  init %wp: f32[24,24,1,1] = [{}]
  init %wc: f32[24,5] = [{}]
  init %lo: f32[] = [0.0]
  init %hi: f32[] = [6.0]
  init %axes: i64[2] = [2, 3]
  init %flat: i64[2] = [1, 24]
  node "stem" %s: f32[1,24,9,8] = Conv(%x, %w0) {{pads=[1,1,1,1], strides=[2,2]}}
  node "stem_bias" %sb: f32[1,24,9,8] = Add(%s, %b0)
  node "clip_lo" %c1: f32[1,24,9,8] = Max(%sb, %lo)
  node "clip_hi" %c2: f32[1,24,9,8] = Min(%c1, %hi)
  node "depthwise" %d: f32[1,24,9,8] = Conv(%c2, %wd) {{group=24, pads=[1,1,1,1]}}
  node "dw_bias" %db: f32[1,24,9,8] = Add(%d, %bd)
  node "relu" %r: f32[1,24,9,8] = Max(%db, %lo)
  node "pointwise" %p: f32[1,24,9,8] = Conv(%r, %wp)
  node "residual" %a: f32[1,24,9,8] = Add(%p, %c2)
  node "pool" %m: f32[1,24,5,4] = MaxPool(%a) {{kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2]}}
  node "sum" %g: f32[1,24,1,1] = ReduceSum(%m, %axes) {{keepdims=1}}
  node "flatten" %f: f32[1,24] = Reshape(%g, %flat)
  node "classifier" %y: f32[1,5] = MatMul(%f, %wc)
  output %y, %a
}}"#,
        values(24 * 27, 1),
        values(24, 2),
        values(24 * 9, 3),
        values(24, 4),
        values(24 * 24, 5),
        values(24 * 5, 6),
    )
}

fn count(g: &Graph, op: &str) -> usize {
    g.nodes.iter().filter(|n| n.op == op).count()
}

fn optimized(src: &str, layout: Layout) -> Result<Graph> {
    let mut g = load(src)?;
    let opts = Options {
        layout,
        verify_each: true,
        ..Default::default()
    };
    optimize(&mut g, &opts)?;
    Ok(g)
}

/// `g` compiled for the CPU backend with `fusion` on 2 threads.
fn compiled(g: &Graph, fusion: PlannerKind) -> Result<CompiledModel> {
    let opts = CpuOptions {
        threads: 2,
        fusion,
        ..Default::default()
    };
    CompiledModel::compile(g, &opts)
}

/// `g` on `ins` gives `want` on the interpreter and on the CPU backend
/// under every planner.
fn gives_everywhere(g: &Graph, ins: &[kiln_ir::Tensor], want: &[kiln_ir::Tensor]) -> Result<()> {
    assert_close(&kiln_interp::run(g, ins)?, want, "interpreter")?;
    for fusion in PlannerKind::ALL {
        let model = compiled(g, fusion)?;
        assert_close(&model.run(ins)?, want, fusion.name())?;
    }
    Ok(())
}

/// `src` optimized under the automatic layout has four channels-last
/// spatial ops, and runs with the original graph's interpreter results on
/// the interpreter and on the CPU backend under every planner.
fn check_channels_last(src: &str) -> Result<()> {
    let original = load(src)?;
    assert!(
        prefers_channels_last(&original),
        "the graph has 2-D convolutions"
    );
    let ins = inputs(&original)?;
    let want = kiln_interp::run(&original, &ins)?;
    let g = optimized(src, Layout::Auto)?;
    // Four spatial ops rewritten; the only layout changes left are the
    // transposes back to the graph's channels-first output and before
    // the classifier (a reshape there: it moves unit axes only).
    assert_eq!(count(&g, "ChannelsLast"), 4, "{}", kiln_ir::text::print(&g));
    assert_eq!(count(&g, "Transpose"), 1, "{}", kiln_ir::text::print(&g));
    gives_everywhere(&g, &ins, &want)
}

#[test]
fn channels_last_network_gives_the_interpreters_results() -> Result<()> {
    check_channels_last(&network())
}

/// The network with a dense 3x3 convolution in place of the depthwise
/// one: a padded NHWC window read by the matmul through row pointers.
fn dense_network() -> String {
    let src = network().replace("group=24, ", "");
    let src = src.replace("f32[24,1,3,3]", "f32[24,24,3,3]");
    src.replace(&values(24 * 9, 3), &values(24 * 24 * 9, 3))
}

#[test]
fn dense_channels_last_network_gives_the_interpreters_results() -> Result<()> {
    check_channels_last(&dense_network())
}

#[test]
fn layout_rule_keeps_models_without_2d_convolutions_channels_first() -> Result<()> {
    let src = r#"graph "g" opsets [""=17] {
  input %x: f32[1,8,30]
  input %w: f32[4,8,3]
  node "conv1d" %y: f32[1,4,28] = Conv(%x, %w)
  output %y
}"#;
    assert!(!prefers_channels_last(&load(src)?));
    assert_eq!(count(&optimized(src, Layout::Auto)?, "ChannelsLast"), 0);
    // Forced, the pass rewrites 1-D convolutions all the same.
    assert_eq!(
        count(&optimized(src, Layout::ChannelsLast)?, "ChannelsLast"),
        1
    );
    // And a forced channels-first layout leaves 2-D ones alone.
    assert_eq!(
        count(
            &optimized(&dense_network(), Layout::ChannelsFirst)?,
            "ChannelsLast"
        ),
        0
    );
    Ok(())
}

/// A SqueezeNet fire module over two images: a stride-2 stem over the
/// channels-first input, a 1x1 squeeze, 1x1 and 3x3 expands joined by a
/// channel Concat, and the next 1x1 squeeze reading the concatenation.
fn fire_network() -> String {
    format!(
        r#"graph "fire" opsets [""=17] {{
  input %x: f32[2,3,13,11]
  init %w0: f32[16,3,3,3] = [{}]
  init %ws: f32[8,16,1,1] = [{}]
  init %we1: f32[16,8,1,1] = [{}]
  init %we3: f32[16,8,3,3] = [{}]
  init %wn: f32[32,32,1,1] = [{}]
  init %lo: f32[] = [0.0]
  node "stem" %s: f32[2,16,7,6] = Conv(%x, %w0) {{pads=[1,1,1,1], strides=[2,2]}}
  node "squeeze" %q: f32[2,8,7,6] = Conv(%s, %ws)
  node "squeeze_relu" %qr: f32[2,8,7,6] = Max(%q, %lo)
  node "expand1" %e1: f32[2,16,7,6] = Conv(%qr, %we1)
  node "expand1_relu" %r1: f32[2,16,7,6] = Max(%e1, %lo)
  node "expand3" %e3: f32[2,16,7,6] = Conv(%qr, %we3) {{pads=[1,1,1,1]}}
  node "expand3_relu" %r3: f32[2,16,7,6] = Max(%e3, %lo)
  node "concat" %c: f32[2,32,7,6] = Concat(%r1, %r3) {{axis=1}}
  node "next" %y: f32[2,32,7,6] = Conv(%c, %wn)
  output %y
}}"#,
        values(16 * 27, 11),
        values(8 * 16, 12),
        values(16 * 8, 13),
        values(16 * 8 * 9, 14),
        values(32 * 32, 15),
    )
}

/// The fire module stays channels-last through its Concat (joined along
/// the channels-last axis, no transposes but the output's), the
/// concatenation is not packed by the next convolution as a prologue
/// (a kernel of its own), and every planner gives the interpreter's
/// results.
#[test]
fn concat_stays_channels_last_and_outside_the_next_gemm() -> Result<()> {
    let src = fire_network();
    let original = load(&src)?;
    let ins = inputs(&original)?;
    let want = kiln_interp::run(&original, &ins)?;
    let g = optimized(&src, Layout::Auto)?;
    let text = kiln_ir::text::print(&g);
    let concat = g.nodes.iter().find(|n| n.op == "Concat").expect("a Concat");
    assert_eq!(concat.attr_int_or("axis", 0)?, 3, "{text}");
    assert_eq!(count(&g, "Transpose"), 1, "{text}");
    assert_close(&kiln_interp::run(&g, &ins)?, &want, "interpreter")?;
    for fusion in PlannerKind::ALL {
        let (got, times) = compiled(&g, fusion)?.run_profiled(&ins)?;
        assert_close(&got, &want, fusion.name())?;
        for t in &times {
            assert!(
                !(t.op.contains("Concat") && t.op.contains("ChannelsLast")),
                "{}: {} packs the concatenation",
                fusion.name(),
                t.op
            );
        }
    }
    Ok(())
}

/// A ShuffleNet unit over two images: a stem, a channel split by two
/// Slices, a 1x1 convolution on one half, a channel Concat and the channel
/// shuffle (Reshape to groups, Transpose of the groups, Reshape back)
/// before the next convolution.
fn shuffle_network() -> String {
    format!(
        r#"graph "shuffle" opsets [""=17] {{
  input %x: f32[2,3,9,8]
  init %w0: f32[8,3,3,3] = [{}]
  init %wb: f32[4,4,1,1] = [{}]
  init %wn: f32[8,8,1,1] = [{}]
  init %zero: i64[1] = [0]
  init %four: i64[1] = [4]
  init %eight: i64[1] = [8]
  init %one: i64[1] = [1]
  init %groups: i64[5] = [2, 2, 4, 9, 8]
  init %merged: i64[4] = [2, 8, 9, 8]
  node "stem" %s: f32[2,8,9,8] = Conv(%x, %w0) {{pads=[1,1,1,1]}}
  node "left" %l: f32[2,4,9,8] = Slice(%s, %zero, %four, %one)
  node "right" %r: f32[2,4,9,8] = Slice(%s, %four, %eight, %one)
  node "branch" %b: f32[2,4,9,8] = Conv(%r, %wb)
  node "concat" %c: f32[2,8,9,8] = Concat(%l, %b) {{axis=1}}
  node "split_groups" %g: f32[2,2,4,9,8] = Reshape(%c, %groups)
  node "shuffle" %t: f32[2,4,2,9,8] = Transpose(%g) {{perm=[0,2,1,3,4]}}
  node "merge_groups" %m: f32[2,8,9,8] = Reshape(%t, %merged)
  node "next" %y: f32[2,8,9,8] = Conv(%m, %wn)
  output %y
}}"#,
        values(8 * 27, 21),
        values(4 * 4, 22),
        values(8 * 8, 23),
    )
}

/// The shuffle unit stays channels-last through its Slices and its channel
/// shuffle: one Transpose permutes the channels within each pixel (the
/// groups' axes, last in the twin) and one is the output's; every planner
/// gives the interpreter's results.
#[test]
fn channel_shuffle_stays_channels_last() -> Result<()> {
    let src = shuffle_network();
    let original = load(&src)?;
    let ins = inputs(&original)?;
    let want = kiln_interp::run(&original, &ins)?;
    let g = optimized(&src, Layout::Auto)?;
    let text = kiln_ir::text::print(&g);
    assert_eq!(count(&g, "Transpose"), 2, "{text}");
    let within_pixels = g.nodes.iter().any(|n| {
        n.op == "Transpose" && n.attr_ints("perm").ok().flatten() == Some(&[0, 1, 2, 4, 3][..])
    });
    assert!(within_pixels, "{text}");
    gives_everywhere(&g, &ins, &want)
}

/// A DenseNet layer over two images: a stem, a 3x3 convolution of its
/// output, the two concatenated along the channels, batch-normalized
/// (per-channel shift and scale) and rectified, then a 1x1 convolution.
fn dense_layer_network() -> String {
    format!(
        r#"graph "dense" opsets [""=17] {{
  input %x: f32[2,3,9,8]
  init %w0: f32[16,3,3,3] = [{}]
  init %w1: f32[8,16,3,3] = [{}]
  init %shift: f32[1,24,1,1] = [{}]
  init %scale: f32[1,24,1,1] = [{}]
  init %wn: f32[12,24,1,1] = [{}]
  init %lo: f32[] = [0.0]
  node "stem" %s: f32[2,16,9,8] = Conv(%x, %w0) {{pads=[1,1,1,1]}}
  node "grow" %g: f32[2,8,9,8] = Conv(%s, %w1) {{pads=[1,1,1,1]}}
  node "concat" %c: f32[2,24,9,8] = Concat(%s, %g) {{axis=1}}
  node "shift" %a: f32[2,24,9,8] = Add(%c, %shift)
  node "scale" %m: f32[2,24,9,8] = Mul(%a, %scale)
  node "relu" %r: f32[2,24,9,8] = Max(%m, %lo)
  node "next" %y: f32[2,12,9,8] = Conv(%r, %wn)
  output %y
}}"#,
        values(16 * 27, 31),
        values(8 * 16 * 9, 32),
        values(24, 33),
        values(24, 34),
        values(12 * 24, 35),
    )
}

/// Under APOLLO, the DenseNet layer's concatenation, batch norm and ReLU
/// are one kernel (the concatenated values are never stored unnormalized),
/// which the next convolution does not pack as a prologue; every planner
/// gives the interpreter's results.
#[test]
fn a_concatenation_and_its_batch_norm_are_one_kernel() -> Result<()> {
    let src = dense_layer_network();
    let original = load(&src)?;
    let ins = inputs(&original)?;
    let want = kiln_interp::run(&original, &ins)?;
    let g = optimized(&src, Layout::Auto)?;
    let (got, times) = compiled(&g, PlannerKind::Apollo)?.run_profiled(&ins)?;
    assert_close(&got, &want, "apollo")?;
    let ops: Vec<&str> = times.iter().map(|t| t.op.as_str()).collect();
    let fused =
        |t: &&&str| t.contains("Concat") && t.contains("Mul") && !t.contains("ChannelsLast");
    assert_eq!(ops.iter().filter(fused).count(), 1, "{ops:?}");
    assert!(!ops.contains(&"Concat"), "{ops:?}");
    gives_everywhere(&g, &ins, &want)
}

/// A Pad between two convolutions (constant pads over every axis, here the
/// batch and an image axis) pads the channels-last twin: the one Transpose
/// left is the output's (the stem reads the input channels-first); every
/// planner gives the interpreter's results.
#[test]
fn a_pad_between_convolutions_stays_channels_last() -> Result<()> {
    let src = format!(
        r#"graph "pad" opsets [""=17] {{
  input %x: f32[2,3,9,8]
  init %w0: f32[8,3,3,3] = [{}]
  init %w1: f32[4,8,3,3] = [{}]
  init %pads: i64[8] = [1, 0, 2, 0, 0, 0, 1, 0]
  node "stem" %s: f32[2,8,9,8] = Conv(%x, %w0) {{pads=[1,1,1,1]}}
  node "pad" %p: f32[3,8,12,8] = Pad(%s, %pads)
  node "next" %y: f32[3,4,10,6] = Conv(%p, %w1)
  output %y
}}"#,
        values(8 * 27, 41),
        values(4 * 8 * 9, 42),
    );
    let original = load(&src)?;
    let ins = inputs(&original)?;
    let want = kiln_interp::run(&original, &ins)?;
    let g = optimized(&src, Layout::Auto)?;
    assert_eq!(count(&g, "Transpose"), 1, "{}", kiln_ir::text::print(&g));
    gives_everywhere(&g, &ins, &want)
}
