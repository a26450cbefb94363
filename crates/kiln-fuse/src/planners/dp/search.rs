//! The mapping-rules paper's Algorithm 2 "融合方案搜索算法" (fusion plan
//! search, §3.3.2 part 2), with its pruning.
//!
//! Needs: the rule types (`rules.rs`) and the candidates of Algorithm 1
//! (`candidates.rs`) of a [`FusionGraph`].
//! Guarantees: the returned partition is the cheapest (eq. (8), `cost.rs`)
//! of the complete plans explored; every merge was checked with
//! [`Partition::can_merge`], so its groups are convex; every group obeys
//! Table 1; not-fusable nodes are alone.
//!
//! How Algorithm 2 maps onto this file (the Fused array is the
//! partition's group of each node plus `assigned`, its "≠ −1"):
//! - `Group_Fuse_Search`: not-fusable nodes get their own group; then for
//!   every unfused node (the branch, backtracked by restarting from a copy
//!   of the initial state) its longest candidate (`findLongestPath`)
//!   becomes a group, and `Other_Fuse_Search` completes the plan. Pruning
//!   (the paper's): one branch per node, taking only its longest candidate,
//!   and the rest completed greedily rather than enumerated; ours on top:
//!   nodes whose longest candidate is the node alone are no branch (they
//!   would give the plain completion, which is always evaluated first).
//! - `Other_Fuse_Search` / `findUnfusedPath`: repeatedly the longest
//!   candidate whose nodes are all unfused becomes a group, ties broken by
//!   searching forward cyclically from a random node (a seeded generator,
//!   so plans are reproducible); until every node has a group.
//! - A candidate is a path prefix; its nodes are merged one by one, and
//!   the group stops before the first node `can_merge` refuses.
//! - `Group_Fuse_Second` (second fusion): groups whose fused types Table 1
//!   still allows are merged along their edges, to a fixed point.
//! - `WeightFuse`/`WeightCount`: `cost.rs`; the cheapest plan is kept.
//! - Budgets: `PlanOptions::dp_time_budget` and `dp_state_budget` (states
//!   = groups assigned, Algorithm 2's recursion steps), checked between
//!   complete plans; when one is hit the best plan so far is returned and
//!   [`Outcome::stopped`] says which.

use super::candidates::Candidates;
use super::cost::{cost, Cost};
use super::rules::{fuse, group_type, FuseType};
use crate::graph::{FusionGraph, Partition};
use crate::PlanOptions;
use kiln_ops::te::classify::MappingType;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// What the search found.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub partition: Partition,
    pub cost: Cost,
    /// Groups assigned over all plans explored.
    pub states: usize,
    /// Complete plans evaluated.
    pub plans: usize,
    /// The budget that ended the search early, if any.
    pub stopped: Option<&'static str>,
}

/// One Fused array being filled.
#[derive(Clone)]
struct State {
    part: Partition,
    assigned: Vec<bool>,
}

/// The search's fixed inputs and counters.
struct Search<'a> {
    fg: &'a FusionGraph,
    types: &'a [FuseType],
    cands: &'a Candidates,
    /// Candidate lengths with nothing fused: upper bounds, since a
    /// candidate only shrinks as nodes get fused.
    initial: BTreeMap<usize, BTreeSet<usize>>,
    states: usize,
}

pub fn search(
    fg: &FusionGraph,
    types: &[FuseType],
    cands: &Candidates,
    opts: &PlanOptions,
) -> Outcome {
    let start = Instant::now();
    let mut s = Search {
        fg,
        types,
        cands,
        initial: BTreeMap::new(),
        states: 0,
    };
    let init = s.init();
    s.initial = s.buckets(&init);
    let mut best = s.complete(init.clone(), 0);
    let mut best_cost = cost(fg, &fused_array(fg.len(), &best), opts);
    let mut plans = 1;
    let mut stopped = None;
    for root in s.roots(&init) {
        if start.elapsed() >= opts.dp_time_budget {
            stopped = Some("time");
            break;
        }
        if s.states >= opts.dp_state_budget {
            stopped = Some("state");
            break;
        }
        let mut st = init.clone();
        let cand = s.cands.longest_free(root, |_| true).to_vec();
        s.commit(&mut st, &cand);
        let part = s.complete(st, plans);
        plans += 1;
        let c = cost(fg, &fused_array(fg.len(), &part), opts);
        if c.total < best_cost.total {
            (best, best_cost) = (part, c);
        }
    }
    Outcome {
        cost: best_cost,
        partition: best,
        states: s.states,
        plans,
        stopped,
    }
}

