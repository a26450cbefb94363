//! GraphTurbo (OSDI '23) §3.1, Algorithm 1 and eq. (1): SplitInfo, the
//! ways a sub-graph's output can be split into instances that fit the
//! local buffer, and the best of them.
//!
//! Per op ([`OpSplit`]), an output axis splits cleanly when every input
//! access that uses its index uses it alone, in one input dimension
//! (`in[.., i_a, ..]`): a slice of the output then reads the same slice of
//! that input and all of the other inputs. Axes read through a window
//! (`2*i2 + r0 - 1`: a halo), a reshape (`floordiv`/`mod`) or data
//! (Gather) do not split. This comes from the op's tensor expression, not
//! from op names; a reduction axis is never an output axis.
//!
//! Per sub-graph ([`propagate`]), a split of the output along one axis is
//! carried backwards through the nodes (line 7–11's "propagating its
//! splitting information to each of intermediate tensors"): a node whose
//! output is split along an axis it splits cleanly passes the split to its
//! inputs; any other node is computed whole in every instance. A value
//! read in two different ways is whole.
//!
//! Needs: an [`OpGraph`], a sub-graph as ascending node positions with one
//! exit (the node whose outputs leave it), a [`DsaDesc`].
//! Guarantees: a [`SplitCandidate`] is only returned when one instance's
//! working set, spread over the cluster's cores, fits one core's LB.
//!
//! Readings of the paper (also in docs/dsa.md):
//! - `peak` is the largest sum of live activation bytes while one
//!   instance runs its nodes in order (weights excluded, §2.2); it is
//!   computed per candidate factor from the propagated regions instead of
//!   `peak / v`, since inputs read whole do not shrink.
//! - line 5's `⌈peak/v⌉ ≤ sizeof(LB)`: the instance is bound to all the
//!   cluster's cores (§3.4), so the test is `⌈peak_v / cores⌉ ≤ LB`.
//! - line 4's values `1, 2, 4, 8, 9, …, size(d)`: only those dividing
//!   `size(d)` (line 10's divisibility, load balance between instances).
//! - `n_d` counts the nodes the split reaches (computed as slices).

use crate::desc::DsaDesc;
use crate::opgraph::OpGraph;
use kiln_ir::{Node, ValueId};
use kiln_ops::te::{IndexExpr, TensorExpr, Var};
use std::collections::BTreeMap;

/// Where a clean split of one output axis lands in each input: the input
/// dimension (`Some`), or the whole input (`None`).
pub type AxisMap = BTreeMap<ValueId, Option<usize>>;

/// What splitting each output axis of one op means for its inputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpSplit {
    /// Per output axis: `None` when it does not split cleanly.
    pub axes: Vec<Option<AxisMap>>,
}

impl OpSplit {
    /// From a node's tensor expression; a node without one splits nowhere.
    pub fn from_expr(te: Option<&TensorExpr>, node: &Node) -> OpSplit {
        let Some(te) = te else {
            return OpSplit::default();
        };
        let axes = (0..te.shape.len())
            .map(|axis| axis_map(te, node, axis))
            .collect();
        OpSplit { axes }
    }

    /// The input map of `axis`, when it splits cleanly.
    pub fn axis(&self, axis: usize) -> Option<&AxisMap> {
        self.axes.get(axis).and_then(Option::as_ref)
    }
}

/// The input dimensions `axis` lands in, or `None` when an access uses
/// its index other than alone in one dimension with the same extent.
fn axis_map(te: &TensorExpr, node: &Node, axis: usize) -> Option<AxisMap> {
    let var = Var::Out(axis);
    let mut map = AxisMap::new();
    for (k, access) in te.accesses.iter().enumerate() {
        let mut dims = access
            .index
            .iter()
            .enumerate()
            .filter(|(_, e)| uses(e, var));
        let dim = match (dims.next(), dims.next()) {
            (None, _) => None,
            (Some((j, e)), None) if is_alone(e, var) => Some(j),
            _ => return None,
        };
        let same_extent = dim.is_none_or(|j| te.access_shape(k).get(j) == te.shape.get(axis));
        if !same_extent {
            return None;
        }
        let value = node.inputs.get(access.input).copied().flatten()?;
        let merged = match map.get(&value) {
            Some(&earlier) if earlier != dim => None,
            _ => dim,
        };
        map.insert(value, merged);
    }
    Some(map)
}

