//! GraphTurbo (OSDI '23) §3.4, Algorithm 4: core binding and buffer-scope
//! inference for ordered sub-graph instances; §3.5 and Figs. 8–9: the
//! concat, copy and redistribute ops inserted between instances.
//!
//! A binding is one core count per dimension of an instance's output
//! slice (Fig. 9's `bind=[2,4]`). The plain binding gives cores from the
//! outermost dimension in, each the largest power of two up to the
//! cluster's cores that divides the extent (8, 4, 2, 1 on eight cores).
//! `infer_binding` carries a consumer's binding to a producer's slice
//! through the dimensions the consumer's output and that value share
//! (Algorithm 1's matching: the spans [`crate::propagate::propagate`]
//! gives every axis, cut or not): a consumer dimension bound to `b`
//! cores whose slice spans `k` producer slices asks `b / k` cores of
//! each.
//!
//! Algorithm 4 is followed as printed: instances are visited from the
//! last scheduled; an instance without a binding (or not in LB) takes the
//! plain one and passes the inferred ones to its producers, a producer
//! already bound differently goes to GB (line 12); an instance that was
//! given one keeps it when it uses more cores than the plain one (line
//! 16; kiln has no annotated dimensions, so `update_binding` is the
//! identity).
//!
//! Transfers (§3.5): a concat before each consumer of a value written by
//! several producer instances (Fig. 8); a copy into LB of a value a
//! producer left in GB or DDR (Fig. 9 left); a redistribution when an LB
//! value is bound differently from what its consumer infers, to the
//! smaller factor per dimension (Fig. 9 right).
//!
//! Needs: an [`InstanceGraph`] and an order of its instances.
//! Guarantees: every instance gets a binding using at most `cores` cores;
//! [`transfers`] makes every edge either LB-to-LB with matching bindings,
//! or bridged by a copy or a redistribution.

use crate::instances::{written_region, Edge, InstanceGraph};
use crate::opgraph::OpGraph;
use crate::propagate::{exit_node, propagate, Region, Span};
use kiln_ir::ValueId;
use std::collections::BTreeSet;
use std::fmt;

/// Cores per dimension of an instance's output slice.
pub type Binding = Vec<usize>;

/// Where a tensor lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    Lb,
    Gb,
    Ddr,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scope::Lb => "LB",
            Scope::Gb => "GB",
            Scope::Ddr => "DDR",
        })
    }
}

/// An op §3.5 inserts between instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transfer {
    /// `consumer` reads `value` gathered from several `producers`.
    Concat {
        consumer: usize,
        value: ValueId,
        producers: Vec<usize>,
    },
    /// `producer`'s slice of `value` is promoted from `from` to LB.
    Copy { edge: Edge, from: Scope },
    /// `producer`'s LB slice of `value` is moved between cores.
    Redistribute {
        edge: Edge,
        from: Binding,
        to: Binding,
    },
}

/// The slice of its group's output one instance writes.
pub fn slice_shape(og: &OpGraph, ig: &InstanceGraph, instance: usize) -> Vec<usize> {
    let group = &ig.groups[ig.instances[instance].group];
    let Some(output) =
        exit_node(og, &group.nodes).and_then(|e| og.nodes[e].outputs.first().copied())
    else {
        return Vec::new();
    };
    let mut shape = og.shape(output).to_vec();
    if let Some(region) = written_region(og, group, output) {
        let full = shape.clone();
        for (dim, span) in region.sliced(&full) {
            shape[dim] = span.extent as usize;
        }
    }
    shape
}

/// Cores from the outermost dimension in: per dimension the largest
/// power of two that divides the extent and the cores left.
pub fn plain_binding(shape: &[usize], cores: usize) -> Binding {
    let mut left = cores.max(1);
    shape
        .iter()
        .map(|&extent| {
            let factor = (0..=left.ilog2())
                .rev()
                .map(|p| 1usize << p)
                .find(|&f| f <= left && extent % f == 0)
                .unwrap_or(1);
            left /= factor;
            factor
        })
        .collect()
}

/// Cores a binding uses.
pub fn cores_used(binding: &Binding) -> usize {
    binding.iter().product()
}

