//! A graph's schedule on a DSA cluster as data, with a text form: the
//! sub-graphs, their instances in execution order, each instance output's
//! core binding and buffer scope (DDR, GB or LB), and the transfers
//! between instances; built by GraphTurbo (OSDI '23, §3–§4.3: Algorithms
//! 1–4 and liveness-based reuse) or by the per-layer baseline that §5.4's
//! Table 3 compares it with (TVM: one kernel per layer, every kernel
//! output in DDR; it and the other baselines are in [`crate::baselines`]).
//!
//! GraphTurbo's order is the better of BFS and DFS (§3.3, "with respect
//! to memory utilization"): the one leaving fewer output bytes outside LB
//! after reuse, DFS on a tie. Scopes after Algorithm 4: graph outputs go
//! to DDR; a group with no split that fits LB streams, its output in GB
//! when GB holds it, else DDR; then §4.3 spills longest-lived LB outputs.
//!
//! Needs: a graph with static shapes and a [`DsaDesc`] (one cluster is
//! scheduled: the graph's batch is the batch per cluster, §2.1).
//! Guarantees: groups partition the nodes; every instance appears once in
//! `order`, after the instances it reads.

use crate::desc::DsaDesc;
use crate::grouping::{fuse_unfit_layers, layers, Grouping};
use crate::instances::{bfs_order, dfs_order, Edge, InstanceGraph};
use crate::opgraph::OpGraph;
use crate::propagate::exit_node;
use crate::release::released_parts;
use crate::reuse::{spill_longest_lived, Tenancy};
use crate::scope::{
    bind_and_scope, infer_binding, slice_shape, transfers, Binding, Scope, Transfer,
};
use crate::split_info::SplitCandidate;
use crate::weight_slices::keep_slices_together;
use kiln_ir::{Graph, Result, ValueId};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};

/// How instances were ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderKind {
    Bfs,
    Dfs,
    /// The per-layer baseline: kernels in graph order.
    Layers,
}

impl fmt::Display for OrderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OrderKind::Bfs => "bfs",
            OrderKind::Dfs => "dfs",
            OrderKind::Layers => "graph",
        })
    }
}

/// One sub-graph (one kernel per instance).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledGroup {
    /// Node positions, ascending.
    pub nodes: Vec<usize>,
    pub names: Vec<String>,
    pub split: Option<SplitCandidate>,
    /// §1.1 layers it holds; their outputs inside an instance stay in LB
    /// (§4.2, buffer stitching).
    pub layers: usize,
}

/// One instance and where its output lives.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledInstance {
    pub group: usize,
    pub index: usize,
    /// The group's output, this instance's slice of it.
    pub output: String,
    pub shape: Vec<usize>,
    pub bind: Binding,
    pub scope: Scope,
}

/// A schedule of one graph on one cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// `graphturbo`, or a baseline's name ([`crate::baselines::ScheduleKind`]).
    pub planner: String,
    pub target: String,
    pub order_kind: OrderKind,
    pub groups: Vec<ScheduledGroup>,
    pub instances: Vec<ScheduledInstance>,
    /// Instance positions in execution order.
    pub order: Vec<usize>,
    /// Which instance reads which other's output.
    pub edges: Vec<Edge>,
    pub transfers: Vec<Transfer>,
    /// Edges whose reader finds the value in LB though the producer's
    /// output is spilled: it runs before the spill ([`early_reads`]).
    pub early_reads: BTreeSet<Edge>,
    /// Names of the values transfers move.
    pub value_names: BTreeMap<ValueId, String>,
}

/// How many kernel outputs live at each level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScopeCounts {
    pub ddr: usize,
    pub gb: usize,
    pub lb: usize,
}

impl ScopeCounts {
    fn add(&mut self, scope: Scope, count: usize) {
        match scope {
            Scope::Ddr => self.ddr += count,
            Scope::Gb => self.gb += count,
            Scope::Lb => self.lb += count,
        }
    }
}

/// An order with its bindings and scopes.
pub(crate) struct Placed {
    pub(crate) kind: OrderKind,
    pub(crate) order: Vec<usize>,
    pub(crate) bind: Vec<Binding>,
    pub(crate) scope: Vec<Scope>,
    /// Per instance, the step its output was spilled at ([`spill_longest_lived`]).
    pub(crate) spilled_at: Vec<Option<usize>>,
}

