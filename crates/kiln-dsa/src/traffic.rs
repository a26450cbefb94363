//! The bytes a schedule moves between DDR, the global buffer (GB) and the
//! local buffers (LB), per instance (one kernel each, GraphTurbo §4), and
//! what each instance computes: the traffic half of the simulator that
//! puts numbers on GraphTurbo's Table 3 and Fig. 15 (§5.3–5.4).
//!
//! The model, per instance of a group split `f` ways:
//! - an activation it reads from another instance comes from where that
//!   instance's output lives (§3.4's scope): DDR or GB by DMA into LB,
//!   nothing when it is in LB (§4.2's buffer stitching), through GB when
//!   §3.5 redistributes it between cores (the cores are joined by the
//!   LLB, §5); a model input comes from DDR;
//! - its output slice goes to its scope: DDR, GB, or stays in LB;
//! - an operand from DDR (a weight, a model input, an output left in
//!   DDR) that the instances of a split group read more than once in all
//!   (each reads a weight whole, neighbours share a halo) is promoted
//!   whole DDR → GB once by the group's first instance and each hoists
//!   its part GB → LB (§4.4 and Fig. 11's weight promotion), while GB
//!   holds the group's such operands together (largest first; GB's room
//!   for spilled outputs is not subtracted); otherwise each instance
//!   reads its part from DDR. Weights are split
//!   into the first layer's (needed before compute) and the later
//!   layers' (§4.4 may load them during compute);
//! - values a group computes for itself stay in LB (§4.1–4.2);
//! - each operand is moved once per instance (its piece, a halo
//!   included) and read from LB once per node that reads it, except by a contraction whose two largest
//!   operands do not fit the cluster's LBs together: it is tiled, one operand
//!   streamed once per block of the other, from GB when GB holds it
//!   ([`tiling_rereads`], §4.1's anchor-op tiling; a bound of the
//!   blocked-matrix-product kind, not the emulator's exact tiles);
//! - an instance runs on all the cluster's cores (§3.4: Algorithm 1
//!   sizes an instance for them; its binding says where its output's
//!   slices live, not how many cores compute), with one DMA call per
//!   operand moved and core.
//!
//! Needs: the [`Schedule`] built from the same graph as the [`OpGraph`].
//! Guarantees: every weight and model input read by a node is read from
//! DDR at least once and every graph output written to DDR at least
//! once, so a schedule's DDR bytes are never below
//! [`compulsory_ddr_bytes`].

use crate::desc::DsaDesc;
use crate::instances::Edge;
use crate::opgraph::OpGraph;
use crate::propagate::{propagate, Propagation};
use crate::schedule::Schedule;
use crate::scope::{Scope, Transfer};
use crate::weight_slices::{slice_axes, slice_key, sliced_weights};
use kiln_ir::{Graph, ValueId};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Bytes moved between memory levels, and the DMA calls moving them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Traffic {
    pub ddr_to_lb: u64,
    pub ddr_to_gb: u64,
    pub gb_to_lb: u64,
    pub lb_to_gb: u64,
    pub lb_to_ddr: u64,
    pub dma_calls: u64,
}

/// One hop of a DMA transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    DdrToLb,
    DdrToGb,
    GbToLb,
    LbToGb,
    LbToDdr,
}

impl Traffic {
    /// Bytes read from or written to DDR.
    pub fn ddr_bytes(&self) -> u64 {
        self.ddr_to_lb + self.ddr_to_gb + self.lb_to_ddr
    }

    /// Bytes written to or read from GB.
    pub fn gb_bytes(&self) -> u64 {
        self.ddr_to_gb + self.gb_to_lb + self.lb_to_gb
    }

    pub fn add(&mut self, other: &Traffic) {
        self.ddr_to_lb += other.ddr_to_lb;
        self.ddr_to_gb += other.ddr_to_gb;
        self.gb_to_lb += other.gb_to_lb;
        self.lb_to_gb += other.lb_to_gb;
        self.lb_to_ddr += other.lb_to_ddr;
        self.dma_calls += other.dma_calls;
    }

    /// `bytes` over `hop`, by `calls` DMA calls (none when nothing moves).
    fn record(&mut self, hop: Hop, bytes: u64, calls: u64) {
        if bytes == 0 {
            return;
        }
        let field = match hop {
            Hop::DdrToLb => &mut self.ddr_to_lb,
            Hop::DdrToGb => &mut self.ddr_to_gb,
            Hop::GbToLb => &mut self.gb_to_lb,
            Hop::LbToGb => &mut self.lb_to_gb,
            Hop::LbToDdr => &mut self.lb_to_ddr,
        };
        *field += bytes;
        self.dma_calls += calls;
    }
}

