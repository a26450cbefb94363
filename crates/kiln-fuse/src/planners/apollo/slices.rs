//! kiln's step after APOLLO's Layer I: plain slices and gathers join the
//! group that reads them.
//!
//! Needs: micro-graphs after Table 1's levels (`aggregate.rs`), so
//! contractions have taken the data movement feeding them already.
//! Guarantees: a group made only of plain data movement — slices, whose
//! reads are affine (offsets and strides) and select nothing by bounds (a
//! `Slice`, one output of a `Split`), and gathers — whose values are read
//! by one consumer group only, and are no graph output, merges into that
//! group when it is element-wise, broadcast, layout or a transpose; a
//! transpose group also takes zero paddings (the transposing copy reads
//! through their bounds checks; not concatenations, whose select between
//! sources per element made a channel shuffle slower). The
//! merged group keeps the consumer's type. The consumer then reads the
//! moved tensor through the composed index instead of a copy: an LSTM
//! step's four gate slices of one matrix product feed one gate kernel, a
//! Resize's gathers by constant index tables feed its weighted sums, a
//! video convolution's shifted, zero-padded frames feed the sum that
//! transposes them back (`kiln-ops` `conv/planes.rs`). A group read by
//! several groups stays a kernel of its own, so no group recomputes
//! another's values. Merges are acyclic (`MicroGraphs::merge`).
//!
//! The paper's Table 1 has no row for data movement into element-wise
//! ops; this is one beside the kiln rows of `aggregate.rs`, applied last
//! so that no earlier rule sees an element-wise group turned into another
//! type.

use super::micro::MicroGraphs;
use super::rules::{apply_to_fixed_point, Rule, Side};
use crate::graph::FusionGraph;
use kiln_ops::te::classify::{selects_by_bounds, ApolloType, OpaqueKind};

const LAYOUT: ApolloType = ApolloType::Opaque(OpaqueKind::Layout);
const GATHER: ApolloType = ApolloType::Opaque(OpaqueKind::Gather);
const TRANSPOSE: ApolloType = ApolloType::Opaque(OpaqueKind::Transpose);

/// A data-movement group into its one consumer group, keeping the
/// consumer's type.
const MOVEMENT_INTO_CONSUMER: &[Rule] = &[
    Rule::new(Side::LAYOUT, Side::EW, ApolloType::ElementWise),
    Rule::new(Side::LAYOUT, Side::BCAST, ApolloType::Broadcast),
    Rule::new(Side::LAYOUT, Side::LAYOUT, LAYOUT),
    Rule::new(Side::GATHER, Side::EW, ApolloType::ElementWise),
    Rule::new(Side::GATHER, Side::BCAST, ApolloType::Broadcast),
    Rule::new(Side::GATHER, Side::LAYOUT, LAYOUT),
    Rule::new(Side::LAYOUT, Side::TRANSPOSE, TRANSPOSE),
    Rule::new(Side::GATHER, Side::TRANSPOSE, TRANSPOSE),
];

/// Merges every data-movement group into its one consumer group
/// (module doc); returns the number of merges.
pub fn absorb(fg: &FusionGraph, mg: &mut MicroGraphs) -> usize {
    let plain: Vec<bool> = fg
        .nodes
        .iter()
        .map(|n| match n.apollo() {
            LAYOUT => n.te.as_ref().is_some_and(|te| !selects_by_bounds(te)),
            GATHER => true,
            _ => false,
        })
        .collect();
    // A zero padding reads one source; a transposing copy peels its
    // bounds. A concatenation's select between sources per element made
    // ShuffleNet's channel shuffle slower than the copies it saved.
    let padded = |n: usize| {
        let node = &fg.nodes[n];
        node.apollo() == LAYOUT
            && node
                .te
                .as_ref()
                .is_some_and(|te| te.body.as_padded_load().is_some())
    };
    let movement = |n: usize| plain[n] || padded(n);
    let condition = |mg: &MicroGraphs, rule: &Rule, p: usize, c: usize| {
        let members = mg.part.members(p);
        let movable = match rule.result {
            TRANSPOSE => members.iter().all(|&n| movement(n)),
            _ => members.iter().all(|&n| plain[n]),
        };
        movable
            && members.iter().all(|&n| {
                !fg.nodes[n].graph_output
                    && fg.nodes[n]
                        .consumers
                        .iter()
                        .all(|&k| [p, c].contains(&mg.part.group_of(k)))
            })
    };
    apply_to_fixed_point(fg, mg, MOVEMENT_INTO_CONSUMER, &condition)
}
