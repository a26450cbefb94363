//! Property tests of GraphTurbo's schedule on random small chains of
//! convolutions and element-wise ops (with residual adds, so diamonds and
//! branches occur): the groups partition the nodes, every split group's
//! instance fits the local buffer, the order runs producers first, and
//! the scopes are consistent with the transfers and the LB's size.

mod common;

use kiln_dsa::grouping::Grouping;
use kiln_dsa::opgraph::OpGraph;
use kiln_dsa::propagate::{instance_peak, propagate};
use kiln_dsa::scope::{Scope, Transfer};
use kiln_dsa::{graphturbo, per_layer, DsaDesc, Schedule};
use kiln_ir::Graph;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// One step of a chain: 0 Relu, 1 1×1 conv, 2 3×3 conv, 3 2×2 stride-2
/// conv, 4 add of the value two steps back (when shapes allow), with a
/// channel multiplier for convolutions.
type OpSpec = (u8, usize);

fn chain() -> impl Strategy<Value = (usize, usize, usize, Vec<OpSpec>)> {
    (
        prop::sample::select(vec![1usize, 2, 4, 8]),
        prop::sample::select(vec![8usize, 16, 32]),
        prop::sample::select(vec![8usize, 16, 32]),
        prop::collection::vec((0u8..5, 1usize..3), 1..10),
    )
}

/// The chain as kiln text (weights as `%w…` inputs), loaded.
fn build(n: usize, c: usize, h: usize, ops: &[OpSpec]) -> Graph {
    let mut lines = Vec::new();
    let mut inputs = vec![format!("  input %x: f32[{n},{c},{h},{h}]")];
    let mut values = vec![("x".to_string(), c, h)];
    for (k, &(kind, mult)) in ops.iter().enumerate() {
        let (prev, pc, ph) = values.last().cloned().unwrap();
        let name = format!("v{k}");
        let ty = |c: usize, h: usize| format!("f32[{n},{c},{h},{h}]");
        let (line, oc, oh) = match kind {
            1..=3 => {
                let (kernel, attrs, oh) = match kind {
                    1 => (1, String::new(), ph),
                    2 => (3, " {pads=[1,1,1,1]}".to_string(), ph),
                    _ if ph >= 2 => (2, " {strides=[2,2]}".to_string(), ph / 2),
                    _ => (1, String::new(), ph),
                };
                let oc = pc * mult;
                inputs.push(format!("  input %w{k}: f32[{oc},{pc},{kernel},{kernel}]"));
                let l = format!(
                    "  node \"n{k}\" %{name}: {} = Conv(%{prev}, %w{k}){attrs}",
                    ty(oc, oh)
                );
                (l, oc, oh)
            }
            4 if values.len() >= 3
                && values[values.len() - 3].1 == pc
                && values[values.len() - 3].2 == ph =>
            {
                let other = &values[values.len() - 3].0;
                (
                    format!(
                        "  node \"n{k}\" %{name}: {} = Add(%{prev}, %{other})",
                        ty(pc, ph)
                    ),
                    pc,
                    ph,
                )
            }
            _ => (
                format!("  node \"n{k}\" %{name}: {} = Relu(%{prev})", ty(pc, ph)),
                pc,
                ph,
            ),
        };
        lines.push(line);
        values.push((name, oc, oh));
    }
    let out = &values.last().unwrap().0;
    let src = format!(
        "graph \"chain\" opsets [\"\"=17] {{\n{}\n{}\n  output %{out}\n}}\n",
        inputs.join("\n"),
        lines.join("\n")
    );
    common::load(&src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

/// stcp920, and the same with a 16 KB LB so that more groups split.
fn targets() -> Vec<DsaDesc> {
    let full = DsaDesc::preset("stcp920").unwrap();
    let mut small = full.clone();
    small.local_buffer.bytes = 16 * 1024;
    vec![full, small]
}

fn check_groups(og: &OpGraph, desc: &DsaDesc) {
    let groups = Grouping::run(og, desc);
    let mut seen: Vec<usize> = groups.iter().flat_map(|g| g.nodes.clone()).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..og.nodes.len()).collect::<Vec<_>>(),
        "groups partition the nodes"
    );
    let cores = u64::from(desc.cores_per_cluster);
    for g in groups
        .iter()
        .filter_map(|g| g.split.as_ref().map(|s| (g, s)))
    {
        let (group, split) = g;
        let prop = propagate(og, &group.nodes, &split.factors);
        let per_core = instance_peak(og, &group.nodes, &prop).div_ceil(cores);
        assert_eq!(per_core, split.per_core_bytes);
        assert!(
            per_core <= desc.local_buffer.bytes,
            "an instance's tiles fit LB"
        );
    }
}

