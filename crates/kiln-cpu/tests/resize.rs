//! Resize and Upsample opened into gathers and weighted sums
//! (`kiln-ops` `resize/gathers.rs`): nearest, linear and cubic modes under
//! several coordinate transforms, up and down, with scales or with sizes
//! that only the shape folding makes constant, after a convolution (so the
//! layout pass meets them), run as generated kernels on the CPU backend
//! under every planner with the interpreter's results on the graph as
//! written (its Resize kernel); tf_crop_and_resize stays on the
//! interpreter.

mod common;

use common::{check_planners, values};
use kiln_ir::Result;

/// The nodes [`common::check_planners`] leaves to the interpreter.
fn check(src: &str, name: &str) -> Result<Vec<(String, String)>> {
    Ok(check_planners(src, name)?.1)
}

/// A 1x1 convolution to 8 channels over a 6x5 image, then Resize with
/// `attrs`, its scales `scales` (empty: none) and sizes from the image's
/// shape times (`h`, `w`) (`None`: none), to an output of `out`.
fn resized(attrs: &str, scales: &str, sizes: Option<(i64, i64)>, out: &str) -> String {
    let scales_init = match scales {
        "" => String::new(),
        s => format!("  init %scales: f32[4] = [{s}]\n"),
    };
    let scales_arg = if scales.is_empty() { "_" } else { "%scales" };
    let (sizes_nodes, sizes_arg) = match sizes {
        None => (String::new(), "".to_string()),
        Some((h, w)) => (
            format!(
                "  init %factor: i64[4] = [1, 1, {h}, {w}]\n  node \"shape\" %s: i64[4] = Shape(%c)\n  node \"times\" %sizes: i64[4] = Mul(%s, %factor)\n"
            ),
            ", %sizes".to_string(),
        ),
    };
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,3,6,5]
  init %w: f32[8,3,1,1] = [{}]
{scales_init}  node "conv" %c: f32[1,8,6,5] = Conv(%x, %w)
{sizes_nodes}  node "resize" %y: f32[{out}] = Resize(%c, _, {scales_arg}{sizes_arg}) {{{attrs}}}
  output %y
}}"#,
        values(24, 3)
    )
}

#[test]
fn resizes_become_generated_kernels() -> Result<()> {
    let cases = [
        (
            "nearest 2x",
            resized(r#"mode="nearest""#, "1, 1, 2, 2", None, "1,8,12,10"),
        ),
        (
            "nearest floor asymmetric",
            resized(
                r#"mode="nearest", nearest_mode="floor", coordinate_transformation_mode="asymmetric""#,
                "1, 1, 1.5, 2.5",
                None,
                "1,8,9,12",
            ),
        ),
        (
            "linear half_pixel sizes",
            resized(r#"mode="linear""#, "", Some((2, 3)), "1,8,12,15"),
        ),
        (
            "linear align_corners",
            resized(
                r#"mode="linear", coordinate_transformation_mode="align_corners""#,
                "1, 1, 2, 2",
                None,
                "1,8,12,10",
            ),
        ),
        (
            "cubic",
            resized(r#"mode="cubic""#, "1, 1, 2, 2", None, "1,8,12,10"),
        ),
        (
            "linear antialiased down",
            resized(
                r#"mode="linear", antialias=1"#,
                "1, 1, 0.5, 0.6",
                None,
                "1,8,3,3",
            ),
        ),
    ];
    for (name, src) in cases {
        let left = check(&src, name)?;
        assert!(left.is_empty(), "{name}: {left:?}");
    }
    Ok(())
}

#[test]
fn upsample_becomes_a_generated_kernel() -> Result<()> {
    let src = r#"graph "g" opsets [""=9] {
  input %x: f32[1,2,3,4]
  init %scales: f32[4] = [1, 1, 2, 3]
  node "up" %y: f32[1,2,6,12] = Upsample(%x, %scales) {mode="nearest"}
  output %y
}"#;
    let left = check(src, "upsample")?;
    assert!(left.is_empty(), "{left:?}");
    Ok(())
}

#[test]
fn crop_and_resize_stays_with_the_interpreter() -> Result<()> {
    let src = r#"graph "g" opsets [""=17] {
  input %x: f32[1,2,6,6]
  init %roi: f32[8] = [0, 0, 0.2, 0.1, 1, 1, 0.8, 0.9]
  init %scales: f32[4] = [1, 1, 1.5, 1.5]
  node "crop" %y: f32[1,2,9,9] = Resize(%x, %roi, %scales) {mode="linear", coordinate_transformation_mode="tf_crop_and_resize"}
  output %y
}"#;
    assert_eq!(check(src, "crop")?.len(), 1);
    Ok(())
}
