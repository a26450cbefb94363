//! Weights packed once at compile time for their gemms (`kernel_c`'s
//! prepacking): matmuls and convolutions whose weight is an initializer,
//! on either side of the gemm, alone and with fused epilogues, with K cut
//! into several blocks and partial panels, against the reference
//! interpreter.

mod common;

use common::{assert_close, inputs, load, values};
use kiln_cpu::{CompileSummary, CompiledModel, CpuOptions};
use kiln_fuse::PlannerKind;
use kiln_ir::Result;

/// Runs `src` under every planner; returns the weights packed (apollo).
fn check(src: &str, name: &str) -> Result<usize> {
    Ok(check_report(src, name)?.prepacked_weights)
}

/// Runs `src` under every planner; returns apollo's compile summary.
fn check_report(src: &str, name: &str) -> Result<CompileSummary> {
    let g = load(src)?;
    let ins = inputs(&g)?;
    let want = kiln_interp::run(&g, &ins)?;
    let mut report = None;
    for fusion in [PlannerKind::None, PlannerKind::Apollo] {
        let opts = CpuOptions {
            threads: 2,
            fusion,
            ..Default::default()
        };
        let model = CompiledModel::compile(&g, &opts)?;
        assert_close(&model.run(&ins)?, &want, name)?;
        report = Some(model.report);
    }
    report.ok_or_else(|| kiln_ir::Error::new("no planner ran"))
}

#[test]
fn matmul_weights_are_packed_once_and_give_the_interpreters_results() -> Result<()> {
    // K = 300: two K blocks; N = 70, M = 37: partial panels.
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,37,300]
  init %w: f32[300,70] = [{}]
  init %b: f32[70] = [{}]
  init %zero: f32[] = [0.0]
  node "mm" %y: f32[1,37,70] = MatMul(%x, %w)
  node "bias" %z: f32[1,37,70] = Add(%y, %b)
  node "relu" %o: f32[1,37,70] = Max(%z, %zero)
  node "mm2" %p: f32[1,37,70] = MatMul(%x, %w)
  output %o, %p
}}"#,
        values(300 * 70, 1),
        values(70, 2)
    );
    let report = check_report(&src, "matmul")?;
    assert_eq!(
        report.prepacked_weights, 2,
        "both matmuls read a packed weight"
    );
    assert!(
        report.weight_bytes < 300 * 70 * 4,
        "%w is read only through its packings, so it is not kept: {} bytes kept",
        report.weight_bytes
    );
    Ok(())
}

#[test]
fn a_packed_weight_another_node_reads_is_kept() -> Result<()> {
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,37,300]
  init %w: f32[300,70] = [{}]
  node "mm" %y: f32[1,37,70] = MatMul(%x, %w)
  node "double" %d: f32[300,70] = Add(%w, %w)
  output %y, %d
}}"#,
        values(300 * 70, 6)
    );
    let report = check_report(&src, "kept")?;
    assert_eq!(report.prepacked_weights, 1);
    assert!(
        report.weight_bytes >= 300 * 70 * 4,
        "the Add reads %w itself"
    );
    Ok(())
}

#[test]
fn convolution_weights_are_packed_once_and_give_the_interpreters_results() -> Result<()> {
    // A 3x3 window (K = 8*9 = 72) and a 1x1 convolution with K = 280.
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,8,11,9]
  input %h: f32[1,280,6,5]
  init %w: f32[20,8,3,3] = [{}]
  init %b: f32[20,1,1] = [{}]
  init %v: f32[33,280,1,1] = [{}]
  node "conv" %y: f32[1,20,11,9] = Conv(%x, %w) {{pads=[1,1,1,1]}}
  node "bias" %o: f32[1,20,11,9] = Add(%y, %b)
  node "pointwise" %p: f32[1,33,6,5] = Conv(%h, %v)
  output %o, %p
}}"#,
        values(20 * 8 * 9, 3),
        values(20, 4),
        values(33 * 280, 5)
    );
    let packed = check(&src, "conv")?;
    assert_eq!(packed, 2, "both convolutions read a packed weight");
    Ok(())
}

/// A matmul over `weight` ([2048, 2304]: its packing is larger than
/// `CACHED_FROM_BYTES`), the weight an initializer.
fn large_matmul(weight: Vec<f32>) -> Result<kiln_ir::Graph> {
    let mut g = load(
        r#"graph "g" opsets [""=17] {
  input %x: f32[1,8,2048]
  input %w: f32[2048,2304]
  node "mm" %y: f32[1,8,2304] = MatMul(%x, %w)
  output %y
}"#,
    )?;
    let w = g.inputs.remove(1);
    let tensor = kiln_ir::Tensor::new(vec![2048, 2304], kiln_ir::Data::F32(weight.into()))?;
    g.initializers
        .insert(w, kiln_ir::Initializer::Tensor(tensor));
    Ok(g)
}

#[test]
fn large_packings_are_mapped_from_the_cache_at_the_next_start() -> Result<()> {
    let cache = std::env::temp_dir().join(format!("kiln-packed-cache-{}", std::process::id()));
    let opts = CpuOptions {
        threads: 2,
        compiler: kiln_runtime::jit::CompilerConfig {
            cache_dir: cache.clone(),
            ..kiln_runtime::jit::CompilerConfig::from_env()
        },
        ..Default::default()
    };
    let mut weight: Vec<f32> = (0..2048 * 2304usize)
        .map(|i| ((i * 7919) % 1999) as f32 / 1999.0 - 0.5)
        .collect();
    let starts = |g: &kiln_ir::Graph| -> Result<bool> {
        let model = CompiledModel::compile(g, &opts)?;
        let ins = inputs(g)?;
        assert_close(&model.run(&ins)?, &kiln_interp::run(g, &ins)?, "large")?;
        assert_eq!(model.report.prepacked_weights, 1);
        Ok(model.report.packed_from_cache)
    };
    let g = large_matmul(weight.clone())?;
    assert!(!starts(&g)?, "the first start packs");
    assert!(
        starts(&g)?,
        "the second start maps the packing the first stored"
    );
    // One changed element is another model: packed again, from its own values.
    weight[12345] += 1.0;
    assert!(
        !starts(&large_matmul(weight)?)?,
        "a changed weight is not a hit"
    );
    std::fs::remove_dir_all(&cache).ok();
    Ok(())
}
