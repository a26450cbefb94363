//! TVM's operator pattern kinds (relay `OpPatternKind`, the classes TVM's
//! FuseOps pass fuses by; APOLLO §2 and the mapping-rules paper §2.2
//! describe them as the baseline), derived from kiln's APOLLO classes.
//!
//! Needs: a [`FusionGraph`] (classes and tensor expressions per node).
//! Guarantees: [`Pattern`]s are ordered as TVM orders them (element-wise <
//! broadcast < injective < comm-reduce < out-element-wise-fusable <
//! opaque), so that [`Pattern::combine`] is TVM's `CombinePattern` (the
//! maximum); edge patterns follow TVM's `IndexedForwardGraph` (an edge
//! into a broadcast op from an input of the output's shape is
//! element-wise).

use crate::graph::{FusionGraph, NodeInfo};
use kiln_ops::te::classify::{ApolloType, OpaqueKind};

/// TVM's `OpPatternKind` (without `kTuple`: kiln has no tuple nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pattern {
    ElemWise,
    Broadcast,
    Injective,
    CommReduce,
    OutEWiseFusable,
    Opaque,
}

impl Pattern {
    /// TVM's `CombinePattern`: the more complex of the two.
    pub fn combine(self, other: Pattern) -> Pattern {
        self.max(other)
    }
}

/// The pattern kind of one node, from its APOLLO type: element-wise →
/// kElemWise, broadcast → kBroadcast, the data-movement opaque kinds
/// (transpose, reshape, layout, gather) → kInjective, reduction →
/// kCommReduce, matmul and conv → kOutEWiseFusable (they take
/// element-wise epilogues), everything else (pooling windows, other
/// opaque expressions, library ops) → kOpaque.
pub fn pattern_of(info: &NodeInfo) -> Pattern {
    match info.apollo() {
        ApolloType::ElementWise => Pattern::ElemWise,
        ApolloType::Broadcast => Pattern::Broadcast,
        ApolloType::Reduction => Pattern::CommReduce,
        ApolloType::Opaque(
            OpaqueKind::Transpose | OpaqueKind::Reshape | OpaqueKind::Layout | OpaqueKind::Gather,
        ) => Pattern::Injective,
        ApolloType::Opaque(OpaqueKind::Matmul | OpaqueKind::Conv) => Pattern::OutEWiseFusable,
        ApolloType::Opaque(_) => Pattern::Opaque,
    }
}

/// The pattern of the edge `producer → consumer`: the consumer's pattern,
/// except that a broadcast consumer reading a value of its own output
/// shape is element-wise along that edge (TVM's `IndexedForwardGraph`
/// creator; this is what lets a conv fuse with a following bias add).
pub fn edge_pattern(fg: &FusionGraph, producer: usize, consumer: usize) -> Pattern {
    let p = pattern_of(&fg.nodes[consumer]);
    let same_shape = match (&fg.nodes[producer].te, &fg.nodes[consumer].te) {
        (Some(a), Some(b)) => a.shape == b.shape,
        _ => false,
    };
    if p == Pattern::Broadcast && same_shape {
        Pattern::ElemWise
    } else {
        p
    }
}
