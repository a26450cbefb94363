//! The pass manager's options and checks: pass names, printing after a
//! pass, the report, verification catching a broken pass, the round limit,
//! and constant folding's size cap.

mod common;

use kiln_ir::{Graph, Result};
use kiln_passes::{optimize, optimize_to, Options, Pass, PassManager};

const GRAPH: &str = r#"graph "g" opsets [""=17] {
  input %x: f32[2,3]
  init %zero: f32[] = [0.0]
  node "add" %a: f32[2,3] = Add(%x, %zero)
  node "t1" %b: f32[3,2] = Transpose(%a) {perm=[1, 0]}
  node "t2" %c: f32[2,3] = Transpose(%b) {perm=[1, 0]}
  node "relu" %y: f32[2,3] = Relu(%c)
  output %y
}
"#;

fn names(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|s| s.to_string()).collect())
}

#[test]
fn unknown_pass_names_are_listed() {
    let mut g = common::load(GRAPH).unwrap();
    let opts = Options {
        passes: names(&["simplify", "nope"]),
        ..Options::default()
    };
    let err = optimize(&mut g, &opts).unwrap_err().to_string();
    assert!(
        err.contains("unknown pass 'nope'") && err.contains("fold_affine"),
        "{err}"
    );
    let opts = Options {
        print_after: Some("nope".into()),
        ..Options::default()
    };
    let err = optimize(&mut g, &opts).unwrap_err().to_string();
    assert!(
        err.contains("unknown pass 'nope'") && err.contains("dce"),
        "{err}"
    );
    let opts = Options {
        passes: names(&["dce"]),
        print_after: Some("cse".into()),
        ..Options::default()
    };
    let err = optimize(&mut g, &opts).unwrap_err().to_string();
    assert!(err.contains("not in the pipeline (dce)"), "{err}");
}

#[test]
fn default_pipeline_report_and_printouts() {
    let mut g = common::load(GRAPH).unwrap();
    let opts = Options {
        verify_each: true,
        print_after: Some("simplify".into()),
        ..Options::default()
    };
    let report = optimize(&mut g, &opts).unwrap();
    assert!(report.converged);
    assert_eq!((report.nodes_before, report.nodes_after), (4, 1));
    let simplify = report.pass("simplify").unwrap();
    assert!(simplify.runs >= 2 && simplify.changed >= 1 && simplify.delta < 0);
    // Every pass runs each round, opening compounds included.
    assert_eq!(report.pass("open_compounds").unwrap().runs, simplify.runs);
    // Printed after its first run (which changed the graph) only.
    assert_eq!(report.printed.len(), 1);
    assert!(!report.printed[0].text.contains("Add("));
    let table = report.to_string();
    for name in kiln_passes::passes::names() {
        assert!(table.contains(name), "{table}");
    }
    assert!(
        table.contains("total") && table.contains("fixed"),
        "{table}"
    );
    assert_eq!(
        kiln_ir::text::print(&g)
            .lines()
            .filter(|l| l.contains("node"))
            .count(),
        1
    );
}

#[test]
fn printouts_go_to_the_writer() {
    let mut g = common::load(GRAPH).unwrap();
    let opts = Options {
        passes: names(&["canonicalize_layout"]),
        print_after: Some("canonicalize_layout".into()),
        ..Options::default()
    };
    let mut out = Vec::new();
    let report = optimize_to(&mut g, &opts, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(report.printed.is_empty());
    assert!(
        text.starts_with("# after canonicalize_layout (round 1)\ngraph"),
        "{text}"
    );
    assert!(!text.contains("Transpose"), "{text}");
}

/// Declares a wrong shape for the first node's output.
struct BreaksTypes;
impl Pass for BreaksTypes {
    fn name(&self) -> &'static str {
        "breaks_types"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        let o = g.nodes[0].outputs[0].unwrap();
        g.values[o.index()].ty.shape = Some(vec![7]);
        Ok(true)
    }
}

/// Renames the graph output.
struct Renames;
impl Pass for Renames {
    fn name(&self) -> &'static str {
        "renames"
    }
    fn run(&self, g: &mut Graph) -> Result<bool> {
        let o = g.outputs[0];
        g.values[o.index()].name = "other".into();
        Ok(true)
    }
}

#[test]
fn verification_names_the_broken_pass() {
    let opts = Options {
        verify_each: true,
        ..Options::default()
    };
    let mut g = common::load(GRAPH).unwrap();
    let pm = PassManager::new(vec![Box::new(BreaksTypes)], vec![]);
    let err = pm.run(&mut g, &opts, None).unwrap_err().to_string();
    assert!(
        err.contains("after pass 'breaks_types'") && err.contains("shape inference gives"),
        "{err}"
    );
    let mut g = common::load(GRAPH).unwrap();
    let pm = PassManager::new(vec![Box::new(Renames)], vec![]);
    let err = pm
        .run(&mut g, &Options::default(), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pass 'renames'") && err.contains("outputs"),
        "{err}"
    );
}

#[test]
fn round_limit_is_reported() {
    let mut g = common::load(GRAPH).unwrap();
    // A pass that always claims a change never reaches a fixed point.
    let pm = PassManager::new(vec![], vec![Box::new(BreaksTypes)]);
    let opts = Options {
        max_rounds: 3,
        ..Options::default()
    };
    let report = pm.run(&mut g, &opts, None).unwrap();
    assert!(!report.converged);
    assert_eq!((report.rounds, report.passes[0].runs), (3, 3));
}

#[test]
fn large_results_fold_only_when_their_inputs_die() {
    let src = r#"graph "g" opsets [""=17] {
  input %x: f32[1024,1025]
  init %one: f32[] = [1.0]
  init %shape: i64[2] = [1024, 1025]
  node "expand" %e: f32[1024,1025] = Expand(%one, %shape)
  node "add" %y: f32[1024,1025] = Add(%x, %e)
  output %y
}
"#;
    let mut g = common::load(src).unwrap();
    let opts = Options {
        passes: names(&["fold_constants"]),
        ..Options::default()
    };
    optimize(&mut g, &opts).unwrap();
    assert_eq!(
        g.nodes.len(),
        1,
        "Expand folded: its inputs are used by it alone"
    );
    assert_eq!(g.parameter_count(), 1 + 2 + 1024 * 1025);
}
