//! The `dp` planner on small graphs: the paper's Fig. 4 example (its
//! candidate paths and final Fused array), Table 1 cases on real ops, and
//! the cost model (eqs. 6–8) on hand-computed plans.

use kiln_fuse::planners::dp::{candidates, cost, rules, search};
use kiln_fuse::{plan, AcceptAll, FusionGraph, PlanOptions, PlannerKind};
use kiln_ir::Graph;
use kiln_ops::te::classify::MappingType;

fn parse(text: &str) -> Graph {
    kiln_ir::text::parse(text).unwrap()
}

/// The paper's setting: producers may fuse in front of contractions.
fn paper() -> PlanOptions {
    PlanOptions {
        contraction_prologues: true,
        ..PlanOptions::default()
    }
}

/// The dp plan's groups (node lists, in order), with the paper's rules.
fn dp_groups(g: &Graph) -> Vec<Vec<usize>> {
    let planned = plan(g, PlannerKind::Dp, &AcceptAll, &paper()).unwrap();
    planned.plan.groups.into_iter().map(|g| g.nodes).collect()
}

/// A graph shaped like the paper's Fig. 4(b): nodes 0–3 not fusable (TopK,
/// a library op), node 4 one-to-one starting the fusable paths {4,5,6,9}
/// and {4,5,6,8,9} (§3.3.1), 6 an expand (one-to-many), 10 a reduction
/// (many-to-one), 12 a matmul.
const FIG4: &str = r#"graph "fig4" opsets [""=17] {
  input %a: f32[4,8]
  input %b: f32[2,4,8]
  input %c: f32[2,8,3]
  input %d: f32[4,8]
  init %k8: i64[1] = [8]
  init %k3: i64[1] = [3]
  init %shape: i64[3] = [2, 4, 8]
  init %axes: i64[1] = [1]
  node "n0" %v0: f32[4,8], %i0: i64[4,8] = TopK(%a, %k8) {axis=1}
  node "n1" %v1: f32[2,4,8], %i1: i64[2,4,8] = TopK(%b, %k8) {axis=2}
  node "n2" %v2: f32[2,8,3], %i2: i64[2,8,3] = TopK(%c, %k3) {axis=2}
  node "n3" %v3: f32[4,8], %i3: i64[4,8] = TopK(%d, %k8) {axis=1}
  node "n4" %x4: f32[4,8] = Relu(%v0)
  node "n5" %x5: f32[4,8] = Exp(%x4)
  node "n6" %x6: f32[2,4,8] = Expand(%x5, %shape)
  node "n7" %x7: f32[2,4,8] = Neg(%v1)
  node "n8" %x8: f32[2,4,8] = Mul(%x6, %x7)
  node "n9" %x9: f32[2,4,8] = Add(%x6, %x8)
  node "n10" %x10: f32[2,1,8] = ReduceSum(%x9, %axes) {keepdims=1}
  node "n11" %x11: f32[2,8,3] = Relu(%v2)
  node "n12" %x12: f32[2,1,3] = MatMul(%x10, %x11)
  output %x12, %v3
}"#;

#[test]
fn fig4_candidate_paths_from_node_4() {
    let g = parse(FIG4);
    let fg = FusionGraph::new(&g).unwrap();
    let types: Vec<_> = fg.nodes.iter().map(rules::node_type).collect();
    let cands = candidates::build(&fg, &types);
    assert_eq!(cands.paths[4], vec![vec![4, 5, 6, 8, 9], vec![4, 5, 6, 9]]);
    assert_eq!(cands.paths[7], vec![vec![7, 8, 9, 10]]);
    assert_eq!(cands.paths[11], vec![vec![11, 12]]);
    assert!(cands.paths[..4].iter().all(|p| p.is_empty()));
    assert_eq!(cands.capped, 0);
}

#[test]
fn fig4_fused_array_is_the_papers() {
    let g = parse(FIG4);
    let fg = FusionGraph::new(&g).unwrap();
    let types: Vec<_> = fg.nodes.iter().map(rules::node_type).collect();
    let cands = candidates::build(&fg, &types);
    let opts = paper();
    let out = search::search(&fg, &types, &cands, &opts);
    assert_eq!(out.stopped, None);
    let fused = search::fused_array(fg.len(), &out.partition);
    assert_eq!(dense(&fused), vec![0, 1, 2, 3, 4, 4, 4, 5, 5, 5, 5, 6, 6]);
    assert_eq!(
        dp_groups(&g)[4..],
        [vec![4, 5, 6], vec![7, 8, 9, 10], vec![11, 12]]
    );
}

