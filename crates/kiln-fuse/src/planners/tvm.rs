//! `tvm` planner: not written yet (one kernel per node until it is).

use crate::graph::FusionGraph;
use crate::plan::Plan;

pub fn plan(fg: &FusionGraph) -> Plan {
    Plan::singletons("tvm", fg.nodes.iter().map(super::node_kind))
}
