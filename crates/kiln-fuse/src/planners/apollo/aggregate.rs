//! APOLLO Layer I partitioning: rule-based aggregation of micro-graphs
//! (§3.3, Table 1, Algo. 1 in Appendix A).
//!
//! Needs: a [`FusionGraph`] whose nodes carry APOLLO types
//! (`NodeInfo::apollo()`).
//! Guarantees: starting from one micro-graph per primitive op, Table 1's
//! rules (and two of kiln's, below) are applied in Algo. 1's priority order
//! {1, 2, 3, 4, 5, 6-transpose, kiln-layout, {6-matmul}, {6-conv}}, each priority
//! level to a fixed point, merging a producer/consumer pair only when
//! `Partition::can_merge` holds; the merged group gets the rule's result
//! type. Ops of any other opaque kind (reshape, gather, layout, window,
//! library, …) match no rule of the paper and stay alone, except data
//! movement feeding a matmul (below).
//!
//! Decisions kiln makes where the paper leaves room:
//! - Within {6-matmul} and {6-conv} (equal priority in the paper) every
//!   sweep tries the epilogue rule (contraction producer → consumer)
//!   before the prologue rule (element-wise producer → contraction).
//! - A broadcast consumer of a matmul/conv is treated like an
//!   element-wise one for rule 6: a bias add whose operand is `[N]` or
//!   `[C,1,1]` is classified broadcast, and groups made by rules 2/3
//!   (bias add + activation) are broadcast. A broadcast producer
//!   (prologue) is accepted too when it broadcasts only scalars (`q *
//!   scale` before an attention matmul is classified broadcast), so the
//!   backend applies it element by element while packing the operand; a
//!   broadcast of a computed row (Softmax's final `Div`) is left for
//!   Layer II to stitch to its reduction.
//! - One row beyond the paper, at the 6-matmul level: a data-movement
//!   producer (transpose, reshape, slice, gather of a constant index, as
//!   in splitting q, k, v into heads) joins a matmul group, which reads
//!   its operand through the composed index instead of a copy (the
//!   backend refuses what does not compose, e.g. a gather of computed
//!   indices). Convolutions take none: their image is read as a window.
//!   A concatenation or padding does not join one either (a select per
//!   packed element; the CPU backend refused it, and APOLLO's feedback
//!   split it off again, leaving element-wise producers that had joined
//!   meanwhile in the concatenation's kernel, where they kept it from
//!   being assembled in place by its producers).
//! - Another, at a level of its own before 6-matmul ("kiln-layout"): a
//!   layout group that selects by bounds (a concatenation or padding)
//!   joins its element-wise and broadcast consumers, so a DenseNet layer's
//!   concatenation, batch norm and ReLU are one loop nest (peeled at the
//!   sources' borders) that writes the normalized values once instead of a
//!   copy and a pass.
//! - Rules 4 and 5 leave out an element-wise/broadcast producer that
//!   reads a contraction's result and whose values are read outside the
//!   reduction too (a bias and activation before a squeeze-excitation's
//!   pooling and its scaling): rule 6 makes it the contraction's epilogue
//!   instead, so it is stored once by the contraction rather than
//!   recomputed by the reduction from a stored contraction result.
//! - No rule joins a group computing a transcendental (`Exp`, `Sigmoid`,
//!   …) to a consumer that broadcasts its result to at least 8 times as
//!   many elements: the function would run per element of the large
//!   tensor (`broadcasts_transcendental`). It stays a kernel of its own,
//!   or the epilogue of the contraction before it.
//! - Two contractions never share a group: rule 6 joins a contraction
//!   group only with an element-wise/broadcast group, which holds none.
//! - The epilogue restriction is enforced here, not left to the feedback
//!   step: a contraction group may have only one node whose values are
//!   read outside the group (or are graph outputs), so prologue values
//!   are consumed inside and the epilogue is one chain (a DAG such as a
//!   decomposed GELU is fine) whose intermediate values are not read
//!   elsewhere; and every node downstream of the contraction has the
//!   contraction's output element count, so the backend can apply the
//!   epilogue to each result element before it is stored.

use super::micro::{elements, MicroGraphs};
use super::rules::{apply_to_fixed_point, Rule, Side};
use crate::graph::FusionGraph;
use kiln_ops::te::classify::{
    calls_transcendental, relation, selects_by_bounds, ApolloType, OpaqueKind, Relation,
};
use std::collections::BTreeSet;

