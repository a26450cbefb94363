//! 1-D and 3-D convolutions opened into 2-D ones (`kiln-ops`
//! `conv/line.rs`, `conv/planes.rs`): an audio feature extractor's strided,
//! grouped and dilated 1-D convolutions, and a video network's stem (time
//! padding, a bias, a spatial stride), a dilated `(3, 3, 3)` one with a
//! time stride and a `(1, 1, 1)` down-sampling one of stride 2, run on the
//! CPU backend under every planner with the interpreter's results on the
//! graph as written; no convolution of another rank is left after the
//! passes.

mod common;

use common::{assert_close, inputs, load, values};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_fuse::PlannerKind;
use kiln_ir::{Graph, Result};
use kiln_passes::{optimize, Options};

/// Convolutions whose input has rank `rank`, wrapped in a channels-last
/// node or not.
fn convolutions_of_rank(g: &Graph, rank: usize) -> usize {
    g.nodes
        .iter()
        .filter(|n| n.op == "Conv" || n.attr_string("op").ok().flatten() == Some("Conv"))
        .filter(|n| n.inputs[0].and_then(|x| g.ty(x).rank()) == Some(rank))
        .count()
}

/// Checks `src` after the passes (no convolution of `rank` left) under
/// every planner against the interpreter on the graph as written.
fn check(src: &str, rank: usize) -> Result<()> {
    let original = load(src)?;
    let ins = inputs(&original)?;
    let want = kiln_interp::run(&original, &ins)?;
    let mut g = original.clone();
    optimize(&mut g, &Options::default())?;
    let left = convolutions_of_rank(&g, rank);
    assert_eq!(left, 0, "{}", kiln_ir::text::print(&g));
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
fn line_convolutions_run_as_images() -> Result<()> {
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[2,1,100]
  init %w0: f32[8,1,10] = [{}]
  init %b0: f32[8] = [0.5, -0.5, 1, 0, 0.25, -1, 2, 0.1]
  init %w1: f32[8,4,3] = [{}]
  init %w2: f32[6,8,3] = [{}]
  node "extract" %a: f32[2,8,19] = Conv(%x, %w0, %b0) {{strides=[5]}}
  node "grouped" %c: f32[2,8,10] = Conv(%a, %w1) {{group=2, pads=[1, 1], strides=[2]}}
  node "dilated" %y: f32[2,6,10] = Conv(%c, %w2) {{dilations=[2], pads=[2, 2]}}
  output %y
}}"#,
        values(80, 4),
        values(96, 5),
        values(144, 6)
    );
    check(&src, 3)
}

#[test]
fn volume_convolutions_run_as_planes() -> Result<()> {
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,3,6,9,8]
  init %w0: f32[8,3,3,3,3] = [{}]
  init %b0: f32[8] = [0.5, -0.5, 1, 0, 0.25, -1, 2, 0.1]
  init %w1: f32[4,8,3,3,3] = [{}]
  init %w2: f32[5,4,1,1,1] = [{}]
  node "stem" %a: f32[1,8,6,5,4] = Conv(%x, %w0, %b0) {{pads=[1, 1, 1, 1, 1, 1], strides=[1, 2, 2]}}
  node "relu" %r: f32[1,8,6,5,4] = Relu(%a)
  node "dilated" %c: f32[1,4,2,5,4] = Conv(%r, %w1) {{pads=[1, 1, 1, 1, 1, 1], dilations=[2, 1, 1], strides=[2, 1, 1]}}
  node "down" %y: f32[1,5,1,3,2] = Conv(%c, %w2) {{strides=[2, 2, 2]}}
  output %y
}}"#,
        values(8 * 3 * 27, 1),
        values(4 * 8 * 27, 2),
        values(20, 3)
    );
    check(&src, 5)
}