/// What one node computes inside one instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Work {
    pub node: String,
    pub flops: u64,
    /// Runs on a matrix unit (a convolution, a matrix product).
    pub contraction: bool,
    /// Bytes the node reads from and writes to LB.
    pub lb_bytes: u64,
}

/// What one instance (one kernel) moves and computes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InstanceTraffic {
    /// Weight promotion for the first layer that reads weights (and the
    /// group's DDR → GB promotion): needs no earlier kernel, so §4.4 may
    /// prefetch it behind the one before.
    pub weights: Traffic,
    /// The later layers' weights: §4.4 may load them while the earlier
    /// layers of the instance compute.
    pub late_weights: Traffic,
    /// Activations brought into LB.
    pub inputs: Traffic,
    /// Results leaving LB.
    pub outputs: Traffic,
    /// Bytes the compute reads from LB, per operand (value name).
    pub lb_reads: BTreeMap<String, u64>,
    /// Bytes the compute writes to LB, per value.
    pub lb_writes: BTreeMap<String, u64>,
    pub work: Vec<Work>,
    /// Operands tiled nodes stream more than once, and how many times
    /// each node reads them ([`tiling_rereads`]).
    pub rereads: Vec<(String, u64)>,
    /// Cores the instance runs on.
    pub cores: u64,
}

impl InstanceTraffic {
    /// All three phases together.
    pub fn total(&self) -> Traffic {
        let mut t = self.weights;
        t.add(&self.late_weights);
        t.add(&self.inputs);
        t.add(&self.outputs);
        t
    }

    /// Bytes the compute reads from and writes to LB.
    pub fn lb_bytes(&self) -> u64 {
        self.lb_reads.values().chain(self.lb_writes.values()).sum()
    }
}

/// A group as the traffic model reads it.
struct GroupView {
    nodes: Vec<usize>,
    prop: Propagation,
    /// The weights the first node reading any weight reads.
    lead_weights: BTreeSet<ValueId>,
    /// Operands from outside the instances read more than once in all,
    /// staged in GB.
    staged: Staging,
    /// The exit axes its sliced weights follow.
    slice_axes: Vec<usize>,
}

/// One operand moved into one instance, `times` times (a tiled kernel
/// streams one operand once per block of another).
struct Fetch<'a> {
    instance: usize,
    view: &'a GroupView,
    value: ValueId,
    times: u64,
}

/// Everything shared by the instances of one schedule.
struct Model<'a> {
    g: &'a Graph,
    og: &'a OpGraph,
    schedule: &'a Schedule,
    /// GB's size, when there is one.
    gb: Option<u64>,
    /// Every instance runs on all the cluster's cores.
    cores: u64,
    /// One core's LB.
    lb_bytes: u64,
    groups: Vec<GroupView>,
    /// Per instance, the edges into it.
    incoming: Vec<Vec<Edge>>,
    redistributed: BTreeSet<Edge>,
    /// Per group, the instance that runs first (it promotes the weights).
    first_run: Vec<usize>,
    /// Per instance, whether it reads other weight slices than the
    /// instance of its group that ran before it (it promotes them).
    new_slice: Vec<bool>,
}

/// The traffic of every instance of `schedule`, by instance position.
pub fn instance_traffic(
    g: &Graph,
    og: &OpGraph,
    schedule: &Schedule,
    desc: &DsaDesc,
) -> Vec<InstanceTraffic> {
    let model = Model::new(g, og, schedule, desc);
    (0..schedule.instances.len())
        .map(|i| model.instance(i))
        .collect()
}

/// The weights read by the first of `nodes` (ascending) that reads any.
fn lead_weights(og: &OpGraph, nodes: &[usize]) -> BTreeSet<ValueId> {
    nodes
        .iter()
        .map(|&n| {
            og.nodes[n]
                .inputs
                .iter()
                .copied()
                .filter(|&v| !og.is_activation(v))
                .collect::<BTreeSet<_>>()
        })
        .find(|w| !w.is_empty())
        .unwrap_or_default()
}

