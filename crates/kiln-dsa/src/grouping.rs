//! GraphTurbo (OSDI '23) §3.2, Algorithm 2: grouping sub-graphs by the
//! straight, diamond and branch patterns of Fig. 4 while the grouped
//! sub-graph still splits into instances that fit the local buffer; and
//! §1.1's layers, the per-layer baseline's kernels.
//!
//! Starts from one sub-graph per node; each pass merges one pattern kind,
//! recomputing the merged sub-graph's SplitInfo (Algorithm 1) and best
//! split (eq. 1), and the three passes repeat until none merges.
//!
//! - straight (Fig. 4a): SG1 is SG2's only producer and SG2 SG1's only
//!   consumer; merged under rule (i).
//! - diamond (Fig. 4b): one entry, one exit, at least two paths between;
//!   everything after the entry up to the exit is merged (SG2, SG3, SG4)
//!   under rule (ii). The exit is the first sub-graph every consumer of
//!   the entry reaches.
//! - branch (Fig. 4c): an exit with several producers; a producer whose
//!   only consumer is the exit (SG2) is merged into it (SG3) under rule
//!   (i). kiln takes the latest such producer first, as Fig. 5 merges the
//!   shortcut layer 2 (not layer 1) into 3.
//!
//! Rule (i): `f(SG2) ≥ f(SG1)` and `f(SG) ≤ f(SG2)`; rule (ii):
//! `f(SG) ≤ max f(member)`; `f` is the best split's factor, and a
//! sub-graph without a split that fits never merges.
//!
//! [`fuse_unfit_layers`] then gives the nodes no split fits their
//! per-layer kernels (§5.1: TVM's schedule is GraphTurbo's special case).
//!
//! Needs: an [`OpGraph`] and a [`DsaDesc`]. Guarantees: the groups
//! partition the nodes, each has one exit, and no merge makes a cycle
//! (merged members only feed each other or the exit).

use crate::desc::DsaDesc;
use crate::opgraph::OpGraph;
use crate::split_info::{best_split, split_info, SplitCandidate};
use std::collections::{BTreeSet, VecDeque};

/// A sub-graph: its nodes (ascending) and its best split, when one fits.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub nodes: Vec<usize>,
    pub split: Option<SplitCandidate>,
}

impl Group {
    /// Splitting factor `f` (1 when the group does not split).
    pub fn factor(&self) -> usize {
        self.split.as_ref().map_or(1, SplitCandidate::factor)
    }

    /// Pieces per axis of its exit's output (empty: not split).
    pub fn factors(&self) -> &[usize] {
        self.split.as_ref().map_or(&[], |s| &s.factors)
    }
}

/// The state of Algorithm 2.
pub struct Grouping<'a> {
    og: &'a OpGraph,
    desc: &'a DsaDesc,
    pub groups: Vec<Group>,
}