fn check_order(s: &Schedule) {
    let mut position = vec![usize::MAX; s.instances.len()];
    s.order
        .iter()
        .enumerate()
        .for_each(|(p, &i)| position[i] = p);
    assert!(
        position.iter().all(|&p| p != usize::MAX),
        "every instance is ordered once"
    );
    assert_eq!(s.order.len(), s.instances.len());
    for e in &s.edges {
        assert!(
            position[e.producer] < position[e.consumer],
            "producers run first"
        );
    }
}

/// An edge from GB or DDR has a copy into LB; an edge from LB (or read
/// before its producer's output was spilled) has none; every copy and
/// redistribution bridges an edge.
fn check_scopes(s: &Schedule) {
    let copies: BTreeSet<_> = s
        .transfers
        .iter()
        .filter_map(|t| match t {
            Transfer::Copy { edge, .. } => Some(*edge),
            _ => None,
        })
        .collect();
    for e in &s.edges {
        let off_core = s.instances[e.producer].scope != Scope::Lb && !s.early_reads.contains(e);
        assert_eq!(
            off_core,
            copies.contains(e),
            "copy iff the producer is off-core: {e:?}"
        );
    }
    for t in &s.transfers {
        if let Transfer::Redistribute { edge, from, to } = t {
            assert!(s.edges.contains(edge));
            let in_lb = s.instances[edge.producer].scope == Scope::Lb;
            assert!(in_lb || s.early_reads.contains(edge), "{edge:?}");
            assert!(from.iter().zip(to).all(|(f, t)| t <= f));
        }
    }
}

/// At every step the LB outputs then alive fit one core's LB (spread over
/// the cluster's cores), unless one alone is larger.
fn check_lb_capacity(s: &Schedule, desc: &DsaDesc) {
    let mut position = vec![0; s.instances.len()];
    s.order
        .iter()
        .enumerate()
        .for_each(|(p, &i)| position[i] = p);
    let cores = u64::from(desc.cores_per_cluster);
    let bytes =
        |i: usize| (s.instances[i].shape.iter().product::<usize>() as u64 * 4).div_ceil(cores);
    let end = |i: usize| {
        s.edges
            .iter()
            .filter(|e| e.producer == i)
            .map(|e| position[e.consumer])
            .max()
            .unwrap_or(position[i])
    };
    for step in 0..s.order.len() {
        let live: Vec<usize> = (0..s.instances.len())
            .filter(|&i| s.instances[i].scope == Scope::Lb && position[i] <= step && step <= end(i))
            .collect();
        let total: u64 = live.iter().map(|&i| bytes(i)).sum();
        assert!(
            live.len() <= 1 || total <= desc.local_buffer.bytes,
            "LB overflows at step {step}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_chains_schedule_consistently((n, c, h, ops) in chain()) {
        let g = build(n, c, h, &ops);
        let og = OpGraph::new(&g).unwrap();
        for desc in targets() {
            check_groups(&og, &desc);
            let turbo = graphturbo(&g, &desc).unwrap();
            check_order(&turbo);
            check_scopes(&turbo);
            check_lb_capacity(&turbo, &desc);
            let graph_outputs = turbo.instances.iter().filter(|i| g.outputs.iter().any(|&v| g.name(v) == i.output));
            prop_assert!(graph_outputs.clone().all(|i| i.scope == Scope::Ddr), "graph outputs go to DDR");
            let baseline = per_layer(&g, &desc).unwrap();
            check_order(&baseline);
            prop_assert_eq!(baseline.output_counts().ddr, baseline.instances.len(), "per-layer: all in DDR");
        }
    }
}
