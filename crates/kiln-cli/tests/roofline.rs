//! No cliffs: every kernel of small one-op models (each primitive the model
//! suite leans on, at sizes where a kernel takes a fraction of a
//! millisecond; spatial ops after a 1x1 convolution, so they read the
//! channels-last values they read in a network) runs within a factor of
//! its roofline bound on this machine
//! (`kiln_cli::roofline`: FLOPs at the measured FMA peak, compulsory bytes
//! at the measured triad bandwidth, one thread). A new cliff — a kernel in
//! a generic loop form, an operand read element by element — is tens of
//! times its bound and fails here, naming the case and the kernel.
//!
//! The factor is loose ([`FACTOR`]) because the bound ignores caches
//! (what stays in L2 runs faster than DRAM, which only lowers the ratio)
//! and because other processes may run beside the test (a profile takes
//! the median of 11 runs).

use kiln_cli::profile::{node_profile, NodeProfile};
use kiln_cli::roofline::{bound_ms, Machine};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_ir::{DType, Data, Graph, Initializer, Tensor};

/// Most times its roofline bound a kernel may take.
const FACTOR: f64 = 8.0;

/// Milliseconds every kernel may take beyond the factor: a call's fixed
/// cost, which the bound does not count.
const SLACK_MS: f64 = 0.02;

/// One case: a graph in kiln's text form whose inputs named `w…` become
/// random initializers (weights).
struct Case {
    name: &'static str,
    text: String,
}

fn case(name: &'static str, text: &str) -> Case {
    Case {
        name,
        text: text.to_string(),
    }
}

/// A 3x3 convolution in `groups` groups (padding 1) and a ReLU over
/// `[images, channels, side, side]`, after a 1x1 convolution, so that it
/// reads channels-last values as it does inside a network.
fn conv3x3_after_1x1(name: &'static str, [n, c, side]: [usize; 3], groups: usize) -> Case {
    let x = format!("f32[{n},{c},{side},{side}]");
    let text = format!(
        r#"graph "g" opsets [""=17] {{
  input %x0: {x}
  input %w0: f32[{c},{c},1,1]
  input %w: f32[{c},{},3,3]
  node "c0" %x: {x} = Conv(%x0, %w0)
  node "c" %y: {x} = Conv(%x, %w) {{group={groups}, pads=[1,1,1,1]}}
  node "r" %z: {x} = Relu(%y)
  output %z
}}"#,
        c / groups
    );
    case(name, &text)
}

fn cases() -> Vec<Case> {
    vec![
        case(
            "matmul_bias",
            r#"graph "g" opsets [""=17] {
  input %x: f32[256,512]
  input %w: f32[512,512]
  input %wb: f32[512]
  node "mm" %y: f32[256,512] = MatMul(%x, %w)
  node "b" %z: f32[256,512] = Add(%y, %wb)
  output %z
}"#,
        ),
        case(
            "conv3x3_relu",
            r#"graph "g" opsets [""=17] {
  input %x: f32[1,64,56,56]
  input %w: f32[64,64,3,3]
  node "c" %y: f32[1,64,56,56] = Conv(%x, %w) {pads=[1,1,1,1]}
  node "r" %z: f32[1,64,56,56] = Relu(%y)
  output %z
}"#,
        ),
        case(
            "conv3x3_images",
            r#"graph "g" opsets [""=17] {
  input %x: f32[4,128,14,14]
  input %w: f32[128,128,3,3]
  node "c" %y: f32[4,128,14,14] = Conv(%x, %w) {pads=[1,1,1,1]}
  node "r" %z: f32[4,128,14,14] = Relu(%y)
  output %z
}"#,
        ),
        conv3x3_after_1x1("grouped_conv_8_per_group", [4, 208, 28], 26),
        conv3x3_after_1x1("grouped_conv_4_per_group", [1, 128, 56], 32),
        conv3x3_after_1x1("depthwise_relu", [4, 144, 56], 144),
        conv3x3_after_1x1("depthwise_relu_one_image", [1, 144, 112], 144),
        // A depthwise convolution of the model's (channels-first) input.
        case(
            "depthwise_on_model_input",
            r#"graph "g" opsets [""=17] {
  input %x: f32[1,144,112,112]
  input %w: f32[144,1,3,3]
  node "c" %y: f32[1,144,112,112] = Conv(%x, %w) {group=144, pads=[1,1,1,1]}
  node "r" %z: f32[1,144,112,112] = Relu(%y)
  output %z
}"#,
        ),
        case(
            "maxpool3x3_s2",
            r#"graph "g" opsets [""=17] {
  input %x0: f32[4,64,112,112]
  input %w0: f32[64,64,1,1]
  node "c0" %x: f32[4,64,112,112] = Conv(%x0, %w0)
  node "p" %y: f32[4,64,56,56] = MaxPool(%x) {kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]}
  output %y
}"#,
        ),
        case(
            "global_average_pool",
            r#"graph "g" opsets [""=17] {
  input %x: f32[8,1024,14,14]
  node "p" %y: f32[8,1024,1,1] = GlobalAveragePool(%x)
  output %y
}"#,
        ),
        case(
            "concat_channels",
            r#"graph "g" opsets [""=17] {
  input %a: f32[4,128,56,56]
  input %b: f32[4,128,56,56]
  node "c" %y: f32[4,256,56,56] = Concat(%a, %b) {axis=1}
  output %y
}"#,
        ),
        case(
            "softmax_rows_384",
            r#"graph "g" opsets [""=17] {
  input %x: f32[1,16,384,384]
  node "s" %y: f32[1,16,384,384] = Softmax(%x) {axis=-1}
  output %y
}"#,
        ),
        case(
            "layernorm_768",
            r#"graph "g" opsets [""=17] {
  input %x: f32[4,512,768]
  input %wg: f32[768]
  input %wb: f32[768]
  node "n" %y: f32[4,512,768] = LayerNormalization(%x, %wg, %wb) {axis=-1}
  output %y
}"#,
        ),
        case(
            "add_relu",
            r#"graph "g" opsets [""=17] {
  input %a: f32[4,256,56,56]
  input %b: f32[4,256,56,56]
  node "s" %y: f32[4,256,56,56] = Add(%a, %b)
  node "r" %z: f32[4,256,56,56] = Relu(%y)
  output %z
}"#,
        ),
        case(
            "reduce_sum_rows",
            r#"graph "g" opsets [""=17] {
  input %x: f32[2048,2048]
  init %axes: i64[1] = [1]
  node "r" %y: f32[2048,1] = ReduceSum(%x, %axes)
  output %y
}"#,
        ),
        case(
            "transpose_last_two",
            r#"graph "g" opsets [""=17] {
  input %x: f32[16,512,512]
  node "t" %y: f32[16,512,512] = Transpose(%x) {perm=[0,2,1]}
  output %y
}"#,
        ),
    ]
}