fn uses(e: &IndexExpr, var: Var) -> bool {
    let mut vars = Vec::new();
    e.vars(&mut vars);
    vars.contains(&var)
}

fn is_alone(e: &IndexExpr, var: Var) -> bool {
    e.as_affine().and_then(|a| a.as_var()) == Some(var)
}

/// What one instance holds of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// A `1/factor` slice along this axis.
    Slice(usize),
    Whole,
}

/// A split of a sub-graph's output carried through its nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct Propagation {
    /// The region of every value the sub-graph reads or writes.
    pub regions: BTreeMap<ValueId, Region>,
    /// Nodes computed as slices, ascending.
    pub split_nodes: Vec<usize>,
}

/// The sub-graph's exit: its last node whose outputs are read outside it
/// or are graph outputs (its last node when none is).
pub fn exit_node(og: &OpGraph, nodes: &[usize]) -> Option<usize> {
    let leaves = |n: &usize| {
        let node = &og.nodes[*n];
        node.consumers
            .iter()
            .any(|c| nodes.binary_search(c).is_err())
            || node.outputs.iter().any(|v| og.graph_outputs.contains(v))
    };
    nodes
        .iter()
        .rev()
        .copied()
        .find(leaves)
        .or(nodes.last().copied())
}

/// Carries a split of the exit's output along `axis` by `factor` back
/// through `nodes` (ascending). `factor` 1 gives the axis correspondence
/// alone (Algorithm 4's `infer_binding`).
pub fn propagate(og: &OpGraph, nodes: &[usize], axis: usize, factor: usize) -> Propagation {
    let mut regions = BTreeMap::new();
    if let Some(exit) = exit_node(og, nodes) {
        for &v in &og.nodes[exit].outputs {
            merge(&mut regions, v, slice_if_divisible(og, v, axis, factor));
        }
    }
    let mut split_nodes = Vec::new();
    for &n in nodes.iter().rev() {
        let node = &og.nodes[n];
        let out = node.outputs.first().and_then(|v| regions.get(v)).copied();
        let map = match out {
            Some(Region::Slice(a)) => node.split.axis(a),
            _ => None,
        };
        if map.is_some() {
            split_nodes.push(n);
        }
        for &v in &node.inputs {
            let region = match map.and_then(|m| m.get(&v)) {
                Some(Some(dim)) => slice_if_divisible(og, v, *dim, factor),
                _ => Region::Whole,
            };
            merge(&mut regions, v, region);
        }
    }
    split_nodes.reverse();
    Propagation {
        regions,
        split_nodes,
    }
}

fn slice_if_divisible(og: &OpGraph, v: ValueId, axis: usize, factor: usize) -> Region {
    match og.shape(v).get(axis) {
        Some(&extent) if extent.is_multiple_of(factor) => Region::Slice(axis),
        _ => Region::Whole,
    }
}

/// A value read two different ways is needed whole.
fn merge(regions: &mut BTreeMap<ValueId, Region>, v: ValueId, region: Region) {
    let merged = match regions.get(&v) {
        Some(&earlier) if earlier != region => Region::Whole,
        _ => region,
    };
    regions.insert(v, merged);
}

/// Bytes of `v` in one instance: a slice when its producer in the
/// sub-graph is computed as slices, or when it comes from outside and is
/// read as a slice.
pub(crate) fn instance_bytes(
    og: &OpGraph,
    nodes: &[usize],
    prop: &Propagation,
    factor: u64,
    v: ValueId,
) -> u64 {
    if !og.is_activation(v) {
        return 0;
    }
    let sliced = match og.producer[v.index()] {
        Some(p) if nodes.binary_search(&p).is_ok() => prop.split_nodes.binary_search(&p).is_ok(),
        _ => matches!(prop.regions.get(&v), Some(Region::Slice(_))),
    };
    let whole = og.value_bytes(v);
    if sliced {
        whole.div_ceil(factor)
    } else {
        whole
    }
}

