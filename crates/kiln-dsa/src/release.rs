//! Liveness by parts: the bytes of an instance's output that no reader
//! needs any more, step by step, before its last reader runs. GraphTurbo
//! §4.3 releases a tensor's space after its last reader; when several
//! instances each read a part of one output (a whole-batch layer kernel
//! read image by image by the split group after it), the part the
//! readers so far were the last to need is dead already, and §4.3's
//! spilling may give its room in GB to other tensors.
//!
//! The parts are slabs along one dimension of the output: an element
//! slab is needed by the readers whose read interval along that
//! dimension meets it (a reader that does not slice the dimension reads
//! every slab, a halo widens an interval), so it is dead once the last
//! of them has run. Of the output's dimensions, the one whose slabs die
//! earliest in all (bytes × steps before the last reader) is used;
//! slabs are sized down to whole bytes, so no more is released than the
//! output holds.
//!
//! Needs: an [`InstanceGraph`], an order listing every instance once,
//! per instance the bytes its output takes.
//! Guarantees: per instance, `(step, bytes)` pairs with ascending steps
//! from its own to its last reader's, excluded the last (which frees
//! what remains); the bytes add up to at most its output's; a slab is
//! only listed after every reader of it has run.

use crate::instances::{written_region, Edge, InstanceGraph};
use crate::opgraph::OpGraph;
use crate::propagate::{exit_node, pieces, propagate, Propagation, Region};
use kiln_ir::ValueId;

/// One reader's part of an output along one dimension, and its step.
#[derive(Debug, Clone, Copy)]
struct Read {
    start: i64,
    end: i64,
    step: usize,
}

/// Per instance, the bytes of its output (`bytes[i]` in all) dead after
/// each step before its last reader's; `position[i]` is instance `i`'s
/// step.
pub(crate) fn released_parts(
    og: &OpGraph,
    ig: &InstanceGraph,
    position: &[usize],
    bytes: &[u64],
) -> Vec<Vec<(usize, u64)>> {
    let props: Vec<Propagation> = ig
        .groups
        .iter()
        .map(|g| propagate(og, &g.nodes, g.factors()))
        .collect();
    // Per group, the value its instances write and the part each writes.
    let outputs: Vec<Option<(ValueId, Option<Region>)>> = ig
        .groups
        .iter()
        .map(|g| {
            let exit = exit_node(og, &g.nodes)?;
            let value = og.nodes[exit].outputs.first().copied()?;
            Some((value, written_region(og, g, value)))
        })
        .collect();
    (0..ig.instances.len())
        .map(|i| {
            let Some((value, written)) = &outputs[ig.instances[i].group] else {
                return Vec::new();
            };
            let edges: Vec<&Edge> = ig.consumers_of(i).filter(|e| e.value == *value).collect();
            if edges.len() < 2 {
                return Vec::new();
            }
            let output = Output {
                og,
                ig,
                props: &props,
                value: *value,
                written,
                producer: i,
            };
            output.slabs(&edges, position, bytes[i])
        })
        .collect()
}

/// One instance's output and what its readers read of it.
struct Output<'a> {
    og: &'a OpGraph,
    ig: &'a InstanceGraph,
    props: &'a [Propagation],
    value: ValueId,
    written: &'a Option<Region>,
    producer: usize,
}

impl Output<'_> {
    /// The releases along the dimension whose slabs die earliest.
    fn slabs(&self, edges: &[&Edge], position: &[usize], bytes: u64) -> Vec<(usize, u64)> {
        let last = edges
            .iter()
            .map(|e| position[e.consumer])
            .max()
            .unwrap_or(0);
        let rank = self.og.shape(self.value).len();
        let best = (0..rank)
            .map(|d| self.dead_slabs(d, edges, position))
            .max_by(|a, b| early_death(a, last).total_cmp(&early_death(b, last)));
        let Some((slabs, total)) = best else {
            return Vec::new();
        };
        let mut releases: Vec<(usize, u64)> = slabs
            .into_iter()
            .filter(|&(_, step)| step < last)
            .map(|(len, step)| (step, bytes * len as u64 / total.max(1) as u64))
            .filter(|&(_, b)| b > 0)
            .collect();
        releases.sort_unstable();
        releases.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 += b.1;
            }
            same
        });
        releases
    }

    /// Along dimension `d`: the written interval cut at every reader's
    /// bounds into slabs, each with its length and the step of its last
    /// reader; and the written interval's length.
    fn dead_slabs(
        &self,
        d: usize,
        edges: &[&Edge],
        position: &[usize],
    ) -> (Vec<(i64, usize)>, i64) {
        let size = self.og.shape(self.value)[d];
        let (lo, hi) = interval(self.ig, self.written, self.producer, d, size);
        let reads: Vec<Read> = edges
            .iter()
            .map(|e| {
                let group = self.ig.instances[e.consumer].group;
                let region = self.props[group].region(self.og, self.value);
                let (start, end) = interval(self.ig, &Some(region), e.consumer, d, size);
                Read {
                    start: start.max(lo),
                    end: end.min(hi),
                    step: position[e.consumer],
                }
            })
            .collect();
        let mut bounds: Vec<i64> = reads.iter().flat_map(|r| [r.start, r.end]).collect();
        bounds.extend([lo, hi]);
        bounds.retain(|&b| (lo..=hi).contains(&b));
        bounds.sort_unstable();
        bounds.dedup();
        let slabs = bounds
            .windows(2)
            .map(|w| {
                let step = reads
                    .iter()
                    .filter(|r| r.start < w[1] && w[0] < r.end)
                    .map(|r| r.step)
                    .max()
                    .unwrap_or(position[self.producer]);
                (w[1] - w[0], step)
            })
            .collect();
        (slabs, hi - lo)
    }
}

/// How early `slabs` (of a dimension `total` long) die in all: the
/// share of the output each is, times the steps it is dead before `last`.
fn early_death((slabs, total): &(Vec<(i64, usize)>, i64), last: usize) -> f64 {
    let steps = |&(len, step): &(i64, usize)| len as f64 * (last - step) as f64;
    slabs.iter().map(steps).sum::<f64>() / (*total).max(1) as f64
}

/// Instance `i`'s interval along dimension `d` of a value of extent
/// `size` it holds `region` of (all of it when `None` or not sliced there).
fn interval(
    ig: &InstanceGraph,
    region: &Option<Region>,
    i: usize,
    d: usize,
    size: usize,
) -> (i64, i64) {
    let span = region
        .as_ref()
        .and_then(|r| r.dims.get(d).copied().flatten());
    let Some(span) = span else {
        return (0, size as i64);
    };
    let inst = ig.instances[i];
    let piece = pieces(ig.groups[inst.group].factors(), inst.index);
    span.interval(piece.get(span.axis).copied().unwrap_or(0), size)
}
