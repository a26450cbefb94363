//! The apply step: a fused graph verifies, computes what the original
//! graph computes (reference interpreter on both), and prints and parses
//! back to itself in the text IR, for every planner on a block with
//! matmuls, a LayerNorm, a Softmax and a residual.

use kiln_fuse::{apply::apply, plan, AcceptAll, PlanOptions, PlannerKind};
use kiln_ir::{Data, Graph, Tensor};

/// A block of 4x16 activations: matmul + bias + tanh + residual,
/// LayerNorm, Softmax, matmul.
fn block_text() -> String {
    let w: Vec<String> = (0..256)
        .map(|i| format!("{:.3}", ((i * 29) % 23) as f64 / 46.0 - 0.25))
        .collect();
    format!(
        r#"graph "block" opsets [""=17] {{
  input %x: f32[4,16]
  init %w: f32[16,16] = [{}]
  init %b: f32[16] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, -0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8]
  node "mm" %h: f32[4,16] = MatMul(%x, %w)
  node "bias" %hb: f32[4,16] = Add(%h, %b)
  node "act" %a: f32[4,16] = Tanh(%hb)
  node "res" %r: f32[4,16] = Add(%a, %x)
  node "ln" %n: f32[4,16] = LayerNormalization(%r, %b, %b) {{axis=-1}}
  node "sm" %s: f32[4,16] = Softmax(%n) {{axis=-1}}
  node "mm2" %o: f32[4,16] = MatMul(%s, %w)
  output %o, %n
}}"#,
        w.join(", ")
    )
}

fn block() -> Graph {
    let mut g = kiln_ir::text::parse(&block_text()).unwrap();
    kiln_ops::infer::infer_graph(&mut g, &|_| None).unwrap();
    kiln_passes::optimize(&mut g, &Default::default()).unwrap();
    g
}

fn input() -> Tensor {
    let v: Vec<f64> = (0..64)
        .map(|i| ((i * 37) % 17) as f64 / 8.0 - 1.0)
        .collect();
    Tensor::new(
        vec![4, 16],
        Data::from_f64(kiln_ir::DType::F32, &v).unwrap(),
    )
    .unwrap()
}

#[test]
fn fused_graphs_compute_the_same_and_round_trip_as_text() {
    let g = block();
    let want = kiln_interp::run(&g, &[input()]).unwrap();
    for kind in PlannerKind::ALL {
        let planned = plan(&g, kind, &AcceptAll, &PlanOptions::default()).unwrap();
        let fused = apply(&g, &planned.plan).unwrap();
        if kind != PlannerKind::None {
            assert!(
                fused.nodes.len() < g.nodes.len(),
                "{kind}: nothing fused ({} nodes)",
                fused.nodes.len()
            );
        }
        let text = kiln_ir::text::print(&fused);
        let mut parsed = kiln_ir::text::parse(&text).unwrap();
        kiln_ops::infer::infer_graph(&mut parsed, &|_| None).unwrap();
        assert_eq!(
            kiln_ir::text::print(&parsed),
            text,
            "{kind}: text round trip"
        );
        let got = kiln_interp::run(&parsed, &[input()]).unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert_eq!(a.shape, b.shape);
            let (x, y) = (a.data.to_f64_vec().unwrap(), b.data.to_f64_vec().unwrap());
            assert!(
                x.iter().zip(&y).all(|(p, q)| (p - q).abs() < 1e-6),
                "{kind}"
            );
        }
    }
}

#[test]
fn plans_that_are_not_partitions_are_refused() {
    let g = block();
    let mut planned = plan(&g, PlannerKind::Apollo, &AcceptAll, &PlanOptions::default()).unwrap();
    planned.plan.groups[0].nodes.push(g.nodes.len() + 3);
    let err = apply(&g, &planned.plan).unwrap_err().to_string();
    assert!(err.contains("does not exist"), "{err}");
}
