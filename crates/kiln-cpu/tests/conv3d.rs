//! 3-D convolutions opened into 2-D ones over their frames (`kiln-ops`
//! `conv/planes.rs`): a video network's stem (time padding, a bias, a
//! spatial stride), a dilated `(3, 3, 3)` one with a time stride, and a
//! `(1, 1, 1)` down-sampling one of stride 2, run on the CPU backend under
//! every planner with the interpreter's results on the graph as written;
//! no 3-D convolution is left after the passes.

mod common;

use common::{check_planners, values};
use kiln_ir::{Graph, Result};

/// Convolutions whose input has rank 5, wrapped in a channels-last node
/// or not.
fn volume_convolutions(g: &Graph) -> usize {
    g.nodes
        .iter()
        .filter(|n| n.op == "Conv" || n.attr_string("op").ok().flatten() == Some("Conv"))
        .filter(|n| n.inputs[0].and_then(|x| g.ty(x).rank()) == Some(5))
        .count()
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
    let (g, _) = check_planners(&src, "volume")?;
    assert_eq!(volume_convolutions(&g), 0, "{}", kiln_ir::text::print(&g));
    Ok(())
}

/// Time stride 1 takes the stacked-taps form (one 2-D convolution of all
/// taps' weights, each output frame summed from shifted frames): a
/// temporal `(3, 1, 1)` convolution of dilation 2 with uneven time
/// padding, one tap of which reads only padding for some frames, and a
/// `(2, 3, 3)` one whose output is longer than its input; a batch of two
/// videos takes the sliced form.
#[test]
fn stacked_time_taps_sum_the_shifted_frames() -> Result<()> {
    let graph = |batch: usize| {
        format!(
            r#"graph "g" opsets [""=17] {{
  input %x: f32[{batch},4,5,6,7]
  init %w0: f32[6,4,3,1,1] = [{}]
  init %w1: f32[3,6,2,3,3] = [{}]
  node "temporal" %a: f32[{batch},6,6,6,7] = Conv(%x, %w0) {{pads=[5, 0, 0, 0, 0, 0], dilations=[2, 1, 1]}}
  node "longer" %y: f32[{batch},3,9,6,7] = Conv(%a, %w1) {{pads=[2, 1, 1, 2, 1, 1]}}
  output %y
}}"#,
            values(6 * 4 * 3, 4),
            values(3 * 6 * 18, 5),
        )
    };
    for batch in [1, 2] {
        let (g, _) = check_planners(&graph(batch), &format!("stacked, batch {batch}"))?;
        assert_eq!(volume_convolutions(&g), 0, "{}", kiln_ir::text::print(&g));
    }
    Ok(())
}
