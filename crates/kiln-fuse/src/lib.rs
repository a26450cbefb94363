//! Fusion planning (DESIGN.md layer 5).
//!
//! A planner reads a graph (through [`graph::FusionGraph`]) and returns a
//! [`plan::Plan`] as plain data; it never edits the graph. [`plan`] runs
//! one planner, then the feedback step (`feedback.rs`): every multi-node
//! group is offered to the backend's [`GroupCheck`], and a group the
//! backend cannot turn into one kernel is split, the reason recorded.
//! `apply.rs` turns any plan into a graph of fused nodes.
//!
//! Planners (`planners/`): `none` (one kernel per node), `tvm` (TVM's
//! pattern kinds and greedy post-dominator grouping), `apollo` (APOLLO's
//! rule-based aggregation, memory stitching and parallelism stitching),
//! `dp` (the mapping-rules paper's cost model and pruned search).

pub mod apply;
pub mod feedback;
pub mod graph;
pub mod metrics;
pub mod plan;
pub mod planners;
pub mod report;

use kiln_ir::{bail, Graph, Result};
use kiln_target::{CpuPreset, TargetDesc};
use std::fmt;
use std::str::FromStr;
use std::time::Instant;

pub use feedback::Feedback;
pub use graph::{FusionGraph, Partition};
pub use plan::{Group, Plan};

/// The planners `--fusion` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PlannerKind {
    None,
    Tvm,
    #[default]
    Apollo,
    Dp,
}

impl PlannerKind {
    pub const ALL: [PlannerKind; 4] = [
        PlannerKind::None,
        PlannerKind::Tvm,
        PlannerKind::Apollo,
        PlannerKind::Dp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PlannerKind::None => "none",
            PlannerKind::Tvm => "tvm",
            PlannerKind::Apollo => "apollo",
            PlannerKind::Dp => "dp",
        }
    }
}

impl fmt::Display for PlannerKind {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PlannerKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        PlannerKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!("unknown fusion planner '{s}' (expected none, tvm, apollo or dp)")
            })
    }
}

/// The backend's answer to "can these nodes become one kernel?" (APOLLO
/// §4.1's feedback from the loop level to the partitioner).
pub trait GroupCheck {
    /// `Err(reason)` when `nodes` (positions in `g.nodes`) cannot be
    /// lowered to one kernel.
    fn check(&self, g: &Graph, nodes: &[usize]) -> std::result::Result<(), String>;
}

/// Accepts every group (planner tests that do not lower).
pub struct AcceptAll;

impl GroupCheck for AcceptAll {
    fn check(&self, _: &Graph, _: &[usize]) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Planner settings.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Whether the `dp` planner fuses producers in front of a matmul or
    /// convolution (Table 1 as written). kiln's CPU backend computes such
    /// a prologue while packing the operand, except over a padded window,
    /// but the paper's rules then fuse an activation into the next
    /// convolution rather than the previous one's epilogue, and the
    /// feedback splits the refused groups worse (ResNet-50: 68 kernels
    /// instead of 56, GPT-2 182 instead of 170). Off by default.
    pub contraction_prologues: bool,
    /// `dp`: stop searching after this long and keep the best plan found.
    pub dp_time_budget: std::time::Duration,
    /// `dp`: stop searching after this many states (groups assigned)
    /// and keep the best plan found.
    pub dp_state_budget: usize,
    /// `dp`: cost weights of eq. (8): α per byte on edges between groups
    /// (eq. 6), β per unit of variance of group sizes (eq. 7). The default
    /// α = 1e-6 weighs one MB between kernels like one unit of variance
    /// (bytes are ~10^6 times larger numbers than the variance).
    pub dp_alpha: f64,
    pub dp_beta: f64,
    /// The machine the plan is for: its peak and memory bandwidth price
    /// groups in [`FusionGraph::cost_ns`] (APOLLO's Layer III cost).
    pub target: TargetDesc,
}

impl PlanOptions {
    /// The default settings, planning for `target`.
    pub fn for_target(target: TargetDesc) -> PlanOptions {
        PlanOptions {
            target,
            ..PlanOptions::default()
        }
    }
}

impl Default for PlanOptions {
    /// Plans for [`reference_target`], not the host, so that plans do not
    /// depend on the machine.
    fn default() -> Self {
        PlanOptions {
            contraction_prologues: false,
            dp_time_budget: std::time::Duration::from_secs(5),
            dp_state_budget: 10_000_000,
            dp_alpha: 1e-6,
            dp_beta: 1.0,
            target: reference_target(),
        }
    }
}

/// This project's 2-core AVX-512 reference machine as the cost model has
/// always priced it: 100 GFLOP/s and 20 GB/s.
pub fn reference_target() -> TargetDesc {
    TargetDesc {
        peak_gflops: 100.0,
        memory_gbps: 20.0,
        ..CpuPreset::X86_64V4.desc(2)
    }
}

/// What one planner run produced.
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: Plan,
    /// Groups the backend refused, and how they were split.
    pub feedback: Vec<Feedback>,
    /// Planner remarks (e.g. a search budget that was hit).
    pub notes: Vec<String>,
    /// Planning time in seconds (planner plus feedback).
    pub seconds: f64,
}

/// Runs planner `kind` on `g`, then the feedback step with `check`.
pub fn plan(
    g: &Graph,
    kind: PlannerKind,
    check: &dyn GroupCheck,
    opts: &PlanOptions,
) -> Result<Planned> {
    let start = Instant::now();
    let fg = FusionGraph::new(g)?;
    let (plan, notes) = match kind {
        PlannerKind::None => (planners::none::plan(&fg), Vec::new()),
        PlannerKind::Tvm => (planners::tvm::plan(&fg), Vec::new()),
        PlannerKind::Apollo => (planners::apollo::plan(&fg, &opts.target), Vec::new()),
        PlannerKind::Dp => planners::dp::plan(&fg, opts),
    };
    let plan = plan.normalized();
    if let Err(e) = plan.check_partition(g.nodes.len()) {
        bail!("internal error: planner {kind} made an invalid plan: {e}");
    }
    let (plan, feedback) = feedback::apply_feedback(g, &fg, plan, check);
    Ok(Planned {
        plan,
        feedback,
        notes,
        seconds: start.elapsed().as_secs_f64(),
    })
}
