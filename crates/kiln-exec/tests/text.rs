//! The execution plan's text form: hand-written plans and random ones
//! print and parse back to the same plan; malformed text is an error
//! naming its line.

use kiln_exec::{parse_plan, Exec, ExecPlan, Loc, Packing, PlanValue, Step, WorkspaceSlice};
use kiln_ir::DType;
use proptest::prelude::*;

fn value(id: usize, name: &str, shape: Option<Vec<usize>>, loc: Loc) -> PlanValue {
    PlanValue {
        id,
        name: name.to_string(),
        dtype: DType::F32,
        shape,
        loc,
    }
}

fn sample() -> ExecPlan {
    ExecPlan {
        values: vec![
            value(0, "x", Some(vec![1, 8]), Loc::Input(0)),
            value(1, "w \"odd\"\n name", Some(vec![8, 8]), Loc::Weight(0)),
            value(2, "y", Some(vec![1, 8]), Loc::Arena(0)),
            value(3, "r", Some(vec![8]), Loc::Arena(0)),
            value(4, "", None, Loc::Boxed(0)),
        ],
        inputs: vec![0],
        outputs: vec![3, 4],
        weights: vec![1],
        packings: vec![Packing {
            kernel: "kiln_k0".into(),
            weight: 1,
            bytes: 2048,
        }],
        steps: vec![
            Step::Kernel {
                node: 0,
                kernel: "kiln_k0".into(),
                args: vec![0, 1, 2],
                packing: Some(0),
                workspace: Some(WorkspaceSlice {
                    offset: 0,
                    bytes: 1024,
                }),
            },
            Step::Alias {
                node: 1,
                value: 3,
                of: 2,
            },
            Step::Interp {
                node: 2,
                reason: "TopK has no \"tensor expression\"".into(),
            },
        ],
        exec: vec![
            Exec::Step(0),
            Exec::Concurrent {
                func: "kiln_block1".into(),
                steps: vec![1, 2],
            },
        ],
        alignment: 64,
        arena_bytes: 4096,
        arena_bound: 2048,
        arena_total: 8192,
        workspace_bytes: 1024,
        threads: 2,
        boxed: 1,
    }
}

#[test]
fn a_hand_written_plan_round_trips() {
    let plan = sample();
    let text = plan.to_string();
    assert_eq!(
        parse_plan(&text).unwrap_or_else(|e| panic!("{e}\n{text}")),
        plan
    );
}

#[test]
fn malformed_text_is_an_error_naming_the_line() {
    let text = sample().to_string().replace("arena 0\n", "arena zero\n");
    let err = parse_plan(&text).unwrap_err().to_string();
    assert!(err.contains("line") && err.contains("zero"), "{err}");
    assert!(parse_plan("not a plan").is_err());
    let gap = sample().to_string().replace("input 0", "input 1");
    assert!(parse_plan(&gap).unwrap_err().to_string().contains("slot 0"));
}

fn arb_loc() -> impl Strategy<Value = Loc> {
    prop_oneof![
        (0usize..100_000).prop_map(|o| Loc::Arena(o * 64)),
        (0usize..4).prop_map(Loc::Boxed),
    ]
}

fn arb_step(values: usize) -> impl Strategy<Value = Step> {
    let v = 0..values;
    prop_oneof![
        (
            "[a-z_][a-z0-9_]{0,8}",
            prop::collection::vec(v.clone(), 0..5),
            prop::option::of(0usize..3),
            prop::option::of((0usize..1000, 0usize..1000))
        )
            .prop_map(|(kernel, args, packing, ws)| Step::Kernel {
                node: 0,
                kernel,
                args,
                packing,
                workspace: ws.map(|(offset, bytes)| WorkspaceSlice { offset, bytes }),
            }),
        (v.clone(), v.clone()).prop_map(|(value, of)| Step::Alias { node: 0, value, of }),
        v.prop_map(|value| Step::Assembled { node: 0, value }),
        any::<String>().prop_map(|reason| Step::Interp { node: 0, reason }),
    ]
}

fn arb_plan() -> impl Strategy<Value = ExecPlan> {
    (1usize..8).prop_flat_map(|n| {
        (
            prop::collection::vec(
                (
                    any::<String>(),
                    prop::option::of(prop::collection::vec(0usize..9, 0..4)),
                    arb_loc(),
                ),
                n,
            ),
            prop::collection::vec(arb_step(n), 0..6),
            prop::collection::vec(0usize..n, 0..3),
            (0usize..1 << 30, 0usize..1 << 30, 0usize..64),
        )
            .prop_map(|(vals, steps, outputs, (arena, ws, threads))| {
                let values = vals
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, shape, loc))| PlanValue {
                        id: i * 3,
                        name,
                        dtype: DType::I64,
                        shape,
                        loc,
                    })
                    .collect();
                let steps: Vec<Step> = steps
                    .into_iter()
                    .enumerate()
                    .map(|(i, s)| match s {
                        Step::Kernel {
                            kernel,
                            args,
                            packing,
                            workspace,
                            ..
                        } => Step::Kernel {
                            node: i,
                            kernel,
                            args,
                            packing,
                            workspace,
                        },
                        Step::Alias { value, of, .. } => Step::Alias { node: i, value, of },
                        Step::Assembled { value, .. } => Step::Assembled { node: i, value },
                        Step::Interp { reason, .. } => Step::Interp { node: i, reason },
                    })
                    .collect();
                let exec = (0..steps.len()).map(Exec::Step).collect();
                ExecPlan {
                    values,
                    inputs: Vec::new(),
                    outputs,
                    weights: Vec::new(),
                    packings: Vec::new(),
                    steps,
                    exec,
                    alignment: 64,
                    arena_bytes: arena,
                    arena_bound: arena / 2,
                    arena_total: arena,
                    workspace_bytes: ws,
                    threads: threads + 1,
                    boxed: 4,
                }
            })
    })
}

proptest! {
    #[test]
    fn random_plans_round_trip(plan in arb_plan()) {
        let text = plan.to_string();
        prop_assert_eq!(parse_plan(&text).map_err(|e| format!("{e}\n{text}")), Ok(plan));
    }
}
