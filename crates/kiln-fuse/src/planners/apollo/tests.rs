//! Tests of the `apollo` planner on small graphs in kiln's text IR (the
//! paper's examples: Fig. 3's ew→ew→reduction chain, Softmax/LayerNorm
//! stitching as in Fig. 5, Fig. 6's multi-head branches) and, when the
//! model file is present, on BERT.

use super::{aggregate, memory_stitch, plan};
use crate::graph::FusionGraph;
use crate::plan::Plan;
use kiln_ir::Graph;

fn graph(body: &str) -> Graph {
    let src = format!("graph \"g\" opsets [\"\"=18] {{\n{body}\n}}");
    kiln_ir::text::parse(&src).expect("test graph parses")
}

fn node(g: &Graph, name: &str) -> usize {
    g.nodes
        .iter()
        .position(|n| n.name == name)
        .expect("node exists")
}

/// The names of the nodes in `name`'s group, sorted.
fn group_of(g: &Graph, plan: &Plan, name: &str) -> Vec<String> {
    let n = node(g, name);
    let group = plan
        .groups
        .iter()
        .find(|gr| gr.nodes.contains(&n))
        .expect("node is planned");
    let mut names: Vec<String> = group
        .nodes
        .iter()
        .map(|&m| g.nodes[m].name.clone())
        .collect();
    names.sort();
    names
}

