//! Imports an ONNX model, runs the default pass pipeline on it and prints
//! the pass report and the op histogram before and after:
//!
//! ```text
//! cargo run --release -p kiln-passes --example optimize -- MODEL [--verify-each] [--print-after PASS] [--check]
//! ```
//!
//! `--check` also runs the reference interpreter on the graph before and
//! after, on the same pseudo-random inputs, and prints the largest
//! difference between the outputs.

#[path = "../tests/common/mod.rs"]
mod common;

use kiln_ir::{bail, Error, Graph, Result, Tensor};
use kiln_passes::Options;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn histogram(g: &Graph) -> BTreeMap<String, usize> {
    let mut h = BTreeMap::new();
    for n in &g.nodes {
        *h.entry(n.op.clone()).or_default() += 1;
    }
    h
}

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: optimize MODEL [--verify-each] [--print-after PASS] [--check]";
    let mut check = false;
    let path = args.next().ok_or_else(|| Error::new(usage))?;
    let mut opts = Options::default();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--verify-each" => opts.verify_each = true,
            "--check" => check = true,
            "--print-after" => {
                opts.print_after = Some(args.next().ok_or_else(|| Error::new(usage))?);
                opts.print_elide = Some(8);
            }
            other => bail!("unknown argument '{other}'; {usage}"),
        }
    }
    let start = Instant::now();
    let mut model = kiln_onnx::load(Path::new(&path), &Default::default())?;
    println!("import: {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
    let before = histogram(&model.graph);
    let reference = if check {
        let inputs = common::random_inputs(&model.graph, 1)?;
        let outs = kiln_interp::run(&model.graph, &inputs)?;
        Some((inputs, outs))
    } else {
        None
    };
    let params = model.graph.parameter_count();
    let report = kiln_passes::optimize_to(&mut model.graph, &opts, &mut std::io::stdout())?;
    print!("{report}");
    let after = histogram(&model.graph);
    println!("op            before  after");
    for op in before
        .keys()
        .chain(after.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (b, a) = (before.get(op).unwrap_or(&0), after.get(op).unwrap_or(&0));
        println!("{op:<20} {b:>6} {a:>6}");
    }
    println!("parameters: {params} -> {}", model.graph.parameter_count());
    if let Some((inputs, want)) = reference {
        let got = kiln_interp::run(&model.graph, &inputs)?;
        println!(
            "largest output difference after/before: {:e}",
            max_diff(&want, &got)?
        );
    }
    Ok(())
}

fn max_diff(want: &[Tensor], got: &[Tensor]) -> Result<f64> {
    let mut worst = 0.0f64;
    for (w, g) in want.iter().zip(got) {
        if w.shape != g.shape {
            bail!("output shapes differ: {:?} vs {:?}", w.shape, g.shape);
        }
        for (a, b) in w.data.to_f64_vec()?.iter().zip(g.data.to_f64_vec()?) {
            worst = worst.max((a - b).abs());
        }
    }
    Ok(worst)
}
