//! Concatenations assembled in place (`assemble.rs`, `build.rs`): the
//! parts take the whole's place and no step runs for the concatenation; a
//! mark the plan cannot honour fails the build, naming the node.

use kiln_exec::{build, KernelInfo, Loc, PlanRequest, Step, WorkspaceNeed};
use kiln_ir::{DType, Graph};

const GRAPH: &str = r#"graph "g" opsets [""=17] {
  input %a: f32[2,3]
  input %b: f32[2,5]
  node "ra" %x: f32[2,3] = Relu(%a)
  node "nb" %y: f32[2,5] = Neg(%b)
  node "cat" %c: f32[2,8] = Concat(%x, %y) {axis=1}
  node "with_input" %d: f32[2,11] = Concat(%c, %a) {axis=1}
  node "abs" %z: f32[2,11] = Abs(%d)
  output %z
}"#;

fn kernel(name: &str, inputs: usize, assembled: bool) -> Result<KernelInfo, String> {
    Ok(KernelInfo {
        name: name.into(),
        inputs: (0..inputs).collect(),
        in_place: Some(0),
        view: None,
        packs: None,
        workspace: WorkspaceNeed::default(),
        assembled,
    })
}

fn plan(g: &Graph, assembled: [bool; 2]) -> kiln_ir::Result<kiln_exec::ExecPlan> {
    let kernels = [
        kernel("ra", 1, false),
        kernel("nb", 1, false),
        kernel("cat", 2, assembled[0]),
        kernel("with_input", 2, assembled[1]),
        kernel("abs", 1, false),
    ];
    build(&PlanRequest {
        graph: g,
        kernels: &kernels,
        parallel: &[],
        scope_reads: &vec![Vec::new(); g.nodes.len()],
        threads: 1,
        prefix: "t",
        arena_dtype: &|d| d == DType::F32,
        alignment: 64,
    })
}

#[test]
fn parts_take_the_place_of_their_whole() -> kiln_ir::Result<()> {
    let g = kiln_ir::text::parse(GRAPH)?;
    let p = plan(&g, [true, false])?;
    let loc = |name: &str| p.value(g.find(name).unwrap().index()).unwrap().loc;
    assert!(matches!(loc("c"), Loc::Arena(_)));
    assert_eq!(loc("x"), loc("c"));
    assert_eq!(loc("y"), loc("c"));
    assert!(matches!(p.steps[2], Step::Assembled { node: 2, .. }));
    // `d`, computed while `c` is read, has a place of its own.
    assert_ne!(loc("d"), loc("c"));
    Ok(())
}

#[test]
fn a_mark_the_plan_cannot_honour_is_an_error() -> kiln_ir::Result<()> {
    let g = kiln_ir::text::parse(GRAPH)?;
    let err = plan(&g, [false, true]).expect_err("a graph input cannot be a part");
    assert!(err.to_string().contains("with_input"), "{err}");
    Ok(())
}
