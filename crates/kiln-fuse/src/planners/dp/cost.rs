//! The mapping-rules paper's cost model, §3.3.1 eqs. (6)–(8):
//! `FusedCost = α·FusedCost_Mem + β·FusedCost_Par`.
//!
//! Needs: a Fused array (Algorithm 2's `fused`: the group number of every
//! node, any numbering) over a [`FusionGraph`].
//! Guarantees:
//! - `FusedCost_Mem` (eq. 6) is the sum of the weights ω_ij of the edges
//!   between different groups, ω = the bytes the producer writes
//!   (`NodeInfo::out_bytes`); a value read by several nodes of one other
//!   group crosses to it once, so it counts once per consumer group.
//! - `FusedCost_Par` (eq. 7) is the variance of the group sizes (number of
//!   nodes per group, population variance `1/N₂ Σ (nᵢ − n̄)²`).
//! - α and β are `PlanOptions::dp_alpha` (per byte; the default 1e-6
//!   weighs one MB between kernels like one unit of size variance) and
//!   `PlanOptions::dp_beta`: the paper's normalisation factors, "set from
//!   the model size and the platform" (§3.3.1).

use crate::graph::FusionGraph;
use crate::PlanOptions;
use std::collections::BTreeSet;

/// One plan's cost and its two terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Eq. (6), bytes.
    pub mem: f64,
    /// Eq. (7), nodes².
    pub par: f64,
    /// Eq. (8).
    pub total: f64,
}

pub fn cost(fg: &FusionGraph, fused: &[usize], opts: &PlanOptions) -> Cost {
    let mem = mem_cost(fg, fused);
    let par = par_cost(fused);
    Cost {
        mem,
        par,
        total: opts.dp_alpha * mem + opts.dp_beta * par,
    }
}

/// Eq. (6): bytes on edges between groups, once per consumer group.
pub fn mem_cost(fg: &FusionGraph, fused: &[usize]) -> f64 {
    let mut bytes = 0u64;
    for (p, info) in fg.nodes.iter().enumerate() {
        let other_groups: BTreeSet<usize> = info
            .consumers
            .iter()
            .map(|&c| fused[c])
            .filter(|&g| g != fused[p])
            .collect();
        bytes += info.out_bytes * other_groups.len() as u64;
    }
    bytes as f64
}

/// Eq. (7): variance of the number of nodes per group.
pub fn par_cost(fused: &[usize]) -> f64 {
    let mut sizes = vec![0usize; fused.iter().max().map_or(0, |&m| m + 1)];
    for &g in fused {
        sizes[g] += 1;
    }
    sizes.retain(|&s| s > 0);
    if sizes.is_empty() {
        return 0.0;
    }
    let n = sizes.len() as f64;
    let mean = sizes.iter().sum::<usize>() as f64 / n;
    sizes
        .iter()
        .map(|&s| (s as f64 - mean).powi(2))
        .sum::<f64>()
        / n
}