const EW: ApolloType = ApolloType::ElementWise;
const BCAST: ApolloType = ApolloType::Broadcast;
const REDUCTION: ApolloType = ApolloType::Reduction;
const TRANSPOSE: ApolloType = ApolloType::Opaque(OpaqueKind::Transpose);
const MATMUL: ApolloType = ApolloType::Opaque(OpaqueKind::Matmul);
const CONV: ApolloType = ApolloType::Opaque(OpaqueKind::Conv);
const LAYOUT: ApolloType = ApolloType::Opaque(OpaqueKind::Layout);
const WINDOW: ApolloType = ApolloType::Opaque(OpaqueKind::Window);

/// Table 1, one slice per priority level of Algo. 1, line 4.
pub const TABLE_1: &[&[Rule]] = &[
    &[/* 1 */ Rule::new(Side::EW, Side::EW, EW)],
    &[/* 2 */ Rule::new(Side::BCAST, Side::EW, BCAST)],
    &[/* 3 */ Rule::new(Side::BCAST, Side::BCAST, BCAST)],
    &[/* 4 */ Rule::new(Side::EW, Side::REDUCTION, REDUCTION)],
    &[
        /* 5 */ Rule::new(Side::BCAST, Side::REDUCTION, REDUCTION),
    ],
    &[
        /* 6-transpose */ Rule::new(Side::EwOrBcast, Side::TRANSPOSE, TRANSPOSE),
    ],
    &[
        /* kiln */ Rule::new(Side::LAYOUT, Side::EwOrBcast, LAYOUT),
    ],
    &[
        /* 6-matmul */ Rule::new(Side::MATMUL, Side::EwOrBcast, MATMUL),
        /* 6-matmul */ Rule::new(Side::EwOrBcast, Side::MATMUL, MATMUL),
        /* kiln */ Rule::new(Side::Movement, Side::MATMUL, MATMUL),
    ],
    &[
        /* 6-conv */ Rule::new(Side::CONV, Side::EwOrBcast, CONV),
        /* 6-conv */ Rule::new(Side::EwOrBcast, Side::CONV, CONV),
    ],
    &[
        /* kiln-window */ Rule::new(Side::WINDOW, Side::EwOrBcast, WINDOW),
    ],
];

/// Algo. 1: the micro-graphs after Layer I aggregation.
pub fn aggregate(fg: &FusionGraph) -> MicroGraphs {
    let mut mg = MicroGraphs::new(fg);
    // Per node, once: the sweeps ask for every edge of every level.
    let costly: Vec<bool> = fg
        .nodes
        .iter()
        .map(|n| n.te.as_ref().is_some_and(calls_transcendental))
        .collect();
    let selecting: Vec<bool> = fg
        .nodes
        .iter()
        .map(|n| n.te.as_ref().is_some_and(selects_by_bounds))
        .collect();
    let condition = |mg: &MicroGraphs, rule: &Rule, p: usize, c: usize| match rule.result {
        LAYOUT => mg.part.members(p).iter().any(|&n| selecting[n]),
        // A concatenation or padding never joins a contraction: its packing would select
        // per element, and kept whole a concatenation can be assembled in place.
        MATMUL | CONV => {
            let selecting_movement =
                rule.producer == Side::Movement && mg.part.members(p).iter().any(|&n| selecting[n]);
            !selecting_movement && contraction_fusable(fg, mg, p, c)
        }
        WINDOW => epilogue_of_its_shape(fg, mg, p, c, &|n| fg.nodes[n].apollo() == WINDOW),
        REDUCTION => {
            !kept_for_contraction(fg, mg, p, c) && !broadcasts_transcendental(fg, mg, &costly, p, c)
        }
        _ => !broadcasts_transcendental(fg, mg, &costly, p, c),
    };
    for level in TABLE_1 {
        apply_to_fixed_point(fg, &mut mg, level, &condition);
    }
    mg
}

/// Whether groups `p` and `c` (one of them a contraction group) make a
/// contraction with a prologue/epilogue the backend can apply in place.
fn contraction_fusable(fg: &FusionGraph, mg: &MicroGraphs, p: usize, c: usize) -> bool {
    let prologue_ok = mg.ty(p) != BCAST || scalar_broadcasts_only(fg, mg.part.members(p));
    prologue_ok && epilogue_of_its_shape(fg, mg, p, c, &|n| fg.nodes[n].is_contraction())
}

