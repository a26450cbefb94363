//! `kiln sim MODEL --backend dsa:PRESET [--schedule …] [--json] [-o
//! report.html]`: the DSA traffic and cycle simulator
//! (`kiln_dsa::simulate`) on a model, printed as a summary, as JSON, or
//! drawn as a timeline of kernels on cores ([`crate::sim_html`]).

use crate::sim_html;
use kiln_dsa::{simulate, ScheduleKind, SimOptions, SimReport};
use kiln_ir::{Error, Graph, Result};
use std::collections::HashMap;
use std::path::PathBuf;

/// `--across-layer`: GraphTurbo's §4.4 scheduling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AcrossLayer {
    /// On for graphturbo, off for the baselines.
    Auto,
    On,
    Off,
}

impl AcrossLayer {
    fn choice(self) -> Option<bool> {
        match self {
            AcrossLayer::Auto => None,
            AcrossLayer::On => Some(true),
            AcrossLayer::Off => Some(false),
        }
    }
}

/// What `kiln sim` was asked for.
pub struct SimRequest {
    /// `dsa:PRESET` or `dsa:PATH.toml`.
    pub target: String,
    pub schedule: ScheduleKind,
    pub across_layer: AcrossLayer,
    /// Overrides the description's `float_bytes`.
    pub float_bytes: Option<u32>,
    pub json: bool,
    pub html: Option<PathBuf>,
}

/// Checks `--backend`: a DSA target (the error names the preset or file).
pub fn parse_dsa_target(value: &str) -> std::result::Result<String, String> {
    kiln_dsa::parse_target(value)
        .map(|_| value.to_string())
        .map_err(|e| e.to_string())
}

/// Checks `--schedule` (the error lists the schedules).
pub fn parse_schedule(value: &str) -> std::result::Result<ScheduleKind, String> {
    ScheduleKind::parse(value).map_err(|e| e.to_string())
}

/// Checks `--float-bytes`: 1, 2, 4 or 8.
pub fn parse_float_bytes(value: &str) -> std::result::Result<u32, String> {
    match value.parse::<u32>() {
        Ok(b) if [1, 2, 4, 8].contains(&b) => Ok(b),
        _ => Err(format!("'{value}' is not 1, 2, 4 or 8")),
    }
}

/// Input shapes with the first dimension set to `batch`, for every input
/// of `g` that has one and is not in `given` (what `--input-shape` set).
pub fn rebatched_inputs(
    g: &Graph,
    batch: usize,
    given: &HashMap<String, Vec<usize>>,
) -> Vec<(String, Vec<usize>)> {
    g.inputs
        .iter()
        .filter(|&&v| !given.contains_key(g.name(v)))
        .filter_map(|&v| {
            let mut shape = g.ty(v).shape.clone()?;
            *shape.first_mut()? = batch;
            Some((g.name(v).to_string(), shape))
        })
        .collect()
}

/// Simulates `g` (called `label`) and prints or writes what `req` asks.
pub fn sim(g: &Graph, label: &str, req: &SimRequest) -> Result<()> {
    let mut desc = kiln_dsa::parse_target(&req.target)?;
    desc.float_bytes = req.float_bytes.or(desc.float_bytes);
    let opts = SimOptions {
        schedule: req.schedule,
        across_layer: req.across_layer.choice(),
    };
    let report = simulate(g, &desc, opts).map_err(|e| e.context(label.to_string()))?;
    if let Some(path) = &req.html {
        std::fs::write(path, sim_html::page(label, &report)).map_err(|e| {
            Error::new(format!("cannot write the report: {e}")).in_file(path.display().to_string())
        })?;
    }
    if req.json {
        println!("{}", json(label, &req.target, &report)?);
    } else {
        println!("model: {label}");
        print!("{report}");
        if let Some(path) = &req.html {
            println!("report: {}", path.display());
        }
    }
    Ok(())
}

/// The report as JSON, with the model and target it is for.
fn json(label: &str, target: &str, report: &SimReport) -> Result<serde_json::Value> {
    let mut value = serde_json::to_value(report)
        .map_err(|e| Error::new(format!("the report does not serialize: {e}")))?;
    if let Some(object) = value.as_object_mut() {
        object.insert("model".into(), label.into());
        object.insert("backend".into(), target.into());
    }
    Ok(value)
}
