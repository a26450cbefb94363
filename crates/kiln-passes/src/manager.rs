//! The pass manager: runs a pipeline of passes over a graph — first the
//! passes that run once, if any (custom pipelines), then the rest in rounds
//! until a whole round changes nothing (a fixed point) or the round limit
//! is reached. Optionally verifies the graph after every pass (structure
//! plus agreement of every declared type with shape inference), and prints
//! the graph after a named pass. Each pass is timed; the [`Report`] has
//! the numbers.
//!
//! Needs: a verified, type-inferred graph. Guarantees: the same graph
//! inputs and outputs (ids and names), the same results up to floating-point
//! reassociation; an error names the pass (and round) that failed.

use crate::pass::Pass;
use crate::passes;
use crate::passes::channels_last::{self, Layout};
use crate::passes::winograd;
use crate::report::{PassStats, Printout, Report};
use kiln_ir::{bail, Attr, Error, Graph, Initializer, Result};
use kiln_target::TargetDesc;
use std::io::Write;
use std::time::{Duration, Instant};

/// What to run and what to check.
#[derive(Debug, Clone)]
pub struct Options {
    /// Pass names to run in rounds instead of the default pipeline.
    pub passes: Option<Vec<String>>,
    /// Verify the graph before the first pass and after every pass.
    pub verify_each: bool,
    /// Print the graph after every run of this pass that changed it (and
    /// after its first run).
    pub print_after: Option<String>,
    /// Show at most this many elements per constant when printing (the
    /// printout then does not parse back); `None` prints everything.
    pub print_elide: Option<usize>,
    /// Upper bound on fixed-point rounds.
    pub max_rounds: usize,
    /// The data layout of convolutions and pooling, applied after the
    /// pipeline ([`channels_last`]). Channels-first (the graph as ONNX
    /// defines it) unless a caller asks.
    pub layout: Layout,
    /// The CPU target for which dense 3x3 stride-1 channels-last
    /// convolutions become Winograd F(2x2, 3x3) transforms around a
    /// batched MatMul where they pay on it ([`winograd`], after the layout
    /// rewrite). `None` by default: it is a CPU code-generation choice,
    /// which the CPU backend's callers make.
    pub winograd: Option<TargetDesc>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            passes: None,
            verify_each: false,
            print_after: None,
            print_elide: None,
            max_rounds: 8,
            layout: Layout::ChannelsFirst,
            winograd: None,
        }
    }
}

/// A pipeline: passes run once, then passes run to a fixed point.
pub struct PassManager {
    once: Vec<Box<dyn Pass>>,
    rounds: Vec<Box<dyn Pass>>,
}

impl PassManager {
    /// A pipeline of passes run once (in order), then passes run in rounds.
    pub fn new(once: Vec<Box<dyn Pass>>, rounds: Vec<Box<dyn Pass>>) -> PassManager {
        PassManager { once, rounds }
    }

    /// The default pipeline (see [`passes`]): every pass, in rounds.
    pub fn default_pipeline() -> PassManager {
        PassManager {
            once: Vec::new(),
            rounds: passes::all(),
        }
    }

    /// The named passes, run in rounds in the given order.
    pub fn from_names(names: &[String]) -> Result<PassManager> {
        let rounds = names
            .iter()
            .map(|n| passes::by_name(n))
            .collect::<Result<_>>()?;
        Ok(PassManager {
            once: Vec::new(),
            rounds,
        })
    }

    pub fn from_options(opts: &Options) -> Result<PassManager> {
        match &opts.passes {
            Some(names) => PassManager::from_names(names),
            None => Ok(PassManager::default_pipeline()),
        }
    }

