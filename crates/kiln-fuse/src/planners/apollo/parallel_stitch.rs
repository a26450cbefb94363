//! APOLLO Layer III: parallelism stitching of independent micro-graphs
//! (§4.3, cost model (3), Algo. 3 in Appendix A).
//!
//! Needs: the final micro-graphs (after Layers I and II).
//! Guarantees: returns sets of group ids that may run concurrently; no
//! group is in two sets and no two groups of a set are connected by a
//! path. Groups are not merged. How:
//! - Patterns, in Algo. 3's order (line 1): multi-head (a group with two
//!   or more producer groups: walk backward along each producer branch),
//!   multi-tail (two or more consumer groups: walk forward along each
//!   consumer branch) and independent sub-graphs (a virtual common tail
//!   over the groups nothing consumes, at most [`MAX_INDEPENDENT`]
//!   branches; the paper prefers a tail when a head and a tail are both
//!   legal, and kiln always uses the tail). A walk stops at the next
//!   multi-head/-tail group: backward it collects a multi-head
//!   terminator and drops a multi-tail one, forward the converse. Every
//!   collected group has a single consumer (backward) or producer
//!   (forward) along its branch, so branches are independent.
//!   Compute-bound groups (contractions) are skipped but the walk goes on.
//! - Composition (lines 3–11): repeatedly take the next unvisited group
//!   of every branch, sort by cost (descending, `FusionGraph::cost_ns` on
//!   the target description as cost_op), and stitch the runs `m..m+k` for which the cost model is
//!   positive, shrinking `k` and skipping an overweight leader as the
//!   algorithm does.
//! - "Positive" (kiln's reading for a multi-core CPU): gain = Σ cost −
//!   max cost > 0 (eq. 3) and the most expensive member costs less than
//!   `max_cost_ns` (the planner uses [`MAX_COST_NS`], 50 µs): a kernel
//!   that long already spreads over all cores by itself, so running it
//!   beside others gains nothing.

use crate::graph::{FusionGraph, Partition};
use kiln_target::TargetDesc;

/// Most independent branches joined by one virtual tail.
pub const MAX_INDEPENDENT: usize = 7;
/// Groups estimated at or above this many nanoseconds are not stitched.
pub const MAX_COST_NS: f64 = 50_000.0;

/// The group graph Algo. 3 walks: per live group id its neighbours, cost
/// and whether it is compute-bound.
struct GroupDag {
    order: Vec<usize>,
    producers: Vec<Vec<usize>>,
    consumers: Vec<Vec<usize>>,
    cost: Vec<f64>,
    compute_bound: Vec<bool>,
}

impl GroupDag {
    fn new(fg: &FusionGraph, part: &Partition, target: &TargetDesc) -> GroupDag {
        let n = fg.len();
        let mut dag = GroupDag {
            order: part.groups(),
            producers: vec![Vec::new(); n],
            consumers: vec![Vec::new(); n],
            cost: vec![0.0; n],
            compute_bound: vec![false; n],
        };
        for &g in &dag.order {
            let members = part.members(g);
            dag.producers[g] = part.producer_groups(fg, g);
            dag.consumers[g] = part.consumer_groups(fg, g);
            dag.cost[g] = fg.cost_ns(members, target);
            dag.compute_bound[g] = members.iter().any(|&m| fg.nodes[m].is_contraction());
        }
        dag
    }

    /// The branch above `start`, walking producers.
    fn backward(&self, start: usize) -> Vec<usize> {
        self.walk(start, &self.consumers, &self.producers)
    }

    /// The branch below `start`, walking consumers.
    fn forward(&self, start: usize) -> Vec<usize> {
        self.walk(start, &self.producers, &self.consumers)
    }

    /// Walks from `start` along `next` while groups have one `next`
    /// neighbour; a group with several `behind` neighbours is a
    /// terminator that is dropped, one with several `next` neighbours a
    /// terminator that is kept.
    fn walk(&self, start: usize, behind: &[Vec<usize>], next: &[Vec<usize>]) -> Vec<usize> {
        let mut branch = Vec::new();
        let mut g = start;
        while behind[g].len() < 2 {
            if !self.compute_bound[g] {
                branch.push(g);
            }
            match next[g].as_slice() {
                [only] => g = *only,
                _ => break,
            }
        }
        branch
    }

