//! GraphTurbo (OSDI '23) §3.3, Algorithm 3 and Figs. 6–7: splitting each
//! grouped sub-graph into instances and ordering them breadth-first (BFS)
//! or depth-first (DFS).
//!
//! A group split `f` ways (its best split by eq. 1, `f` the product of
//! the pieces along each axis cut) becomes `f` instances, numbered
//! row-major over the axes ([`crate::propagate::pieces`]). An instance
//! depends on a producer instance only when it reads part of what that
//! one writes (§3.3's redundant edges, the gray ones of Fig. 6, are never
//! made): in every dimension both slice, the producer's piece and the
//! consumer's (halo included) overlap.
//!
//! Needs: the groups of Algorithm 2 over an [`OpGraph`].
//! Guarantees: groups are put in a topological order; instances are
//! numbered breadth-first (group by group), which is [`bfs_order`]; both
//! orders list every instance once, producers before consumers.

use crate::grouping::Group;
use crate::opgraph::OpGraph;
use crate::propagate::{exit_node, pieces, propagate, Region};
use kiln_ir::{bail, Result, ValueId};
use std::collections::BTreeSet;

/// Slice `index` (of the group's `factor`) of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instance {
    pub group: usize,
    pub index: usize,
}

/// `consumer` reads part of `value` that `producer` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub producer: usize,
    pub consumer: usize,
    pub value: ValueId,
}

/// The instances of all groups and the edges between them.
#[derive(Debug, Clone)]
pub struct InstanceGraph {
    /// The groups, in a topological order.
    pub groups: Vec<Group>,
    /// Instances group by group (BFS numbering).
    pub instances: Vec<Instance>,
    /// Edges, sorted.
    pub edges: Vec<Edge>,
    /// Per instance, the positions in `edges` of the edges into it.
    incoming: Vec<Vec<usize>>,
    /// Per instance, the positions in `edges` of the edges out of it.
    outgoing: Vec<Vec<usize>>,
}

impl InstanceGraph {
    /// Splits every group into its instances and links them.
    pub fn new(og: &OpGraph, groups: Vec<Group>) -> Result<InstanceGraph> {
        let groups = topological(og, groups)?;
        let mut instances = Vec::new();
        let mut first = Vec::with_capacity(groups.len());
        for (g, group) in groups.iter().enumerate() {
            first.push(instances.len());
            instances.extend((0..group.factor()).map(|index| Instance { group: g, index }));
        }
        let mut edges = Vec::new();
        for consumer in 0..groups.len() {
            for read in group_reads(og, &groups, consumer) {
                edges.extend(read.edges(&first));
            }
        }
        edges.sort();
        edges.dedup();
        let mut incoming = vec![Vec::new(); instances.len()];
        let mut outgoing = vec![Vec::new(); instances.len()];
        for (k, e) in edges.iter().enumerate() {
            incoming[e.consumer].push(k);
            outgoing[e.producer].push(k);
        }
        Ok(InstanceGraph {
            groups,
            instances,
            edges,
            incoming,
            outgoing,
        })
    }

    /// Instances `i` reads from.
    pub fn producers_of(&self, i: usize) -> impl Iterator<Item = &Edge> {
        self.incoming[i].iter().map(|&k| &self.edges[k])
    }

    /// Instances reading what `i` writes.
    pub fn consumers_of(&self, i: usize) -> impl Iterator<Item = &Edge> {
        self.outgoing[i].iter().map(|&k| &self.edges[k])
    }
}

/// The groups in a topological order of their data flow (Kahn's, the
/// earliest first node first).
fn topological(og: &OpGraph, groups: Vec<Group>) -> Result<Vec<Group>> {
    let mut of = vec![0; og.nodes.len()];
    for (g, group) in groups.iter().enumerate() {
        group.nodes.iter().for_each(|&n| of[n] = g);
    }
    let producers: Vec<BTreeSet<usize>> = groups
        .iter()
        .enumerate()
        .map(|(g, group)| {
            let all = group
                .nodes
                .iter()
                .flat_map(|&n| og.nodes[n].producers.iter().map(|&p| of[p]));
            all.filter(|&p| p != g).collect()
        })
        .collect();
    let mut placed = vec![false; groups.len()];
    let mut order = Vec::with_capacity(groups.len());
    while order.len() < groups.len() {
        let ready = (0..groups.len())
            .filter(|&g| !placed[g] && producers[g].iter().all(|&p| placed[p]))
            .min_by_key(|&g| groups[g].nodes[0]);
        let Some(g) = ready else {
            bail!("the groups form a cycle");
        };
        placed[g] = true;
        order.push(g);
    }
    let mut groups: Vec<Option<Group>> = groups.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|g| groups[g].take()).collect())
}