impl<'a> Grouping<'a> {
    /// Lines 1–4: one sub-graph per node, with its SplitInfo.
    pub fn singletons(og: &'a OpGraph, desc: &'a DsaDesc) -> Grouping<'a> {
        let mut grouping = Grouping {
            og,
            desc,
            groups: Vec::new(),
        };
        grouping.groups = (0..og.nodes.len())
            .map(|n| grouping.evaluate(vec![n]))
            .collect();
        grouping
    }

    /// Algorithm 2: the three passes until none merges.
    pub fn run(og: &'a OpGraph, desc: &'a DsaDesc) -> Vec<Group> {
        let mut grouping = Grouping::singletons(og, desc);
        loop {
            let straight = grouping.straight_merge();
            let diamond = grouping.diamond_merge();
            let branch = grouping.branch_merge();
            if !(straight || diamond || branch) {
                return grouping.groups;
            }
        }
    }

    /// A sub-graph of `nodes` with its best split (Algorithm 1, eq. 1).
    fn evaluate(&self, mut nodes: Vec<usize>) -> Group {
        nodes.sort_unstable();
        let split = best_split(&split_info(self.og, &nodes, self.desc));
        Group { nodes, split }
    }

    fn group_of(&self) -> Vec<usize> {
        let mut of = vec![0; self.og.nodes.len()];
        for (g, group) in self.groups.iter().enumerate() {
            for &n in &group.nodes {
                of[n] = g;
            }
        }
        of
    }

    /// Other groups producing what `g` reads.
    fn producers(&self, g: usize, of: &[usize]) -> BTreeSet<usize> {
        let nodes = self.groups[g].nodes.iter();
        let all = nodes.flat_map(|&n| self.og.nodes[n].producers.iter().map(|&p| of[p]));
        all.filter(|&p| p != g).collect()
    }

    /// Other groups reading what `g` writes.
    fn consumers(&self, g: usize, of: &[usize]) -> BTreeSet<usize> {
        let nodes = self.groups[g].nodes.iter();
        let all = nodes.flat_map(|&n| self.og.nodes[n].consumers.iter().map(|&c| of[c]));
        all.filter(|&c| c != g).collect()
    }

    /// Whether a value of `g` is a graph output (an outside consumer).
    fn writes_graph_output(&self, g: usize) -> bool {
        let outputs = self.groups[g]
            .nodes
            .iter()
            .flat_map(|&n| &self.og.nodes[n].outputs);
        outputs.clone().any(|v| self.og.graph_outputs.contains(v))
    }

    /// `g`'s only consumer, when it has exactly one and no graph output.
    fn only_consumer(&self, g: usize, of: &[usize]) -> Option<usize> {
        let consumers = self.consumers(g, of);
        match (consumers.len(), self.writes_graph_output(g)) {
            (1, false) => consumers.first().copied(),
            _ => None,
        }
    }

    /// Replaces the groups `members` by `merged`.
    fn replace(&mut self, members: &BTreeSet<usize>, merged: Group) {
        let mut g = 0;
        self.groups.retain(|_| {
            g += 1;
            !members.contains(&(g - 1))
        });
        self.groups.push(merged);
        self.groups.sort_by_key(|group| group.nodes[0]);
    }

    fn merged(&self, members: &BTreeSet<usize>) -> Group {
        let nodes = members
            .iter()
            .flat_map(|&g| self.groups[g].nodes.iter().copied());
        self.evaluate(nodes.collect())
    }

    /// Rule (i) for `first` (SG1 / SG2) merged into `second` (SG2 / SG3).
    fn rule_one(&self, first: usize, second: usize, merged: &Group) -> bool {
        let (a, b) = (&self.groups[first], &self.groups[second]);
        a.split.is_some()
            && b.split.is_some()
            && merged.split.is_some()
            && b.factor() >= a.factor()
            && merged.factor() <= b.factor()
    }

    /// Merges `first` into `second` when rule (i) allows it.
    fn try_pair(&mut self, first: usize, second: usize) -> bool {
        let members = BTreeSet::from([first, second]);
        let merged = self.merged(&members);
        if !self.rule_one(first, second, &merged) {
            return false;
        }
        self.replace(&members, merged);
        true
    }

    /// Line 6: merges every straight pattern; whether any merged.
    pub fn straight_merge(&mut self) -> bool {
        let mut any = false;
        let mut g = 0;
        while g < self.groups.len() {
            let of = self.group_of();
            let next = self.only_consumer(g, &of);
            let straight = next.filter(|&c| self.producers(c, &of) == BTreeSet::from([g]));
            match straight {
                Some(c) if self.try_pair(g, c) => any = true,
                _ => g += 1,
            }
        }
        any
    }

    /// Line 12: per exit with several producers, merges the latest
    /// producer that feeds only it; whether any merged.
    pub fn branch_merge(&mut self) -> bool {
        let mut any = false;
        let mut exit = 0;
        while exit < self.groups.len() {
            let of = self.group_of();
            let producers = self.producers(exit, &of);
            let mut feeding: Vec<usize> = producers
                .iter()
                .copied()
                .filter(|&p| producers.len() >= 2 && self.only_consumer(p, &of) == Some(exit))
                .collect();
            feeding.sort_by_key(|&p| self.groups[p].nodes.last().copied());
            let merged = feeding.iter().rev().any(|&p| self.try_pair(p, exit));
            any |= merged;
            // After a merge the exit moved; revisit from its position.
            if !merged {
                exit += 1;
            }
        }
        any
    }

    /// Line 9: per entry with several consumers, merges the region up to
    /// its exit when it is a diamond and rule (ii) holds; whether any did.
    pub fn diamond_merge(&mut self) -> bool {
        let mut any = false;
        let mut entry = 0;
        while entry < self.groups.len() {
            let of = self.group_of();
            let region = self.diamond_after(entry, &of);
            let merged = region.map(|members| (self.merged(&members), members));
            match merged {
                Some((group, members)) if self.rule_two(&members, &group) => {
                    self.replace(&members, group);
                    any = true;
                }
                _ => entry += 1,
            }
        }
        any
    }

    fn rule_two(&self, members: &BTreeSet<usize>, merged: &Group) -> bool {
        let largest = members
            .iter()
            .filter_map(|&m| self.groups[m].split.as_ref().map(SplitCandidate::factor))
            .max();
        matches!((&merged.split, largest), (Some(s), Some(f)) if s.factor() <= f)
    }

    /// The groups after `entry` up to the first group all its consumers
    /// reach, when they form a diamond: nothing but the exit is read from
    /// outside, nothing but the entry feeds in from outside.
    fn diamond_after(&self, entry: usize, of: &[usize]) -> Option<BTreeSet<usize>> {
        let consumers = self.consumers(entry, of);
        if consumers.len() < 2 {
            return None;
        }
        let reach: Vec<BTreeSet<usize>> = consumers
            .iter()
            .map(|&c| self.reachable(c, of, true))
            .collect();
        let common = reach.iter().skip(1).fold(reach[0].clone(), |acc, r| {
            acc.intersection(r).copied().collect()
        });
        let exit = common
            .into_iter()
            .min_by_key(|&g| self.groups[g].nodes[0])?;
        let before_exit = self.reachable(exit, of, false);
        let members: BTreeSet<usize> = reach
            .iter()
            .flatten()
            .copied()
            .filter(|m| before_exit.contains(m))
            .collect();
        let closed = members.iter().all(|&m| {
            let inside = |g: &usize| members.contains(g) || *g == entry;
            let feeds_out = m != exit
                && (self.writes_graph_output(m) || !self.consumers(m, of).iter().all(inside));
            !feeds_out && self.producers(m, of).iter().all(inside)
        });
        closed.then_some(members)
    }

    /// Groups reachable from `start` following consumers (`forward`) or
    /// producers, `start` included.
    fn reachable(&self, start: usize, of: &[usize], forward: bool) -> BTreeSet<usize> {
        let mut seen = BTreeSet::from([start]);
        let mut queue = VecDeque::from([start]);
        while let Some(g) = queue.pop_front() {
            let next = if forward {
                self.consumers(g, of)
            } else {
                self.producers(g, of)
            };
            for c in next {
                if seen.insert(c) {
                    queue.push_back(c);
                }
            }
        }
        seen
    }
}

