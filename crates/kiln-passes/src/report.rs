//! What a pipeline run did: per pass its runs, changes, wall time and node
//! counts, printed as a table (`kiln ... --time-passes`), and the graphs
//! printed after the pass named by `--print-after`.

use std::fmt;
use std::time::Duration;

/// One pass's share of a pipeline run.
#[derive(Debug, Clone, PartialEq)]
pub struct PassStats {
    pub name: &'static str,
    /// How often it ran, and how many of those runs changed the graph.
    pub runs: usize,
    pub changed: usize,
    /// Wall time of all its runs.
    pub time: Duration,
    /// Nodes (subgraphs included) before its first run and after its last.
    pub nodes_before: usize,
    pub nodes_after: usize,
    /// Net change of the node count made by its own runs (negative: removed).
    pub delta: i64,
}

/// The graph as printed after one run of the `print_after` pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Printout {
    pub pass: &'static str,
    pub round: usize,
    pub text: String,
}

/// The result of [`crate::optimize`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// In pipeline order.
    pub passes: Vec<PassStats>,
    /// Rounds of the fixed-point loop that ran.
    pub rounds: usize,
    /// False when the round limit stopped a pipeline still changing the graph.
    pub converged: bool,
    pub total: Duration,
    pub nodes_before: usize,
    pub nodes_after: usize,
    /// Graphs printed after the `print_after` pass (when no writer was given).
    pub printed: Vec<Printout>,
}

impl Report {
    /// The statistics of the pass named `name`.
    pub fn pass(&self, name: &str) -> Option<&PassStats> {
        self.passes.iter().find(|p| p.name == name)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<22} {:>5} {:>8} {:>10} {:>6} {:>8} {:>8} {:>7}",
            "pass", "runs", "changed", "time (ms)", "%", "before", "after", "delta"
        )?;
        let total = ms(self.total).max(1e-9);
        for p in &self.passes {
            writeln!(
                f,
                "{:<22} {:>5} {:>8} {:>10.3} {:>5.1}% {:>8} {:>8} {:>+7}",
                p.name,
                p.runs,
                p.changed,
                ms(p.time),
                100.0 * ms(p.time) / total,
                p.nodes_before,
                p.nodes_after,
                p.delta
            )?;
        }
        writeln!(
            f,
            "{:<22} {:>5} {:>8} {:>10.3} {:>5.1}% {:>8} {:>8} {:>+7}",
            "total",
            self.rounds,
            if self.converged { "fixed" } else { "limit" },
            ms(self.total),
            100.0,
            self.nodes_before,
            self.nodes_after,
            self.nodes_after as i64 - self.nodes_before as i64
        )
    }
}