/// Whether groups `p` and `c` joined hold an anchor node (a contraction,
/// a window) whose downstream nodes in the union all have its element
/// count, with one node read outside: the anchor's epilogue is one chain
/// applied to each of its results before the store.
fn epilogue_of_its_shape(
    fg: &FusionGraph,
    mg: &MicroGraphs,
    p: usize,
    c: usize,
    is_anchor: &dyn Fn(usize) -> bool,
) -> bool {
    let union: BTreeSet<usize> = mg
        .part
        .members(p)
        .iter()
        .chain(mg.part.members(c))
        .copied()
        .collect();
    let leaving = union
        .iter()
        .filter(|&&n| read_outside(fg, &union, n))
        .count();
    let Some(&anchor) = union.iter().find(|&&n| is_anchor(n)) else {
        return false;
    };
    let size = elements(fg, anchor);
    leaving <= 1 && downstream(fg, &union, anchor).all(|n| elements(fg, n) == size)
}

/// Whether producer group `p` of reduction group `c` stays out of it for
/// a contraction's epilogue: `p` reads a contraction's result of its own
/// size and its values are read outside `p` and `c` as well, so they are
/// stored anyway. Joined to the reduction, `p` would be computed a second
/// time and its input read twice; as the epilogue, the contraction stores
/// `p`'s values directly and the reduction reads them once.
fn kept_for_contraction(fg: &FusionGraph, mg: &MicroGraphs, p: usize, c: usize) -> bool {
    let members = mg.part.members(p);
    let union: BTreeSet<usize> = members.iter().chain(mg.part.members(c)).copied().collect();
    let fed_by_contraction = members.iter().any(|&n| {
        fg.nodes[n].producers.iter().any(|&q| {
            !members.contains(&q)
                && fg.nodes[q].is_contraction()
                && elements(fg, q) == elements(fg, n)
        })
    });
    fed_by_contraction && members.iter().any(|&n| read_outside(fg, &union, n))
}

/// How many times larger than a transcendental's result a consumer must
/// be for the planner to keep them apart: recomputed per consumer element,
/// a polynomial of a dozen instructions would cost more than one store
/// and one load per element of the small result.
const RECOMPUTE_FACTOR: usize = 8;

/// Whether producer group `p` computes a transcendental (`costly`, per
/// node) and consumer group `c` broadcasts one of `p`'s results at least
/// [`RECOMPUTE_FACTOR`] times (a squeeze-excitation's `Sigmoid` of
/// `[N, C]` scaling `[N, H, W, C]`): joined, the transcendental would run
/// per element of the large tensor.
fn broadcasts_transcendental(
    fg: &FusionGraph,
    mg: &MicroGraphs,
    costly: &[bool],
    p: usize,
    c: usize,
) -> bool {
    let members = mg.part.members(p);
    members.iter().any(|&n| costly[n])
        && members.iter().any(|&q| {
            fg.nodes[q].consumers.iter().any(|&k| {
                mg.part.group_of(k) == c && elements(fg, k) >= RECOMPUTE_FACTOR * elements(fg, q)
            })
        })
}

/// Every broadcast (injective) read of `nodes` reads a one-element input.
fn scalar_broadcasts_only(fg: &FusionGraph, nodes: &[usize]) -> bool {
    nodes.iter().all(|&n| {
        let Some(te) = &fg.nodes[n].te else {
            return false;
        };
        te.accesses.iter().enumerate().all(|(k, access)| {
            relation(te, k) != Relation::Injective
                || te.inputs[access.input]
                    .as_ref()
                    .is_some_and(|shape| shape.iter().product::<usize>() == 1)
        })
    })
}

/// Node `n`'s values are graph outputs or read by a node outside `inside`.
fn read_outside(fg: &FusionGraph, inside: &BTreeSet<usize>, n: usize) -> bool {
    let info = &fg.nodes[n];
    info.graph_output || info.consumers.iter().any(|c| !inside.contains(c))
}

/// The nodes of `inside` reachable from `from` inside it (excluding `from`).
fn downstream<'a>(
    fg: &'a FusionGraph,
    inside: &'a BTreeSet<usize>,
    from: usize,
) -> impl Iterator<Item = usize> + 'a {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from];
    while let Some(n) = stack.pop() {
        for &c in &fg.nodes[n].consumers {
            if inside.contains(&c) && seen.insert(c) {
                stack.push(c);
            }
        }
    }
    seen.into_iter()
}
