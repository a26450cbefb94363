//! Algorithm 2 on the paper's examples: Fig. 4's three patterns, Fig. 5's
//! conv and identity blocks of ResNet-50 (Fig. 2), and rule (i) stopping
//! at Fig. 3a's down-sampling stage boundaries.

mod common;

use common::graph;
use kiln_dsa::grouping::{layers, Grouping};
use kiln_dsa::opgraph::OpGraph;
use kiln_dsa::DsaDesc;

fn stcp920() -> DsaDesc {
    DsaDesc::preset("stcp920").expect("preset")
}

/// Node names, group by group.
fn names(og: &OpGraph, groups: impl IntoIterator<Item = Vec<usize>>) -> Vec<Vec<&str>> {
    groups
        .into_iter()
        .map(|g| g.iter().map(|&n| og.nodes[n].name.as_str()).collect())
        .collect()
}

fn grouped<'a>(og: &'a OpGraph, grouping: &Grouping) -> Vec<Vec<&'a str>> {
    names(og, grouping.groups.iter().map(|g| g.nodes.clone()))
}

/// Fig. 4a: SG1 → SG2, each the other's only neighbour, become one.
#[test]
fn fig4a_straight_pattern_merges() {
    let og = OpGraph::new(&graph("fig4a_straight")).unwrap();
    let desc = stcp920();
    let mut grouping = Grouping::singletons(&og, &desc);
    assert!(grouping.straight_merge());
    assert_eq!(grouped(&og, &grouping), [vec!["sg1", "sg2"]]);
}

/// Fig. 4b: SG2, SG3 and SG4 (the red box) merge; the entry SG1 stays.
#[test]
fn fig4b_diamond_merges_all_but_the_entry() {
    let og = OpGraph::new(&graph("fig4b_diamond")).unwrap();
    let desc = stcp920();
    let mut grouping = Grouping::singletons(&og, &desc);
    assert!(
        !grouping.straight_merge(),
        "no straight pattern in a diamond"
    );
    assert!(grouping.diamond_merge());
    assert_eq!(
        grouped(&og, &grouping),
        [vec!["sg1"], vec!["sg2", "sg3", "sg4"]]
    );
}

/// Fig. 4c: SG2 (fed by SG1, as "could be") merges into the exit SG3;
/// SG1 feeds two sub-graphs and stays.
#[test]
fn fig4c_branch_merges_into_the_exit() {
    let og = OpGraph::new(&graph("fig4c_branch")).unwrap();
    let desc = stcp920();
    let mut grouping = Grouping::singletons(&og, &desc);
    assert!(!grouping.straight_merge());
    assert!(grouping.branch_merge());
    assert_eq!(grouped(&og, &grouping), [vec!["sg1"], vec!["sg2", "sg3"]]);
}

/// Fig. 5a: the straight patterns are the five sub-graphs 1–5 (the conv
/// block's three left layers, its shortcut layer, its add+ReLU; the
/// identity block's three layers, its add+ReLU); Fig. 5b–c: branch and
/// straight merges then make one sub-graph {1, 2, 3, 4, 5}.
#[test]
fn fig5_conv_and_identity_blocks_become_one_sub_graph() {
    let og = OpGraph::new(&graph("fig5_resnet_blocks")).unwrap();
    let desc = stcp920();
    let mut grouping = Grouping::singletons(&og, &desc);
    grouping.straight_merge();
    let fig5a = [
        vec![
            "conv1", "bn1", "relu1", "conv2", "bn2", "relu2", "conv3", "bn3",
        ],
        vec!["convs", "bns"],
        vec!["add", "relu"],
        vec![
            "conv4", "bn4", "relu4", "conv5", "bn5", "relu5", "conv6", "bn6",
        ],
        vec!["add2", "relu6"],
    ];
    assert_eq!(grouped(&og, &grouping), fig5a);
    let all = Grouping::run(&og, &desc);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].nodes, (0..og.nodes.len()).collect::<Vec<_>>());
}

/// Fig. 2's layers (§1.1: a straight line with at most one parametric
/// node): conv-bn-relu, conv-bn and add-relu, nine in the two blocks.
#[test]
fn fig2_layers_are_the_per_layer_kernels() {
    let og = OpGraph::new(&graph("fig5_resnet_blocks")).unwrap();
    let expected = [
        vec!["conv1", "bn1", "relu1"],
        vec!["conv2", "bn2", "relu2"],
        vec!["conv3", "bn3"],
        vec!["convs", "bns"],
        vec!["add", "relu"],
        vec!["conv4", "bn4", "relu4"],
        vec!["conv5", "bn5", "relu5"],
        vec!["conv6", "bn6"],
        vec!["add2", "relu6"],
    ];
    assert_eq!(names(&og, layers(&og)), expected);
}

/// Fig. 3a: each stage halves its tensors; its sub-graph splits 8, 4, 2
/// and 1 ways (one image per instance in stage 1), and rule (i) keeps a
/// stage from merging into the next (`f(SG2) ≥ f(SG1)` fails).
#[test]
fn fig3_stages_stop_at_down_sampling() {
    let og = OpGraph::new(&graph("fig3_stages")).unwrap();
    let groups = Grouping::run(&og, &stcp920());
    let stages = [
        vec!["conv_a", "relu_a", "down_a"],
        vec!["conv_b", "relu_b", "down_b"],
        vec!["conv_c", "relu_c", "down_c"],
        vec!["conv_d", "relu_d"],
    ];
    assert_eq!(names(&og, groups.iter().map(|g| g.nodes.clone())), stages);
    let splits: Vec<(usize, usize)> = groups
        .iter()
        .map(|g| g.split.as_ref().map(|s| (s.axis(), s.factor())).unwrap())
        .collect();
    assert_eq!(splits, [(0, 8), (0, 4), (0, 2), (0, 1)]);
}