/// §4.1: a contraction whose two largest operands do not fit the
/// cluster's LBs together is tiled: blocks of one fill the LBs and the other is
/// streamed through a small buffer (§2.2) once per block. `home` says
/// where an operand's repeated reads come from (LB: free, GB, DDR); of
/// the two ways, the one reading fewer DDR bytes again, then fewer GB
/// bytes, then streaming the larger. Returns the streamed operand and
/// how many times it is read, when more than once.
pub fn tiling_rereads(
    operands: &[(ValueId, u64)],
    lb_total: u64,
    home: impl Fn(ValueId, u64) -> Scope,
) -> Option<(ValueId, u64)> {
    let mut largest = operands.to_vec();
    largest.sort_by_key(|&(v, bytes)| (std::cmp::Reverse(bytes), v));
    let [a, b, ..] = largest[..] else {
        return None;
    };
    if a.1 + b.1 <= lb_total {
        return None;
    }
    let blocks = |bytes: u64| bytes.div_ceil(lb_total.max(1));
    // Bytes read again from DDR and from GB when `streamed` is read once
    // per block of `held`.
    let cost = |(streamed, bytes): (ValueId, u64), held: u64| {
        let again = bytes * (blocks(held) - 1);
        match home(streamed, bytes) {
            Scope::Ddr => (again, 0),
            Scope::Gb => (0, again),
            Scope::Lb => (0, 0),
        }
    };
    let (streamed, times) = if cost(a, b.1) <= cost(b, a.1) {
        (a.0, blocks(b.1))
    } else {
        (b.0, blocks(a.1))
    };
    (times > 1).then_some((streamed, times))
}

/// What a split group keeps in GB for its instances.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Staging {
    /// Operands promoted whole once.
    pub whole: BTreeSet<ValueId>,
    /// Weights larger than GB promoted slice by slice
    /// ([`crate::weight_slices`]).
    pub sliced: BTreeSet<ValueId>,
}

impl Staging {
    /// `v` is read from GB (whole or by slices).
    pub fn holds(&self, v: &ValueId) -> bool {
        self.whole.contains(v) || self.sliced.contains(v)
    }
}

/// The operands from outside `nodes` that the `factor` instances of a
/// group (split `factor` ways, cutting the batch or not) read more than
/// once in all (a weight each reads whole, a halo): first the slices of
/// weights larger than GB
/// ([`crate::weight_slices::sliced_weights`]), then whole operands,
/// largest first while GB holds them together (none when the group is
/// not split or there is no GB).
pub(crate) fn staged_operands(
    og: &OpGraph,
    nodes: &[usize],
    prop: &Propagation,
    (factor, batch): (usize, bool),
    gb: Option<u64>,
) -> Staging {
    let Some(gb) = gb.filter(|_| factor > 1) else {
        return Staging::default();
    };
    let (sliced, mut room) = sliced_weights(og, nodes, prop, (factor, batch), gb);
    let outside =
        |v: ValueId| og.producer[v.index()].is_none_or(|p| nodes.binary_search(&p).is_err());
    let reread = |v: ValueId| prop.bytes(og, v) * factor as u64 > og.value_bytes(v);
    let mut reread_ones: Vec<(u64, ValueId)> = prop
        .regions
        .keys()
        .copied()
        .filter(|&v| outside(v) && reread(v) && !sliced.contains(&v))
        .map(|v| (og.value_bytes(v), v))
        .collect();
    reread_ones.sort_by_key(|&(bytes, v)| (std::cmp::Reverse(bytes), v));
    let mut whole = BTreeSet::new();
    for (bytes, v) in reread_ones {
        if bytes <= room {
            room -= bytes;
            whole.insert(v);
        }
    }
    Staging { whole, sliced }
}

/// Per instance, whether it reads other weight slices than the instance
/// of its group that ran just before it in `schedule`'s order.
fn slice_runs(schedule: &Schedule, groups: &[GroupView]) -> Vec<bool> {
    let mut new_slice = vec![false; schedule.instances.len()];
    let mut last: Vec<Option<Vec<usize>>> = vec![None; groups.len()];
    for &i in &schedule.order {
        let inst = &schedule.instances[i];
        let view = &groups[inst.group];
        if view.slice_axes.is_empty() {
            continue;
        }
        let factors = schedule.groups[inst.group]
            .split
            .as_ref()
            .map_or(&[][..], |s| &s.factors);
        let key = slice_key(factors, inst.index, &view.slice_axes);
        new_slice[i] = last[inst.group].as_ref() != Some(&key);
        last[inst.group] = Some(key);
    }
    new_slice
}

