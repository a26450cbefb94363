//! Concatenations assembled in place (`kiln-cpu` `concat_in_place.rs`,
//! `kiln-loop` `write_as_part.rs`, `kiln-exec` `assemble.rs`): the
//! producers of a concatenation's parts (products, Winograd and window
//! kernels, element-wise loops) store straight into its output. Each graph
//! runs under every planner against the interpreter on the graph as
//! written; under `apollo` the test also counts the concatenations the plan
//! assembles, so a rule that stops applying shows here.

mod common;

use common::{check_planners_after, values};
use kiln_exec::Step;
use kiln_ir::Result;
use kiln_passes::Layout;

/// Checks `src`, optimized for `layout`, under every planner against the
/// interpreter on the graph as written, and returns how many
/// concatenations the `apollo` plan assembles in place.
fn assembled(src: &str, layout: Layout, name: &str) -> Result<usize> {
    let passes = kiln_passes::Options {
        layout,
        ..Default::default()
    };
    let (g, interpreted) = check_planners_after(src, name, &passes)?;
    assert!(interpreted.is_empty(), "{name}: {interpreted:?}");
    let opts = kiln_cpu::CpuOptions {
        fusion: kiln_fuse::PlannerKind::Apollo,
        ..Default::default()
    };
    let model = kiln_cpu::CompiledModel::compile(&g, &opts)?;
    Ok(model
        .plan()
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Assembled { .. }))
        .count())
}

/// A SqueezeNet fire module (1x1 and 3x3 expansions of 12 and 20
/// channels: parts that start and end inside a vector), then an
/// Inception reduction (a max pool and a strided convolution of the first
/// concatenation, concatenated), over `images` images.
fn fire_and_reduction(images: usize) -> String {
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[{images},8,9,9]
  init %ws: f32[4,8,1,1] = [{}]
  init %bs: f32[4] = [0.1, -0.2, 0.3, 0.05]
  init %w1: f32[12,4,1,1] = [{}]
  init %w3: f32[20,4,3,3] = [{}]
  init %wq: f32[8,32,3,3] = [{}]
  init %wh: f32[5,40,1,1] = [{}]
  node "squeeze" %s: f32[{images},4,9,9] = Conv(%x, %ws, %bs)
  node "squeeze_relu" %sr: f32[{images},4,9,9] = Relu(%s)
  node "expand1" %e1: f32[{images},12,9,9] = Conv(%sr, %w1)
  node "expand1_relu" %e1r: f32[{images},12,9,9] = Relu(%e1)
  node "expand3" %e3: f32[{images},20,9,9] = Conv(%sr, %w3) {{pads=[1,1,1,1]}}
  node "expand3_relu" %e3r: f32[{images},20,9,9] = Relu(%e3)
  node "fire" %c: f32[{images},32,9,9] = Concat(%e1r, %e3r) {{axis=1}}
  node "pool" %p: f32[{images},32,4,4] = MaxPool(%c) {{kernel_shape=[3,3], strides=[2,2]}}
  node "reduce" %q: f32[{images},8,4,4] = Conv(%c, %wq) {{strides=[2,2]}}
  node "reduction" %c2: f32[{images},40,4,4] = Concat(%p, %q) {{axis=1}}
  node "head" %y: f32[{images},5,4,4] = Conv(%c2, %wh)
  output %y
}}"#,
        values(32, 1),
        values(48, 2),
        values(720, 3),
        values(2304, 4),
        values(200, 5)
    )
}

#[test]
fn convolution_and_pooling_outputs_are_written_into_their_concatenation() -> Result<()> {
    for images in [1, 3] {
        let src = fire_and_reduction(images);
        let name = format!("{images} images");
        assert_eq!(assembled(&src, Layout::Auto, &name)?, 2, "{name}");
    }
    // Channels first, a channel's parts are whole blocks of one image only.
    let src = fire_and_reduction(1);
    assert_eq!(assembled(&src, Layout::ChannelsFirst, "channels first")?, 2);
    Ok(())
}

/// Element-wise kernels run as one flat loop: their parts are written in
/// place where they are contiguous in the whole (along the first axis),
/// and copied where they are not (along the last; `write_as_part` refuses
/// the flat index), with the same results.
#[test]
fn element_wise_parts_in_place_where_contiguous() -> Result<()> {
    let src = r#"graph "g" opsets [""=17] {
  input %a: f32[3,5,7]
  input %b: f32[3,5,9]
  input %m: f32[4,5,7]
  node "ra" %x: f32[3,5,7] = Relu(%a)
  node "sb" %y: f32[3,5,9] = Sigmoid(%b)
  node "last" %c: f32[3,5,16] = Concat(%x, %y) {axis=-1}
  node "max" %n: f32[3,5] = ReduceMax(%c) {axes=[2], keepdims=0}
  node "tm" %t: f32[4,5,7] = Tanh(%m)
  node "ea" %e: f32[3,5,7] = Exp(%a)
  node "first" %f: f32[7,5,7] = Concat(%e, %t) {axis=0}
  init %w: f32[7,3] = [0.5, -1, 0.25, 2, 0.125, -0.5, 1, 1.5, -2, 0.75, 0.3, -0.3, 0.6, 0.9, -0.1, 0.2, 0.4, -0.7, 1.1, -1.2, 0.05]
  node "mm" %o: f32[7,5,3] = MatMul(%f, %w)
  output %n, %o
}"#;
    assert_eq!(assembled(src, Layout::Auto, "element-wise parts")?, 1);
    Ok(())
}

#[test]
fn parts_read_elsewhere_or_not_computed_are_copied() -> Result<()> {
    // `x` and `s` are read twice, `b` is a graph input, `e` is a graph
    // output: none of the three concatenations is assembled.
    let src = r#"graph "g" opsets [""=17] {
  input %a: f32[2,6]
  input %b: f32[2,4]
  node "ra" %x: f32[2,6] = Relu(%a)
  node "sa" %s: f32[2,6] = Sigmoid(%a)
  node "both" %c: f32[2,12] = Concat(%x, %s) {axis=1}
  node "twice" %t: f32[2,6] = Add(%x, %x)
  node "with_input" %d: f32[2,10] = Concat(%s, %b) {axis=1}
  node "na" %n: f32[2,6] = Neg(%a)
  node "ta" %u: f32[2,6] = Tanh(%a)
  node "out" %e: f32[2,12] = Concat(%n, %u) {axis=1}
  node "mc" %y: f32[2] = ReduceMax(%c) {axes=[1], keepdims=0}
  node "md" %z: f32[2] = ReduceMax(%d) {axes=[1], keepdims=0}
  output %y, %t, %z, %e
}"#;
    assert_eq!(assembled(src, Layout::Auto, "refusals")?, 0);
    Ok(())
}