/// GraphTurbo's schedule of `g` on `desc`.
pub fn graphturbo(g: &Graph, desc: &DsaDesc) -> Result<Schedule> {
    let og = OpGraph::for_device(g, desc)?;
    let groups = fuse_unfit_layers(&og, Grouping::run(&og, desc));
    let ig = InstanceGraph::new(&og, groups)?;
    let cores = desc.cores_per_cluster as usize;
    let gb = desc.global_buffer.as_ref().map(|m| m.bytes);
    let mut best: Option<(u64, Placed)> = None;
    for kind in [OrderKind::Dfs, OrderKind::Bfs] {
        let order = if kind == OrderKind::Dfs {
            dfs_order(&ig)
        } else {
            bfs_order(&ig)
        };
        let order = keep_slices_together(&og, &ig, order, gb);
        let (bind, scope) = bind_and_scope(&og, &ig, &order, cores);
        let (scope, spilled_at) = final_scopes(&og, &ig, &order, scope, desc);
        let outside = (0..scope.len())
            .filter(|&i| scope[i] != Scope::Lb)
            .map(|i| slice_bytes(&og, &ig, i))
            .sum();
        if best.as_ref().is_none_or(|b| outside < b.0) {
            let placed = Placed {
                kind,
                order,
                bind,
                scope,
                spilled_at,
            };
            best = Some((outside, placed));
        }
    }
    let Some((_, placed)) = best else {
        kiln_ir::bail!("no order was built");
    };
    let early = early_reads(&og, &ig, &placed);
    let moves = transfers(&og, &ig, &placed.bind, &|e| read_scope(&placed, &early, e));
    Ok(assemble(
        g,
        &og,
        &ig,
        "graphturbo",
        placed,
        (moves, early),
        desc,
    ))
}

/// Bytes of the slice instance `i` writes.
pub(crate) fn slice_bytes(og: &OpGraph, ig: &InstanceGraph, i: usize) -> u64 {
    let Some(output) = instance_output(og, ig, i) else {
        return 0;
    };
    let whole: usize = og.shape(output).iter().product();
    let slice: usize = slice_shape(og, ig, i).iter().product();
    og.value_bytes(output) * slice as u64 / whole.max(1) as u64
}

fn instance_output(og: &OpGraph, ig: &InstanceGraph, i: usize) -> Option<ValueId> {
    let group = &ig.groups[ig.instances[i].group];
    exit_node(og, &group.nodes).and_then(|e| og.nodes[e].outputs.first().copied())
}

/// Algorithm 4's scopes, then graph outputs in DDR, streamed groups'
/// outputs in GB or DDR, and §4.3's spills (with the step of each).
fn final_scopes(
    og: &OpGraph,
    ig: &InstanceGraph,
    order: &[usize],
    mut scope: Vec<Scope>,
    desc: &DsaDesc,
) -> (Vec<Scope>, Vec<Option<usize>>) {
    let gb = desc.global_buffer.as_ref().map(|m| m.bytes);
    for (i, scope_i) in scope.iter_mut().enumerate() {
        let group = &ig.groups[ig.instances[i].group];
        if writes_graph_output(og, ig, i) {
            *scope_i = Scope::Ddr;
        } else if group.split.is_none() {
            *scope_i = if gb.is_some_and(|gb| slice_bytes(og, ig, i) <= gb) {
                Scope::Gb
            } else {
                Scope::Ddr
            };
        }
    }
    let tensors = lifetimes(og, ig, order, desc);
    let spilled_at = spill_longest_lived(&tensors, desc.local_buffer.bytes, gb, &mut scope);
    (scope, spilled_at)
}

/// The edges whose reader runs before the producer's output is spilled
/// (§4.3 spills it at the step LB overflows): such a reader finds it in
/// LB (§4.2's buffer stitching) when it takes it as the producer laid it
/// out, or when the spill went to DDR (a redistribution between the
/// cores through GB moves no DDR byte); otherwise, and for the readers
/// after the spill, it is read from the producer's scope.
pub(crate) fn early_reads(og: &OpGraph, ig: &InstanceGraph, placed: &Placed) -> BTreeSet<Edge> {
    let position = positions(&placed.order);
    let early = |e: &&Edge| {
        let before = placed.spilled_at[e.producer].is_some_and(|at| position[e.consumer] < at);
        let laid_out = || {
            infer_binding(og, ig, e, &placed.bind[e.consumer]).as_ref()
                == Some(&placed.bind[e.producer])
        };
        before && (placed.scope[e.producer] == Scope::Ddr || laid_out())
    };
    ig.edges.iter().filter(early).copied().collect()
}

