//! `kiln explain`: the fusion plan of a model as text, JSON or a drawing,
//! optionally with each kernel's time.

use crate::{load, optimize, random_input, ModelArgs, PassArgs};
use kiln_ir::{bail, Error, Graph, Result, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// What `kiln explain` prints and writes.
/// Mean time in ms of each group's kernel (by group index) over a few
/// profiled runs of `g` compiled with `planned`'s plan on random inputs.
fn group_times(g: &Graph, planned: &kiln_fuse::Planned) -> Result<Vec<(usize, f64)>> {
    const RUNS: usize = 3;
    let model = kiln_cpu::CompiledModel::compile_with_plan(
        g,
        planned.plan.clone(),
        &kiln_cpu::CpuOptions::default(),
    )?;
    let mut seed = 0;
    let inputs: Vec<Tensor> = g
        .inputs
        .iter()
        .map(|&id| random_input(g.ty(id), g.name(id), &mut seed))
        .collect::<Result<_>>()?;
    model.run(&inputs)?;
    // Fused nodes are named `fused<group>_<first node>` by the apply step.
    let mut group_of: HashMap<String, usize> = HashMap::new();
    for (gi, group) in planned.plan.groups.iter().enumerate() {
        let first = &g.nodes[group.nodes[0]].name;
        let name = match group.nodes.len() {
            1 => first.clone(),
            _ => format!("fused{gi}_{first}"),
        };
        group_of.insert(name, gi);
    }
    let mut ms: HashMap<usize, f64> = HashMap::new();
    for _ in 0..RUNS {
        for t in model.run_profiled(&inputs)?.1 {
            if let Some(&gi) = group_of.get(&t.node) {
                *ms.entry(gi).or_default() += t.time.as_secs_f64() * 1e3 / RUNS as f64;
            }
        }
    }
    let mut times: Vec<(usize, f64)> = ms.into_iter().collect();
    times.sort_by_key(|t| t.0);
    Ok(times)
}

pub(crate) struct ExplainOutput<'a> {
    /// Where to write the HTML report.
    pub(crate) html: Option<&'a Path>,
    /// JSON instead of the text summary.
    pub(crate) json: bool,
    /// Also list the feedback entries (text output).
    pub(crate) feedback: bool,
    /// Time every kernel.
    pub(crate) profile: bool,
}

/// `kiln explain`: import and optimize as `kiln run` does, plan, report.
pub(crate) fn explain(
    model: &Path,
    fusion: kiln_fuse::PlannerKind,
    out: &ExplainOutput,
    args: &ModelArgs,
    passes: &PassArgs,
) -> Result<()> {
    if !model.is_file() {
        bail!("model file {} does not exist", model.display());
    }
    let mut g = load(model, args)?;
    optimize(&mut g, passes)?;
    let planned = kiln_cpu::program::plan_fusion(&g, fusion, &kiln_target::host())?;
    let times = if out.profile {
        group_times(&g, &planned)?
    } else {
        Vec::new()
    };
    if let Some(path) = out.html {
        std::fs::write(path, kiln_fuse::report::html(&g, &planned, &times))
            .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
    }
    if out.json {
        println!("{}", kiln_fuse::report::json_profiled(&g, &planned, &times));
        return Ok(());
    }
    print!("{}", kiln_fuse::report::text(&g, &planned, &times));
    if out.feedback {
        print!("{}", kiln_fuse::report::feedback_text(&g, &planned));
    }
    if let Some(path) = out.html {
        println!("wrote {}", path.display());
    }
    Ok(())
}
