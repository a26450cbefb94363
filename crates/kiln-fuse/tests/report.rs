//! `kiln explain`'s reports on a small text-IR graph: the JSON keys and
//! their consistency, the text summary and the HTML drawing.

use kiln_fuse::{plan, report, AcceptAll, GroupCheck, PlanOptions, PlannerKind};

const GRAPH: &str = r#"graph "g<&>" opsets [""=18] {
  input %x: f32[8,16]
  input %w: f32[16,32]
  input %b: f32[32]
  node "mm<1>" %y: f32[8,32] = MatMul(%x, %w)
  node "bias" %z: f32[8,32] = Add(%y, %b)
  node "relu" %r: f32[8,32] = Relu(%z)
  output %r
}"#;

fn planned() -> (kiln_ir::Graph, kiln_fuse::Planned) {
    let g = kiln_ir::text::parse(GRAPH).unwrap();
    let p = plan(&g, PlannerKind::Tvm, &AcceptAll, &PlanOptions::default()).unwrap();
    (g, p)
}

#[test]
fn json_has_the_issue_keys_and_consistent_values() {
    let (g, p) = planned();
    let v = report::json(&g, &p);
    assert_eq!(v["planner"], "tvm");
    assert_eq!(v["primitive_nodes"], 3);
    assert_eq!(v["kernels"], 1);
    assert_eq!(v["fusion_ratio"], 3.0);
    assert_eq!(v["intermediate_bytes"], 0);
    assert!(v["planning_s"].as_f64().unwrap() >= 0.0);
    assert_eq!(v["feedback"], serde_json::json!([]));
    let group = &v["groups"][0];
    assert_eq!(group["kind"], "matmul");
    assert_eq!(group["ops"], "MatMul+Add+Relu");
    assert_eq!(group["nodes"], serde_json::json!(["mm<1>", "bias", "relu"]));
    // x (512 B) + w (2048 B) + b (128 B) in, r (1024 B) out.
    assert_eq!(group["bytes_in"], 512 + 2048 + 128);
    assert_eq!(group["bytes_out"], 1024);
    assert!(group.get("time_ms").is_none());
    let timed = report::json_profiled(&g, &p, &[(0, 1.25)]);
    assert_eq!(timed["groups"][0]["time_ms"], 1.25);
}

#[test]
fn text_lists_each_group() {
    let (g, p) = planned();
    let t = report::text(&g, &p, &[]);
    assert!(
        t.starts_with("planner tvm: 3 primitive nodes -> 1 kernels"),
        "{t}"
    );
    assert!(t.contains("matmul") && t.contains("MatMul+Add+Relu"), "{t}");
    assert!(report::feedback_text(&g, &p).contains("accepted every group"));
}

#[test]
fn html_is_one_page_with_an_escaped_svg_drawing() {
    let (g, p) = planned();
    let h = report::html(&g, &p, &[(0, 0.5)]);
    assert!(h.starts_with("<!DOCTYPE html>") && h.contains("<svg") && h.contains("</svg>"));
    assert!(
        !h.contains("<script") && !h.contains("href="),
        "must be self-contained"
    );
    assert!(h.contains("mm&lt;1&gt;") && !h.contains("mm<1>"));
    assert!(h.contains("g&lt;&amp;&gt;"));
    assert_eq!(h.matches("class=\"node\"").count(), 3);
    assert_eq!(h.matches("class=\"edge\"").count(), 2);
    assert!(h.contains("0.500 ms"));
}

/// A backend that refuses every group holding a Relu.
struct NoRelu;

impl GroupCheck for NoRelu {
    fn check(&self, g: &kiln_ir::Graph, nodes: &[usize]) -> Result<(), String> {
        match nodes.iter().any(|&n| g.nodes[n].op == "Relu") {
            true => Err("no relu epilogue".into()),
            false => Ok(()),
        }
    }
}

#[test]
fn refused_groups_are_reported_with_reason_and_split() {
    let g = kiln_ir::text::parse(GRAPH).unwrap();
    let p = plan(&g, PlannerKind::Tvm, &NoRelu, &PlanOptions::default()).unwrap();
    let v = report::json(&g, &p);
    assert_eq!(v["kernels"], 2);
    let f = &v["feedback"][0];
    assert_eq!(f["pattern"], "MatMul+Add+Relu");
    assert_eq!(f["reason"], "no relu epilogue");
    assert_eq!(f["split"], serde_json::json!([["mm<1>", "bias"], ["relu"]]));
    let t = report::feedback_text(&g, &p);
    assert!(t.contains("MatMul+Add+Relu: no relu epilogue"), "{t}");
    assert!(t.contains("split into: MatMul+Add | Relu"), "{t}");
}
