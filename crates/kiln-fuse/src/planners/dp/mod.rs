//! `dp` planner: the mapping-rules paper ("TVM operator fusion with
//! mapping-type rules and dynamic-programming search", in
//! ../shared/papers/tvm-fusion-mapping-rules-dp-search.zh.txt).
//!
//! Needs: a [`FusionGraph`] (mapping types §3.1.1 come from kiln-ops
//! `te/classify.rs`).
//! Guarantees: a plan whose groups partition the nodes, are convex, obey
//! §3.2.2 Table 1 (`rules.rs`), and are the cheapest under §3.3.1 eq. (8)
//! (`cost.rs`) among the plans Algorithm 2 (`search.rs`) explores over the
//! candidates of Algorithm 1 (`candidates.rs`). The search covers the
//! whole graph (no regions): it stays well inside the budgets on the
//! project's models. Notes say when a budget or the path cap was hit.
//! Group kind: the report kind (`planners::node_kind`) of the group's
//! most complex member, so a matmul with its epilogue is `matmul`.

pub mod candidates;
pub mod cost;
pub mod rules;
pub mod search;

use crate::graph::{FusionGraph, Partition};
use crate::plan::{Group, Plan};
use crate::PlanOptions;
use rules::FuseType;

pub fn plan(fg: &FusionGraph, opts: &PlanOptions) -> (Plan, Vec<String>) {
    let types: Vec<FuseType> = fg
        .nodes
        .iter()
        .map(|n| rules::node_type(n).with_prologues(opts.contraction_prologues))
        .collect();
    let cands = candidates::build(fg, &types);
    let out = search::search(fg, &types, &cands, opts);
    let mut notes = Vec::new();
    if cands.capped > 0 {
        notes.push(format!(
            "{} nodes have more than {} fusable paths; the first {} were kept",
            cands.capped,
            candidates::MAX_PATHS,
            candidates::MAX_PATHS
        ));
    }
    if let Some(budget) = out.stopped {
        notes.push(format!(
            "{budget} budget hit after {} states ({} plans); best plan so far kept",
            out.states, out.plans
        ));
    }
    (to_plan(fg, &types, &out.partition), notes)
}

/// The plan of a partition, each group named after its most complex member.
fn to_plan(fg: &FusionGraph, types: &[FuseType], part: &Partition) -> Plan {
    let groups = part
        .groups()
        .into_iter()
        .map(|g| {
            let members = part.members(g);
            let lead = members
                .iter()
                .copied()
                .max_by_key(|&n| (types[n].mapping, std::cmp::Reverse(n)))
                .unwrap_or(members[0]);
            Group::new(super::node_kind(&fg.nodes[lead]), members.to_vec())
        })
        .collect();
    Plan {
        planner: "dp".to_string(),
        groups,
        parallel: Vec::new(),
    }
}