/// Where each edge's reader finds the value: LB for `early` reads, else
/// the producer's scope.
pub(crate) fn read_scope(placed: &Placed, early: &BTreeSet<Edge>, edge: &Edge) -> Scope {
    if early.contains(edge) {
        Scope::Lb
    } else {
        placed.scope[edge.producer]
    }
}

/// Per instance, its position in `order`.
pub(crate) fn positions(order: &[usize]) -> Vec<usize> {
    let mut position = vec![0; order.len()];
    order.iter().enumerate().for_each(|(p, &i)| position[i] = p);
    position
}

/// Whether instance `i`'s output (its group's exit's) is a graph output.
pub(crate) fn writes_graph_output(og: &OpGraph, ig: &InstanceGraph, i: usize) -> bool {
    let group = &ig.groups[ig.instances[i].group];
    exit_node(og, &group.nodes).is_some_and(|e| {
        og.nodes[e]
            .outputs
            .iter()
            .any(|v| og.graph_outputs.contains(v))
    })
}

/// Each instance output's life over `order`, with the parts of it
/// dead before its last reader ([`released_parts`]).
pub(crate) fn lifetimes(
    og: &OpGraph,
    ig: &InstanceGraph,
    order: &[usize],
    desc: &DsaDesc,
) -> Vec<Tenancy> {
    let position = positions(order);
    let cores = u64::from(desc.cores_per_cluster);
    let bytes: Vec<u64> = (0..order.len()).map(|i| slice_bytes(og, ig, i)).collect();
    let freed = released_parts(og, ig, &position, &bytes);
    freed
        .into_iter()
        .enumerate()
        .map(|(i, freed)| Tenancy {
            start: position[i],
            end: ig
                .consumers_of(i)
                .map(|e| position[e.consumer])
                .max()
                .unwrap_or(position[i]),
            lb_bytes: bytes[i].div_ceil(cores),
            gb_bytes: bytes[i],
            freed,
        })
        .collect()
}

/// The schedule as data, with names for printing.
pub(crate) fn assemble(
    g: &Graph,
    og: &OpGraph,
    ig: &InstanceGraph,
    planner: &str,
    placed: Placed,
    (transfers, early_reads): (Vec<Transfer>, BTreeSet<Edge>),
    desc: &DsaDesc,
) -> Schedule {
    let Placed {
        kind: order_kind,
        order,
        bind,
        scope,
        ..
    } = placed;
    let layer_of = layer_numbers(og);
    let groups = ig
        .groups
        .iter()
        .map(|group| ScheduledGroup {
            nodes: group.nodes.clone(),
            names: group
                .nodes
                .iter()
                .map(|&n| og.nodes[n].name.clone())
                .collect(),
            split: group.split.clone(),
            layers: count_distinct(group.nodes.iter().map(|&n| layer_of[n])),
        })
        .collect();
    let instances = ig
        .instances
        .iter()
        .enumerate()
        .map(|(i, inst)| ScheduledInstance {
            group: inst.group,
            index: inst.index,
            output: instance_output(og, ig, i).map_or_else(String::new, |v| g.name(v).to_string()),
            shape: slice_shape(og, ig, i),
            bind: bind[i].clone(),
            scope: scope[i],
        })
        .collect();
    let value_names = ig
        .edges
        .iter()
        .map(|e| (e.value, g.name(e.value).to_string()))
        .collect();
    Schedule {
        planner: planner.to_string(),
        target: desc.name.clone(),
        order_kind,
        groups,
        instances,
        order,
        edges: ig.edges.clone(),
        transfers,
        early_reads,
        value_names,
    }
}

fn layer_numbers(og: &OpGraph) -> Vec<usize> {
    let mut of = vec![0; og.nodes.len()];
    for (l, layer) in layers(og).iter().enumerate() {
        layer.iter().for_each(|&n| of[n] = l);
    }
    of
}

fn count_distinct(items: impl Iterator<Item = usize>) -> usize {
    let mut v: Vec<usize> = items.collect();
    v.sort_unstable();
    v.dedup();
    v.len()
}

impl Schedule {
    /// Kernel (instance) outputs per scope: Table 3's count.
    pub fn output_counts(&self) -> ScopeCounts {
        let mut counts = ScopeCounts::default();
        self.instances.iter().for_each(|i| counts.add(i.scope, 1));
        counts
    }

