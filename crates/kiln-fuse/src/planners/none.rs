//! `none`: one kernel per primitive node (the unfused baseline).

use crate::graph::FusionGraph;
use crate::plan::Plan;

pub fn plan(fg: &FusionGraph) -> Plan {
    Plan::singletons("none", fg.nodes.iter().map(super::node_kind))
}
