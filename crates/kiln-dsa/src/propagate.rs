//! GraphTurbo (OSDI '23) §3.1, Algorithm 1 lines 7–11: carrying a split of
//! a sub-graph's output back through its nodes ("propagating its splitting
//! information to each of intermediate tensors"), and what one instance
//! then holds of every value.
//!
//! Per op ([`OpSplit`]), an output axis `a` reaches an input dimension when
//! the access uses `i_a` in that one dimension only, as `stride·i_a + w`
//! with `w` ranging over a window built from reduction indices and a
//! constant ([`DimMap`]): `in[.., i_a, ..]` (a clean split), a strided or
//! shifted read, or a convolution's `2*i2 + r0 - 1` (a window: a slice of
//! the output reads a slice of the input grown by a halo, which
//! neighbouring instances read too). Reshapes (`floordiv`/`mod`), two
//! output indices in one dimension and data-dependent indices (Gather) do
//! not split. This comes from the op's tensor expression, not op names.
//!
//! Per sub-graph ([`propagate`]), the exit's output is cut along each
//! axis into `factors[axis]` pieces of `⌈size / factor⌉` (the last one
//! shorter); instance `k` along an axis
//! holds `[k·step + offset, k·step + offset + extent)` of every dimension
//! that axis reaches ([`Span`]), clipped to the dimension. A node computes
//! the union of what its readers in the sub-graph need; along an output
//! dimension it cannot split it computes everything, and so does it along
//! a dimension whose halo would more than double its slice
//! ([`MAX_RECOMPUTE`]: kiln's cost model against recomputation, which §3.1
//! says GraphTurbo has without giving it). A value read in two
//! incompatible ways is needed whole along that dimension.
//!
//! Needs: an [`OpGraph`], a sub-graph as ascending node positions.
//! Guarantees: every value the sub-graph reads or writes has a region;
//! spans exist for every exit axis a dimension follows (factor 1 gives
//! the correspondence alone, Algorithm 4's `infer_binding`).

use crate::opgraph::OpGraph;
use kiln_ir::{Node, ValueId};
use kiln_ops::te::{IndexExpr, TensorExpr, Var};
use std::collections::BTreeMap;

/// How one output axis of an op reaches one input dimension:
/// `index = stride·i_axis + w` with `lo ≤ w ≤ hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DimMap {
    pub dim: usize,
    pub stride: i64,
    pub lo: i64,
    pub hi: i64,
}

/// Per input value: the dimension an output axis reaches (`Some`), or the
/// whole input (`None`).
pub type AxisMap = BTreeMap<ValueId, Option<DimMap>>;

/// What splitting each output axis of one op means for its inputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpSplit {
    /// Per output axis: `None` when it does not split.
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

    /// The input map of `axis`, when it splits.
    pub fn axis(&self, axis: usize) -> Option<&AxisMap> {
        self.axes.get(axis).and_then(Option::as_ref)
    }
}

