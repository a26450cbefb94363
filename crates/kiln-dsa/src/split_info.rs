//! GraphTurbo (OSDI '23) §3.1, Algorithm 1 and eq. (1): SplitInfo, the
//! ways a sub-graph's output can be split into instances that fit the
//! local buffer, and the best of them. How a split reaches the sub-graph's
//! nodes and inputs (lines 7–11) is [`crate::propagate`].
//!
//! Needs: an [`OpGraph`], a sub-graph as ascending node positions with one
//! exit (the node whose outputs leave it), a [`DsaDesc`].
//! Guarantees: a [`SplitCandidate`] is only returned when one instance's
//! working set, spread over the cluster's cores, fits one core's LB, and
//! it passes the cost model below.
//!
//! Readings of the paper (also in docs/dsa.md):
//! - `peak` is the largest sum of live activation bytes while one
//!   instance runs its nodes in order (weights excluded, §2.2); it is
//!   computed per candidate factor from the propagated regions instead of
//!   `peak / v`, since inputs read whole do not shrink.
//! - line 5's `⌈peak/v⌉ ≤ sizeof(LB)`: the instance is bound to all the
//!   cluster's cores (§3.4), so the test is `⌈peak_v / cores⌉ ≤ LB`.
//! - line 4's values `1, 2, 4, 8, 9, …, size(d)`, as printed: pieces of
//!   `⌈size(d) / v⌉`, the last one shorter, and only values that leave
//!   no piece empty (line 10's divisibility is about intermediates; a
//!   prime token axis of 197 would otherwise split 197 ways).
//! - `n_d` counts the nodes every axis cut reaches (their output follows
//!   it; for `v = 1`, the axis itself).
//! - "a simple cost model to prevent excessive recomputations" (not
//!   given): the instances together re-read what each reads whole (a
//!   weight, an input along an axis it does not follow) and what
//!   neighbours share (a halo). A factor is refused when a weight re-read
//!   does not fit GB beside the group's other re-read operands (every
//!   instance would read it from DDR; [`crate::traffic`] stages the
//!   others, Fig. 11's promotion), or when the re-read bytes, those from
//!   GB at GB's cost relative to DDR's (the cluster's DDR share over GB's
//!   bandwidth), exceed what one unsplit run moves (its outside operands
//!   and outputs once each). Halos are also bounded per node
//!   ([`crate::propagate::MAX_RECOMPUTE`]). Larger factors only re-read
//!   more, so the axis stops there.
//!
//! Beyond the paper, eq. (1) prefers splitting the batch (axis 0 when it
//! is as long as the graph's batch, above 1: a ViT exported sequence
//! first has 197 tokens there) to fewer instances among splits reaching
//! as many nodes: consecutive groups split by images depend on each other
//! image by image, so Algorithm 3's DFS keeps one image's tensors on chip
//! (Fig. 3b's schedule, every stage split by images); groups split along
//! different axes depend all-to-all, and the whole tensor between them is
//! live at once (MobileNetV2 at batch 32 spilled 77 MB tensors to DDR
//! that way). Between splits cutting as many axes, the inner one wins a
//! tie (measured faster on the CNNs).
//!
//! Beyond the paper, which splits one axis: when no factor of axis `d`
//! both fits and passes the cost model, `d` is cut by the largest factor
//! that did not fit (`size(d)` when none fits) and the search goes on
//! along each of the next axes inward, the best by eq. (1) kept, up to
//! [`MAX_CUTS`] axes (a ResNet-50 stage-1 image at batch 16, 1.6 MB in
//! FP16, does not fit 8 LBs: images, then columns).

use crate::desc::DsaDesc;
use crate::opgraph::OpGraph;
use crate::propagate::{exit_node, instance_peak, propagate, Propagation};
use crate::traffic::staged_operands;
use kiln_ir::ValueId;

/// The most output axes one split cuts.
pub const MAX_CUTS: usize = 3;

/// One element of SplitInfo: the 4-tuple `(split_d, n_d, f_d, d)` with
/// `split_d = 1` implied, `f_d` the product of `factors` and `d` the
/// first axis cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitCandidate {
    /// `n_d`: nodes the split reaches.
    pub split_ops: usize,
    /// Pieces per axis of the exit's output (1: not cut).
    pub factors: Vec<usize>,
    /// One instance's working set per core, in bytes.
    pub per_core_bytes: u64,
    /// It cuts the batch: axis 0, as long as the graph's batch (> 1).
    pub batch: bool,
    /// Its instances share slices of a weight larger than GB
    /// ([`crate::weight_slices`]): they run slice by slice, not image by
    /// image.
    pub weight_slices: bool,
}