    /// Names of the passes in pipeline order.
    pub fn names(&self) -> Vec<&'static str> {
        self.once
            .iter()
            .chain(&self.rounds)
            .map(|p| p.name())
            .collect()
    }

    /// Runs the pipeline on `g`. Printouts go to `out` when given, else
    /// into the report.
    pub fn run(
        &self,
        g: &mut Graph,
        opts: &Options,
        out: Option<&mut dyn Write>,
    ) -> Result<Report> {
        if let Some(name) = &opts.print_after {
            if !self.names().contains(&name.as_str()) {
                passes::by_name(name)?;
                bail!(
                    "--print-after: pass '{name}' is not in the pipeline ({})",
                    self.names().join(", ")
                );
            }
        }
        let start = Instant::now();
        let mut run = Run {
            opts,
            out,
            interface: interface(g),
            report: Report {
                passes: self.names().iter().map(|&n| new_stats(n)).collect(),
                nodes_before: count_nodes(g),
                ..Report::default()
            },
        };
        if opts.verify_each {
            check(g).map_err(|e| e.context("verifying the input graph"))?;
        }
        for (i, pass) in self.once.iter().enumerate() {
            run.pass(g, pass.as_ref(), i, 0)?;
        }
        run.report.converged = self.rounds.is_empty();
        for round in 1..=opts.max_rounds {
            if self.rounds.is_empty() {
                break;
            }
            run.report.rounds = round;
            let mut changed = false;
            for (i, pass) in self.rounds.iter().enumerate() {
                changed |= run.pass(g, pass.as_ref(), self.once.len() + i, round)?;
            }
            if !changed {
                run.report.converged = true;
                break;
            }
        }
        run.report.total = start.elapsed();
        run.report.nodes_after = count_nodes(g);
        Ok(run.report)
    }
}

/// Runs the pipeline `opts` selects on `g`, then applies the layout
/// choice (`opts.layout`); printouts land in the report.
pub fn optimize(g: &mut Graph, opts: &Options) -> Result<Report> {
    optimize_with_layout(g, opts, None)
}

/// Like [`optimize`], writing printouts to `out` as they happen.
pub fn optimize_to(g: &mut Graph, opts: &Options, out: &mut dyn Write) -> Result<Report> {
    optimize_with_layout(g, opts, Some(out))
}

/// The pipeline; then, when the layout choice picks channels-last, the
/// [`channels_last`] rewrite and the pipeline once more, which cancels the
/// layout changes that meet and folds the permuted constants, and with
/// `opts.winograd` the [`winograd`] rewrite. The report is the first
/// pipeline run's, with the second's printouts and the final node count.
fn optimize_with_layout(
    g: &mut Graph,
    opts: &Options,
    mut out: Option<&mut dyn Write>,
) -> Result<Report> {
    let pm = PassManager::from_options(opts)?;
    let read_from_file = raw_initializers(g);
    // `&mut W` writes through to `W`: a reborrow for the first run.
    let mut report = pm.run(g, opts, out.as_mut().map(|w| w as &mut dyn Write))?;
    if opts.layout.channels_last_for(g)
        && channels_last::to_channels_last(g).map_err(|e| e.context("pass 'channels_last'"))?
    {
        let cleanup = pm.run(g, opts, out)?;
        report.printed.extend(cleanup.printed);
        report.nodes_after = cleanup.nodes_after;
        if let Some(target) = &opts.winograd {
            if winograd::to_winograd(g, target).map_err(|e| e.context("pass 'winograd'"))? {
                report.nodes_after = count_nodes(g);
            }
        }
    }
    // Folding read weights from the model file into new constants; what
    // is still needed is read again on demand (`kiln_ir::mapped`).
    read_from_file
        .iter()
        .for_each(Initializer::release_resident);
    Ok(report)
}

/// The initializers still raw bytes of the model file (cheap clones).
fn raw_initializers(g: &Graph) -> Vec<Initializer> {
    g.initializers
        .values()
        .filter(|i| matches!(i, Initializer::Raw { .. }))
        .cloned()
        .collect()
}

fn new_stats(name: &'static str) -> PassStats {
    PassStats {
        name,
        runs: 0,
        changed: 0,
        time: Duration::ZERO,
        nodes_before: 0,
        nodes_after: 0,
        delta: 0,
    }
}