/// The input dimensions `axis` reaches, or `None` when an access uses its
/// index other than as `stride·i + window` in one dimension.
fn axis_map(te: &TensorExpr, node: &Node, axis: usize) -> Option<AxisMap> {
    let var = Var::Out(axis);
    let reduction = te.reduction.as_ref().map_or(&[][..], |r| &r.extents[..]);
    let mut map = AxisMap::new();
    for access in &te.accesses {
        let mut dims = access
            .index
            .iter()
            .enumerate()
            .filter(|(_, e)| uses(e, var));
        let dim = match (dims.next(), dims.next()) {
            (None, _) => None,
            (Some((j, e)), None) => Some(window(e, var, j, reduction)?),
            _ => return None,
        };
        let value = node.inputs.get(access.input).copied().flatten()?;
        let merged = match map.get(&value) {
            Some(&earlier) => earlier.zip(dim).and_then(|(a, b)| union_map(a, b)),
            None => dim,
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

/// `e` as `stride·var + w` over the reduction indices, in dimension `dim`.
fn window(e: &IndexExpr, var: Var, dim: usize, reduction: &[usize]) -> Option<DimMap> {
    let affine = e.as_affine()?;
    let (mut stride, mut lo, mut hi) = (0, affine.constant, affine.constant);
    for &(v, c) in &affine.terms {
        match v {
            _ if v == var => stride = c,
            Var::Red(r) => {
                let span = c * (*reduction.get(r)? as i64 - 1);
                lo += span.min(0);
                hi += span.max(0);
            }
            Var::Out(_) => return None,
        }
    }
    (stride > 0).then_some(DimMap {
        dim,
        stride,
        lo,
        hi,
    })
}

/// Two reads of one input along the same dimension and stride: the union
/// of their windows; otherwise the input is read whole.
fn union_map(a: DimMap, b: DimMap) -> Option<DimMap> {
    (a.dim == b.dim && a.stride == b.stride).then_some(DimMap {
        lo: a.lo.min(b.lo),
        hi: a.hi.max(b.hi),
        ..a
    })
}

/// A node's slice may grow by its halo to at most this many times its
/// step before the node is computed whole along that dimension instead.
pub const MAX_RECOMPUTE: i64 = 2;

/// One instance's part of a value along one dimension: piece `k` of the
/// cut of exit axis `axis` holds `[k·step + offset, k·step + offset +
/// extent)`, clipped to the dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub axis: usize,
    pub step: i64,
    pub extent: i64,
    pub offset: i64,
}

impl Span {
    /// The span an access `m` reads for this one.
    fn through(self, m: &DimMap) -> Span {
        Span {
            axis: self.axis,
            step: m.stride * self.step,
            extent: m.stride * (self.extent - 1) + m.hi - m.lo + 1,
            offset: m.stride * self.offset + m.lo,
        }
    }

    /// Both spans in one, when they follow the same cut alike.
    fn union(self, other: Span) -> Option<Span> {
        let same = self.axis == other.axis && self.step == other.step;
        let offset = self.offset.min(other.offset);
        let end = (self.offset + self.extent).max(other.offset + other.extent);
        same.then_some(Span {
            extent: end - offset,
            offset,
            ..self
        })
    }

    /// Piece `k`'s elements `[start, end)` in a dimension of `size`.
    pub fn interval(&self, k: usize, size: usize) -> (i64, i64) {
        let start = k as i64 * self.step + self.offset;
        (start.max(0), (start + self.extent).min(size as i64))
    }

    /// Elements one piece holds at most.
    fn length(&self, size: usize) -> u64 {
        self.extent.clamp(0, size as i64) as u64
    }
}

/// What one instance holds of a value: per dimension a span, or all of
/// it (`None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub dims: Vec<Option<Span>>,
}

impl Region {
    pub fn whole(rank: usize) -> Region {
        Region {
            dims: vec![None; rank],
        }
    }

    /// The dimensions one piece holds only part of.
    pub fn sliced<'a>(&'a self, shape: &'a [usize]) -> impl Iterator<Item = (usize, Span)> + 'a {
        let dims = self.dims.iter().zip(shape).enumerate();
        dims.filter_map(|(d, (span, &size))| {
            span.filter(|s| s.length(size) < size as u64)
                .map(|s| (d, s))
        })
    }

    /// Whether one piece holds all of a value of `shape`.
    pub fn is_whole(&self, shape: &[usize]) -> bool {
        self.sliced(shape).next().is_none()
    }

    /// The part of `whole` units (bytes, FLOPs) of a value of `shape` one
    /// piece holds, rounded up.
    pub fn part(&self, shape: &[usize], whole: u64) -> u64 {
        let (mut num, mut den) = (1u128, 1u128);
        for (d, span) in self.sliced(shape) {
            num *= u128::from(span.length(shape[d]));
            den *= shape[d] as u128;
        }
        (u128::from(whole) * num).div_ceil(den) as u64
    }

    /// Dimension by dimension: the union where both follow one cut alike,
    /// else all of it.
    fn union(&self, other: &Region) -> Region {
        let dims = self.dims.iter().zip(&other.dims);
        Region {
            dims: dims
                .map(|(a, b)| a.zip(*b).and_then(|(a, b)| a.union(b)))
                .collect(),
        }
    }
}

/// The piece of each exit axis instance `i` computes (row-major over the
/// axes' factors).
pub fn pieces(factors: &[usize], mut i: usize) -> Vec<usize> {
    let mut piece = vec![0; factors.len()];
    for (axis, &f) in factors.iter().enumerate().rev() {
        piece[axis] = i % f.max(1);
        i /= f.max(1);
    }
    piece
}

/// A split of a sub-graph's output carried through its nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct Propagation {
    /// The region of every value the sub-graph reads or writes.
    pub regions: BTreeMap<ValueId, Region>,
    /// Nodes computed as slices, ascending.
    pub split_nodes: Vec<usize>,
}

