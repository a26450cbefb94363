//! `apollo` planner: APOLLO's partition-based fusion (MLSys 2022), §3.3
//! and §4.2–§4.3 with Algorithms 1–3 of Appendix A.
//!
//! Needs: a [`FusionGraph`] (compounds opened, so reductions such as
//! Softmax's and LayerNorm's are primitive ops) and the target
//! description Layer III prices groups on.
//! Guarantees: a [`Plan`] whose groups partition the nodes and are convex
//! (every merge passes `Partition::can_merge`), made in three steps:
//! `aggregate.rs` (Layer I partition, Table 1 / Algo. 1, then kiln's
//! `slices.rs`: plain slices join the one group reading them),
//! `memory_stitch.rs` (Layer II, Table 2 / Algo. 2) and
//! `parallel_stitch.rs` (Layer III, cost model (3) / Algo. 3, recorded in
//! `Plan::parallel`, not by merging). A group's kind is its final APOLLO
//! type: `element-wise`, `broadcast`, `reduction`, `matmul`, `conv`,
//! `transpose`, or the opaque kind of a lone op (`reshape`, `gather`,
//! `layout`, `window`, `library`, …).

mod aggregate;
mod memory_stitch;
mod micro;
mod parallel_stitch;
mod rules;
mod slices;

use crate::graph::FusionGraph;
use crate::plan::{Group, Plan};
use kiln_target::TargetDesc;

/// The plan of `fg`, Layer III pricing groups on `target`.
pub fn plan(fg: &FusionGraph, target: &TargetDesc) -> Plan {
    let mut mg = aggregate::aggregate(fg);
    slices::absorb(fg, &mut mg);
    memory_stitch::stitch(fg, &mut mg);
    let sets = parallel_stitch::stitch(fg, &mg.part, target, parallel_stitch::MAX_COST_NS);
    let ids = mg.part.groups();
    let position = |id: &usize| ids.iter().position(|g| g == id);
    Plan {
        planner: "apollo".to_string(),
        groups: ids
            .iter()
            .map(|&g| Group::new(super::type_kind(mg.ty(g)), mg.part.members(g).to_vec()))
            .collect(),
        parallel: sets
            .iter()
            .map(|set| set.iter().filter_map(position).collect())
            .collect(),
    }
}

#[cfg(test)]
mod tests;
