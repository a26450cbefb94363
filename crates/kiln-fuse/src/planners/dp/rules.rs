//! The mapping-rules paper's fusion rules: §3.2.2 Table 1 "算子映射融合规则"
//! (operator mapping fusion rules) with its two supplements (补充 1, 补充 2),
//! over the mapping types of §3.1.1 (one-to-one < reorganize < shuffle <
//! one-to-many < many-to-many < not-fusable, `NodeInfo::mapping()`).
//!
//! Needs: a [`FusionGraph`] node (its mapping type and tensor expression).
//! Guarantees: [`fuse`] answers whether a producer (a node or a fused group)
//! and one of its consumers may fuse, and gives the fused type: "the most
//! complex mapping type of the pair" (§3.2.2). Not-fusable never fuses.
//!
//! Decisions (the paper leaves them open or kiln's classes differ):
//! - Table 1 is read as unordered pairs (rule 1 "one-to-one + any type"
//!   also covers "any type followed by one-to-one"): rows 2–3 repeat pairs
//!   rule 1 already has, and the paper's §4 fusion ratios (VGG-16 3.00)
//!   need conv followed by bias add and ReLU to fuse. Direction matters
//!   only where §3.2.1's analysis gives one (below).
//! - One-to-many followed by many-to-many never fuses (§3.2.1 analysis 3),
//!   nor many-to-many + many-to-many (analysis 4), nor one-to-many +
//!   one-to-many (no row of Table 1).
//! - Supplement 1 (reorganize/shuffle + one-to-many/many-to-many, "fuse
//!   unless the second op must read its input contiguously", §3.2.1
//!   analysis 2): when `PlanOptions::contraction_prologues` is false (the
//!   default, see there why) no group fuses in front of a contraction,
//!   one-to-one producers included (rule 1 would allow them); with it
//!   true, as in the paper, only refused when a
//!   reorganize/shuffle group feeds a
//!   contraction (matmul, conv: their kernels pack their operands and read
//!   them in memory order); allowed for expands and many-to-one ops
//!   (reductions, pooling), which read through any index map. In the other
//!   order (a one-to-many/many-to-many op whose result is reorganized or
//!   shuffled) the layout change becomes the producer's output index, no
//!   input is read out of order, so it fuses.
//! - Supplement 2 (many-to-many(many-to-one) + one-to-many, "needs
//!   analysis"): allowed when the many-to-many part is many-to-one (a
//!   reduction or pooling, its result re-broadcast as in softmax and
//!   normalization); refused after a contraction, whose output tile is
//!   what a following expand would have to replicate.
//! - kiln derives mapping types from index maps, so a broadcasting binary
//!   op (`Add(x[B,S,H], bias[H])`) is one-to-many; the paper registers types
//!   per op and names add its example one-to-one op (§3.1.1, eq. (1)
//!   allows any per-dimension function, broadcasting's constant 0
//!   included). [`node_type`] therefore treats a one-to-many node that
//!   also reads one input element-for-element (a bijective access) as
//!   one-to-one; a pure expand stays one-to-many.

use crate::graph::NodeInfo;
use kiln_ops::te::classify::{relation, MappingType, Relation};

/// A node's or a fused group's type for the rules: the mapping type, and
/// for many-to-many whether it is many-to-one (Table 1's "多对多(多对一)").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FuseType {
    pub mapping: MappingType,
    /// Many-to-many that is many-to-one (reduction, pooling), not a
    /// contraction (matmul, conv).
    pub many_to_one: bool,
    /// A contraction that must read its operands from memory (the
    /// backend cannot fuse producers in front of it).
    pub operands_in_memory: bool,
}

impl FuseType {
    fn contraction(self) -> bool {
        self.mapping == MappingType::ManyToMany && !self.many_to_one
    }

    fn layout_change(self) -> bool {
        matches!(self.mapping, MappingType::Reorganize | MappingType::Shuffle)
    }

    /// The fused type: the more complex of the two (§3.2.2).
    fn most_complex(self, other: FuseType) -> FuseType {
        if other.mapping > self.mapping {
            other
        } else {
            self
        }
    }
}

/// The type the rules see for one node (see the module doc for the
/// broadcasting refinement).
pub fn node_type(info: &NodeInfo) -> FuseType {
    let mut mapping = info.mapping();
    let reads_one_input_whole = info
        .te
        .as_ref()
        .is_some_and(|te| (0..te.accesses.len()).any(|k| relation(te, k) == Relation::Bijective));
    if mapping == MappingType::OneToMany && reads_one_input_whole {
        mapping = MappingType::OneToOne;
    }
    FuseType {
        mapping,
        many_to_one: mapping == MappingType::ManyToMany && !info.is_contraction(),
        operands_in_memory: false,
    }
}

