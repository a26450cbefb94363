//! The schedules GraphTurbo (OSDI '23) is compared with, and the variants
//! of its §5.3 breakdown (Fig. 15), all with one kernel per §1.1 layer and
//! no instances:
//!
//! - `per-layer` (TVM, §5.2 and Table 3): every kernel output in DDR.
//! - `layers-in-gb` (Fig. 15's first variant, "keep the outputs of each
//!   kernel in LLB as much as possible"): outputs in GB while GB holds
//!   them over their lives, the longest-lived spilled to DDR first (§4.3's
//!   rule applied to GB).
//! - `layers-in-lb` (Fig. 15's second variant, outputs "stay in L1 to
//!   the greatest extent"): outputs in LB while the cluster's LBs hold
//!   them, spread over the cores, the longest-lived spilled to GB, then
//!   DDR (§4.3).
//! - `astitch-like` (§5.2: AStitch reproduced "by maximally preserving
//!   tensors in L1", without splitting into instances): as
//!   `layers-in-lb` but spilled straight to DDR; AStitch does not use
//!   the LLB.
//!
//! Graph outputs always go to DDR. [`ScheduleKind`] names every schedule
//! `kiln sim --schedule` accepts; [`schedule`] builds one.
//!
//! Needs: a graph with static shapes and a [`DsaDesc`].
//! Guarantees: the groups are §1.1's layers in graph order, one instance
//! each; GB never holds more than its size at any step.

use crate::desc::DsaDesc;
use crate::grouping::{layers, Group};
use crate::instances::{bfs_order, InstanceGraph};
use crate::opgraph::OpGraph;
use crate::reuse::{spill_longest_lived, Tenancy};
use crate::schedule::{
    assemble, early_reads, graphturbo, lifetimes, read_scope, writes_graph_output, OrderKind,
    Placed, Schedule,
};
use crate::scope::{plain_binding, slice_shape, transfers, Binding, Scope};
use kiln_ir::{bail, Graph, Result};

/// A schedule `kiln sim` can simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleKind {
    Graphturbo,
    PerLayer,
    AstitchLike,
    LayersInGb,
    LayersInLb,
}

impl ScheduleKind {
    pub const ALL: [ScheduleKind; 5] = [
        ScheduleKind::Graphturbo,
        ScheduleKind::PerLayer,
        ScheduleKind::AstitchLike,
        ScheduleKind::LayersInGb,
        ScheduleKind::LayersInLb,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::Graphturbo => "graphturbo",
            ScheduleKind::PerLayer => "per-layer",
            ScheduleKind::AstitchLike => "astitch-like",
            ScheduleKind::LayersInGb => "layers-in-gb",
            ScheduleKind::LayersInLb => "layers-in-lb",
        }
    }

    /// The kind called `name`; the error lists them all.
    pub fn parse(name: &str) -> Result<ScheduleKind> {
        match ScheduleKind::ALL.iter().find(|k| k.name() == name) {
            Some(&kind) => Ok(kind),
            None => {
                let names: Vec<&str> = ScheduleKind::ALL.iter().map(|k| k.name()).collect();
                bail!("unknown schedule '{name}' (known: {})", names.join(", "))
            }
        }
    }
}

/// The schedule of `kind` for `g` on `desc`.
pub fn schedule(g: &Graph, desc: &DsaDesc, kind: ScheduleKind) -> Result<Schedule> {
    match kind {
        ScheduleKind::Graphturbo => graphturbo(g, desc),
        _ => layer_schedule(g, desc, kind),
    }
}

/// The per-layer baseline: one kernel per §1.1 layer, every output in DDR.
pub fn per_layer(g: &Graph, desc: &DsaDesc) -> Result<Schedule> {
    layer_schedule(g, desc, ScheduleKind::PerLayer)
}

