//! TVM's greedy grouping along the post-dominator tree (relay FuseOps,
//! `GraphPartitioner::RunFuse`, phases 0 and 1).
//!
//! Needs: a [`FusionGraph`] and its [`PostDomTree`].
//! Guarantees: visiting nodes in topological order, a node's group is
//! merged with its immediate post-dominator's group, together with every
//! node on the paths between them, exactly when TVM would:
//! - phase 0: an out-element-wise-fusable group (conv, matmul) absorbs its
//!   post-dominator when every path to it is element-wise and every op on
//!   the way, the post-dominator included, is broadcast or simpler (an
//!   epilogue);
//! - phases 0 and 1: an element-wise or broadcast node fuses forward when
//!   the paths are injective or simpler and end in an injective, reduction
//!   or conv/matmul-anchored group (a reduction takes its element-wise
//!   inputs; nothing fuses into the *input* of a conv/matmul, since the
//!   edge into one is out-element-wise-fusable);
//! - phase 1: an injective node fuses along injective-or-simpler paths;
//! - a comm-reduce node never fuses into its consumer; opaque nodes never
//!   fuse.
//!
//! TVM's phase 2 fuses injective ops into tuples, which kiln does not
//! have. No group exceeds [`MAX_FUSE_DEPTH`] nodes (TVM's
//! `relay.FuseOps.max_depth`), and every merge is checked with
//! [`Partition::can_merge`]: a fusion whose merges would not all keep the
//! group graph acyclic is not made.

use super::pattern::{pattern_of, Pattern};
use super::postdom::PostDomTree;
use crate::graph::{FusionGraph, Partition};
use std::collections::BTreeSet;

/// TVM's default `relay.FuseOps.max_depth`: most nodes in one group.
pub const MAX_FUSE_DEPTH: usize = 256;

/// Groups being formed, with TVM's per-group pattern. Group ids are node
/// numbers (a group's id is its root node, as in TVM's union-find).
#[derive(Debug, Clone)]
pub struct Groups {
    pub part: Partition,
    /// Pattern of each group id: the root node's own pattern, raised to
    /// out-element-wise-fusable once the group holds a conv/matmul anchor.
    pattern: Vec<Pattern>,
    /// The group holds an out-element-wise-fusable node (TVM's `anchor_ref`).
    anchored: Vec<bool>,
}

/// Runs phases 0 and 1 on `fg`.
pub fn fuse(fg: &FusionGraph, tree: &PostDomTree) -> Groups {
    let pattern: Vec<Pattern> = fg.nodes.iter().map(pattern_of).collect();
    let mut groups = Groups {
        part: Partition::singletons(fg.len()),
        anchored: pattern
            .iter()
            .map(|&p| p == Pattern::OutEWiseFusable)
            .collect(),
        pattern,
    };
    for phase in 0..2 {
        for node in 0..fg.len() {
            groups.try_fuse(fg, tree, node, phase);
        }
    }
    groups
}

impl Groups {
    /// One step of `RunFuse`: fuse `node` into its post-dominator's group
    /// when TVM's conditions for `phase` hold.
    fn try_fuse(&mut self, fg: &FusionGraph, tree: &PostDomTree, node: usize, phase: u8) {
        let Some(dom) = tree.parent[node] else {
            return;
        };
        if self.part.group_of(node) == self.part.group_of(dom) {
            return;
        }
        // `groups_[nid]->pattern` in TVM: the node's own group record.
        let own = self.pattern[node];
        let fuses = match own {
            Pattern::OutEWiseFusable => {
                phase == 0
                    && tree.pattern[node] == Pattern::ElemWise
                    && self.paths_satisfy(fg, node, dom, |p, _| p <= Pattern::Broadcast)
            }
            Pattern::ElemWise | Pattern::Broadcast => {
                let via = tree.pattern[node];
                (via <= Pattern::Injective || via == Pattern::CommReduce)
                    && self.paths_satisfy(fg, node, dom, |p, is_sink| {
                        p <= Pattern::Injective || (is_sink && p <= Pattern::OutEWiseFusable)
                    })
            }
            Pattern::Injective => {
                phase == 1 && self.paths_satisfy(fg, node, dom, |p, _| p <= Pattern::Injective)
            }
            Pattern::CommReduce | Pattern::Opaque => false,
        };
        if fuses {
            self.commit(fg, node, dom);
        }
    }

    /// TVM's `CheckPath`: `cond(group pattern, is the post-dominator)`
    /// holds for every node on the paths from `src` to `dom`, `dom`
    /// included, `src` excluded.
    fn paths_satisfy(
        &self,
        fg: &FusionGraph,
        src: usize,
        dom: usize,
        cond: impl Fn(Pattern, bool) -> bool,
    ) -> bool {
        let between = between(fg, src, dom);
        between
            .iter()
            .filter(|&&n| n != src)
            .chain(std::iter::once(&dom))
            .all(|&n| cond(self.pattern[self.part.group_of(n)], n == dom))
    }

    /// TVM's `CommitFuse`: merges the groups of `src` and of every node
    /// on its paths to `dom` into `dom`'s group, latest node first, when
    /// the result stays within [`MAX_FUSE_DEPTH`] and every merge keeps
    /// the group graph acyclic.
    fn commit(&mut self, fg: &FusionGraph, src: usize, dom: usize) {
        let mut next = self.clone();
        let target = next.part.group_of(dom);
        for &n in between(fg, src, dom).iter().rev() {
            let g = next.part.group_of(n);
            if !next.part.can_merge(fg, target, g) {
                return;
            }
            next.merge_into(target, g);
        }
        if next.part.members(target).len() <= MAX_FUSE_DEPTH {
            *self = next;
        }
    }

    /// TVM's `MergeFromTo`: `child` joins `parent`; an anchor raises the
    /// parent's pattern.
    fn merge_into(&mut self, parent: usize, child: usize) {
        if parent == child {
            return;
        }
        if self.anchored[child] {
            self.anchored[parent] = true;
            self.pattern[parent] = self.pattern[parent].combine(self.pattern[child]);
        }
        self.part.merge(parent, child);
    }
}

/// `src` and the nodes on its paths to `dom` (`dom` excluded), ascending.
/// `dom` post-dominates `src`, so every node reachable from `src` without
/// passing `dom` is on such a path.
fn between(fg: &FusionGraph, src: usize, dom: usize) -> BTreeSet<usize> {
    let mut seen = BTreeSet::from([src]);
    let mut stack = vec![src];
    while let Some(n) = stack.pop() {
        for &c in &fg.nodes[n].consumers {
            if c != dom && seen.insert(c) {
                stack.push(c);
            }
        }
    }
    seen
}
