//! `dp` planner: not written yet (one kernel per node until it is).

use crate::graph::FusionGraph;
use crate::plan::Plan;
use crate::PlanOptions;

pub fn plan(fg: &FusionGraph, _opts: &PlanOptions) -> (Plan, Vec<String>) {
    (
        Plan::singletons("dp", fg.nodes.iter().map(super::node_kind)),
        Vec::new(),
    )
}
