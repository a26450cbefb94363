//! Aggregation rules as data and the loop that applies them: the body of
//! APOLLO's Algo. 1 (lines 5–9) and Algo. 2, shared by Layer I (Table 1)
//! and Layer II (Table 2).
//!
//! Needs: [`MicroGraphs`] and one priority level of rules.
//! Guarantees: [`apply_to_fixed_point`] visits every producer→consumer
//! edge between two groups (consumers in graph order, then the rules of
//! the level in the order given), merges a pair when a rule's producer
//! and consumer sides accept the groups' types, the caller's extra
//! condition holds and the merge is acyclic, and repeats until a sweep
//! merges nothing (the `while changed` loop). Termination: every merge
//! removes a group.

use super::micro::MicroGraphs;
use crate::graph::FusionGraph;
use kiln_ops::te::classify::{ApolloType, OpaqueKind};

/// The group types one side of a rule accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Is(ApolloType),
    /// Element-wise or broadcast.
    EwOrBcast,
    /// Data movement: transpose, reshape, gather, layout (slice, pad,
    /// concat).
    Movement,
}

impl Side {
    pub const EW: Side = Side::Is(ApolloType::ElementWise);
    pub const BCAST: Side = Side::Is(ApolloType::Broadcast);
    pub const REDUCTION: Side = Side::Is(ApolloType::Reduction);
    pub const TRANSPOSE: Side = Side::Is(ApolloType::Opaque(OpaqueKind::Transpose));
    pub const MATMUL: Side = Side::Is(ApolloType::Opaque(OpaqueKind::Matmul));
    pub const CONV: Side = Side::Is(ApolloType::Opaque(OpaqueKind::Conv));
    pub const LAYOUT: Side = Side::Is(ApolloType::Opaque(OpaqueKind::Layout));
    pub const WINDOW: Side = Side::Is(ApolloType::Opaque(OpaqueKind::Window));
    pub const GATHER: Side = Side::Is(ApolloType::Opaque(OpaqueKind::Gather));

    pub fn accepts(self, ty: ApolloType) -> bool {
        match self {
            Side::Is(t) => t == ty,
            Side::EwOrBcast => matches!(ty, ApolloType::ElementWise | ApolloType::Broadcast),
            Side::Movement => matches!(
                ty,
                ApolloType::Opaque(
                    OpaqueKind::Transpose
                        | OpaqueKind::Reshape
                        | OpaqueKind::Gather
                        | OpaqueKind::Layout
                )
            ),
        }
    }
}

/// One row of Table 1 or Table 2: `producer + consumer → result`.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub producer: Side,
    pub consumer: Side,
    pub result: ApolloType,
}

impl Rule {
    pub const fn new(producer: Side, consumer: Side, result: ApolloType) -> Rule {
        Rule {
            producer,
            consumer,
            result,
        }
    }

    fn matches(&self, producer: ApolloType, consumer: ApolloType) -> bool {
        self.producer.accepts(producer) && self.consumer.accepts(consumer)
    }
}

/// A rule's extra condition on (producer group, consumer group), beyond
/// the types and acyclicity.
pub type Condition<'a> = &'a dyn Fn(&MicroGraphs, &Rule, usize, usize) -> bool;

/// Applies one priority level of rules until none applies; returns the
/// number of merges.
pub fn apply_to_fixed_point(
    fg: &FusionGraph,
    mg: &mut MicroGraphs,
    level: &[Rule],
    condition: Condition,
) -> usize {
    let mut merges = 0;
    loop {
        let before = merges;
        for rule in level {
            merges += sweep(fg, mg, rule, condition);
        }
        if merges == before {
            return merges;
        }
    }
}

/// One pass of `rule` over every edge; returns the number of merges.
fn sweep(fg: &FusionGraph, mg: &mut MicroGraphs, rule: &Rule, condition: Condition) -> usize {
    let mut merges = 0;
    for (c, info) in fg.nodes.iter().enumerate() {
        for &p in &info.producers {
            let (gp, gc) = (mg.part.group_of(p), mg.part.group_of(c));
            if gp != gc
                && rule.matches(mg.ty(gp), mg.ty(gc))
                && condition(mg, rule, gp, gc)
                && mg.merge(fg, gp, gc, rule.result)
            {
                merges += 1;
            }
        }
    }
    merges
}
