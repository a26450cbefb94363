//! The `tvm` planner on small text-IR graphs: TVM's fusion rules (conv/
//! matmul epilogues, reductions with their element-wise inputs, no fusion
//! after a reduction or into a matmul's input, post-dominated diamonds,
//! injective chains, graph outputs, the max fuse depth).

use kiln_fuse::planners::tvm::MAX_FUSE_DEPTH;
use kiln_fuse::{plan, AcceptAll, PlanOptions, PlannerKind};
use kiln_ir::Graph;

fn graph(body: &str) -> Graph {
    let src = format!("graph \"g\" opsets [\"\"=18] {{\n{body}\n}}");
    kiln_ir::text::parse(&src).unwrap()
}

/// The tvm plan of `g` as (kind, node names) per group.
fn groups(g: &Graph) -> Vec<(String, Vec<String>)> {
    let planned = plan(g, PlannerKind::Tvm, &AcceptAll, &PlanOptions::default()).unwrap();
    assert!(planned.feedback.is_empty());
    planned
        .plan
        .groups
        .iter()
        .map(|grp| {
            let names = grp.nodes.iter().map(|&n| g.nodes[n].name.clone()).collect();
            (grp.kind.clone(), names)
        })
        .collect()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn conv_bias_relu_is_one_conv_kernel() {
    let g = graph(
        r#"input %x: f32[1,4,8,8]
        input %w: f32[8,4,3,3]
        input %b: f32[1,8,1,1]
        node "conv" %y: f32[1,8,8,8] = Conv(%x, %w) {pads=[1,1,1,1]}
        node "bias" %z: f32[1,8,8,8] = Add(%y, %b)
        node "relu" %r: f32[1,8,8,8] = Relu(%z)
        output %r"#,
    );
    assert_eq!(
        groups(&g),
        vec![("conv".into(), names(&["conv", "bias", "relu"]))]
    );
}

#[test]
fn conv_with_bias_input_opens_and_fuses() {
    let mut g = graph(
        r#"input %x: f32[1,4,8,8]
        input %w: f32[8,4,3,3]
        input %b: f32[8]
        node "conv" %y: f32[1,8,8,8] = Conv(%x, %w, %b) {pads=[1,1,1,1]}
        node "relu" %r: f32[1,8,8,8] = Relu(%y)
        output %r"#,
    );
    kiln_passes::optimize(&mut g, &Default::default()).unwrap();
    let gs = groups(&g);
    assert_eq!(gs.len(), 1, "{gs:?}");
    assert_eq!(gs[0].0, "conv");
}

#[test]
fn elementwise_fuses_into_the_reduction_it_feeds() {
    let g = graph(
        r#"input %x: f32[4,64]
        init %axes: i64[1] = [1]
        node "exp" %e: f32[4,64] = Exp(%x)
        node "sq" %s: f32[4,64] = Mul(%e, %e)
        node "sum" %y: f32[4,1] = ReduceSum(%s, %axes)
        output %y"#,
    );
    assert_eq!(
        groups(&g),
        vec![("reduction".into(), names(&["exp", "sq", "sum"]))]
    );
}

#[test]
fn reduction_does_not_fuse_into_its_consumer() {
    let g = graph(
        r#"input %x: f32[4,64]
        init %axes: i64[1] = [1]
        node "sum" %y: f32[4,1] = ReduceSum(%x, %axes)
        node "neg" %n: f32[4,1] = Neg(%y)
        node "exp" %e: f32[4,1] = Exp(%n)
        output %e"#,
    );
    assert_eq!(
        groups(&g),
        vec![
            ("reduction".into(), names(&["sum"])),
            ("element-wise".into(), names(&["neg", "exp"])),
        ]
    );
}

#[test]
fn elementwise_does_not_fuse_into_a_matmul_input_but_the_epilogue_does() {
    let g = graph(
        r#"input %x: f32[8,16]
        input %w: f32[16,32]
        input %b: f32[32]
        node "relu" %r: f32[8,16] = Relu(%x)
        node "mm" %y: f32[8,32] = MatMul(%r, %w)
        node "bias" %z: f32[8,32] = Add(%y, %b)
        node "tanh" %t: f32[8,32] = Tanh(%z)
        output %t"#,
    );
    assert_eq!(
        groups(&g),
        vec![
            ("element-wise".into(), names(&["relu"])),
            ("matmul".into(), names(&["mm", "bias", "tanh"])),
        ]
    );
}

#[test]
fn post_dominated_diamond_is_one_group() {
    let g = graph(
        r#"input %x: f32[16]
        node "a" %a: f32[16] = Exp(%x)
        node "b" %b: f32[16] = Neg(%a)
        node "c" %c: f32[16] = Abs(%a)
        node "d" %d: f32[16] = Add(%b, %c)
        output %d"#,
    );
    assert_eq!(
        groups(&g),
        vec![("element-wise".into(), names(&["a", "b", "c", "d"]))]
    );
}

#[test]
fn diamond_through_a_reduction_is_not_fused() {
    // Softmax's shape: exp feeds the sum and the division; the path
    // through the reduction stops exp from fusing into the division.
    let g = graph(
        r#"input %x: f32[4,64]
        init %axes: i64[1] = [1]
        node "exp" %e: f32[4,64] = Exp(%x)
        node "sum" %s: f32[4,1] = ReduceSum(%e, %axes)
        node "div" %d: f32[4,64] = Div(%e, %s)
        output %d"#,
    );
    assert_eq!(
        groups(&g),
        vec![
            ("element-wise".into(), names(&["exp"])),
            ("reduction".into(), names(&["sum"])),
            ("broadcast".into(), names(&["div"])),
        ]
    );
}

#[test]
fn graph_output_does_not_fuse_into_its_consumer() {
    let g = graph(
        r#"input %x: f32[16]
        node "a" %a: f32[16] = Exp(%x)
        node "b" %b: f32[16] = Neg(%a)
        node "c" %c: f32[16] = Abs(%b)
        output %b, %c"#,
    );
    assert_eq!(
        groups(&g),
        vec![
            ("element-wise".into(), names(&["a", "b"])),
            ("element-wise".into(), names(&["c"])),
        ]
    );
}

#[test]
fn injective_chain_fuses_in_phase_one() {
    let g = graph(
        r#"input %x: f32[8,16]
        node "relu" %r: f32[8,16] = Relu(%x)
        node "t" %t: f32[16,8] = Transpose(%r) {perm=[1,0]}
        node "exp" %e: f32[16,8] = Exp(%t)
        output %e"#,
    );
    assert_eq!(
        groups(&g),
        vec![("injective".into(), names(&["relu", "t", "exp"]))]
    );
}

#[test]
fn groups_stop_at_the_max_fuse_depth() {
    let n = MAX_FUSE_DEPTH + 10;
    let mut body = String::from("input %v0: f32[4]\n");
    for i in 1..=n {
        body += &format!("node \"n{i}\" %v{i}: f32[4] = Neg(%v{})\n", i - 1);
    }
    body += &format!("output %v{n}");
    let gs = groups(&graph(&body));
    let sizes: Vec<usize> = gs.iter().map(|(_, nodes)| nodes.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), n);
    assert!(sizes.iter().all(|&s| s <= MAX_FUSE_DEPTH), "{sizes:?}");
    assert_eq!(sizes.len(), 2, "{sizes:?}");
}
