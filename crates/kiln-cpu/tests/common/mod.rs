//! Helpers shared by the CPU backend's integration tests.

// Each test binary uses some of these helpers.
#![allow(dead_code)]

pub mod random_graph;

use kiln_ir::{Data, Graph, Result, Tensor};

/// Parses the textual IR, infers types and verifies.
pub fn load(src: &str) -> Result<Graph> {
    let mut g = kiln_ir::text::parse(src)?;
    kiln_ops::infer::infer_graph(&mut g, &|_| None)?;
    kiln_ir::verify::verify(&g)?;
    Ok(g)
}

/// Inputs: floats in [-2, 2), integer indices in [-2, 2) (negative ones
/// count from the end, as Gather allows).
pub fn inputs(g: &Graph) -> Result<Vec<Tensor>> {
    let mut state = 12345u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as f64 / (1u64 << 31) as f64
    };
    g.inputs
        .iter()
        .map(|&id| {
            let ty = g.ty(id);
            let shape = ty.shape.clone().unwrap_or_default();
            let n: usize = shape.iter().product();
            let v: Vec<f64> = (0..n)
                .map(|_| {
                    let r = next() * 4.0 - 2.0;
                    if ty.dtype.is_float() {
                        r
                    } else {
                        r.floor()
                    }
                })
                .collect();
            Tensor::new(shape, Data::from_f64(ty.dtype, &v)?)
        })
        .collect()
}

/// Asserts `got` equals `want` (the interpreter's) up to float rounding.
pub fn assert_close(got: &[Tensor], want: &[Tensor], name: &str) -> Result<()> {
    assert_eq!(got.len(), want.len(), "{name}: output count");
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        assert_eq!(a.shape, b.shape, "{name}: output {k} shape");
        let (x, y) = (a.data.to_f64_vec()?, b.data.to_f64_vec()?);
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            assert!(
                (p - q).abs() <= 1e-5 + 1e-4 * q.abs() || (p.is_nan() && q.is_nan()),
                "{name}: output {k} element {i}: cpu {p} vs interpreter {q}"
            );
        }
    }
    Ok(())
}

/// `count` deterministic values in [-1, 1), printed for the text form.
pub fn values(count: usize, seed: u64) -> String {
    let mut state = seed.wrapping_mul(6364136223846793005) | 1;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            format!("{:.6}", (state >> 40) as f64 / (1u64 << 23) as f64 - 1.0)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Compiles `src` after the default passes under every planner and checks
/// the outputs against the interpreter on the graph as written (`name`
/// labels failures); returns the optimized graph and the nodes it leaves
/// to the interpreter (node, why).
pub fn check_planners(src: &str, name: &str) -> Result<(Graph, Vec<(String, String)>)> {
    check_planners_after(src, name, &kiln_passes::Options::default())
}

/// [`check_planners`] after the graph passes with `passes`.
pub fn check_planners_after(
    src: &str,
    name: &str,
    passes: &kiln_passes::Options,
) -> Result<(Graph, Vec<(String, String)>)> {
    let original = load(src)?;
    let ins = inputs(&original)?;
    let want = kiln_interp::run(&original, &ins)?;
    let mut g = original.clone();
    kiln_passes::optimize(&mut g, passes)?;
    let mut interpreted = Vec::new();
    for fusion in kiln_fuse::PlannerKind::ALL {
        let opts = kiln_cpu::CpuOptions {
            threads: 2,
            fusion,
            ..Default::default()
        };
        let model = kiln_cpu::CompiledModel::compile(&g, &opts)?;
        interpreted = kiln_cpu::CpuProgram::interpreted_in(model.graph(), model.plan());
        assert_close(
            &model.run(&ins)?,
            &want,
            &format!("{name} {}", fusion.name()),
        )?;
    }
    Ok((g, interpreted))
}
