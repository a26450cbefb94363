//! Algorithms 3 and 4 on Fig. 3a's four stages: the instances of Fig. 6,
//! the BFS and DFS orders of Fig. 7, the concatenations of Fig. 8 and the
//! plain bindings of Fig. 9.

mod common;

use common::graph;
use kiln_dsa::grouping::{Group, Grouping};
use kiln_dsa::instances::{bfs_order, dfs_order, InstanceGraph};
use kiln_dsa::opgraph::OpGraph;
use kiln_dsa::scope::{
    bind_and_scope, cores_used, plain_binding, smaller_factors, transfers, Transfer,
};
use kiln_dsa::split_info::SplitCandidate;
use kiln_dsa::DsaDesc;

fn fig6() -> (OpGraph, InstanceGraph) {
    let og = OpGraph::new(&graph("fig3_stages")).unwrap();
    let desc = DsaDesc::preset("stcp920").unwrap();
    let groups = Grouping::run(&og, &desc);
    let ig = InstanceGraph::new(&og, groups).unwrap();
    (og, ig)
}

/// Fig. 6's labels: a1…a8, b1…b4, c1, c2, d1.
fn labels(ig: &InstanceGraph, order: &[usize]) -> Vec<String> {
    order
        .iter()
        .map(|&i| {
            let inst = ig.instances[i];
            format!("{}{}", ["a", "b", "c", "d"][inst.group], inst.index + 1)
        })
        .collect()
}

/// Fig. 6: 8, 4, 2 and 1 instances; each instance reads exactly the two
/// of the previous stage holding its images (the black edges), none of
/// the redundant gray ones.
#[test]
fn fig6_instances_and_their_edges() {
    let (_, ig) = fig6();
    let per_group: Vec<usize> = (0..4)
        .map(|g| ig.instances.iter().filter(|i| i.group == g).count())
        .collect();
    assert_eq!(per_group, [8, 4, 2, 1]);
    let edges: Vec<(String, String)> = ig
        .edges
        .iter()
        .map(|e| {
            let l = labels(&ig, &[e.producer, e.consumer]);
            (l[0].clone(), l[1].clone())
        })
        .collect();
    let mut expected = Vec::new();
    for (from, to, count) in [("a", "b", 4), ("b", "c", 2), ("c", "d", 1)] {
        for k in 1..=count {
            expected.push((format!("{from}{}", 2 * k - 1), format!("{to}{k}")));
            expected.push((format!("{from}{}", 2 * k), format!("{to}{k}")));
        }
    }
    expected.sort();
    let mut got = edges;
    got.sort();
    assert_eq!(got, expected);
}

/// Fig. 7a (BFS) and Fig. 7f (Algorithm 3's DFS), label for label.
#[test]
fn fig7_bfs_and_dfs_orders() {
    let (_, ig) = fig6();
    let bfs = "a1 a2 a3 a4 a5 a6 a7 a8 b1 b2 b3 b4 c1 c2 d1";
    let dfs = "a8 a7 b4 a6 a5 b3 c2 a4 a3 b2 a2 a1 b1 c1 d1";
    assert_eq!(labels(&ig, &bfs_order(&ig)).join(" "), bfs);
    assert_eq!(labels(&ig, &dfs_order(&ig)).join(" "), dfs);
}

/// Fig. 8: one concat before each consumer of two producer instances:
/// b1…b4, c1, c2 and d1.
#[test]
fn fig8_concatenates_instance_outputs() {
    let (og, ig) = fig6();
    let order = dfs_order(&ig);
    let (bind, scope) = bind_and_scope(&og, &ig, &order, 8);
    let moves = transfers(&og, &ig, &bind, &|e| scope[e.producer]);
    let mut concats: Vec<(String, usize)> = moves
        .iter()
        .filter_map(|t| match t {
            Transfer::Concat {
                consumer,
                producers,
                ..
            } => Some((labels(&ig, &[*consumer])[0].clone(), producers.len())),
            _ => None,
        })
        .collect();
    concats.sort();
    let expected: Vec<(String, usize)> = ["b1", "b2", "b3", "b4", "c1", "c2", "d1"]
        .iter()
        .map(|l| (l.to_string(), 2))
        .collect();
    assert_eq!(concats, expected);
}

/// Fig. 9's bindings are plain ones on eight cores: [2,28,28,512] gets
/// [2,4], [4,28,28,512] gets [4,2]; the redistribution between them
/// takes the smaller factor per dimension, [2,2].
#[test]
fn fig9_plain_bindings_and_redistribution() {
    let small = plain_binding(&[2, 28, 28, 512], 8);
    let large = plain_binding(&[4, 28, 28, 512], 8);
    assert_eq!(small, [2, 4, 1, 1]);
    assert_eq!(large, [4, 2, 1, 1]);
    assert_eq!(smaller_factors(&small, &large), [2, 2, 1, 1]);
    assert_eq!(
        plain_binding(&[1, 3, 5], 8),
        [1, 1, 1],
        "odd extents bind one core"
    );
}

/// Algorithm 4 binds every instance within the cluster's cores, and
/// every edge whose producer is not in LB gets a copy, every LB edge
/// with mismatching bindings a redistribution.
#[test]
fn algorithm4_binds_every_instance() {
    let (og, ig) = fig6();
    let order = dfs_order(&ig);
    let (bind, _) = bind_and_scope(&og, &ig, &order, 8);
    assert!(bind.iter().all(|b| !b.is_empty() && cores_used(b) <= 8));
    // The stage-1 instances (one image) use all cores over channels.
    assert!(bind[..8].iter().all(|b| b == &[1, 8, 1, 1]), "{bind:?}");
}

/// Instance edges through a halo: a ReLU and a padded 3×3 convolution
/// each cut into 4 pieces of 8 rows; convolution piece k reads rows
/// 8k − 1 .. 8k + 8 of the ReLU's output, so it depends on ReLU pieces
/// k − 1, k and k + 1 (10 edges, not 16); a DFS runs each convolution
/// piece as soon as the rows it reads are there.
#[test]
fn halo_edges_join_neighbouring_pieces() {
    let g = common::load(
        "graph \"t\" opsets [\"\"=17] {
  input %x: f32[1,8,32,32]
  input %w: f32[8,8,3,3]
  node \"r\" %a: f32[1,8,32,32] = Relu(%x)
  node \"c\" %b: f32[1,8,32,32] = Conv(%a, %w) {pads=[1,1,1,1]}
  output %b
}
",
    )
    .unwrap();
    let og = OpGraph::new(&g).unwrap();
    let cut = |n: usize| Group {
        nodes: vec![n],
        split: Some(SplitCandidate {
            split_ops: 1,
            factors: vec![1, 1, 4, 1],
            per_core_bytes: 0,
            batch: false,
            weight_slices: false,
        }),
    };
    let ig = InstanceGraph::new(&og, vec![cut(0), cut(1)]).unwrap();
    let pairs: Vec<(usize, usize)> = ig
        .edges
        .iter()
        .map(|e| (e.producer, e.consumer - 4))
        .collect();
    let expected = [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 1),
        (2, 2),
        (2, 3),
        (3, 2),
        (3, 3),
    ];
    assert_eq!(pairs, expected);
    // Instances 0–3 are the ReLU's pieces, 4–7 the convolution's.
    assert_eq!(dfs_order(&ig), [3, 2, 7, 1, 6, 0, 5, 4]);
}
