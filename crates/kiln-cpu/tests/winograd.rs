//! Winograd F(2x2, 3x3) convolutions (`kiln_passes::passes::winograd`,
//! the transforms' form `kiln_loop::winograd`): a network with three dense
//! 3x3 stride-1 convolutions over odd images at batch 2 (symmetric and
//! one-sided padding, a bias and ReLU after the first, the second's output
//! one column narrower than its input, the third dilated by 2 over 13x8
//! pixels, so its last tiles cover one phase or one pixel) is rewritten to the transforms and
//! runs on the CPU backend under every planner, and on the interpreter,
//! with the original graph's interpreter results; convolutions the rule
//! refuses stay convolutions, among them those whose transformed tensors
//! leave the cache and cost more memory traffic than they save, or whose
//! dilation is so wide against the image that Winograd would do more
//! multiply-adds; one dilated as wide as the image compiles.

mod common;

use common::{inputs, load, values};
use kiln_cpu::{CompiledModel, CpuOptions, CpuProgram};
use kiln_fuse::PlannerKind;
use kiln_ir::{Graph, Result, Tensor};
use kiln_passes::{optimize, Layout, Options};
use kiln_target::{CpuPreset, TargetDesc};

fn network(batch: usize, image: [usize; 2], channels: usize, stride: usize) -> String {
    let [h, w] = image;
    let (c, k) = (channels, channels + 8);
    let out = |size: usize, pads: usize, d: usize| (size + pads - 2 * d - 1) / stride + 1;
    let (h1, w1) = (out(h, 2, 1), out(w, 2, 1));
    let (h2, w2) = (out(h1, 2, 1), out(w1, 1, 1));
    let (h3, w3) = (out(h2, 4, 2), out(w2, 3, 2));
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[{batch},{c},{h},{w}]
  init %w0: f32[{c},{c},1,1] = [{}]
  init %w1: f32[{k},{c},3,3] = [{}]
  init %b1: f32[{k},1,1] = [{}]
  init %w2: f32[{c},{k},3,3] = [{}]
  init %w3: f32[{c},{c},3,3] = [{}]
  init %zero: f32[] = [0.0]
  node "pointwise" %a: f32[{batch},{c},{h},{w}] = Conv(%x, %w0)
  node "relu0" %r: f32[{batch},{c},{h},{w}] = Max(%a, %zero)
  node "conv1" %c1: f32[{batch},{k},{h1},{w1}] = Conv(%r, %w1) {{pads=[1,1,1,1], strides=[{stride},{stride}]}}
  node "bias1" %cb: f32[{batch},{k},{h1},{w1}] = Add(%c1, %b1)
  node "relu1" %cr: f32[{batch},{k},{h1},{w1}] = Max(%cb, %zero)
  node "conv2" %y: f32[{batch},{c},{h2},{w2}] = Conv(%cr, %w2) {{pads=[0,1,2,0], strides=[{stride},{stride}]}}
  node "dilated" %z: f32[{batch},{c},{h3},{w3}] = Conv(%y, %w3) {{pads=[2,1,2,2], dilations=[2,2], strides=[{stride},{stride}]}}
  output %cr, %y, %z
}}"#,
        values(c * c, 1),
        values(k * c * 9, 2),
        values(k, 3),
        values(c * k * 9, 4),
        values(c * c * 9, 5),
    )
}

/// `got` equals `want` up to f32 rounding at the outputs' scale: the
/// transforms sum values larger than a small output element (measured
/// differences are below 4e-7 of the largest output), so an element is
/// compared against `1e-5` of the largest magnitude, not its own.
fn assert_close(got: &[Tensor], want: &[Tensor], name: &str) -> Result<()> {
    assert_eq!(got.len(), want.len(), "{name}: output count");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.shape, b.shape, "{name}: output {k} shape");
        let (x, y) = (a.data.to_f64_vec()?, b.data.to_f64_vec()?);
        let scale = y.iter().fold(1.0f64, |m, q| m.max(q.abs()));
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            assert!(
                (p - q).abs() <= 1e-5 * scale,
                "{name}: output {k} element {i}: {p} vs the original's {q} (scale {scale})"
            );
        }
    }
    Ok(())
}

fn count(g: &Graph, op: &str) -> usize {
    g.nodes.iter().filter(|n| n.op == op).count()
}

/// A fixed CPU description, so that the rule's cache and bandwidth terms
/// do not depend on the machine the tests run on: 8 MiB of last-level
/// cache, 2 cores.
fn target() -> TargetDesc {
    CpuPreset::X86_64V3.desc(2)
}

fn with_winograd(src: &str) -> Result<Graph> {
    let mut g = load(src)?;
    let opts = Options {
        layout: Layout::Auto,
        winograd: Some(target()),
        verify_each: true,
        ..Default::default()
    };
    optimize(&mut g, &opts)?;
    Ok(g)
}

#[test]
fn winograd_convolutions_give_the_interpreters_results() -> Result<()> {
    let src = network(2, [13, 10], 16, 1);
    let original = load(&src)?;
    let ins = inputs(&original)?;
    let want = kiln_interp::run(&original, &ins)?;
    let g = with_winograd(&src)?;
    let printed = kiln_ir::text::print(&g);
    assert_eq!(count(&g, "WinogradInput"), 3, "{printed}");
    assert_eq!(count(&g, "WinogradOutput"), 3, "{printed}");
    assert_eq!(
        count(&g, "ChannelsLast"),
        1,
        "only the 1x1 stays: {printed}"
    );
    assert_close(&kiln_interp::run(&g, &ins)?, &want, "interpreter")?;
    for fusion in PlannerKind::ALL {
        let opts = CpuOptions {
            threads: 2,
            fusion,
            ..Default::default()
        };
        let model = CompiledModel::compile(&g, &opts)?;
        let interpreted = CpuProgram::interpreted_in(model.graph(), model.plan());
        assert!(interpreted.is_empty(), "{}: {interpreted:?}", fusion.name());
        assert_close(&model.run(&ins)?, &want, fusion.name())?;
    }
    Ok(())
}