/// The largest sum of live activation bytes while one instance runs
/// `nodes` in order: external inputs live until their last read, values
/// the sub-graph produces from their node to their last read, the exit's
/// outputs to the end.
pub fn instance_peak(og: &OpGraph, nodes: &[usize], prop: &Propagation, factor: usize) -> u64 {
    let bytes = |v: ValueId| instance_bytes(og, nodes, prop, factor as u64, v);
    let inside =
        |v: &ValueId| og.producer[v.index()].is_some_and(|p| nodes.binary_search(&p).is_ok());
    let mut last_read: BTreeMap<ValueId, usize> = BTreeMap::new();
    for (step, &n) in nodes.iter().enumerate() {
        for &v in &og.nodes[n].inputs {
            last_read.insert(v, step);
        }
    }
    let kept: Vec<ValueId> =
        exit_node(og, nodes).map_or(Vec::new(), |e| og.nodes[e].outputs.clone());
    let mut live: u64 = last_read
        .keys()
        .filter(|v| !inside(v))
        .map(|&v| bytes(v))
        .sum();
    let mut peak = live;
    for (step, &n) in nodes.iter().enumerate() {
        let outputs = &og.nodes[n].outputs;
        live += outputs.iter().map(|&v| bytes(v)).sum::<u64>();
        peak = peak.max(live);
        let read_last = last_read
            .iter()
            .filter(|&(_, &last)| last == step)
            .map(|(&v, _)| v);
        let never_read = outputs
            .iter()
            .copied()
            .filter(|v| !last_read.contains_key(v));
        let freed: u64 = read_last
            .chain(never_read)
            .filter(|v| !kept.contains(v))
            .map(bytes)
            .sum();
        live -= freed.min(live);
    }
    peak
}

/// One element of SplitInfo: the 4-tuple `(split_d, n_d, f_d, d)` with
/// `split_d = 1` implied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitCandidate {
    /// `n_d`: nodes the split reaches.
    pub split_ops: usize,
    /// `f_d`: instances.
    pub factor: usize,
    /// `d`: the output axis.
    pub axis: usize,
    /// One instance's working set per core, in bytes.
    pub per_core_bytes: u64,
}

/// Line 4's values for an axis of extent `size`: 1, 2, 4, then 8 up to
/// `size`, those dividing it.
fn factors(size: usize) -> impl Iterator<Item = usize> {
    [1, 2, 4]
        .into_iter()
        .chain(8..=size.max(1))
        .filter(move |&v| v <= size && size.is_multiple_of(v))
}

/// Algorithm 1: per output axis of the sub-graph, the smallest factor
/// whose instances fit the LB.
pub fn split_info(og: &OpGraph, nodes: &[usize], desc: &DsaDesc) -> Vec<SplitCandidate> {
    let Some(exit) = exit_node(og, nodes) else {
        return Vec::new();
    };
    let Some(&output) = og.nodes[exit].outputs.first() else {
        return Vec::new();
    };
    let cores = u64::from(desc.cores_per_cluster);
    let mut info = Vec::new();
    for (axis, &size) in og.shape(output).iter().enumerate() {
        for factor in factors(size) {
            let prop = propagate(og, nodes, axis, factor);
            // More than one instance only helps when the exit is sliced.
            if factor > 1 && prop.split_nodes.binary_search(&exit).is_err() {
                break;
            }
            let per_core = instance_peak(og, nodes, &prop, factor).div_ceil(cores);
            if per_core <= desc.local_buffer.bytes {
                info.push(SplitCandidate {
                    split_ops: prop.split_nodes.len(),
                    factor,
                    axis,
                    per_core_bytes: per_core,
                });
                break;
            }
        }
    }
    info
}

/// Eq. (1): `lexmax (n_d, -f_d, -d)`: the split reaching most nodes, then
/// the fewest instances, then the outermost axis.
pub fn best_split(info: &[SplitCandidate]) -> Option<SplitCandidate> {
    info.iter().copied().max_by_key(|c| {
        (
            c.split_ops,
            std::cmp::Reverse(c.factor),
            std::cmp::Reverse(c.axis),
        )
    })
}