/// The two plans the search weighs on Fig. 4, by hand: the longest path
/// of node 4 first ({4,5,6,8,9}, then 7 joins it in the second fusion) or
/// node 7's first. Both leave the same bytes between groups (2048: TopK
/// outputs 384 + 768 + 576, then 9→10 = 256 or 6→{7..10} = 256, and
/// 10→12 = 64); the group sizes [1,1,1,1,6,1,2] have variance 146/49,
/// [1,1,1,1,3,4,2] 62/49, so the search keeps the second.
#[test]
fn fig4_search_keeps_the_cheaper_plan() {
    let g = parse(FIG4);
    let fg = FusionGraph::new(&g).unwrap();
    let opts = PlanOptions::default();
    let first = cost::cost(&fg, &[0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 5, 6, 6], &opts);
    let second = cost::cost(&fg, &[0, 1, 2, 3, 4, 4, 4, 5, 5, 5, 5, 6, 6], &opts);
    assert_eq!((first.mem, second.mem), (2048.0, 2048.0));
    assert!((first.par - 146.0 / 49.0).abs() < 1e-12);
    assert!((second.par - 62.0 / 49.0).abs() < 1e-12);
    assert!(second.total < first.total);
    let types: Vec<_> = fg.nodes.iter().map(rules::node_type).collect();
    let out = search::search(&fg, &types, &candidates::build(&fg, &types), &opts);
    assert_eq!(out.cost, second);
    assert!(out.plans > 1);
}

/// Renumbers group ids densely in order of first appearance (the paper's
/// Fused array numbering).
fn dense(fused: &[usize]) -> Vec<usize> {
    let mut seen: Vec<usize> = Vec::new();
    fused
        .iter()
        .map(|g| {
            seen.iter().position(|s| s == g).unwrap_or_else(|| {
                seen.push(*g);
                seen.len() - 1
            })
        })
        .collect()
}

#[test]
fn cost_counts_a_value_once_per_consumer_group() {
    // 0 → {1, 2} → 3, every value 6 f32 = 24 bytes.
    let g = parse(
        r#"graph "g" opsets [""=17] {
  input %x: f32[2,3]
  node "a" %a: f32[2,3] = Relu(%x)
  node "b" %b: f32[2,3] = Exp(%a)
  node "c" %c: f32[2,3] = Neg(%a)
  node "d" %d: f32[2,3] = Add(%b, %c)
  output %d
}"#,
    );
    let fg = FusionGraph::new(&g).unwrap();
    let opts = PlanOptions {
        dp_alpha: 0.5,
        dp_beta: 2.0,
        ..PlanOptions::default()
    };
    // {0,1} {2,3}: a→c and b→d cross; sizes 2, 2.
    let c = cost::cost(&fg, &[0, 0, 1, 1], &opts);
    assert_eq!((c.mem, c.par, c.total), (48.0, 0.0, 24.0));
    // {0} {1,2,3}: a crosses once to the group reading it twice; sizes 1, 3.
    let c = cost::cost(&fg, &[0, 1, 1, 1], &opts);
    assert_eq!((c.mem, c.par, c.total), (24.0, 1.0, 14.0));
    // Each node alone: a twice, b and c once.
    let c = cost::cost(&fg, &[0, 1, 2, 3], &opts);
    assert_eq!((c.mem, c.par, c.total), (96.0, 0.0, 48.0));
    // One chain of one-to-one ops is one kernel.
    assert_eq!(dp_groups(&g), vec![vec![0, 1, 2, 3]]);
}

#[test]
fn contractions_take_their_epilogue_but_not_each_other() {
    let g = parse(
        r#"graph "g" opsets [""=17] {
  input %x: f32[4,8]
  init %w1: f32[8,8] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  init %bias: f32[8] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
  node "mm1" %m1: f32[4,8] = MatMul(%x, %w1)
  node "mm2" %m2: f32[4,8] = MatMul(%m1, %w1)
  node "add" %a: f32[4,8] = Add(%m2, %bias)
  node "relu" %r: f32[4,8] = Relu(%a)
  output %r
}"#,
    );
    let fg = FusionGraph::new(&g).unwrap();
    let add = rules::node_type(&fg.nodes[2]);
    assert_eq!(
        add.mapping,
        MappingType::OneToOne,
        "bias add counts as one-to-one"
    );
    assert_eq!(dp_groups(&g), vec![vec![0], vec![1, 2, 3]]);
    let planned = plan(&g, PlannerKind::Dp, &AcceptAll, &PlanOptions::default()).unwrap();
    assert_eq!(planned.plan.groups[1].kind, "matmul");
}