/// Stride 2, too few channels, too few tiles: none is rewritten.
#[test]
fn the_rule_keeps_convolutions_it_does_not_pay_for() -> Result<()> {
    for (batch, image, channels, stride) in [
        (2, [13, 10], 16, 2),
        (2, [13, 10], 8, 1),
        (1, [7, 7], 16, 1),
    ] {
        let g = with_winograd(&network(batch, image, channels, stride))?;
        assert_eq!(
            count(&g, "WinogradInput"),
            0,
            "{}",
            kiln_ir::text::print(&g)
        );
        // Each stays a convolution (one may open into regions of its
        // output, several convolutions).
        assert!(count(&g, "ChannelsLast") >= 4);
    }
    Ok(())
}

/// A 3x3 convolution with padding 1 from `c` to `k` channels, after a
/// 1x1 one (a convolution reading the graph's input reads it
/// channels-first, which the rule does not take).
fn single_conv(batch: usize, image: usize, c: usize, k: usize) -> String {
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[{batch},{c},{image},{image}]
  init %w0: f32[{c},{c},1,1] = [{}]
  init %w: f32[{k},{c},3,3] = [{}]
  node "pointwise" %a: f32[{batch},{c},{image},{image}] = Conv(%x, %w0)
  node "conv" %y: f32[{batch},{k},{image},{image}] = Conv(%a, %w) {{pads=[1,1,1,1]}}
  output %y
}}"#,
        values(c * c, 1),
        values(k * c * 9, 2)
    )
}

/// On [`target`] (half its cache: 4 MiB; 10 GB/s and 96 GFLOP/s a core):
/// 16 to 64 channels over 55x55 pixels has 4.0 MB of transformed tensors
/// at batch 1, which stay in cache, and 32 MB at batch 8, whose traffic
/// (3.2 ms at the memory bandwidth) outweighs the multiply-adds saved (1.3
/// ms at peak); 64 to 128 channels over 56x56 at batch 8 moves 77 MB but
/// saves more (10.7 ms against 7.7).
#[test]
fn the_rule_weighs_transformed_traffic_against_the_saving() -> Result<()> {
    for (batch, image, c, k, rewritten) in [
        (1, 55, 16, 64, true),
        (8, 55, 16, 64, false),
        (8, 56, 64, 128, true),
    ] {
        let g = with_winograd(&single_conv(batch, image, c, k))?;
        let got = count(&g, "WinogradInput") == 1;
        assert_eq!(got, rewritten, "batch {batch}, {c} to {k} channels");
    }
    Ok(())
}

/// A 3x3 convolution with `dilation` and as much padding along the rows
/// (`dilation` 1 and padding 1 along the columns), over `image` rows of
/// `width` pixels of 16 channels, after a 1x1 one. (Dilated along both
/// axes, the convolution would open into regions of its output,
/// `kiln-ops` `conv/regions.rs`, before the rule sees it.)
fn atrous_conv(image: usize, width: usize, dilation: usize) -> String {
    let (c, d) = (16, dilation);
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,{c},{image},{width}]
  init %w0: f32[{c},{c},1,1] = [{}]
  init %w: f32[{c},{c},3,3] = [{}]
  node "pointwise" %a: f32[1,{c},{image},{width}] = Conv(%x, %w0)
  node "atrous" %y: f32[1,{c},{image},{width}] = Conv(%a, %w) {{pads=[{d},1,{d},1], dilations=[{d},1]}}
  output %y
}}"#,
        values(c * c, 6),
        values(c * c * 9, 7)
    )
}

/// A dilation as wide as the image (ASPP's atrous convolutions on a small
/// feature map): every tile row is the last, so the output transform has
/// no loop over tile rows; its kernel runs across threads over another
/// loop and matches the interpreter, with nothing left to it. Wider
/// still, most phases are one pixel and Winograd would do more
/// multiply-adds than the direct convolution: no Winograd transform.
#[test]
fn a_dilation_as_wide_as_the_image_still_compiles() -> Result<()> {
    let src = atrous_conv(8, 32, 4);
    let original = load(&src)?;
    let ins = inputs(&original)?;
    let want = kiln_interp::run(&original, &ins)?;
    let g = with_winograd(&src)?;
    assert_eq!(
        count(&g, "WinogradOutput"),
        1,
        "{}",
        kiln_ir::text::print(&g)
    );
    let opts = CpuOptions {
        threads: 2,
        ..Default::default()
    };
    let model = CompiledModel::compile(&g, &opts)?;
    let interpreted = CpuProgram::interpreted_in(model.graph(), model.plan());
    assert!(interpreted.is_empty(), "{interpreted:?}");
    assert_close(&model.run(&ins)?, &want, "atrous")?;
    let wider = with_winograd(&atrous_conv(14, 14, 12))?;
    assert_eq!(
        count(&wider, "WinogradOutput"),
        0,
        "{}",
        kiln_ir::text::print(&wider)
    );
    Ok(())
}
