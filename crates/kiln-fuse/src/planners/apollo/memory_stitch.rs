//! APOLLO Layer II: memory stitching of a reduction micro-graph with what
//! follows it (§4.2, Table 2, Algo. 2 in Appendix A).
//!
//! Needs: micro-graphs after Layer I (`aggregate.rs`), so every
//! reduction group holds reductions of one canonical form.
//! Guarantees: Table 2's rules — 7: reduction → element-wise/broadcast
//! gives reduction; 8: reduction → reduction gives reduction — are applied
//! over every producer/consumer edge, repeatedly until none applies (the
//! recursive application §4.2 allows), merging only acyclic pairs that
//! pass Algo. 2's checks:
//! - line 2, consistent dimensions (rule 7): the consumer group's
//!   iteration space (its largest output, in elements) is the reduction's
//!   input space, i.e. the reduction's output elements times its reduced
//!   elements, or its output space (a value per row computed from the
//!   reduced ones, LogSoftmax's `Log(sum)`); one loop nest over the rows
//!   then computes both;
//! - line 3, identical canonical form (rule 8): every reduction of both
//!   groups has the same `NodeInfo::reduce_form()` (PANAMERA §3).
//!
//! Afterwards a reduction group still holds reductions of one canonical
//! form. Algo. 2's allocation of the stitched tensors (lines 8–9) is the
//! backend's business and not done here.

use super::micro::{space, MicroGraphs};
use super::rules::{apply_to_fixed_point, Rule, Side};
use crate::graph::FusionGraph;
use kiln_ops::te::classify::ApolloType;

/// A reduction's canonical form: output extents and reduced extents.
type Form = (Vec<usize>, Vec<usize>);

/// Table 2.
pub const TABLE_2: &[Rule] = &[
    /* 7 */ Rule::new(Side::REDUCTION, Side::EwOrBcast, ApolloType::Reduction),
    /* 8 */ Rule::new(Side::REDUCTION, Side::REDUCTION, ApolloType::Reduction),
];

/// Algo. 2 on `mg`; returns the number of merges.
pub fn stitch(fg: &FusionGraph, mg: &mut MicroGraphs) -> usize {
    let condition = |mg: &MicroGraphs, rule: &Rule, p: usize, c: usize| {
        let Some(form) = single_form(fg, mg, p) else {
            return false;
        };
        if rule.consumer.accepts(ApolloType::Reduction) {
            single_form(fg, mg, c).is_some_and(|f| f == form)
        } else {
            let (out, reduced) = (&form.0, &form.1);
            let output_space: usize = out.iter().product();
            let input_space = output_space * reduced.iter().product::<usize>();
            let consumer = space(fg, mg.part.members(c));
            consumer == input_space || consumer == output_space
        }
    };
    apply_to_fixed_point(fg, mg, TABLE_2, &condition)
}

/// The canonical form shared by every reduction of `group`, if there is
/// exactly one.
fn single_form(fg: &FusionGraph, mg: &MicroGraphs, group: usize) -> Option<Form> {
    let mut forms = mg
        .part
        .members(group)
        .iter()
        .filter(|&&n| fg.nodes[n].apollo() == ApolloType::Reduction)
        .filter_map(|&n| fg.nodes[n].reduce_form());
    let first = forms.next()?;
    forms.all(|f| f == first).then_some(first)
}