    /// Algo. 3, lines 1–2: the candidate sets of every pattern.
    fn candidate_sets(&self) -> Vec<Vec<Vec<usize>>> {
        let heads = self.order.iter().filter(|&&g| self.producers[g].len() >= 2);
        let multi_head = heads.map(|&g| {
            self.producers[g]
                .iter()
                .map(|&p| self.backward(p))
                .collect()
        });
        let tails = self.order.iter().filter(|&&g| self.consumers[g].len() >= 2);
        let multi_tail =
            tails.map(|&g| self.consumers[g].iter().map(|&c| self.forward(c)).collect());
        let sinks = self.order.iter().filter(|&&g| self.consumers[g].is_empty());
        let independent: Vec<Vec<usize>> = sinks
            .take(MAX_INDEPENDENT)
            .map(|&g| self.backward(g))
            .collect();
        multi_head.chain(multi_tail).chain([independent]).collect()
    }
}

/// Algo. 3: sets of group ids of `part` to run concurrently, groups
/// priced on `target`.
pub fn stitch(
    fg: &FusionGraph,
    part: &Partition,
    target: &TargetDesc,
    max_cost_ns: f64,
) -> Vec<Vec<usize>> {
    let dag = GroupDag::new(fg, part, target);
    let mut stitched = vec![false; fg.len()];
    let mut sets = Vec::new();
    for branches in dag.candidate_sets() {
        let mut cursors = vec![0usize; branches.len()];
        loop {
            let mut group: Vec<usize> = branches
                .iter()
                .zip(&mut cursors)
                .filter_map(|(branch, cursor)| next_unvisited(branch, cursor, &stitched))
                .collect();
            if group.len() < 2 {
                break;
            }
            group.sort_by(|a, b| dag.cost[*b].total_cmp(&dag.cost[*a]));
            let costs: Vec<f64> = group.iter().map(|&g| dag.cost[g]).collect();
            for (m, k) in compose(&costs, max_cost_ns) {
                let set = group[m..m + k].to_vec();
                for &g in &set {
                    stitched[g] = true;
                }
                sets.push(set);
            }
        }
    }
    sets
}

/// The next group of `branch` at or after `cursor` not yet stitched;
/// moves the cursor past it.
fn next_unvisited(branch: &[usize], cursor: &mut usize, stitched: &[bool]) -> Option<usize> {
    while let Some(&g) = branch.get(*cursor) {
        *cursor += 1;
        if !stitched[g] {
            return Some(g);
        }
    }
    None
}

/// Algo. 3, lines 6–10, over costs sorted in descending order: the runs
/// `(m, k)` (start, length) to stitch.
fn compose(costs: &[f64], max_cost_ns: f64) -> Vec<(usize, usize)> {
    let n = costs.len();
    let mut runs = Vec::new();
    let (mut m, mut k) = (0, n);
    while m < n && k >= 2 {
        if positive(&costs[m..m + k], max_cost_ns) {
            runs.push((m, k));
            m += k;
            k = n - m;
        } else {
            k -= 1;
            if k == 1 && m + 1 != n {
                m += 1;
                k = n - m;
            }
        }
    }
    runs
}

/// Cost model (3) on costs sorted in descending order, with kiln's cap
/// on the largest member.
fn positive(costs: &[f64], max_cost_ns: f64) -> bool {
    let sum: f64 = costs.iter().sum();
    let max = costs.first().copied().unwrap_or(0.0);
    sum - max > 0.0 && max < max_cost_ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compose_follows_example_7() {
        // Five ops, all small: one set of all five.
        assert_eq!(compose(&[5.0, 4.0, 3.0, 2.0, 1.0], 10.0), vec![(0, 5)]);
        // The leader is overweight: it is skipped, the rest stitched.
        assert_eq!(compose(&[50.0, 4.0, 3.0, 2.0], 10.0), vec![(1, 3)]);
        // Nothing small enough.
        assert!(compose(&[50.0, 40.0], 10.0).is_empty());
        // Zero-cost members gain nothing.
        assert!(compose(&[1.0, 0.0], 10.0).is_empty());
    }
}