impl SplitCandidate {
    /// `f_d`: instances.
    pub fn factor(&self) -> usize {
        self.factors.iter().product::<usize>().max(1)
    }

    /// `d`: the first axis cut (0 when none is).
    pub fn axis(&self) -> usize {
        self.factors.iter().position(|&f| f > 1).unwrap_or(0)
    }

    /// The axes cut, with their factors.
    pub fn cuts(&self) -> Vec<(usize, usize)> {
        let cut = self.factors.iter().copied().enumerate();
        cut.filter(|&(_, f)| f > 1).collect()
    }
}

/// Line 4's values for an axis of extent `size`: 1, 2, 4, then 8 up to
/// `size`, those that leave no piece empty (pieces of `⌈size / v⌉`, the
/// last one shorter).
fn line4_values(size: usize) -> impl Iterator<Item = usize> {
    [1, 2, 4]
        .into_iter()
        .chain(8..=size.max(1))
        .filter(move |&v| v <= size && (v - 1) * size.div_ceil(v) < size)
}

/// What Algorithm 1 reads of one sub-graph.
struct Search<'a> {
    og: &'a OpGraph,
    nodes: &'a [usize],
    exit: usize,
    shape: Vec<usize>,
    cores: u64,
    lb: u64,
    gb: Option<u64>,
    /// The exit's axis 0 is the graph's batch.
    batch_axis: bool,
    /// A byte re-read from GB against one from DDR, in time.
    gb_cost: f64,
}

/// Algorithm 1: per output axis of the sub-graph, the smallest factor
/// whose instances fit the LB (cutting the next axes too when none does).
pub fn split_info(og: &OpGraph, nodes: &[usize], desc: &DsaDesc) -> Vec<SplitCandidate> {
    let Some(exit) = exit_node(og, nodes) else {
        return Vec::new();
    };
    let Some(&output) = og.nodes[exit].outputs.first() else {
        return Vec::new();
    };
    let search = Search {
        og,
        nodes,
        exit,
        shape: og.shape(output).to_vec(),
        batch_axis: og.batch > 1 && og.shape(output).first() == Some(&og.batch),
        cores: u64::from(desc.cores_per_cluster),
        lb: desc.local_buffer.bytes,
        gb: desc.global_buffer.as_ref().map(|m| m.bytes),
        gb_cost: desc.global_buffer.as_ref().map_or(1.0, |m| {
            desc.ddr.gbps / f64::from(desc.clusters.max(1)) / m.gbps
        }),
    };
    let uncut = vec![1; search.shape.len()];
    (0..search.shape.len())
        .filter_map(|axis| search.along(uncut.clone(), axis))
        .collect()
}