/// §1.1's layers: straight lines of nodes with at most one parametric
/// node each (what TVM-like per-layer fusion makes one kernel of).
pub fn layers(og: &OpGraph) -> Vec<Vec<usize>> {
    let mut layer_of: Vec<usize> = Vec::with_capacity(og.nodes.len());
    let mut layers: Vec<Vec<usize>> = Vec::new();
    for (n, node) in og.nodes.iter().enumerate() {
        let joins = match node.producers.as_slice() {
            [p] => {
                let producer = &og.nodes[*p];
                let only_reader = producer.consumers == [n]
                    && !producer
                        .outputs
                        .iter()
                        .any(|v| og.graph_outputs.contains(v));
                let layer = &layers[layer_of[*p]];
                let has_parameters = layer.iter().any(|&m| og.nodes[m].parametric);
                let last = layer.last() == Some(p);
                (only_reader && last && !(node.parametric && has_parameters))
                    .then_some(layer_of[*p])
            }
            _ => None,
        };
        let layer = joins.unwrap_or_else(|| {
            layers.push(Vec::new());
            layers.len() - 1
        });
        layers[layer].push(n);
        layer_of.push(layer);
    }
    layers
}

/// §5.1: where no split fits, GraphTurbo schedules as TVM does ("the
/// scheduling of TVM can be considered as a special case of our work"):
/// the nodes of a §1.1 layer that all stayed alone because no split of
/// them fits become one sub-graph, one kernel as the per-layer baseline
/// makes of them (§4.1's loop fusion within a layer tiles the anchor op,
/// so the layer needs no split to run). A layer is a chain whose inner
/// values have one reader, the next node, so merging it makes no cycle.
pub fn fuse_unfit_layers(og: &OpGraph, groups: Vec<Group>) -> Vec<Group> {
    let alone_unfit = |g: &Group| g.split.is_none() && g.nodes.len() == 1;
    let unfit: BTreeSet<usize> = groups
        .iter()
        .filter(|g| alone_unfit(g))
        .map(|g| g.nodes[0])
        .collect();
    let mut fused: Vec<Group> = groups.into_iter().filter(|g| !alone_unfit(g)).collect();
    for layer in layers(og) {
        if layer.iter().all(|n| unfit.contains(n)) {
            fused.push(Group {
                nodes: layer,
                split: None,
            });
        } else {
            let alone = layer.into_iter().filter(|n| unfit.contains(n));
            fused.extend(alone.map(|n| Group {
                nodes: vec![n],
                split: None,
            }));
        }
    }
    fused
}