/// One kernel per layer in graph order, outputs kept as `kind` says.
fn layer_schedule(g: &Graph, desc: &DsaDesc, kind: ScheduleKind) -> Result<Schedule> {
    let og = OpGraph::for_device(g, desc)?;
    let groups = layers(&og)
        .into_iter()
        .map(|nodes| Group { nodes, split: None })
        .collect();
    let ig = InstanceGraph::new(&og, groups)?;
    let cores = desc.cores_per_cluster as usize;
    let bind: Vec<Binding> = (0..ig.instances.len())
        .map(|i| plain_binding(&slice_shape(&og, &ig, i), cores))
        .collect();
    let order = bfs_order(&ig);
    let count = ig.instances.len();
    let (scope, spilled_at) = match kind {
        ScheduleKind::LayersInGb => (kept_in_gb(&og, &ig, &order, desc), vec![None; count]),
        ScheduleKind::LayersInLb => kept_in_lb(&og, &ig, &order, desc, true),
        ScheduleKind::AstitchLike => kept_in_lb(&og, &ig, &order, desc, false),
        _ => (vec![Scope::Ddr; count], vec![None; count]),
    };
    // The per-layer baseline reads every input from DDR: no transfer
    // between kernels to list (its text is Table 3's baseline as before).
    let placed = Placed {
        kind: OrderKind::Layers,
        order,
        bind,
        scope,
        spilled_at,
    };
    let early = early_reads(&og, &ig, &placed);
    let moves = if kind == ScheduleKind::PerLayer {
        Vec::new()
    } else {
        transfers(&og, &ig, &placed.bind, &|e| read_scope(&placed, &early, e))
    };
    Ok(assemble(
        g,
        &og,
        &ig,
        kind.name(),
        placed,
        (moves, early),
        desc,
    ))
}

/// Outputs in GB while it holds them, longest-lived spilled to DDR.
fn kept_in_gb(og: &OpGraph, ig: &InstanceGraph, order: &[usize], desc: &DsaDesc) -> Vec<Scope> {
    let count = ig.instances.len();
    let Some(gb) = desc.global_buffer.as_ref().map(|m| m.bytes) else {
        return vec![Scope::Ddr; count];
    };
    // GB plays LB's part in §4.3's spilling: whole tensors, spilled to DDR.
    let in_gb: Vec<Tenancy> = lifetimes(og, ig, order, desc)
        .into_iter()
        .map(|t| Tenancy {
            lb_bytes: t.gb_bytes,
            ..t
        })
        .collect();
    let mut scope: Vec<Scope> = (0..count)
        .map(|i| {
            let fits = in_gb[i].gb_bytes <= gb;
            if fits && !writes_graph_output(og, ig, i) {
                Scope::Lb
            } else {
                Scope::Ddr
            }
        })
        .collect();
    spill_longest_lived(&in_gb, gb, None, &mut scope);
    scope
        .into_iter()
        .map(|s| if s == Scope::Lb { Scope::Gb } else { s })
        .collect()
}

/// Outputs in LB while the cores hold them, longest-lived spilled to GB
/// (when `use_gb`), then DDR; with the step of each spill.
fn kept_in_lb(
    og: &OpGraph,
    ig: &InstanceGraph,
    order: &[usize],
    desc: &DsaDesc,
    use_gb: bool,
) -> (Vec<Scope>, Vec<Option<usize>>) {
    let tensors = lifetimes(og, ig, order, desc);
    let gb = desc
        .global_buffer
        .as_ref()
        .map(|m| m.bytes)
        .filter(|_| use_gb);
    let mut scope: Vec<Scope> = (0..ig.instances.len())
        .map(|i| {
            let t = &tensors[i];
            if writes_graph_output(og, ig, i) {
                Scope::Ddr
            } else if t.lb_bytes <= desc.local_buffer.bytes {
                Scope::Lb
            } else if gb.is_some_and(|gb| t.gb_bytes <= gb) {
                Scope::Gb
            } else {
                Scope::Ddr
            }
        })
        .collect();
    let spilled_at = spill_longest_lived(&tensors, desc.local_buffer.bytes, gb, &mut scope);
    (scope, spilled_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_by_name_and_errors_list_them() {
        for kind in ScheduleKind::ALL {
            assert_eq!(ScheduleKind::parse(kind.name()).unwrap(), kind);
        }
        let err = ScheduleKind::parse("tvm").unwrap_err().to_string();
        assert!(
            err.contains("'tvm'") && err.contains("graphturbo, per-layer, astitch-like"),
            "{err}"
        );
    }
}
