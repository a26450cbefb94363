//! A fusion plan: plain data, and its text form.
//!
//! A [`Plan`] partitions the nodes of one graph into [`Group`]s, each to
//! become one kernel, and lists sets of groups that may run concurrently
//! (APOLLO Layer III, parallelism stitching). Planners build plans and
//! never edit the graph; `apply.rs` is the one step that turns any plan
//! into a graph of fused nodes.
//!
//! Text form (round-trips through [`Plan::parse`]):
//!
//! ```text
//! plan apollo
//! group reduction: 3 4 5
//! group matmul: 6 7
//! parallel: 1 2
//! ```
//!
//! Node numbers are positions in `Graph::nodes`; `parallel` lists group
//! numbers (positions in `groups`).

use kiln_ir::{bail, Result};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Which planner made it (`none`, `tvm`, `apollo`, `dp`).
    pub planner: String,
    /// Every node of the graph in exactly one group.
    pub groups: Vec<Group>,
    /// Sets of independent groups that may run concurrently.
    pub parallel: Vec<Vec<usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// What the planner says the kernel is (`element-wise`, `reduction`,
    /// `matmul`, …); one word, for reports.
    pub kind: String,
    /// Node positions, ascending.
    pub nodes: Vec<usize>,
}

impl Group {
    pub fn new(kind: impl Into<String>, mut nodes: Vec<usize>) -> Group {
        nodes.sort_unstable();
        nodes.dedup();
        Group {
            kind: kind.into(),
            nodes,
        }
    }
}

impl Plan {
    /// The plan with one group per node.
    pub fn singletons(planner: &str, kinds: impl Iterator<Item = String>) -> Plan {
        Plan {
            planner: planner.to_string(),
            groups: kinds
                .enumerate()
                .map(|(n, kind)| Group::new(kind, vec![n]))
                .collect(),
            parallel: Vec::new(),
        }
    }

    /// Groups ordered by their first node, nodes sorted.
    pub fn normalized(mut self) -> Plan {
        for g in &mut self.groups {
            g.nodes.sort_unstable();
        }
        let old: Vec<Vec<usize>> = self.groups.iter().map(|g| g.nodes.clone()).collect();
        self.groups.retain(|g| !g.nodes.is_empty());
        self.groups.sort_by_key(|g| g.nodes[0]);
        let position = |nodes: &Vec<usize>| self.groups.iter().position(|g| &g.nodes == nodes);
        let parallel: Vec<Vec<usize>> = self
            .parallel
            .iter()
            .map(|set| set.iter().filter_map(|&i| position(old.get(i)?)).collect())
            .filter(|set: &Vec<usize>| set.len() > 1)
            .collect();
        self.parallel = parallel;
        self
    }

    /// Checks that the groups partition `0..node_count`.
    pub fn check_partition(&self, node_count: usize) -> Result<()> {
        let mut seen = vec![false; node_count];
        for g in &self.groups {
            for &n in &g.nodes {
                match seen.get_mut(n) {
                    None => bail!("plan '{}': node {n} does not exist", self.planner),
                    Some(true) => bail!("plan '{}': node {n} is in two groups", self.planner),
                    Some(s) => *s = true,
                }
            }
        }
        if let Some(n) = seen.iter().position(|s| !s) {
            bail!("plan '{}': node {n} is in no group", self.planner);
        }
        for set in &self.parallel {
            if let Some(&i) = set.iter().find(|&&i| i >= self.groups.len()) {
                bail!("plan '{}': parallel set names group {i}", self.planner);
            }
        }
        Ok(())
    }

    /// Number of kernels: groups.
    pub fn kernels(&self) -> usize {
        self.groups.len()
    }

    /// Reads the text form.
    pub fn parse(text: &str) -> Result<Plan> {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let Some(planner) = lines.next().and_then(|l| l.strip_prefix("plan ")) else {
            bail!("fusion plan text must start with 'plan NAME'");
        };
        let mut plan = Plan {
            planner: planner.trim().to_string(),
            groups: Vec::new(),
            parallel: Vec::new(),
        };
        let numbers = |s: &str| -> Result<Vec<usize>> {
            s.split_whitespace()
                .map(|t| {
                    t.parse::<usize>()
                        .map_err(|_| kiln_ir::Error::new(format!("bad number '{t}' in fusion plan")))
                })
                .collect()
        };
        for line in lines {
            if let Some(rest) = line.strip_prefix("group ") {
                let Some((kind, nodes)) = rest.split_once(':') else {
                    bail!("fusion plan line '{line}': expected 'group KIND: NODES'");
                };
                plan.groups.push(Group {
                    kind: kind.trim().to_string(),
                    nodes: numbers(nodes)?,
                });
            } else if let Some(rest) = line.strip_prefix("parallel:") {
                plan.parallel.push(numbers(rest)?);
            } else {
                bail!("fusion plan line '{line}': expected 'group' or 'parallel'");
            }
        }
        Ok(plan)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(f, "plan {}", self.planner)?;
        for g in &self.groups {
            write!(f, "group {}:", g.kind)?;
            for n in &g.nodes {
                write!(f, " {n}")?;
            }
            writeln!(f)?;
        }
        for set in &self.parallel {
            write!(f, "parallel:")?;
            for n in set {
                write!(f, " {n}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips() {
        let plan = Plan {
            planner: "apollo".into(),
            groups: vec![
                Group::new("reduction", vec![0, 1, 2]),
                Group::new("matmul", vec![3, 4]),
                Group::new("element-wise", vec![5]),
            ],
            parallel: vec![vec![1, 2]],
        };
        let text = plan.to_string();
        assert_eq!(Plan::parse(&text).unwrap(), plan);
        plan.check_partition(6).unwrap();
        assert!(plan.check_partition(7).is_err());
    }

    #[test]
    fn bad_text_is_an_error() {
        assert!(Plan::parse("group x: 1").is_err());
        assert!(Plan::parse("plan p\ngroup x 1").is_err());
        assert!(Plan::parse("plan p\ngroup x: a").is_err());
    }
}
