//! Transposed convolutions whose kernel tiles the output opened into a
//! matrix product and a shuffle (`kiln-ops` `conv/transpose/blocks.rs`): a
//! U-Net's 2x2 stride-2 upsampling with a bias after a convolution (so the
//! layout pass meets it), a 1-D one of stride 4 and a 3-D one, as
//! generated kernels on the CPU backend under every planner with the
//! interpreter's results on the graph as written (its col2im kernel); an
//! overlapping one (3x3, stride 2) stays on the interpreter.

mod common;

use common::{check_planners, values};
use kiln_ir::Result;

/// How many nodes [`common::check_planners`] leaves to the interpreter.
fn check(src: &str, name: &str) -> Result<usize> {
    Ok(check_planners(src, name)?.1.len())
}

/// A 1x1 convolution to 6 channels over a 5x4 image, then a 2-D
/// ConvTranspose to 4 channels with a `k`x`k` kernel, stride `s`, pads `p`
/// and a bias, to an output of `out`.
fn upsampling(k: usize, s: usize, p: usize, out: &str) -> String {
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[2,3,5,4]
  init %w0: f32[6,3,1,1] = [{}]
  init %w: f32[6,4,{k},{k}] = [{}]
  init %b: f32[4] = [0.5, -1, 0.25, 2]
  node "conv" %c: f32[2,6,5,4] = Conv(%x, %w0)
  node "up" %y: f32[{out}] = ConvTranspose(%c, %w, %b) {{strides=[{s}, {s}], pads=[{p}, {p}, {p}, {p}]}}
  output %y
}}"#,
        values(18, 1),
        values(24 * k * k, 2)
    )
}

#[test]
fn tiling_transposed_convolutions_become_products() -> Result<()> {
    assert_eq!(check(&upsampling(2, 2, 0, "2,4,10,8"), "2x2 stride 2")?, 0);
    let one_d = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,3,7]
  init %w: f32[3,5,4] = [{}]
  node "up" %y: f32[1,5,28] = ConvTranspose(%x, %w) {{strides=[4]}}
  output %y
}}"#,
        values(60, 3)
    );
    assert_eq!(check(&one_d, "1-D stride 4")?, 0);
    let three_d = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,2,3,2,4]
  init %w: f32[2,3,2,2,2] = [{}]
  node "up" %y: f32[1,3,6,4,8] = ConvTranspose(%x, %w) {{strides=[2, 2, 2]}}
  output %y
}}"#,
        values(48, 4)
    );
    assert_eq!(check(&three_d, "3-D stride 2")?, 0);
    Ok(())
}

#[test]
fn overlapping_transposed_convolutions_stay_with_the_interpreter() -> Result<()> {
    assert_eq!(check(&upsampling(3, 2, 1, "2,4,9,7"), "3x3 stride 2")?, 1);
    Ok(())
}