/// The binding `edge.consumer`, bound `bind`, asks of `edge.producer`'s
/// slice; `None` when it does not divide the slice (invalid).
pub fn infer_binding(
    og: &OpGraph,
    ig: &InstanceGraph,
    edge: &Edge,
    bind: &Binding,
) -> Option<Binding> {
    let consumer = &ig.groups[ig.instances[edge.consumer].group];
    let producer = &ig.groups[ig.instances[edge.producer].group];
    let piece = slice_shape(og, ig, edge.producer);
    let full = og.shape(edge.value);
    let read = propagate(og, &consumer.nodes, consumer.factors()).region(og, edge.value);
    let written = written_region(og, producer, edge.value);
    let extent = |region: Option<&Region>, dim: usize| {
        let span = region.and_then(|r| r.dims[dim]);
        span.map_or(full[dim], |s| s.extent.clamp(1, full[dim] as i64) as usize)
    };
    let mut inferred = vec![1; piece.len()];
    for (axis, &cores) in bind.iter().enumerate().filter(|(_, &c)| c > 1) {
        // The value's dimension that follows the consumer's output axis.
        let follows = |s: &Option<Span>| s.is_some_and(|s| s.axis == axis);
        let Some(dim) = read.dims.iter().position(follows) else {
            continue;
        };
        let pieces = (extent(Some(&read), dim) / extent(written.as_ref(), dim).max(1)).max(1);
        if !cores.is_multiple_of(pieces)
            || dim >= piece.len()
            || !piece[dim].is_multiple_of(cores / pieces)
        {
            return None;
        }
        inferred[dim] *= cores / pieces;
    }
    Some(inferred)
}

/// Algorithm 4: bindings and scopes (LB or GB) of every instance's output.
pub fn bind_and_scope(
    og: &OpGraph,
    ig: &InstanceGraph,
    order: &[usize],
    cores: usize,
) -> (Vec<Binding>, Vec<Scope>) {
    let count = ig.instances.len();
    let mut bind: Vec<Option<Binding>> = vec![None; count];
    let mut scope = vec![Scope::Lb; count];
    for &i in order.iter().rev() {
        let plain = plain_binding(&slice_shape(og, ig, i), cores);
        match bind[i].clone() {
            Some(given) if scope[i] == Scope::Lb => {
                bind[i] = Some(if cores_used(&given) > cores_used(&plain) {
                    given
                } else {
                    plain
                });
            }
            _ => {
                for edge in ig.producers_of(i) {
                    let Some(inferred) = infer_binding(og, ig, edge, &plain) else {
                        continue;
                    };
                    let j = edge.producer;
                    match &bind[j] {
                        None => bind[j] = Some(inferred),
                        Some(b) if *b != inferred => scope[j] = Scope::Gb,
                        Some(_) => {}
                    }
                }
                bind[i] = Some(plain);
            }
        }
    }
    (
        bind.into_iter().map(Option::unwrap_or_default).collect(),
        scope,
    )
}

/// §3.5: the concat, copy and redistribute ops the bindings call for,
/// each edge's value read from `from(edge)` (the producer's scope, or LB
/// for a reader that runs before the value is spilled, §4.3).
pub fn transfers(
    og: &OpGraph,
    ig: &InstanceGraph,
    bind: &[Binding],
    from: &dyn Fn(&Edge) -> Scope,
) -> Vec<Transfer> {
    let mut out = Vec::new();
    for consumer in 0..ig.instances.len() {
        let edges: Vec<&Edge> = ig.producers_of(consumer).collect();
        let values: BTreeSet<ValueId> = edges.iter().map(|e| e.value).collect();
        for value in values {
            let producers: Vec<usize> = edges
                .iter()
                .filter(|e| e.value == value)
                .map(|e| e.producer)
                .collect();
            if producers.len() > 1 {
                out.push(Transfer::Concat {
                    consumer,
                    value,
                    producers,
                });
            }
        }
        for edge in edges {
            out.extend(bridge(og, ig, edge, bind, from(edge)));
        }
    }
    out
}

/// The copy or redistribution one edge needs, if any.
fn bridge(
    og: &OpGraph,
    ig: &InstanceGraph,
    edge: &Edge,
    bind: &[Binding],
    from: Scope,
) -> Option<Transfer> {
    if from != Scope::Lb {
        return Some(Transfer::Copy { edge: *edge, from });
    }
    let wanted = infer_binding(og, ig, edge, &bind[edge.consumer])?;
    let have = &bind[edge.producer];
    (*have != wanted).then(|| Transfer::Redistribute {
        edge: *edge,
        from: have.clone(),
        to: smaller_factors(have, &wanted),
    })
}

/// Fig. 9 right: the tuple reset to the smaller factor per dimension.
pub fn smaller_factors(a: &Binding, b: &Binding) -> Binding {
    a.iter().zip(b).map(|(&x, &y)| x.min(y)).collect()
}