#[test]
fn transpose_fuses_after_a_matmul_but_not_before_one() {
    let g = parse(
        r#"graph "g" opsets [""=17] {
  input %x: f32[4,8]
  input %y: f32[4,8]
  node "t1" %t1: f32[8,4] = Transpose(%x) {perm=[1,0]}
  node "mm" %m: f32[8,8] = MatMul(%t1, %y)
  node "t2" %t2: f32[8,8] = Transpose(%m) {perm=[1,0]}
  output %t2
}"#,
    );
    assert_eq!(dp_groups(&g), vec![vec![0], vec![1, 2]]);
}

#[test]
fn reduction_fuses_with_a_following_expand_and_its_input() {
    // Supplement 2: a many-to-one op followed by a one-to-many op.
    let g = parse(
        r#"graph "g" opsets [""=17] {
  input %x: f32[4,8]
  init %axes: i64[1] = [1]
  init %shape: i64[2] = [4, 8]
  node "exp" %e: f32[4,8] = Exp(%x)
  node "sum" %s: f32[4,1] = ReduceSum(%e, %axes) {keepdims=1}
  node "expand" %b: f32[4,8] = Expand(%s, %shape)
  output %b
}"#,
    );
    let fg = FusionGraph::new(&g).unwrap();
    assert_eq!(
        rules::node_type(&fg.nodes[2]).mapping,
        MappingType::OneToMany
    );
    assert_eq!(dp_groups(&g), vec![vec![0, 1, 2]]);
}

#[test]
fn budgets_keep_the_best_plan_found_and_say_so() {
    let g = parse(FIG4);
    let opts = PlanOptions {
        dp_state_budget: 1,
        ..paper()
    };
    let planned = plan(&g, PlannerKind::Dp, &AcceptAll, &opts).unwrap();
    assert_eq!(planned.notes.len(), 1, "{:?}", planned.notes);
    assert!(planned.notes[0].starts_with("state budget hit after"));
    assert_eq!(planned.plan.kernels(), 7);
}

/// A transformer-like block after `optimize` (LayerNorm and Softmax
/// opened): the dp plan applies (its groups are convex, `apply` verifies
/// the fused graph), no group holds two many-to-many ops (Table 1), and it
/// fuses.
#[test]
fn transformer_block_plan_applies() {
    let mut g = parse(
        r#"graph "g" opsets [""=17] {
  input %x: f32[2,4,8]
  input %w: f32[8,8]
  input %gamma: f32[8]
  input %beta: f32[8]
  node "ln" %n: f32[2,4,8] = LayerNormalization(%x, %gamma, %beta) {axis=-1, epsilon=1e-5}
  node "q" %q: f32[2,4,8] = MatMul(%n, %w)
  node "qb" %qb: f32[2,4,8] = Add(%q, %beta)
  node "t" %t: f32[2,8,4] = Transpose(%n) {perm=[0,2,1]}
  node "s" %s: f32[2,4,4] = MatMul(%qb, %t)
  node "sm" %p: f32[2,4,4] = Softmax(%s) {axis=-1}
  node "o" %o: f32[2,4,8] = MatMul(%p, %n)
  node "res" %r: f32[2,4,8] = Add(%o, %x)
  output %r
}"#,
    );
    kiln_passes::optimize(&mut g, &Default::default()).unwrap();
    let planned = plan(&g, PlannerKind::Dp, &AcceptAll, &PlanOptions::default()).unwrap();
    kiln_fuse::apply::apply(&g, &planned.plan).unwrap();
    let fg = FusionGraph::new(&g).unwrap();
    for group in &planned.plan.groups {
        let many = group
            .nodes
            .iter()
            .filter(|&&n| fg.nodes[n].mapping() == MappingType::ManyToMany)
            .count();
        assert!(
            many <= 1,
            "group {:?} holds {many} many-to-many ops",
            group.nodes
        );
    }
    assert!(
        planned.plan.kernels() * 2 <= g.nodes.len(),
        "{} nodes, {} kernels",
        g.nodes.len(),
        planned.plan.kernels()
    );
}