/// Deterministic values in [-1, 1) (SplitMix64).
fn random(shape: &[usize], seed: u64) -> Tensor {
    let mut state = seed;
    let values: Vec<f64> = (0..shape.iter().product::<usize>())
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect();
    Tensor::new(shape.to_vec(), Data::from_f64(DType::F32, &values).unwrap()).unwrap()
}

/// The case's graph, weights made initializers, and random inputs.
fn graph_and_inputs(case: &Case) -> (Graph, Vec<Tensor>) {
    let mut g = kiln_ir::text::parse(&case.text).unwrap();
    let mut inputs = Vec::new();
    for (seed, id) in std::mem::take(&mut g.inputs).into_iter().enumerate() {
        let shape = g.ty(id).shape.clone().unwrap();
        let value = random(&shape, seed as u64 + 1);
        if g.name(id).starts_with('w') {
            g.initializers.insert(id, Initializer::Tensor(value));
        } else {
            g.inputs.push(id);
            inputs.push(value);
        }
    }
    // The layout `kiln run` chooses by default (channels-last with convolutions).
    let passes = kiln_passes::Options {
        layout: kiln_passes::Layout::Auto,
        ..Default::default()
    };
    kiln_passes::optimize(&mut g, &passes).unwrap();
    (g, inputs)
}

/// Each kernel's profile on one thread.
fn profile(case: &Case, machine: &Machine) -> Vec<NodeProfile> {
    let (g, inputs) = graph_and_inputs(case);
    let options = CpuOptions {
        threads: 1,
        ..CpuOptions::default()
    };
    let m = CompiledModel::compile(&g, &options).unwrap();
    let interpreted = &m.report.interpreted;
    assert!(
        interpreted.is_empty(),
        "{}: nodes on the interpreter (node, reason): {interpreted:?}",
        case.name
    );
    m.run(&inputs).unwrap();
    let graph = m.graph();
    let bound = |i: usize| graph.nodes.get(i).and_then(|n| bound_ms(graph, n, machine));
    node_profile(|| Ok(m.run_profiled(&inputs)?.1), &bound).unwrap()
}

#[test]
fn every_kernel_is_near_its_roofline() {
    let machine = Machine::measure(1).unwrap().machine;
    let mut failures = Vec::new();
    for case in cases() {
        for row in profile(&case, &machine) {
            let bound = row.bound_ms.expect("static shapes give every node a bound");
            let ratio = row.ms / bound;
            eprintln!(
                "{}: {} {}: {:.3} ms, bound {:.3} ms, {ratio:.1}x",
                case.name, row.op, row.node, row.ms, bound
            );
            if row.ms > FACTOR * bound + SLACK_MS {
                failures.push(format!(
                    "{}: {} {} took {:.3} ms, {ratio:.1}x its bound {:.3} ms (at most {}x)",
                    case.name, row.op, row.node, row.ms, bound, FACTOR
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "kernels far from their roofline ({machine:?}):\n{}",
        failures.join("\n")
    );
}