/// State of one pipeline run.
struct Run<'a, 'w> {
    opts: &'a Options,
    out: Option<&'w mut dyn Write>,
    /// Names of the graph's inputs and outputs, which no pass may change.
    interface: (Vec<String>, Vec<String>),
    report: Report,
}

impl Run<'_, '_> {
    /// Runs pass `i` of the pipeline once; true when it changed the graph.
    fn pass(&mut self, g: &mut Graph, pass: &dyn Pass, i: usize, round: usize) -> Result<bool> {
        let name = pass.name();
        let ctx = || {
            if round == 0 {
                format!("pass '{name}'")
            } else {
                format!("pass '{name}' (round {round})")
            }
        };
        let before = count_nodes(g);
        let start = Instant::now();
        let changed = pass.run(g).map_err(|e| e.context(ctx()))?;
        let time = start.elapsed();
        let after = count_nodes(g);
        let st = &mut self.report.passes[i];
        if st.runs == 0 {
            st.nodes_before = before;
        }
        st.runs += 1;
        st.changed += changed as usize;
        st.time += time;
        st.nodes_after = after;
        st.delta += after as i64 - before as i64;
        let first = st.runs == 1;
        if interface(g) != self.interface {
            return Err(
                Error::new("renamed or replaced the graph's inputs or outputs").context(ctx()),
            );
        }
        if self.opts.verify_each {
            check(g).map_err(|e| e.context(format!("verifying after {}", ctx())))?;
        }
        if self.opts.print_after.as_deref() == Some(name) && (changed || first) {
            self.print(g, name, round)?;
        }
        Ok(changed)
    }

    fn print(&mut self, g: &Graph, pass: &'static str, round: usize) -> Result<()> {
        let text = kiln_ir::text::print_elided(g, self.opts.print_elide);
        match self.out.as_mut() {
            Some(w) => writeln!(w, "# after {pass} (round {round})\n{text}")?,
            None => self.report.printed.push(Printout { pass, round, text }),
        }
        Ok(())
    }
}

fn interface(g: &Graph) -> (Vec<String>, Vec<String>) {
    let names = |ids: &[kiln_ir::ValueId]| ids.iter().map(|&v| g.name(v).to_string()).collect();
    (names(&g.inputs), names(&g.outputs))
}

/// Nodes of `g` and of all its subgraphs.
pub fn count_nodes(g: &Graph) -> usize {
    g.nodes
        .iter()
        .map(|n| {
            1 + n
                .attrs
                .values()
                .map(|a| match a {
                    Attr::Graph(sub) => count_nodes(sub),
                    _ => 0,
                })
                .sum::<usize>()
        })
        .sum()
}

/// The structural verifier plus shape inference agreeing with every
/// declared type (a declared unknown shape may be refined, nothing else).
pub fn check(g: &Graph) -> Result<()> {
    kiln_ir::verify::verify(g)?;
    let mut inferred = g.clone();
    kiln_ops::infer::infer_graph(&mut inferred, &|_| None)
        .map_err(|e| e.context("shape inference"))?;
    compare_types(g, &inferred)
}

fn compare_types(declared: &Graph, inferred: &Graph) -> Result<()> {
    for (node, inode) in declared.nodes.iter().zip(&inferred.nodes) {
        for o in node.outputs.iter().flatten() {
            let (d, i) = (declared.ty(*o), inferred.ty(*o));
            if d.dtype != i.dtype || (d.shape.is_some() && d.shape != i.shape) {
                bail!(
                    "'{}' (output of {}) is declared {d} but shape inference gives {i}",
                    declared.name(*o),
                    node.describe()
                );
            }
        }
        for (name, a) in &node.attrs {
            if let (Attr::Graph(sub), Some(Attr::Graph(isub))) = (a, inode.attrs.get(name)) {
                compare_types(sub, isub)
                    .map_err(|e| e.context(format!("subgraph '{name}' of {}", node.describe())))?;
            }
        }
    }
    Ok(())
}
