//! Keeping a weight slice on chip across the instances that share it: a
//! weight too large for the global buffer (GB) is promoted slice by slice
//! (GraphTurbo §4.1's Fig. 11 promotes one weight tile DDR → GB → LB per
//! tile of the anchor op; §4.4), and the instances of a group are put in
//! an order in which those reading one slice run one after another, so
//! each slice is read from DDR once.
//!
//! A group split along the batch alone has every instance read each
//! weight whole. When a weight is larger than GB, each instance would
//! read it from DDR again, and Algorithm 1's cost model refuses the split
//! ([`crate::split_info`]); the group then runs unsplit over the whole
//! batch and the whole-batch tensors around it are spilled. Cutting the
//! group's output along an axis the weight follows as well (a
//! convolution's output channels) gives each instance a slice of it;
//! the instances with the same piece along those axes share one slice.
//!
//! - [`sliced_weights`]: the weights a split group's instances read more
//!   than once in all, too large for GB whole, whose slice fits the room
//!   GB has (largest slice first); [`crate::traffic`] promotes such a
//!   slice DDR → GB once per run of consecutive instances reading it and
//!   each instance hoists it GB → LB.
//! - [`keep_slices_together`]: the instances of every group with such a
//!   weight made contiguous in the order, slice by slice (instances in
//!   their numbering within a slice); what depends on them moves after
//!   them.
//!
//! Needs: an [`OpGraph`], the groups' splits and propagations, an order
//! in which producers come before consumers. Guarantees: the new order
//! lists every instance once, producers before consumers; a group's
//! instances sharing a slice run consecutively, so each slice is
//! promoted once. The GB room the slice takes while its instances run is
//! reserved beside the group's other staged operands, not beside the
//! outputs the schedule keeps in GB (as for whole staged operands).

use crate::instances::InstanceGraph;
use crate::opgraph::OpGraph;
use crate::propagate::{pieces, propagate, Propagation};
use kiln_ir::ValueId;
use std::collections::BTreeSet;

/// The weights the `factor` instances of `nodes` read more than once in
/// all, larger than GB, whose one-instance slice is smaller than the
/// weight and fits GB's room (largest slice first), and the room left.
/// Only a split cutting the batch (`batch`) slices weights: the instances
/// sharing a slice are then other images (§2.1 schedules the batch).
pub(crate) fn sliced_weights(
    og: &OpGraph,
    nodes: &[usize],
    prop: &Propagation,
    (factor, batch): (usize, bool),
    gb: u64,
) -> (BTreeSet<ValueId>, u64) {
    if !batch {
        return (BTreeSet::new(), gb);
    }
    let outside =
        |v: ValueId| og.producer[v.index()].is_none_or(|p| nodes.binary_search(&p).is_err());
    let mut candidates: Vec<(u64, ValueId)> = prop
        .regions
        .keys()
        .copied()
        .filter(|&v| outside(v) && !og.is_activation(v))
        .filter_map(|v| {
            let (slice, whole) = (prop.bytes(og, v), og.value_bytes(v));
            let reread = slice * factor as u64 > whole;
            (reread && whole > gb && slice < whole).then_some((slice, v))
        })
        .collect();
    candidates.sort_by_key(|&(bytes, v)| (std::cmp::Reverse(bytes), v));
    let mut room = gb;
    let mut sliced = BTreeSet::new();
    for (bytes, v) in candidates {
        if factor > 1 && bytes <= room {
            room -= bytes;
            sliced.insert(v);
        }
    }
    (sliced, room)
}

/// The exit axes along which any of `weights` is sliced: instances with
/// the same pieces along them read the same slices.
pub(crate) fn slice_axes(
    og: &OpGraph,
    prop: &Propagation,
    weights: &BTreeSet<ValueId>,
) -> Vec<usize> {
    let mut axes: Vec<usize> = weights
        .iter()
        .flat_map(|&w| prop.region(og, w).dims.into_iter().flatten())
        .map(|span| span.axis)
        .collect();
    axes.sort_unstable();
    axes.dedup();
    axes
}

/// Which slice instance `index` of a group split by `factors` reads: its
/// pieces along `axes`.
pub(crate) fn slice_key(factors: &[usize], index: usize, axes: &[usize]) -> Vec<usize> {
    let piece = pieces(factors, index);
    axes.iter().map(|&a| piece[a]).collect()
}

/// Per group of `ig`, the axes its sliced weights follow (empty: none).
pub(crate) fn group_slice_axes(
    og: &OpGraph,
    ig: &InstanceGraph,
    gb: Option<u64>,
) -> Vec<Vec<usize>> {
    ig.groups
        .iter()
        .map(|group| {
            let (Some(gb), Some(split)) = (gb, group.split.as_ref()) else {
                return Vec::new();
            };
            let prop = propagate(og, &group.nodes, &split.factors);
            let cut = (split.factor(), split.batch);
            let (weights, _) = sliced_weights(og, &group.nodes, &prop, cut, gb);
            slice_axes(og, &prop, &weights)
        })
        .collect()
}

/// `order` with the instances of each group that has sliced weights run
/// as one block, slice by slice, where the group's last instance ran;
/// the instances that depend on the block and ran before that point move
/// right after it, in their order.
pub fn keep_slices_together(
    og: &OpGraph,
    ig: &InstanceGraph,
    order: Vec<usize>,
    gb: Option<u64>,
) -> Vec<usize> {
    let axes = group_slice_axes(og, ig, gb);
    let mut order = order;
    for (g, axes) in axes.iter().enumerate().filter(|(_, a)| !a.is_empty()) {
        let factors = ig.groups[g].factors();
        let mut block: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| ig.instances[i].group == g)
            .collect();
        block.sort_by_key(|&i| (slice_key(factors, ig.instances[i].index, axes), i));
        order = as_block(ig, &order, &block);
    }
    order
}

/// `order` with `block` (one group's instances) contiguous at the place
/// of its last member: what precedes that place and does not depend on
/// the block stays before it; what depends on the block follows it.
fn as_block(ig: &InstanceGraph, order: &[usize], block: &[usize]) -> Vec<usize> {
    let mut in_block = vec![false; ig.instances.len()];
    block.iter().for_each(|&i| in_block[i] = true);
    let last = order.iter().rposition(|&i| in_block[i]).unwrap_or(0);
    // Producers come before consumers in `order`, so one pass marks
    // everything that depends on the block.
    let mut after = in_block.clone();
    for &i in order {
        if ig.producers_of(i).any(|e| after[e.producer]) {
            after[i] = true;
        }
    }
    let before = order[..last].iter().copied().filter(|&i| !after[i]);
    let moved = order[..last]
        .iter()
        .copied()
        .filter(|&i| after[i] && !in_block[i]);
    let rest = order[last..].iter().copied().filter(|&i| !in_block[i]);
    before
        .chain(block.iter().copied())
        .chain(moved)
        .chain(rest)
        .collect()
}
