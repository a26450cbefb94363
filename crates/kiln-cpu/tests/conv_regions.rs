//! 2-D convolutions whose taps mostly read padding, opened into regions of
//! their output (`kiln-ops` `conv/regions.rs`): DeepLabV3's atrous pyramid
//! in small (dilations wide against the image, a bias, rectangular
//! images, a stride), run on the CPU backend under every planner with the
//! interpreter's results on the graph as written. An ordinary padded 3x3
//! convolution stays one convolution.

mod common;

use common::{check_planners, values};
use kiln_ir::{Graph, Result};

/// The convolutions left after the passes, wrapped in a channels-last
/// node or not.
fn convolutions(g: &Graph) -> usize {
    g.nodes
        .iter()
        .filter(|n| n.op == "Conv" || n.attr_string("op").ok().flatten() == Some("Conv"))
        .count()
}

#[test]
fn atrous_convolutions_run_by_regions() -> Result<()> {
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,4,7,9]
  init %w0: f32[6,4,3,3] = [{}]
  init %b0: f32[6] = [0.5, -0.5, 1, 0, 0.25, -1]
  init %w1: f32[5,6,3,3] = [{}]
  node "atrous" %a: f32[1,6,7,9] = Conv(%x, %w0, %b0) {{pads=[6, 6, 6, 6], dilations=[6, 6]}}
  node "relu" %r: f32[1,6,7,9] = Relu(%a)
  node "strided" %y: f32[1,5,4,5] = Conv(%r, %w1) {{pads=[5, 5, 5, 5], dilations=[5, 5], strides=[2, 2]}}
  output %y
}}"#,
        values(6 * 4 * 9, 1),
        values(5 * 6 * 9, 2),
    );
    let (g, interpreted) = check_planners(&src, "atrous")?;
    assert!(interpreted.is_empty(), "{interpreted:?}");
    assert!(convolutions(&g) > 2, "{}", kiln_ir::text::print(&g));
    Ok(())
}

#[test]
fn an_ordinary_padded_convolution_stays_whole() -> Result<()> {
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,4,7,9]
  init %w: f32[6,4,3,3] = [{}]
  node "conv" %y: f32[1,6,7,9] = Conv(%x, %w) {{pads=[1, 1, 1, 1]}}
  output %y
}}"#,
        values(6 * 4 * 9, 1),
    );
    let (g, _) = check_planners(&src, "ordinary")?;
    assert_eq!(convolutions(&g), 1, "{}", kiln_ir::text::print(&g));
    Ok(())
}