impl Propagation {
    /// What one instance holds of `v` (all of it when `v` is not read).
    pub fn region(&self, og: &OpGraph, v: ValueId) -> Region {
        region_of(&self.regions, og, v)
    }

    /// Bytes of `v` one instance holds.
    pub fn bytes(&self, og: &OpGraph, v: ValueId) -> u64 {
        self.region(og, v).part(og.shape(v), og.value_bytes(v))
    }
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

/// Carries the cut of the exit's output into `factors[axis]` pieces per
/// axis back through `nodes` (ascending).
pub fn propagate(og: &OpGraph, nodes: &[usize], factors: &[usize]) -> Propagation {
    let mut regions: BTreeMap<ValueId, Region> = BTreeMap::new();
    if let Some(exit) = exit_node(og, nodes) {
        for &v in &og.nodes[exit].outputs {
            let cut = og.shape(v).iter().enumerate().map(|(axis, &size)| {
                let f = factors.get(axis).copied().unwrap_or(1).max(1);
                let step = size.div_ceil(f).max(1) as i64;
                Some(Span {
                    axis,
                    step,
                    extent: step,
                    offset: 0,
                })
            });
            merge(
                &mut regions,
                v,
                Region {
                    dims: cut.collect(),
                },
            );
        }
    }
    let mut split_nodes = Vec::new();
    for &n in nodes.iter().rev() {
        let node = &og.nodes[n];
        let Some(&out) = node.outputs.first() else {
            continue;
        };
        let computed = computed_region(og, n, &region_of(&regions, og, out));
        if !computed.is_whole(og.shape(out)) {
            split_nodes.push(n);
        }
        for &v in &node.inputs {
            merge(&mut regions, v, input_region(og, n, &computed, v));
        }
        regions.insert(out, computed);
    }
    split_nodes.reverse();
    Propagation {
        regions,
        split_nodes,
    }
}

/// The region of `v` in `regions`, all of it when absent.
fn region_of(regions: &BTreeMap<ValueId, Region>, og: &OpGraph, v: ValueId) -> Region {
    regions
        .get(&v)
        .cloned()
        .unwrap_or_else(|| Region::whole(og.shape(v).len()))
}

/// What node `n` computes of its output when `needed` is read: whole
/// along dimensions it cannot split or whose halo exceeds
/// [`MAX_RECOMPUTE`] times the step.
fn computed_region(og: &OpGraph, n: usize, needed: &Region) -> Region {
    let node = &og.nodes[n];
    let dims = needed.dims.iter().enumerate().map(|(d, span)| {
        span.filter(|s| node.split.axis(d).is_some() && s.extent <= MAX_RECOMPUTE * s.step)
    });
    Region {
        dims: dims.collect(),
    }
}

/// The region of input `v` node `n` reads to compute `out` of its output.
fn input_region(og: &OpGraph, n: usize, out: &Region, v: ValueId) -> Region {
    let node = &og.nodes[n];
    let mut region = Region::whole(og.shape(v).len());
    let mut reached = vec![false; region.dims.len()];
    for (d, span) in out.dims.iter().enumerate() {
        let map = node
            .split
            .axis(d)
            .and_then(|m| m.get(&v))
            .copied()
            .flatten();
        let (Some(span), Some(map)) = (span, map) else {
            continue;
        };
        if map.dim < region.dims.len() {
            // Two output axes in one input dimension: read it whole.
            region.dims[map.dim] = (!reached[map.dim]).then(|| span.through(&map));
            reached[map.dim] = true;
        }
    }
    region
}

/// A value read in two ways is needed in both.
fn merge(regions: &mut BTreeMap<ValueId, Region>, v: ValueId, region: Region) {
    let merged = match regions.get(&v) {
        Some(earlier) => earlier.union(&region),
        None => region,
    };
    regions.insert(v, merged);
}

/// Bytes of activation `v` in one instance (weights count none: §2.2
/// keeps them out of working sets).
pub(crate) fn instance_bytes(og: &OpGraph, prop: &Propagation, v: ValueId) -> u64 {
    if og.is_activation(v) {
        prop.bytes(og, v)
    } else {
        0
    }
}

/// The largest sum of live activation bytes while one instance runs
/// `nodes` in order: external inputs live until their last read, values
/// the sub-graph produces from their node to their last read, the exit's
/// outputs to the end.
pub fn instance_peak(og: &OpGraph, nodes: &[usize], prop: &Propagation) -> u64 {
    let bytes = |v: ValueId| instance_bytes(og, prop, v);
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
