//! Vectorized max/min row reductions keep propagating NaN: a Softmax-like
//! row program (max, subtract, exp, sum, divide) and a row minimum, on rows
//! where one element is NaN, against the reference interpreter (which
//! propagates NaN as ONNX asks). Rows of 37 (one vector loop) and of 301
//! (long enough for lane partials, `kiln_loop::lane_partials`, on every
//! x86 target: their blocks and the remainder after them).

mod common;

use common::{assert_close, load};
use kiln_cpu::program::Naming;
use kiln_cpu::{CompiledModel, CpuOptions, CpuProgram};
use kiln_ir::{Data, Result, Tensor};

fn graph(width: usize) -> String {
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[4,{width}]
  init %axis: i64[1] = [1]
  node "max" %m: f32[4,1] = ReduceMax(%x, %axis) {{keepdims=1}}
  node "sub" %d: f32[4,{width}] = Sub(%x, %m)
  node "exp" %e: f32[4,{width}] = Exp(%d)
  node "sum" %s: f32[4,1] = ReduceSum(%e, %axis) {{keepdims=1}}
  node "div" %y: f32[4,{width}] = Div(%e, %s)
  node "min" %n: f32[4,1] = ReduceMin(%x, %axis) {{keepdims=1}}
  node "shift" %z: f32[4,{width}] = Sub(%x, %n)
  output %y, %z
}}"#
    )
}

/// Rows of `width` where row 1 holds a NaN at element 5 (the vector body)
/// and row 3 at element `width - 2` (the remainder), run on the CPU backend
/// and the interpreter.
fn check_nan_rows(width: usize) -> Result<()> {
    let g = load(&graph(width))?;
    let values: Vec<f64> = (0..4 * width)
        .map(|i| {
            if i == width + 5 || i == 4 * width - 2 {
                f64::NAN
            } else {
                ((i * 7919) % 101) as f64 / 10.0 - 5.0
            }
        })
        .collect();
    let x = Tensor::new(
        vec![4, width],
        Data::from_f64(kiln_ir::DType::F32, &values)?,
    )?;
    let want = kiln_interp::run(&g, std::slice::from_ref(&x))?;
    let model = CompiledModel::compile(
        &g,
        &CpuOptions {
            threads: 2,
            ..Default::default()
        },
    )?;
    let got = model.run(&[x])?;
    assert_close(&got, &want, "nan rows")?;
    let y = got[0].data.to_f64_vec()?;
    for (row, nan) in [(0, false), (1, true), (2, false), (3, true)] {
        let values = &y[row * width..(row + 1) * width];
        if nan {
            assert!(values.iter().all(|v| v.is_nan()), "row {row} is NaN");
        } else {
            assert!(
                values.iter().all(|v| v.is_finite()),
                "row {row} is finite: {values:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn max_and_min_rows_propagate_nan_like_the_interpreter() -> Result<()> {
    check_nan_rows(37)
}

#[test]
fn long_rows_propagate_nan_through_lane_partials() -> Result<()> {
    check_nan_rows(301)
}

/// A graph of one input `f32[rows, width]` around `nodes`, with the Softmax
/// compound opened (as `kiln_passes::optimize` leaves it for the backend),
/// the input `values`, and the interpreter's outputs.
fn softmax_case(
    rows: usize,
    width: usize,
    nodes: &str,
    values: &dyn Fn(usize, usize) -> f64,
) -> Result<(kiln_ir::Graph, Tensor, Vec<Tensor>)> {
    let g = load(&format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[{rows},{width}]
{nodes}
}}"#
    ))?;
    let values: Vec<f64> = (0..rows * width)
        .map(|i| values(i / width, i % width))
        .collect();
    let x = Tensor::new(
        vec![rows, width],
        Data::from_f64(kiln_ir::DType::F32, &values)?,
    )?;
    let want = kiln_interp::run(&g, std::slice::from_ref(&x))?;
    let mut opened = g;
    kiln_passes::optimize(&mut opened, &Default::default())?;
    Ok((opened, x, want))
}

/// The C `opts` generate for `g`, on one thread.
fn generated_c(g: &kiln_ir::Graph, opts: &CpuOptions) -> Result<String> {
    let naming = Naming {
        prefix: "t".into(),
        threads: 1,
    };
    Ok(CpuProgram::build(g, opts, &naming)?
        .c_units(1, "", "")
        .concat())
}

/// The Softmax op itself (its Exp marked as reading x - max <= 0, which
/// takes the cheaper `kiln_expf_nonpos`) on rows of 301 with a NaN, with
/// -inf elements, and spread over [-120, 0] so exp underflows gradually
/// and to 0, against the interpreter.
#[test]
fn softmax_rows_with_nan_infinities_and_underflow() -> Result<()> {
    let width = 301;
    let nodes = format!(
        r#"  node "softmax" %y: f32[4,{width}] = Softmax(%x) {{axis=1}}
  output %y"#
    );
    let (g, x, want) = softmax_case(4, width, &nodes, &|row, j| match (row, j) {
        (1, 7) => f64::NAN,
        (2, j) if j % 5 == 0 => f64::NEG_INFINITY,
        (3, j) => -120.0 * j as f64 / (width - 1) as f64,
        (_, j) => ((j * 7919) % 101) as f64 / 10.0 - 5.0,
    })?;
    let opts = CpuOptions::default();
    let c = generated_c(&g, &opts)?;
    // the prelude's definition and the kernel's call
    assert!(c.matches("kiln_expf_nonpos(").count() >= 2, "{c}");
    let got = CompiledModel::compile(&g, &opts)?.run(&[x])?;
    assert_close(&got, &want, "softmax rows")
}

/// Rows of 20 on a target with masked vectors (AVX-512): each row loop runs two whole
/// vectors, its body under `if (v < 20)`, where the last four elements ran one at a time
/// (`kiln_codegen` `c/statements.rs` `padded_bound`); a NaN in a row's padded vector and
/// a row of -inf still propagate, against the interpreter (on a host without AVX-512 the
/// run takes the host's own form; the C checked is the x86-64-v4 preset's).
#[test]
fn short_rows_run_whole_masked_vectors() -> Result<()> {
    let width = 20;
    let nodes = format!(
        r#"  node "softmax" %y: f32[7,{width}] = Softmax(%x) {{axis=1}}
  node "max" %m: f32[7] = ReduceMax(%x) {{axes=[1], keepdims=0}}
  output %y, %m"#
    );
    let (g, x, want) = softmax_case(7, width, &nodes, &|row, j| match (row, j) {
        (2, 18) => f64::NAN,
        (4, _) => f64::NEG_INFINITY,
        (_, j) => ((j * 7919 + row) % 101) as f64 / 10.0 - 5.0,
    })?;
    let v4 = CpuOptions {
        target: kiln_target::CpuPreset::X86_64V4.desc(2),
        ..Default::default()
    };
    let c = generated_c(&g, &v4)?;
    assert!(c.contains(" < 32; ++") && c.contains(" < 20) {"), "{c}");
    let got = CompiledModel::compile(&g, &CpuOptions::default())?.run(&[x])?;
    assert_close(&got, &want, "short rows")
}
