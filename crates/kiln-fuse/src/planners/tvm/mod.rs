//! `tvm` planner: TVM's operator fusion (relay FuseOps), the baseline both
//! papers beat (APOLLO §2, the mapping-rules paper §2.2).
//!
//! Needs: a [`FusionGraph`].
//! Guarantees: a plan whose groups are exactly the groups TVM's greedy
//! post-dominator fusion forms from kiln's classes: `pattern.rs` maps
//! each node to TVM's pattern kinds, `postdom.rs` builds the
//! post-dominator tree with a virtual sink for graph outputs, `fuse.rs`
//! runs phases 0 and 1 of `GraphPartitioner`. Groups are convex (every
//! merge passed [`crate::Partition::can_merge`]). A group's kind is its
//! most complex member's TVM pattern in words (`element-wise`,
//! `broadcast`, `injective`, `reduction`), the anchor's kind (`matmul`,
//! `conv`) for a group grown from one, and the node's own kind for a
//! single node. Differences from TVM: pooling is opaque here (TVM
//! registers it out-element-wise-fusable), and there is no tuple phase.

mod fuse;
mod pattern;
mod postdom;

use crate::graph::FusionGraph;
use crate::plan::{Group, Plan};
use pattern::Pattern;

pub use fuse::MAX_FUSE_DEPTH;

pub fn plan(fg: &FusionGraph) -> Plan {
    let tree = postdom::PostDomTree::new(fg);
    let groups = fuse::fuse(fg, &tree);
    let groups = groups
        .part
        .groups()
        .into_iter()
        .map(|id| {
            let members = groups.part.members(id).to_vec();
            Group::new(group_kind(fg, &members), members)
        })
        .collect();
    Plan {
        planner: "tvm".to_string(),
        groups,
        parallel: Vec::new(),
    }
}

/// A one-word kind for a group of `members`: the most complex TVM pattern
/// among them, in words.
fn group_kind(fg: &FusionGraph, members: &[usize]) -> String {
    let anchor = members.iter().find(|&&n| fg.nodes[n].is_contraction());
    let pattern = members
        .iter()
        .map(|&n| pattern::pattern_of(&fg.nodes[n]))
        .max()
        .unwrap_or(Pattern::Opaque);
    match (members, pattern, anchor) {
        ([n], _, _) | (_, _, Some(n)) => super::node_kind(&fg.nodes[*n]),
        (_, Pattern::ElemWise, _) => "element-wise".into(),
        (_, Pattern::Broadcast, _) => "broadcast".into(),
        (_, Pattern::Injective, _) => "injective".into(),
        (_, Pattern::CommReduce, _) => "reduction".into(),
        (_, Pattern::OutEWiseFusable | Pattern::Opaque, _) => "opaque".into(),
    }
}