/// How one group reads one value another group writes.
struct Read {
    value: ValueId,
    producer: usize,
    consumer: usize,
    shape: Vec<usize>,
    /// What each producer instance writes, when they write parts.
    written: Option<Region>,
    /// What each consumer instance reads.
    read: Region,
    producer_factors: Vec<usize>,
    consumer_factors: Vec<usize>,
}

/// Every value `consumer` reads from another group, with both regions.
fn group_reads(og: &OpGraph, groups: &[Group], consumer: usize) -> Vec<Read> {
    let group = &groups[consumer];
    let regions = propagate(og, &group.nodes, group.factors()).regions;
    let mut reads = Vec::new();
    for (&value, region) in &regions {
        let Some(node) = og.producer[value.index()] else {
            continue;
        };
        let Some(producer) = groups
            .iter()
            .position(|g| g.nodes.binary_search(&node).is_ok())
        else {
            continue;
        };
        if producer == consumer {
            continue;
        }
        reads.push(Read {
            value,
            producer,
            consumer,
            shape: og.shape(value).to_vec(),
            written: written_region(og, &groups[producer], value),
            read: region.clone(),
            producer_factors: groups[producer].factors().to_vec(),
            consumer_factors: group.factors().to_vec(),
        });
    }
    reads
}

/// What each of a group's instances writes of `value`, when they write
/// parts of it (its exit's output, split).
pub fn written_region(og: &OpGraph, group: &Group, value: ValueId) -> Option<Region> {
    let split = group.split.as_ref().filter(|s| s.factor() > 1)?;
    let exit = exit_node(og, &group.nodes)?;
    let prop = propagate(og, &group.nodes, &split.factors);
    let sliced =
        prop.split_nodes.binary_search(&exit).is_ok() && og.nodes[exit].outputs.contains(&value);
    sliced.then(|| prop.region(og, value))
}

impl Read {
    /// The instance edges: pairs whose parts of the value overlap.
    fn edges(&self, first: &[usize]) -> Vec<Edge> {
        let count = |f: &[usize]| f.iter().product::<usize>().max(1);
        let consumers: Vec<Vec<usize>> = (0..count(&self.consumer_factors))
            .map(|c| pieces(&self.consumer_factors, c))
            .collect();
        let mut edges = Vec::new();
        for p in 0..count(&self.producer_factors) {
            let written = pieces(&self.producer_factors, p);
            for (c, read) in consumers.iter().enumerate() {
                if self.overlaps(&written, read) {
                    edges.push(Edge {
                        producer: first[self.producer] + p,
                        consumer: first[self.consumer] + c,
                        value: self.value,
                    });
                }
            }
        }
        edges
    }

    /// Whether the producer's piece `written` and the consumer's piece
    /// `read` share elements: in every dimension both slice, their
    /// intervals meet.
    fn overlaps(&self, written: &[usize], read: &[usize]) -> bool {
        let Some(region) = &self.written else {
            return true;
        };
        let mut dims = region.dims.iter().zip(&self.read.dims).zip(&self.shape);
        dims.all(|((w, r), &size)| match (w, r) {
            (Some(w), Some(r)) => {
                let piece = |pieces: &[usize], axis: usize| pieces.get(axis).copied().unwrap_or(0);
                let (ws, we) = w.interval(piece(written, w.axis), size);
                let (rs, re) = r.interval(piece(read, r.axis), size);
                ws < re && rs < we
            }
            _ => true,
        })
    }
}

/// Fig. 7a: group by group, instances in order.
pub fn bfs_order(ig: &InstanceGraph) -> Vec<usize> {
    (0..ig.instances.len()).collect()
}

/// Algorithm 3 (Fig. 7b–f). `visit` starts in BFS order; instances
/// without producers move to `ready`; the last ready instance whose
/// producers are all ordered is ordered next, and its consumers move to
/// the end of `ready` (line 14, also when already there). Lines 3–4 move
/// instances only once: later an instance reaches in-degree 0 only by
/// line 13, and line 14 has already moved it.
pub fn dfs_order(ig: &InstanceGraph) -> Vec<usize> {
    let count = ig.instances.len();
    let mut indegree = vec![0usize; count];
    let mut consumers: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); count];
    for e in &ig.edges {
        if consumers[e.producer].insert(e.consumer) {
            indegree[e.consumer] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..count).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(count);
    while let Some(p) = ready.iter().rposition(|&i| indegree[i] == 0) {
        let next = ready.remove(p);
        order.push(next);
        for &c in &consumers[next] {
            indegree[c] -= 1;
            ready.retain(|&i| i != c);
            ready.push(c);
        }
    }
    order
}
