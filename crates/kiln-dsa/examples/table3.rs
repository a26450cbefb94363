//! GraphTurbo's Table 3 in kind: how many kernel outputs live in DDR, GB
//! and LB under the per-layer baseline and under GraphTurbo, on a DSA
//! preset, for ONNX models at a batch size per cluster.
//!
//! `cargo run -p kiln-dsa --example table3 -- [--target dsa:stcp920] [--float-bytes 2] [--groups] MODEL.onnx:BATCH ...`
//!
//! `--groups` also prints each GraphTurbo schedule's group lines (nodes,
//! layers, split, bytes per core) to stderr.
//!
//! The batch overrides the first dimension of every graph input (when the
//! model cannot be re-batched, its own batch is used and said so).

use kiln_dsa::{graphturbo, parse_target, per_layer, DsaDesc, ScopeCounts};
use kiln_ir::{Graph, Result};
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut desc = DsaDesc::preset("stcp920")?;
    if let Some(p) = args.iter().position(|a| a == "--target") {
        desc = parse_target(args.get(p + 1).map(String::as_str).unwrap_or(""))?;
        args.drain(p..=p + 1);
    }
    if let Some(p) = args.iter().position(|a| a == "--float-bytes") {
        desc.float_bytes = args.get(p + 1).and_then(|b| b.parse().ok());
        args.drain(p..=p + 1);
    }
    let groups = args.iter().any(|a| a == "--groups");
    args.retain(|a| a != "--groups");
    println!("| model | batch | nodes | per-layer DDR / GB / LB | graphturbo DDR / GB / LB | graphturbo layer outputs DDR / GB / LB | groups | instances | seconds |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for arg in args {
        let (path, batch) = match arg.rsplit_once(':') {
            Some((p, b)) => (p.to_string(), b.parse::<usize>().ok()),
            None => (arg.clone(), None),
        };
        let (g, batch) = load(Path::new(&path), batch)?;
        // `models/NAME/model.onnx` is called NAME.
        let model = Path::new(&path)
            .parent()
            .and_then(Path::file_name)
            .map_or(path.clone(), |n| n.to_string_lossy().to_string());
        let start = Instant::now();
        let baseline = per_layer(&g, &desc)?;
        let turbo = graphturbo(&g, &desc)?;
        if groups {
            let text = turbo.to_string();
            text.lines()
                .filter(|l| l.starts_with("group "))
                .for_each(|l| eprintln!("{model}: {}", truncated(l)));
        }
        println!(
            "| {model} | {batch} | {} | {} | {} | {} | {} | {} | {:.1} |",
            g.nodes.len(),
            counts(baseline.output_counts()),
            counts(turbo.output_counts()),
            counts(turbo.layer_output_counts()),
            turbo.groups.len(),
            turbo.instances.len(),
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// A group line without its long list of node names.
fn truncated(line: &str) -> &str {
    match line.char_indices().nth(160) {
        Some((end, _)) => &line[..end],
        None => line,
    }
}

fn counts(c: ScopeCounts) -> String {
    format!("{} / {} / {}", c.ddr, c.gb, c.lb)
}

/// The model at `batch` (its own batch when it cannot be re-batched),
/// optimized by kiln's graph passes (compounds opened).
fn load(path: &Path, batch: Option<usize>) -> Result<(Graph, String)> {
    if let Some(b) = batch {
        match load_at(path, Some(b)) {
            Ok(g) => return Ok((g, b.to_string())),
            Err(e) => eprintln!(
                "{}: batch {b} failed ({e}); using the model's own",
                path.display()
            ),
        }
    }
    let g = load_at(path, None)?;
    let own = g
        .inputs
        .first()
        .and_then(|&v| g.ty(v).shape.as_ref()?.first().copied());
    Ok((g, format!("{} (own)", own.unwrap_or(0))))
}

fn load_at(path: &Path, batch: Option<usize>) -> Result<Graph> {
    let mut opts = kiln_onnx::ImportOptions::default();
    if let Some(b) = batch {
        let declared = kiln_onnx::load(path, &opts)?.graph;
        opts.input_shapes = rebatched(&declared, b);
    }
    let mut g = kiln_onnx::load(path, &opts)?.graph;
    kiln_passes::optimize(&mut g, &Default::default())?;
    Ok(g)
}

fn rebatched(g: &Graph, batch: usize) -> HashMap<String, Vec<usize>> {
    g.inputs
        .iter()
        .filter_map(|&v| {
            let mut shape = g.ty(v).shape.clone()?;
            *shape.first_mut()? = batch;
            Some((g.name(v).to_string(), shape))
        })
        .collect()
}