fn sorted(names: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// Plans `g`, checks the plan is a valid acyclic partition, returns it.
fn planned(g: &Graph) -> Plan {
    let fg = FusionGraph::new(g).expect("fusion graph");
    let p = plan(&fg, &crate::reference_target()).normalized();
    p.check_partition(g.nodes.len()).expect("partition");
    crate::apply::apply(g, &p).expect("plan applies (groups are convex)");
    p
}

fn kind_of(g: &Graph, plan: &Plan, name: &str) -> String {
    let n = node(g, name);
    plan.groups
        .iter()
        .find(|gr| gr.nodes.contains(&n))
        .expect("planned")
        .kind
        .clone()
}

#[test]
fn ew_chain_into_reduction_is_one_group() {
    // Fig. 3(c)'s first group: rules 1 then 4.
    let g = graph(
        r#"input %x: f32[4,8]
  init %axes: i64[1] = [1]
  node "exp" %a: f32[4,8] = Exp(%x)
  node "neg" %b: f32[4,8] = Neg(%a)
  node "sum" %y: f32[4,1] = ReduceSum(%b, %axes)
  output %y"#,
    );
    let p = planned(&g);
    assert_eq!(p.kernels(), 1);
    assert_eq!(kind_of(&g, &p, "sum"), "reduction");
}

#[test]
fn matmul_bias_relu_is_one_group() {
    let g = graph(
        r#"input %a: f32[8,16]
  input %w: f32[16,32]
  input %b: f32[32]
  node "mm" %y: f32[8,32] = MatMul(%a, %w)
  node "bias" %z: f32[8,32] = Add(%y, %b)
  node "relu" %r: f32[8,32] = Relu(%z)
  output %r"#,
    );
    let p = planned(&g);
    assert_eq!(group_of(&g, &p, "mm"), sorted(&["mm", "bias", "relu"]));
    assert_eq!(kind_of(&g, &p, "mm"), "matmul");
}

#[test]
fn two_contractions_never_share_a_group() {
    // The relu is the first matmul's epilogue (tried before the second's
    // prologue); the second matmul stays alone.
    let g = graph(
        r#"input %a: f32[8,16]
  input %w: f32[16,16]
  node "mm1" %y: f32[8,16] = MatMul(%a, %w)
  node "relu" %r: f32[8,16] = Relu(%y)
  node "mm2" %z: f32[8,16] = MatMul(%r, %w)
  output %z"#,
    );
    let p = planned(&g);
    assert_eq!(group_of(&g, &p, "mm1"), sorted(&["mm1", "relu"]));
    assert_eq!(group_of(&g, &p, "mm2"), sorted(&["mm2"]));
}

#[test]
fn epilogue_needs_the_contraction_result_unread_elsewhere() {
    // `y` is also a graph output, so the relu cannot be applied before the
    // matmul's store: they stay apart.
    let g = graph(
        r#"input %a: f32[8,16]
  input %w: f32[16,16]
  node "mm" %y: f32[8,16] = MatMul(%a, %w)
  node "relu" %r: f32[8,16] = Relu(%y)
  output %r, %y"#,
    );
    let p = planned(&g);
    assert_eq!(p.kernels(), 2);
}

/// A squeeze-excitation block after a grouped convolution (RegNetY's):
/// the bias and ReLU, read by the pooling and the scaling, are the
/// convolution's epilogue; the pooling is a reduction alone; the second
/// 1x1 convolution takes the excitation's bias and `Sigmoid`, which stay
/// out of the scaling that broadcasts them over the pixels.
const SQUEEZE_EXCITATION: &str = r#"input %x: f32[2,16,8,8]
  input %w: f32[16,4,3,3]
  input %b: f32[1,16,1,1]
  input %w1: f32[4,16,1,1]
  input %w2: f32[16,4,1,1]
  input %b2: f32[1,16,1,1]
  init %axes: i64[2] = [2, 3]
  node "conv" %y: f32[2,16,8,8] = Conv(%x, %w) {pads=[1,1,1,1], group=4}
  node "bias" %z: f32[2,16,8,8] = Add(%y, %b)
  node "relu" %r: f32[2,16,8,8] = Relu(%z)
  node "pool" %s: f32[2,16,1,1] = ReduceSum(%r, %axes)
  node "fc1" %f1: f32[2,4,1,1] = Conv(%s, %w1)
  node "fc2" %f2: f32[2,16,1,1] = Conv(%f1, %w2)
  node "bias2" %e: f32[2,16,1,1] = Add(%f2, %b2)
  node "gate" %gt: f32[2,16,1,1] = Sigmoid(%e)
  node "scale" %o: f32[2,16,8,8] = Mul(%r, %gt)
  output %o"#;

#[test]
fn grouped_conv_takes_the_epilogue_a_pooling_also_reads() {
    let g = graph(SQUEEZE_EXCITATION);
    let p = planned(&g);
    assert_eq!(group_of(&g, &p, "conv"), sorted(&["conv", "bias", "relu"]));
    assert_eq!(kind_of(&g, &p, "conv"), "conv");
    assert_eq!(group_of(&g, &p, "pool"), sorted(&["pool"]));
}

#[test]
fn a_sigmoid_is_not_recomputed_per_broadcast_element() {
    let g = graph(SQUEEZE_EXCITATION);
    let p = planned(&g);
    assert_eq!(group_of(&g, &p, "scale"), sorted(&["scale"]));
    assert_eq!(group_of(&g, &p, "fc2"), sorted(&["fc2", "bias2", "gate"]));
}

/// A DenseNet layer: the earlier features concatenated, batch-normalized
/// (per-channel `Add` and `Mul`) and rectified, then a 1x1 convolution (a
/// matmul). The concatenation and its element-wise consumers are one
/// group. (The kiln movement row then offers that group to the matmul as
/// a prologue; the CPU backend refuses a concatenation there, and the
/// feedback step splits the matmul off: `kiln-cpu/tests/channels_last.rs`.)
#[test]
fn a_concatenation_joins_its_elementwise_consumers() {
    let g = graph(
        r#"input %x0: f32[1,8,8,16]
  input %x1: f32[1,8,8,8]
  input %shift: f32[1,1,1,24]
  input %scale: f32[1,1,1,24]
  input %w: f32[24,32]
  node "cat" %c: f32[1,8,8,24] = Concat(%x0, %x1) {axis=3}
  node "shift" %a: f32[1,8,8,24] = Add(%c, %shift)
  node "scale" %m: f32[1,8,8,24] = Mul(%a, %scale)
  node "relu" %r: f32[1,8,8,24] = Relu(%m)
  node "conv1" %y: f32[1,8,8,32] = MatMul(%r, %w)
  output %y"#,
    );
    let p = planned(&g);
    let group = group_of(&g, &p, "cat");
    for name in ["shift", "scale", "relu"] {
        assert!(group.contains(&name.to_string()), "{group:?}");
    }
}

/// `slices.rs`: an LSTM step's gate slices of one matrix product join the
/// gate kernel, which keeps its element-wise kind; a slice that two
/// groups read (the product below) stays a kernel of its own.
#[test]
fn plain_slices_join_the_one_group_reading_them() {
    let g = graph(
        r#"input %h: f32[1,8]
  input %w: f32[8,16]
  input %b: f32[1,4]
  init %s0: i64[1] = [0]
  init %s1: i64[1] = [8]
  init %e0: i64[1] = [8]
  init %e1: i64[1] = [16]
  init %s2: i64[1] = [4]
  init %axis: i64[1] = [1]
  node "gates" %z: f32[1,16] = MatMul(%h, %w)
  node "slice_i" %zi: f32[1,8] = Slice(%z, %s0, %e0, %axis)
  node "slice_f" %zf: f32[1,8] = Slice(%z, %s1, %e1, %axis)
  node "sig_i" %i: f32[1,8] = Sigmoid(%zi)
  node "tanh_f" %f: f32[1,8] = Tanh(%zf)
  node "cell" %c: f32[1,8] = Mul(%i, %f)
  node "slice_h" %hs: f32[1,4] = Slice(%h, %s0, %s2, %axis)
  node "out" %y: f32[1,4] = Add(%hs, %b)
  node "twice" %t: f32[1,4] = Mul(%hs, %hs)
  output %c, %y, %t"#,
    );
    let p = planned(&g);
    let gate = sorted(&["slice_i", "slice_f", "sig_i", "tanh_f", "cell"]);
    assert_eq!(group_of(&g, &p, "cell"), gate);
    assert_eq!(kind_of(&g, &p, "cell"), "element-wise");
    assert_eq!(group_of(&g, &p, "slice_h"), sorted(&["slice_h"]));
}

/// `slices.rs`: a Resize's gathers by constant index tables join the
/// weighted sum reading them.
#[test]
fn gathers_join_the_weighted_sum_reading_them() {
    let g = graph(
        r#"input %x: f32[1,4]
  init %lo: i64[8] = [0, 0, 0, 1, 1, 2, 2, 3]
  init %hi: i64[8] = [0, 1, 1, 2, 2, 3, 3, 3]
  init %wl: f32[8] = [1, 0.75, 0.25, 0.75, 0.25, 0.75, 0.25, 1]
  init %wh: f32[8] = [0, 0.25, 0.75, 0.25, 0.75, 0.25, 0.75, 0]
  node "relu" %r: f32[1,4] = Relu(%x)
  node "take_lo" %a: f32[1,8] = Gather(%r, %lo) {axis=1}
  node "take_hi" %b: f32[1,8] = Gather(%r, %hi) {axis=1}
  node "scale_lo" %sa: f32[1,8] = Mul(%a, %wl)
  node "scale_hi" %sb: f32[1,8] = Mul(%b, %wh)
  node "sum" %y: f32[1,8] = Add(%sa, %sb)
  output %y"#,
    );
    let p = planned(&g);
    let sum = sorted(&["take_lo", "take_hi", "scale_lo", "scale_hi", "sum"]);
    assert_eq!(group_of(&g, &p, "sum"), sum);
    assert_eq!(group_of(&g, &p, "relu"), sorted(&["relu"]));
}

/// kiln-window: a window (pooling here; a Winograd output transform in
/// models) and the element-wise chain after it of its shape are one
/// group; a consumer of another shape (the sum) is not.
#[test]
fn a_window_joins_its_epilogue_of_its_shape() {
    let g = graph(
        r#"input %x: f32[1,8,12,12]
  input %b: f32[1,8,1,1]
  input %axes: i64[2]
  node "pool" %p: f32[1,8,6,6] = MaxPool(%x) {kernel_shape=[2,2], strides=[2,2]}
  node "bias" %a: f32[1,8,6,6] = Add(%p, %b)
  node "relu" %r: f32[1,8,6,6] = Relu(%a)
  node "sum" %s: f32[1,8,1,1] = ReduceSum(%r, %axes) {keepdims=1}
  output %r, %s"#,
    );
    let p = planned(&g);
    let group = group_of(&g, &p, "pool");
    assert!(group.contains(&"bias".to_string()), "{group:?}");
    assert!(group.contains(&"relu".to_string()), "{group:?}");
    assert!(!group.contains(&"sum".to_string()), "{group:?}");
}

#[test]
fn a_sigmoid_of_the_same_size_joins_its_consumer() {
    // A SiLU: the sigmoid's result is not broadcast, so it fuses.
    let g = graph(
        r#"input %x: f32[2,16,8,8]
  node "gate" %s: f32[2,16,8,8] = Sigmoid(%x)
  node "silu" %y: f32[2,16,8,8] = Mul(%x, %s)
  output %y"#,
    );
    let p = planned(&g);
    assert_eq!(p.kernels(), 1);
}

#[test]
fn scalar_broadcast_prologue_joins_but_softmax_division_stays_with_its_rows() {
    // `scale` broadcasts a scalar: a prologue of mm1. `div` broadcasts a
    // computed row: Layer II stitches it to the softmax, not to mm2.
    let g = graph(
        r#"input %q: f32[4,8]
  input %w: f32[8,8]
  init %s: f32[] = [0.5]
  init %axes: i64[1] = [1]
  node "scale" %qs: f32[4,8] = Mul(%q, %s)
  node "mm1" %a: f32[4,8] = MatMul(%qs, %w)
  node "max" %m: f32[4,1] = ReduceMax(%a, %axes)
  node "sub" %d: f32[4,8] = Sub(%a, %m)
  node "exp" %e: f32[4,8] = Exp(%d)
  node "sum" %t: f32[4,1] = ReduceSum(%e, %axes)
  node "div" %p: f32[4,8] = Div(%e, %t)
  node "mm2" %y: f32[4,8] = MatMul(%p, %w)
  output %y"#,
    );
    let p = planned(&g);
    assert_eq!(group_of(&g, &p, "mm1"), sorted(&["scale", "mm1"]));
    assert_eq!(
        group_of(&g, &p, "div"),
        sorted(&["max", "sub", "exp", "sum", "div"])
    );
    assert_eq!(group_of(&g, &p, "mm2"), sorted(&["mm2"]));
}

const REDUCE_THEN_DIV: &str = r#"input %x: f32[4,8]
  init %axes: i64[1] = [1]
  node "sum" %s: f32[4,1] = ReduceSum(%x, %axes)
  node "div" %y: f32[4,8] = Div(%x, %s)
  output %y"#;

#[test]
fn reduction_then_ew_is_left_by_layer_1_and_stitched_by_layer_2() {
    let g = graph(REDUCE_THEN_DIV);
    let fg = FusionGraph::new(&g).expect("fusion graph");
    let mut mg = aggregate::aggregate(&fg);
    let (sum, div) = (node(&g, "sum"), node(&g, "div"));
    assert_ne!(mg.part.group_of(sum), mg.part.group_of(div));
    assert_eq!(memory_stitch::stitch(&fg, &mut mg), 1);
    assert_eq!(mg.part.group_of(sum), mg.part.group_of(div));
}

#[test]
fn rule_7_takes_the_reduction_output_space() {
    // `scale` runs over the reduced space [4,1]: one value per row.
    let g = graph(
        r#"input %x: f32[4,8]
  init %axes: i64[1] = [1]
  node "sum" %s: f32[4,1] = ReduceSum(%x, %axes)
  node "scale" %y: f32[4,1] = Sqrt(%s)
  output %y"#,
    );
    assert_eq!(planned(&g).kernels(), 1);
}

#[test]
fn rule_7_needs_the_reduction_input_or_output_space() {
    // `spread` runs over [4,3]: neither the input space [4,8] nor the rows.
    let g = graph(
        r#"input %x: f32[4,8]
  input %z: f32[4,3]
  init %axes: i64[1] = [1]
  node "sum" %s: f32[4,1] = ReduceSum(%x, %axes)
  node "spread" %y: f32[4,3] = Add(%s, %z)
  output %y"#,
    );
    assert_eq!(planned(&g).kernels(), 2);
}

#[test]
fn softmax_from_primitives_is_one_group() {
    let g = graph(
        r#"input %x: f32[4,8]
  init %axes: i64[1] = [1]
  node "max" %m: f32[4,1] = ReduceMax(%x, %axes)
  node "sub" %d: f32[4,8] = Sub(%x, %m)
  node "exp" %e: f32[4,8] = Exp(%d)
  node "sum" %s: f32[4,1] = ReduceSum(%e, %axes)
  node "div" %y: f32[4,8] = Div(%e, %s)
  output %y"#,
    );
    let fg = FusionGraph::new(&g).expect("fusion graph");
    let mg = aggregate::aggregate(&fg);
    // Layer I: {max}, {sub, exp, sum} (rules 2 and 5), {div}.
    assert_eq!(mg.part.groups().len(), 3);
    let p = planned(&g);
    assert_eq!(p.kernels(), 1);
    assert_eq!(kind_of(&g, &p, "div"), "reduction");
}

#[test]
fn layernorm_from_primitives_is_one_group() {
    let g = graph(
        r#"input %x: f32[4,8]
  input %gamma: f32[8]
  input %beta: f32[8]
  init %axes: i64[1] = [1]
  init %inv_n: f32[] = [0.125]
  init %eps: f32[] = [0.00001]
  node "sum1" %s1: f32[4,1] = ReduceSum(%x, %axes)
  node "mean" %mean: f32[4,1] = Mul(%s1, %inv_n)
  node "sub" %d: f32[4,8] = Sub(%x, %mean)
  node "sq" %d2: f32[4,8] = Mul(%d, %d)
  node "sum2" %s2: f32[4,1] = ReduceSum(%d2, %axes)
  node "var" %var: f32[4,1] = Mul(%s2, %inv_n)
  node "addeps" %ve: f32[4,1] = Add(%var, %eps)
  node "sqrt" %sd: f32[4,1] = Sqrt(%ve)
  node "recip" %rs: f32[4,1] = Reciprocal(%sd)
  node "norm" %n: f32[4,8] = Mul(%d, %rs)
  node "scale" %sc: f32[4,8] = Mul(%n, %gamma)
  node "shift" %y: f32[4,8] = Add(%sc, %beta)
  output %y"#,
    );
    let p = planned(&g);
    assert_eq!(p.kernels(), 1, "{p}");
    assert_eq!(kind_of(&g, &p, "shift"), "reduction");
}

#[test]
fn rule_8_needs_one_canonical_form() {
    // Rows of [4,8], then the column of [4,1]: forms ([4],[8]) and ([],[4]).
    let g = graph(
        r#"input %x: f32[4,8]
  init %axes1: i64[1] = [1]
  init %axes0: i64[1] = [0]
  node "rows" %r: f32[4,1] = ReduceSum(%x, %axes1)
  node "all" %y: f32[1,1] = ReduceSum(%r, %axes0)
  output %y"#,
    );
    let p = planned(&g);
    assert_eq!(p.kernels(), 2);
}

#[test]
fn a_merge_that_would_make_a_cycle_is_refused() {
    // exp → add directly and through the transpose: rule 1 (exp, add)
    // would put the transpose both after and before the merged group.
    let g = graph(
        r#"input %x: f32[4,4]
  node "exp" %a: f32[4,4] = Exp(%x)
  node "t" %t: f32[4,4] = Transpose(%a) {perm=[1,0]}
  node "add" %y: f32[4,4] = Add(%a, %t)
  output %y"#,
    );
    let p = planned(&g);
    // Rule 6-transpose joins exp and t; add stays alone.
    assert_eq!(group_of(&g, &p, "exp"), sorted(&["exp", "t"]));
    assert_eq!(kind_of(&g, &p, "exp"), "transpose");
    assert_eq!(group_of(&g, &p, "add"), sorted(&["add"]));
}

#[test]
fn layer_3_finds_the_branches_of_a_multi_head_op() {
    // Fig. 6 style: a multi-head concat with three small reduction
    // branches and a compute-bound matmul branch (excluded).
    let g = graph(
        r#"input %x: f32[4,8]
  input %w: f32[8,3]
  init %axes: i64[1] = [1]
  node "exp" %e: f32[4,8] = Exp(%x)
  node "sum" %a: f32[4,1] = ReduceSum(%e, %axes)
  node "max" %b: f32[4,1] = ReduceMax(%x, %axes)
  node "neg" %n: f32[4,8] = Neg(%x)
  node "min" %c: f32[4,1] = ReduceMin(%n, %axes)
  node "mm" %m: f32[4,3] = MatMul(%x, %w)
  node "cat" %y: f32[4,6] = Concat(%a, %b, %c, %m) {axis=1}
  output %y"#,
    );
    let p = planned(&g);
    assert_eq!(p.kernels(), 5, "{p}");
    assert_eq!(p.parallel.len(), 1, "{p}");
    let mut kinds: Vec<Vec<String>> = p.parallel[0]
        .iter()
        .map(|&i| {
            p.groups[i]
                .nodes
                .iter()
                .map(|&n| g.nodes[n].name.clone())
                .collect()
        })
        .collect();
    kinds.sort();
    let expected = [vec!["exp", "sum"], vec!["max"], vec!["neg", "min"]];
    assert_eq!(
        kinds,
        expected.map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    );
}

#[test]
fn bert_softmax_and_layernorm_are_one_group_each() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/bert/model.onnx");
    if !path.exists() {
        eprintln!("skipped: {} not present", path.display());
        return;
    }
    let model = kiln_onnx::load(&path, &Default::default()).expect("BERT loads");
    let mut g = model.graph;
    kiln_passes::optimize(&mut g, &Default::default()).expect("optimizes");
    let p = planned(&g);
    let fg = FusionGraph::new(&g).expect("fusion graph");
    let patterns: Vec<String> = p
        .groups
        .iter()
        .map(|gr| crate::feedback::pattern(&fg, &gr.nodes))
        .collect();
    let count = |pat: &str| patterns.iter().filter(|p| p.ends_with(pat)).count();
    // 12 layers' attention softmax (the first also computes the mask).
    assert_eq!(count("ReduceMax+Sub+Exp+ReduceSum+Div"), 12, "{patterns:?}");
    // 25 LayerNorms: embeddings and two per layer, each with its residual add.
    assert_eq!(
        count("ReduceSum+Mul+Sub+Mul+ReduceSum+Mul+Add+Sqrt+Reciprocal+Mul"),
        25,
        "{patterns:?}"
    );
    assert!(
        p.kernels() < 399,
        "onnxruntime has 399 nodes; apollo made {}",
        p.kernels()
    );
}