impl FuseType {
    /// This type for a backend that fuses prologues into contractions or
    /// not.
    pub fn with_prologues(mut self, allowed: bool) -> FuseType {
        self.operands_in_memory = self.contraction() && !allowed;
        self
    }
}

/// The type of a group of nodes: the most complex of its members' types.
pub fn group_type(types: &[FuseType], members: &[usize]) -> FuseType {
    members
        .iter()
        .map(|&n| types[n])
        .reduce(FuseType::most_complex)
        .unwrap_or(FuseType {
            mapping: MappingType::OneToOne,
            many_to_one: false,
            operands_in_memory: false,
        })
}

/// Table 1: may `producer` fuse with `consumer` (which reads its result),
/// and the fused type if so.
pub fn fuse(producer: FuseType, consumer: FuseType) -> Option<FuseType> {
    use MappingType::*;
    let fused = producer.most_complex(consumer);
    let allowed = match (producer.mapping, consumer.mapping) {
        (NotFusable, _) | (_, NotFusable) => false,
        // Supplement 1 as kiln's CPU backend needs it: its contractions
        // read their operands from memory, so nothing fuses in front.
        _ if consumer.contraction() && consumer.operands_in_memory => false,
        // Rule 1, either order.
        (OneToOne, _) | (_, OneToOne) => true,
        // Rules 2 and 3.
        _ if producer.layout_change() && consumer.layout_change() => true,
        // Supplement 1.
        _ if producer.layout_change() => !consumer.contraction(),
        _ if consumer.layout_change() => true,
        // Supplement 2.
        (ManyToMany, OneToMany) => producer.many_to_one,
        // Analysis 3 and 4; one-to-many + one-to-many has no rule.
        _ => false,
    };
    allowed.then_some(fused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use MappingType::*;

    fn t(mapping: MappingType) -> FuseType {
        FuseType {
            mapping,
            many_to_one: false,
            operands_in_memory: false,
        }
    }

    fn reduction() -> FuseType {
        FuseType {
            mapping: ManyToMany,
            many_to_one: true,
            operands_in_memory: false,
        }
    }

    #[test]
    fn one_to_one_fuses_with_anything_fusable() {
        for m in [OneToOne, Reorganize, Shuffle, OneToMany, ManyToMany] {
            assert_eq!(fuse(t(OneToOne), t(m)), Some(t(m)));
            assert_eq!(fuse(t(m), t(OneToOne)), Some(t(m)));
        }
        // A backend without prologues: nothing fuses in front of a
        // contraction, reductions still take their producers.
        let memory = |m| t(m).with_prologues(false);
        assert_eq!(fuse(t(OneToOne), memory(ManyToMany)), None);
        assert_eq!(
            fuse(t(OneToOne), reduction().with_prologues(false)),
            Some(reduction())
        );
        assert_eq!(fuse(t(OneToOne), t(NotFusable)), None);
        assert_eq!(fuse(t(NotFusable), t(OneToOne)), None);
    }

    #[test]
    fn rules_2_and_3_give_the_more_complex_layout_type() {
        assert_eq!(fuse(t(Reorganize), t(Reorganize)), Some(t(Reorganize)));
        assert_eq!(fuse(t(Reorganize), t(Shuffle)), Some(t(Shuffle)));
        assert_eq!(fuse(t(Shuffle), t(Reorganize)), Some(t(Shuffle)));
    }

    #[test]
    fn supplement_1_refuses_a_layout_change_feeding_a_contraction() {
        assert_eq!(fuse(t(Shuffle), t(ManyToMany)), None);
        assert_eq!(fuse(t(Reorganize), reduction()), Some(reduction()));
        assert_eq!(fuse(t(Reorganize), t(OneToMany)), Some(t(OneToMany)));
        assert_eq!(fuse(t(ManyToMany), t(Shuffle)), Some(t(ManyToMany)));
    }

    #[test]
    fn supplement_2_and_the_refused_pairs() {
        assert_eq!(fuse(reduction(), t(OneToMany)), Some(reduction()));
        assert_eq!(fuse(t(ManyToMany), t(OneToMany)), None);
        assert_eq!(fuse(t(OneToMany), t(ManyToMany)), None);
        assert_eq!(fuse(t(OneToMany), reduction()), None);
        assert_eq!(fuse(t(ManyToMany), t(ManyToMany)), None);
        assert_eq!(fuse(reduction(), reduction()), None);
        assert_eq!(fuse(t(OneToMany), t(OneToMany)), None);
    }
}
