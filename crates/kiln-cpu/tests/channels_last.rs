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
    assert_close(&kiln_interp::run(&g, &ins)?, &want, "interpreter")?;
    for fusion in PlannerKind::ALL {
        let opts = CpuOptions {
            threads: 2,
            fusion,
            ..Default::default()
        };
        let model = CompiledModel::compile(&g, &opts)?;
        assert_close(&model.run(&ins)?, &want, fusion.name())?;
    }
    Ok(())
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