    /// Layer outputs per scope: inside an instance every layer but the
    /// last keeps its output in LB (§4.2); the last's is the instance's.
    pub fn layer_output_counts(&self) -> ScopeCounts {
        let mut counts = self.output_counts();
        for inst in &self.instances {
            counts.add(Scope::Lb, self.groups[inst.group].layers.saturating_sub(1));
        }
        counts
    }

    /// The node positions of each group: the partition a fusion plan
    /// (`kiln_fuse::Plan`) is made of.
    pub fn node_groups(&self) -> Vec<Vec<usize>> {
        self.groups.iter().map(|g| g.nodes.clone()).collect()
    }

    fn instance_name(&self, i: usize) -> String {
        let inst = &self.instances[i];
        format!("{}.{}", inst.group + 1, inst.index + 1)
    }
}

/// The text form:
///
/// ```text
/// schedule graphturbo on stcp920, dfs order
/// group 1: nodes 3, layers 2, split axis 0 by 8, sliced nodes 3, 49152 B/core: conv_a relu_a down_a
/// instance 1.8 %da[1, 96, 16, 16] bind [1, 8, 1, 1] LB
/// concat 2.4 %da <- 1.7 1.8
/// copy 3.1 %db <- 2.2 GB -> LB
/// redistribute 2.4 %da <- 1.8 [1, 8, 1, 1] -> [1, 1, 1, 1]
/// outputs: DDR 1, GB 0, LB 14; layer outputs: DDR 1, GB 0, LB 18
/// ```
///
/// Groups are numbered from 1 in topological order, instance `g.k` is
/// slice `k` of group `g`; instances are listed in execution order.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "schedule {} on {}, {} order",
            self.planner, self.target, self.order_kind
        )?;
        for (g, group) in self.groups.iter().enumerate() {
            writeln!(
                f,
                "group {}: {}: {}",
                g + 1,
                describe_group(group),
                group.names.join(" ")
            )?;
        }
        for &i in &self.order {
            let inst = &self.instances[i];
            writeln!(
                f,
                "instance {} %{}{:?} bind {:?} {}",
                self.instance_name(i),
                inst.output,
                inst.shape,
                inst.bind,
                inst.scope
            )?;
        }
        for t in &self.transfers {
            writeln!(f, "{}", self.describe_transfer(t))?;
        }
        let (o, l) = (self.output_counts(), self.layer_output_counts());
        writeln!(
            f,
            "outputs: DDR {}, GB {}, LB {}; layer outputs: DDR {}, GB {}, LB {}",
            o.ddr, o.gb, o.lb, l.ddr, l.gb, l.lb
        )
    }
}

fn describe_group(group: &ScheduledGroup) -> String {
    let mut s = format!("nodes {}, layers {}", group.nodes.len(), group.layers);
    match &group.split {
        Some(c) => {
            let cuts: Vec<String> = c
                .cuts()
                .iter()
                .map(|(a, f)| format!("axis {a} by {f}"))
                .collect();
            let cuts = if cuts.is_empty() {
                "axis 0 by 1".to_string()
            } else {
                cuts.join(" and ")
            };
            let _ = write!(
                s,
                ", split {cuts}, sliced nodes {}, {} B/core",
                c.split_ops, c.per_core_bytes
            );
        }
        None => s.push_str(", whole"),
    }
    s
}

impl Schedule {
    fn describe_transfer(&self, t: &Transfer) -> String {
        let name = |v: &ValueId| self.value_names.get(v).cloned().unwrap_or_default();
        match t {
            Transfer::Concat {
                consumer,
                value,
                producers,
            } => {
                let from: Vec<String> = producers.iter().map(|&p| self.instance_name(p)).collect();
                format!(
                    "concat {} %{} <- {}",
                    self.instance_name(*consumer),
                    name(value),
                    from.join(" ")
                )
            }
            Transfer::Copy { edge, from } => format!(
                "copy {} %{} <- {} {from} -> LB",
                self.instance_name(edge.consumer),
                name(&edge.value),
                self.instance_name(edge.producer)
            ),
            Transfer::Redistribute { edge, from, to } => format!(
                "redistribute {} %{} <- {} {from:?} -> {to:?}",
                self.instance_name(edge.consumer),
                name(&edge.value),
                self.instance_name(edge.producer)
            ),
        }
    }
}