/// The Fused array of a partition of `len` nodes: each node's group id.
pub fn fused_array(len: usize, part: &Partition) -> Vec<usize> {
    (0..len).map(|n| part.group_of(n)).collect()
}

impl Search<'_> {
    /// `Init` and the not-fusable case of `Group_Fuse_Search`: every node
    /// alone, not-fusable nodes assigned.
    fn init(&mut self) -> State {
        let assigned: Vec<bool> = self
            .types
            .iter()
            .map(|t| t.mapping == MappingType::NotFusable)
            .collect();
        self.states += assigned.iter().filter(|&&a| a).count();
        State {
            part: Partition::singletons(self.fg.len()),
            assigned,
        }
    }

    /// The branch nodes of `Group_Fuse_Search`: unfused nodes with a
    /// candidate longer than themselves.
    fn roots(&self, init: &State) -> Vec<usize> {
        (0..self.fg.len())
            .filter(|&n| !init.assigned[n] && self.cands.longest_free(n, |_| true).len() > 1)
            .collect()
    }

    /// `Other_Fuse_Search` then `Group_Fuse_Second` from `st`.
    fn complete(&mut self, mut st: State, seed: usize) -> Partition {
        let mut rng = Rng::new(seed);
        let mut buckets = self.initial.clone();
        while let Some(node) = self.pick(&st, &mut buckets, &mut rng) {
            let cand = self.cands.longest_free(node, |n| !st.assigned[n]).to_vec();
            self.commit(&mut st, &cand);
        }
        self.fuse_second(&mut st.part);
        st.part
    }

    /// Candidate lengths of the unassigned nodes, by length.
    fn buckets(&self, st: &State) -> BTreeMap<usize, BTreeSet<usize>> {
        let mut buckets: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for n in (0..self.fg.len()).filter(|&n| !st.assigned[n]) {
            let len = self.cands.longest_free(n, |m| !st.assigned[m]).len();
            buckets.entry(len).or_default().insert(n);
        }
        buckets
    }

    /// `findUnfusedPath`: the unassigned node with the longest free
    /// candidate, searching forward cyclically from a random node among
    /// equals. Lengths in `buckets` are upper bounds, re-checked here.
    fn pick(
        &self,
        st: &State,
        buckets: &mut BTreeMap<usize, BTreeSet<usize>>,
        rng: &mut Rng,
    ) -> Option<usize> {
        loop {
            let (&len, set) = buckets.iter_mut().next_back()?;
            let from = rng.below(self.fg.len());
            let node = set.range(from..).next().or(set.iter().next()).copied();
            if let Some(n) = node {
                set.remove(&n);
            }
            if set.is_empty() {
                buckets.remove(&len);
            }
            let Some(node) = node.filter(|&n| !st.assigned[n]) else {
                continue;
            };
            let now = self.cands.longest_free(node, |m| !st.assigned[m]).len();
            if now == len {
                return Some(node);
            }
            buckets.entry(now).or_default().insert(node);
        }
    }

    /// Makes candidate `cand` (a path prefix of unassigned nodes) one
    /// group, stopping before the first node that would make it cyclic.
    fn commit(&mut self, st: &mut State, cand: &[usize]) {
        let Some((&first, rest)) = cand.split_first() else {
            return;
        };
        self.states += 1;
        st.assigned[first] = true;
        let group = st.part.group_of(first);
        for &n in rest {
            let other = st.part.group_of(n);
            if !st.part.can_merge(self.fg, group, other) {
                break;
            }
            st.part.merge(group, other);
            st.assigned[n] = true;
        }
    }

    /// `Group_Fuse_Second`: merges producer and consumer groups that
    /// Table 1 allows, until none is left.
    fn fuse_second(&self, part: &mut Partition) {
        let mut changed = true;
        while changed {
            changed = false;
            for g in part.groups() {
                for c in part.consumer_groups(self.fg, g) {
                    if part.members(g).is_empty() || part.members(c).is_empty() {
                        continue;
                    }
                    let (tg, tc) = (
                        group_type(self.types, part.members(g)),
                        group_type(self.types, part.members(c)),
                    );
                    if fuse(tg, tc).is_some() && part.can_merge(self.fg, g, c) {
                        part.merge(g, c);
                        changed = true;
                    }
                }
            }
        }
    }
}

/// xorshift64: the random start of `findUnfusedPath`, seeded per plan.
struct Rng(u64);

impl Rng {
    fn new(seed: usize) -> Rng {
        Rng((0x9e37_79b9_7f4a_7c15 ^ (seed as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9)) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}