impl Search<'_> {
    /// Lines 4–6 for `axis`, the axes already cut as in `factors`; when no
    /// factor is both small enough to fit and cheap enough, the axis is
    /// cut by the largest factor that did not fit and the next axes are
    /// searched inward.
    fn along(&self, mut factors: Vec<usize>, axis: usize) -> Option<SplitCandidate> {
        let mut unfit = 1;
        for v in line4_values(self.shape[axis]) {
            factors[axis] = v;
            let prop = propagate(self.og, self.nodes, &factors);
            // More than one piece only helps when the exit is sliced.
            if v > 1 && !self.exit_sliced_along(&prop, axis) {
                return None;
            }
            let per_core = instance_peak(self.og, self.nodes, &prop).div_ceil(self.cores);
            if per_core > self.lb {
                unfit = v;
                continue;
            }
            let cut = (factors.iter().product(), self.batch_axis && factors[0] > 1);
            match self.rereads(&prop, cut) {
                Verdict::Acceptable { weight_slices } => {
                    return Some(SplitCandidate {
                        split_ops: self.reached(&prop, &factors, axis),
                        batch: cut.1,
                        weight_slices,
                        factors,
                        per_core_bytes: per_core,
                    })
                }
                // A batch split may slice the weight along an axis it
                // follows (`weight_slices.rs`): a piece of this axis, when
                // nested in an outer cut, or of the next axes inward.
                Verdict::WeightOffChip if cut.1 => {
                    if v == 1 {
                        continue;
                    }
                    if let Some(inner) = self.inward(factors.clone(), axis) {
                        return Some(inner);
                    }
                    break;
                }
                Verdict::WeightOffChip | Verdict::TooMuch => break,
            }
        }
        factors[axis] = unfit;
        self.inward(factors, axis)
    }

    /// The best split cutting the axes after `axis` too, `factors` cut so
    /// far (none past [`MAX_CUTS`] axes or when `axis` is not cut).
    fn inward(&self, factors: Vec<usize>, axis: usize) -> Option<SplitCandidate> {
        let cut = factors.iter().filter(|&&f| f > 1).count();
        if factors[axis] == 1 || cut >= MAX_CUTS {
            return None;
        }
        let inner: Vec<SplitCandidate> = (axis + 1..self.shape.len())
            .filter_map(|next| self.along(factors.clone(), next))
            .collect();
        best_split(&inner)
    }

    /// `n_d`: the nodes every axis cut (or `axis` alone, uncut) reaches:
    /// their outputs have a span following it.
    fn reached(&self, prop: &Propagation, factors: &[usize], axis: usize) -> usize {
        let mut axes: Vec<usize> = (0..factors.len()).filter(|&a| factors[a] > 1).collect();
        if axes.is_empty() {
            axes.push(axis);
        }
        let follows = |n: &&usize| {
            let out = self.og.nodes[**n].outputs.first();
            let region = out.and_then(|v| prop.regions.get(v));
            region.is_some_and(|r| {
                axes.iter()
                    .all(|&a| r.dims.iter().any(|s| s.is_some_and(|s| s.axis == a)))
            })
        };
        self.nodes.iter().filter(follows).count()
    }

    fn exit_sliced_along(&self, prop: &Propagation, axis: usize) -> bool {
        let output = self.og.nodes[self.exit].outputs[0];
        let region = prop.region(self.og, output);
        let shape = self.og.shape(output);
        prop.split_nodes.binary_search(&self.exit).is_ok()
            && region.sliced(shape).any(|(d, _)| d == axis)
    }

    /// The cost model: no weight re-read from DDR (each re-read one is
    /// staged in GB, whole or slice by slice), and the bytes `factor`
    /// instances re-read beyond one read of each operand, those from GB
    /// at GB's cost, at most what one unsplit run moves (those operands
    /// and the exit's outputs once).
    fn rereads(&self, prop: &Propagation, (factor, batch): (usize, bool)) -> Verdict {
        let og = self.og;
        let staged = staged_operands(og, self.nodes, prop, (factor, batch), self.gb);
        let outside = |v: &ValueId| {
            og.producer[v.index()].is_none_or(|p| self.nodes.binary_search(&p).is_err())
        };
        let (mut again, mut moved) = (0.0, 0u64);
        for &v in prop.regions.keys().filter(|v| outside(v)) {
            let whole = og.value_bytes(v);
            let extra = (prop.bytes(og, v) * factor as u64).saturating_sub(whole) as f64;
            let in_gb = staged.holds(&v);
            if extra > 0.0 && !in_gb && !og.is_activation(v) {
                // GB cannot hold the weight: each instance reads it from DDR.
                return Verdict::WeightOffChip;
            }
            again += if in_gb { extra * self.gb_cost } else { extra };
            moved += whole;
        }
        let outputs = &og.nodes[self.exit].outputs;
        moved += outputs.iter().map(|&v| og.value_bytes(v)).sum::<u64>();
        if again <= moved as f64 {
            let weight_slices = !staged.sliced.is_empty();
            Verdict::Acceptable { weight_slices }
        } else {
            Verdict::TooMuch
        }
    }
}

/// What the cost model says of a split that fits.
enum Verdict {
    /// Acceptable; whether it keeps weight slices in GB.
    Acceptable { weight_slices: bool },
    /// A weight its instances re-read does not fit GB, whole or by
    /// slices: cutting an axis the weight follows may slice it.
    WeightOffChip,
    /// More bytes re-read than one unsplit run moves.
    TooMuch,
}

/// Eq. (1), `lexmax (n_d, -f_d, -d)`: the split reaching most nodes, then
/// the fewest instances, then the outermost axis; kiln puts a split of
/// the batch (axis 0) before the fewest instances, unless its instances
/// share weight slices (they then run slice by slice, not image by image,
/// and re-read the slices from GB), and between splits
/// cutting as many axes the one cutting the inner ones (measured: on
/// ResNet-50, MobileNetV2 and DenseNet-121 at Table 2's batches in FP16,
/// cutting columns rather than rows after the images is 1.08-1.25x
/// faster).
pub fn best_split(info: &[SplitCandidate]) -> Option<SplitCandidate> {
    info.iter()
        .max_by_key(|c| {
            let axes: Vec<usize> = c.cuts().iter().map(|&(a, _)| a).collect();
            (
                c.split_ops,
                c.batch && !c.weight_slices,
                std::cmp::Reverse(c.factor()),
                std::cmp::Reverse(c.axis()),
                axes,
            )
        })
        .cloned()
}