/// The compulsory DDR traffic: every weight and model input some node
/// reads, read once; every graph output written once.
pub fn compulsory_ddr_bytes(og: &OpGraph) -> u64 {
    let read: BTreeSet<ValueId> = og
        .nodes
        .iter()
        .flat_map(|n| n.inputs.iter().copied())
        .filter(|v| og.producer[v.index()].is_none())
        .collect();
    let written = og.graph_outputs.iter().filter(|v| !read.contains(v));
    read.iter().chain(written).map(|&v| og.value_bytes(v)).sum()
}

impl<'a> Model<'a> {
    fn new(g: &'a Graph, og: &'a OpGraph, schedule: &'a Schedule, desc: &DsaDesc) -> Model<'a> {
        let gb = desc.global_buffer.as_ref().map(|m| m.bytes);
        let groups: Vec<GroupView> = schedule
            .groups
            .iter()
            .map(|group| {
                let factors = group.split.as_ref().map_or(&[][..], |s| &s.factors);
                let factor = factors.iter().product::<usize>().max(1);
                let prop = propagate(og, &group.nodes, factors);
                let batch = group.split.as_ref().is_some_and(|s| s.batch);
                let staged = staged_operands(og, &group.nodes, &prop, (factor, batch), gb);
                GroupView {
                    lead_weights: lead_weights(og, &group.nodes),
                    slice_axes: slice_axes(og, &prop, &staged.sliced),
                    staged,
                    nodes: group.nodes.clone(),
                    prop,
                }
            })
            .collect();
        let mut incoming = vec![Vec::new(); schedule.instances.len()];
        schedule
            .edges
            .iter()
            .for_each(|e| incoming[e.consumer].push(*e));
        let redistributed = schedule
            .transfers
            .iter()
            .filter_map(|t| match t {
                Transfer::Redistribute { edge, .. } => Some(*edge),
                _ => None,
            })
            .collect();
        let mut first_run = vec![usize::MAX; schedule.groups.len()];
        for &i in schedule.order.iter().rev() {
            first_run[schedule.instances[i].group] = i;
        }
        let new_slice = slice_runs(schedule, &groups);
        Model {
            g,
            og,
            schedule,
            gb,
            cores: u64::from(desc.cores_per_cluster),
            lb_bytes: desc.local_buffer.bytes,
            groups,
            incoming,
            redistributed,
            first_run,
            new_slice,
        }
    }

    /// Bytes of `v` one instance of `view` holds.
    fn operand_bytes(&self, view: &GroupView, v: ValueId) -> u64 {
        view.prop.bytes(self.og, v)
    }

    fn produced_inside(&self, view: &GroupView, v: ValueId) -> bool {
        self.og.producer[v.index()].is_some_and(|p| view.nodes.binary_search(&p).is_ok())
    }

    fn instance(&self, i: usize) -> InstanceTraffic {
        let inst = &self.schedule.instances[i];
        let view = &self.groups[inst.group];
        let mut t = InstanceTraffic {
            cores: self.cores,
            ..InstanceTraffic::default()
        };
        let external: Vec<ValueId> = view
            .prop
            .regions
            .keys()
            .copied()
            .filter(|&v| !self.og.is_activation(v) || !self.produced_inside(view, v))
            .collect();
        let times = self.node_rereads(i, view, &mut t);
        for value in external {
            let fetch = Fetch {
                instance: i,
                view,
                value,
                times: times.get(&value).copied().unwrap_or(1),
            };
            if self.og.is_activation(value) {
                self.activation_in(&fetch, &mut t);
            } else {
                self.weights_in(&fetch, &mut t);
            }
        }
        self.outputs_out(inst.scope, view, &mut t);
        self.compute(view, &mut t);
        t
    }

    /// How many times each operand is read in all where a node is tiled
    /// ([`tiling_rereads`]); records the re-reads in `t.rereads`.
    fn node_rereads(
        &self,
        i: usize,
        view: &GroupView,
        t: &mut InstanceTraffic,
    ) -> BTreeMap<ValueId, u64> {
        let mut times: BTreeMap<ValueId, u64> = BTreeMap::new();
        // Element-wise nodes read their operands' tiles in step: only a
        // contraction combines every tile of one with every tile of another.
        let contractions = view.nodes.iter().filter(|&&n| self.og.nodes[n].contraction);
        for &n in contractions {
            let inputs: BTreeSet<ValueId> = self.og.nodes[n].inputs.iter().copied().collect();
            let operands: Vec<(ValueId, u64)> = inputs
                .into_iter()
                .map(|v| (v, self.operand_bytes(view, v)))
                .collect();
            let home = |v, bytes| self.home(i, view, v, bytes);
            if let Some((v, n_times)) = tiling_rereads(&operands, self.cores * self.lb_bytes, home)
            {
                *times.entry(v).or_insert(1) += n_times - 1;
                t.rereads.push((self.g.name(v).to_string(), n_times));
            }
        }
        times
    }

    /// Where repeated reads of `v` (`bytes` of it) in instance `i` come
    /// from: LB for what the group computes or finds in LB, GB for what
    /// is in GB or fits there, else DDR.
    fn home(&self, i: usize, view: &GroupView, v: ValueId, bytes: u64) -> Scope {
        if self.og.is_activation(v) && self.produced_inside(view, v) {
            return Scope::Lb;
        }
        let producer = self.incoming[i].iter().find(|e| e.value == v);
        let scope = producer.map_or(Scope::Ddr, |e| self.read_from(e));
        let fits_gb = view.staged.holds(&v) || self.gb.is_some_and(|gb| bytes <= gb);
        match scope {
            Scope::Ddr if fits_gb => Scope::Gb,
            other => other,
        }
    }

    /// Where `e`'s reader finds the value: in LB when it runs before the
    /// producer's output was spilled (§4.3), else the producer's scope.
    fn read_from(&self, e: &Edge) -> Scope {
        if self.schedule.early_reads.contains(e) {
            Scope::Lb
        } else {
            self.schedule.instances[e.producer].scope
        }
    }

    /// A weight into LB.
    fn weights_in(&self, f: &Fetch, t: &mut InstanceTraffic) {
        let bytes = self.operand_bytes(f.view, f.value);
        let phase = if f.view.lead_weights.contains(&f.value) {
            &mut t.weights
        } else {
            &mut t.late_weights
        };
        self.promote(f, phase);
        self.fetch_from_ddr(f, bytes, phase);
    }

    /// A staged operand is promoted to GB whole (every instance reads
    /// parts of it) by the group's first instance (Fig. 11; the emulator
    /// stages re-read inputs the same way); a sliced weight's slice by
    /// the first instance of each run reading it.
    fn promote(&self, f: &Fetch, phase: &mut Traffic) {
        let first = self.first_run[self.schedule.instances[f.instance].group] == f.instance;
        if first && f.view.staged.whole.contains(&f.value) {
            phase.record(Hop::DdrToGb, self.og.value_bytes(f.value), 1);
        }
        if self.new_slice[f.instance] && f.view.staged.sliced.contains(&f.value) {
            let slice = self.operand_bytes(f.view, f.value);
            phase.record(Hop::DdrToGb, slice, 1);
        }
    }

    /// `bytes` of an operand from DDR into LB, `f.times` times: hoisted
    /// from GB when staged ([`Model::promote`]); otherwise straight from
    /// DDR, and when a tiled node reads it again it is kept in GB for that
    /// if GB holds it.
    fn fetch_from_ddr(&self, f: &Fetch, bytes: u64, phase: &mut Traffic) {
        let again = f.times - 1;
        if f.view.staged.holds(&f.value) {
            phase.record(Hop::GbToLb, bytes * f.times, self.cores * f.times);
            return;
        }
        phase.record(Hop::DdrToLb, bytes, self.cores);
        if again == 0 {
            return;
        }
        if self.gb.is_some_and(|gb| bytes <= gb) {
            phase.record(Hop::LbToGb, bytes, self.cores);
            phase.record(Hop::GbToLb, bytes * again, self.cores * again);
        } else {
            phase.record(Hop::DdrToLb, bytes * again, self.cores * again);
        }
    }

    /// An activation from outside the group into LB, from where each
    /// producer instance left its part.
    fn activation_in(&self, f: &Fetch, t: &mut InstanceTraffic) {
        let bytes = self.operand_bytes(f.view, f.value);
        let edges: Vec<&Edge> = self.incoming[f.instance]
            .iter()
            .filter(|e| e.value == f.value)
            .collect();
        let scope = |e: &Edge| self.read_from(e);
        if edges.is_empty() || edges.iter().any(|e| scope(e) == Scope::Ddr) {
            self.promote(f, &mut t.inputs);
        }
        if edges.is_empty() {
            self.fetch_from_ddr(f, bytes, &mut t.inputs);
            return;
        }
        let share = bytes.div_ceil(edges.len() as u64);
        for edge in edges {
            match scope(edge) {
                Scope::Ddr => self.fetch_from_ddr(f, share, &mut t.inputs),
                Scope::Gb => t
                    .inputs
                    .record(Hop::GbToLb, share * f.times, self.cores * f.times),
                Scope::Lb if self.redistributed.contains(edge) => {
                    // Between cores through the level that joins them.
                    let (out, back) = if self.gb.is_some() {
                        (Hop::LbToGb, Hop::GbToLb)
                    } else {
                        (Hop::LbToDdr, Hop::DdrToLb)
                    };
                    t.inputs.record(out, share, self.cores);
                    t.inputs.record(back, share, self.cores);
                }
                Scope::Lb => {}
            }
        }
    }

    /// Values read by another group go to the instance's scope, graph
    /// outputs to DDR.
    fn outputs_out(&self, scope: Scope, view: &GroupView, t: &mut InstanceTraffic) {
        let og = self.og;
        for &n in &view.nodes {
            let node = &og.nodes[n];
            let read_outside = node
                .consumers
                .iter()
                .any(|c| view.nodes.binary_search(c).is_err());
            for &v in &node.outputs {
                let bytes = self.operand_bytes(view, v);
                // A graph output goes to DDR whatever the instance's scope.
                let scope = if og.graph_outputs.contains(&v) {
                    Scope::Ddr
                } else if read_outside {
                    scope
                } else {
                    Scope::Lb
                };
                match scope {
                    Scope::Ddr => t.outputs.record(Hop::LbToDdr, bytes, t.cores),
                    Scope::Gb => t.outputs.record(Hop::LbToGb, bytes, t.cores),
                    Scope::Lb => {}
                }
            }
        }
    }

    /// Per node: its share of the arithmetic and its LB reads and writes.
    fn compute(&self, view: &GroupView, t: &mut InstanceTraffic) {
        for &n in &view.nodes {
            let node = &self.og.nodes[n];
            let mut lb_bytes = 0;
            for &v in &node.inputs {
                let bytes = self.operand_bytes(view, v);
                *t.lb_reads.entry(self.g.name(v).to_string()).or_default() += bytes;
                lb_bytes += bytes;
            }
            for &v in &node.outputs {
                let bytes = self.operand_bytes(view, v);
                *t.lb_writes.entry(self.g.name(v).to_string()).or_default() += bytes;
                lb_bytes += bytes;
            }
            // Its output's part: halos are computed again by neighbours.
            let flops = node.outputs.first().map_or(node.flops, |&out| {
                let region = view.prop.region(self.og, out);
                region.part(self.og.shape(out), node.flops)
            });
            t.work.push(Work {
                node: node.name.clone(),
                flops,
                contraction: node.contraction,
                lb_bytes,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(i: usize) -> ValueId {
        ValueId(i as u32)
    }

    /// Operands that fit together are read once, and so is a large one
    /// beside an operand that fits one block; otherwise the one whose
    /// repeated reads cost least is streamed once per block of the other:
    /// DDR bytes first, then GB bytes.
    #[test]
    fn tiled_nodes_stream_the_cheaper_operand_per_block() {
        let ddr = |_: ValueId, _: u64| Scope::Ddr;
        assert_eq!(tiling_rereads(&[(v(0), 100), (v(1), 100)], 200, ddr), None);
        assert_eq!(tiling_rereads(&[(v(0), 1000), (v(1), 100)], 200, ddr), None);
        // Blocks of 200: holding %1 (2 blocks) reads %0 once more (1000
        // B), holding %0 (5 blocks) reads %1 four times more (1200 B).
        let big = [(v(0), 1000), (v(1), 300), (v(2), 10)];
        assert_eq!(tiling_rereads(&big, 200, ddr), Some((v(0), 2)));
        // Re-reading %1 from GB moves no DDR byte again.
        let gb_for_1 = |x: ValueId, _: u64| if x == v(1) { Scope::Gb } else { Scope::Ddr };
        assert_eq!(tiling_rereads(&big, 200, gb_for_1), Some((v(1), 5)));
        assert_eq!(tiling_rereads(&[(v(0), 1000)], 200, ddr), None);
    }
}
