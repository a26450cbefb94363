//! The loop IR's text form round-trips: `parse_kernel(&k.to_string()) == k`
//! for hand-written kernels covering every construct, for every node of
//! the CPU backend's lowering cases (lowered, contracted, scheduled), and
//! for schedules with splits, fusion, reordering and accumulate_outward.
//! Parse errors name the line and what was expected.

use kiln_ir::tensor::{bf16, f16};
use kiln_ir::{Attr, DType, Data, Elem, Graph, Result, Tensor};
use kiln_loop::contraction::lower_contraction;
use kiln_loop::inline_constants::inline_constants;
use kiln_loop::{
    apply, default_schedule, parse_kernel, ArgStep, Atom, Buffer, Combine, CombineMode, ConvWindow,
    Directive, Extent, Gemm, GemmInput, GemmOperand, Idx, Kernel, Loop, LoopKind, Schedule, Scope,
    Stmt, Val, WindowLayout,
};
use kiln_ops::te::{Combiner, Scalar};
use std::path::{Path, PathBuf};

/// Prints, parses and compares; also checks the reprint is identical.
fn assert_roundtrip(k: &Kernel) {
    let text = k.to_string();
    let back = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\nin:\n{text}"));
    assert_eq!(&back, k, "parsed kernel differs; text:\n{text}");
    assert_eq!(back.to_string(), text);
}

// ------------------------------------------------------------ hand-written

fn buf(name: &str, dtype: DType, shape: &[usize], output: bool) -> Buffer {
    Buffer {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        output,
        scope: Scope::Param,
    }
}

fn var(name: &str) -> Idx {
    Idx::var(name)
}

fn idx(terms: Vec<(Atom, i64)>, constant: i64) -> Idx {
    Idx { terms, constant }
}

fn load(buf: usize, offset: Idx) -> Val {
    Val::Load {
        buf,
        offset,
        guard: Vec::new(),
    }
}

fn scalar(t: Tensor) -> Val {
    Val::Const(t)
}

fn c0<T: Elem>(v: T) -> Val {
    scalar(Tensor::new(vec![], T::wrap(vec![v])).unwrap())
}

fn call(op: &str, args: Vec<Val>) -> Val {
    Val::Call(Scalar::new(op), args)
}

fn looped(var: &str, extent: Extent, kind: LoopKind, body: Vec<Stmt>) -> Stmt {
    Stmt::Loop(Loop {
        var: var.into(),
        extent,
        kind,
        body,
    })
}

/// Every statement, loop kind, extent, index atom and value kind.
fn every_construct() -> Kernel {
    let gather = Atom::Data {
        value: Box::new(load(1, var("i0").plus(&Idx::constant(-1)))),
        extent: 6,
    };
    let window = idx(
        vec![
            (Atom::Div(Box::new(var("io")), 3), 12),
            (
                Atom::Mod(Box::new(idx(vec![(Atom::Var("ii".into()), -2)], 7)), 3),
                -1,
            ),
            (Atom::Var("r0".into()), -5),
            (gather, 4),
        ],
        -13,
    );
    let guarded = Val::Load {
        buf: 0,
        offset: window.clone(),
        guard: vec![(var("ii").plus(&Idx::constant(-1)), 9), (var("r0"), 3)],
    };
    let with_attrs = Val::Call(
        Scalar::new("Mod")
            .with_attr("fmod", Attr::Int(1))
            .with_attr("alpha", Attr::Float(-0.1))
            .with_attr("direction", Attr::String("LEFT }{ \"x\"".into()))
            .with_attr("pads", Attr::Ints(vec![1, -2, 3]))
            .with_attr("scales", Attr::Floats(vec![]))
            .with_attr(
                "table",
                Attr::Tensor(
                    Tensor::new(
                        vec![3, 4],
                        f32::wrap((0..12).map(|x| x as f32 * 0.5).collect()),
                    )
                    .unwrap(),
                ),
            ),
        vec![guarded, c0(f32::NEG_INFINITY)],
    );
    let reduction = vec![
        Stmt::Let {
            name: "acc".into(),
            dtype: DType::F64,
            value: c0(0.0f64),
        },
        looped(
            "r0",
            Extent::Const(3),
            LoopKind::Unrolled,
            vec![Stmt::Update {
                name: "acc".into(),
                combiner: Combiner::Sum,
                value: call("Cast", vec![with_attrs]),
            }],
        ),
        Stmt::Let {
            name: "m".into(),
            dtype: DType::I64,
            value: c0(i64::MIN),
        },
        Stmt::Update {
            name: "m".into(),
            combiner: Combiner::Max,
            value: Val::Index(idx(vec![(Atom::Var("ii".into()), i64::MIN)], i64::MAX)),
        },
        Stmt::Store {
            buf: 3,
            offset: var("io").scale(4).plus(&var("ii")),
            value: call(
                "Where",
                vec![
                    Val::InBounds(vec![(var("ii"), 3), (var("io").scale(-1), 0)]),
                    Val::Local("acc".into()),
                    call("Neg", vec![Val::InBounds(Vec::new())]),
                ],
            ),
        },
    ];
    let tail = Extent::Tail {
        total: 10,
        outer: "io".into(),
        factor: 4,
    };
    let nest = looped(
        "io",
        Extent::Const(3),
        LoopKind::Parallel,
        vec![looped("ii", tail, LoopKind::Vectorized, reduction)],
    );
    let operand = |buf, offset, guard| GemmInput::Read(GemmOperand { buf, offset, guard });
    let gemm = Stmt::Gemm(Box::new(Gemm {
        batch: 2,
        m: 3,
        n: 4,
        k: 5,
        a: operand(
            0,
            var("b").scale(15).plus(&var("r").scale(5)).plus(&var("c")),
            vec![],
        ),
        b: operand(
            2,
            var("k").plus(&Idx::constant(-1)),
            vec![(var("k").plus(&Idx::constant(-1)), 4)],
        ),
        c: GemmOperand {
            buf: 3,
            offset: var("m").scale(4).plus(&var("n")),
            guard: vec![],
        },
        window: Some(ConvWindow {
            channels: 3,
            size: [9, 7],
            out: [5, 4],
            kernel: [3, 2],
            stride: [2, 2],
            pad: [1, 0],
            dilation: [1, 2],
            layout: WindowLayout::Nchw,
            batch_stride: 189,
            pixel_stride: 5,
            images: 1,
            image_stride: 0,
        }),
        epilogue: Some(call(
            "Max",
            vec![
                Val::Local("acc".into()),
                Val::Load {
                    buf: 1,
                    offset: var("r"),
                    guard: vec![],
                },
            ],
        )),
    }));
    let every_combiner: Vec<Stmt> = Combiner::ALL
        .into_iter()
        .map(|combiner| Stmt::Update {
            name: "acc".into(),
            combiner,
            value: c0(true),
        })
        .collect();
    // The same product reading an NHWC window on A, and an NCHW one on A.
    let on_a = |layout| {
        let mut on_a = gemm.clone();
        if let Stmt::Gemm(g) = &mut on_a {
            if let Some(window) = &mut g.window {
                window.layout = layout;
            }
        }
        on_a
    };
    let (nhwc, nchw_rows) = (on_a(WindowLayout::Nhwc), on_a(WindowLayout::NchwRows));
    // An NHWC window whose rows run over two images.
    let mut images = nhwc.clone();
    if let Stmt::Gemm(g) = &mut images {
        if let Some(window) = &mut g.window {
            (window.images, window.image_stride) = (2, 315);
        }
    }
    // The same product with A computed while it is packed (a prologue).
    let mut prologue = gemm.clone();
    if let Stmt::Gemm(g) = &mut prologue {
        let a = var("b").scale(15).plus(&var("r").scale(5)).plus(&var("c"));
        g.a = GemmInput::Computed(call("Relu", vec![load(0, a)]));
        g.window = None;
    }
    let mut body = vec![nest, gemm, nhwc, nchw_rows, images, prologue];
    body.extend(every_combiner);
    // Arg-reduction steps: max and min, ties to the first or the last index.
    for combiner in [Combiner::Max, Combiner::Min] {
        body.extend([false, true].map(|last| {
            Stmt::ArgUpdate(Box::new(ArgStep {
                name: "acc".into(),
                best: "acc_best".into(),
                combiner,
                last,
                value: load(0, var("r")),
                index: var("r").scale(3).plus(&Idx::constant(1)),
            }))
        }));
    }
    body.push(looped("z", Extent::Const(-1), LoopKind::Serial, vec![]));
    // A parallel loop combining its iterations' partials, in both modes.
    body.push(looped(
        "w",
        Extent::Const(4),
        LoopKind::Parallel,
        [CombineMode::Ordered, CombineMode::Atomic]
            .into_iter()
            .map(|mode| {
                Stmt::Combine(Box::new(Combine {
                    name: "acc".into(),
                    combiner: Combiner::Max,
                    value: load(0, var("w")),
                    mode,
                }))
            })
            .collect(),
    ));
    // A local buffer, declared, written and read.
    body.push(looped(
        "j",
        Extent::Const(2),
        LoopKind::Serial,
        vec![
            Stmt::Alloc(4),
            Stmt::Store {
                buf: 4,
                offset: var("j"),
                value: load(0, var("j")),
            },
            Stmt::Store {
                buf: 3,
                offset: var("j"),
                value: load(4, var("j")),
            },
        ],
    ));
    Kernel {
        name: "k0".into(),
        buffers: vec![
            buf("in0", DType::F32, &[4, 6], false),
            buf("in1", DType::I64, &[3], false),
            buf("in2", DType::F32, &[], false),
            buf("out0", DType::F32, &[3, 4], true),
            Buffer {
                scope: Scope::Local,
                ..buf("in0_cache", DType::F32, &[2], false)
            },
        ],
        body,
    }
}

#[test]
fn every_construct_roundtrips() {
    assert_roundtrip(&every_construct());
}

#[test]
fn constants_keep_type_and_value() {
    let values = vec![
        c0(0.1f32),
        c0(-0.0f32),
        c0(f32::INFINITY),
        c0(f32::MIN_POSITIVE / 3.0), // subnormal
        c0(1e-300f64),
        c0(std::f64::consts::PI),
        c0(f64::MAX),
        c0(-3i64),
        c0(i64::MAX),
        c0(255u8),
        c0(-7i8),
        c0(40000u16),
        c0(-300i16),
        c0(-70000i32),
        c0(u32::MAX),
        c0(u64::MAX),
        c0(false),
        c0(f16::from_f32(0.333)),
        c0(bf16::from_f32(-1.7e10)),
        scalar(Tensor::new(vec![], Data::Str(vec!["a: \"b\"]\n".to_string()].into())).unwrap()),
        scalar(Tensor::new(vec![1], f32::wrap(vec![2.5])).unwrap()),
        scalar(Tensor::new(vec![1, 1], i64::wrap(vec![7])).unwrap()),
    ];
    let k = Kernel {
        name: "consts".into(),
        buffers: vec![buf("out0", DType::F32, &[1], true)],
        body: vec![Stmt::Store {
            buf: 0,
            offset: Idx::constant(0),
            value: call("Pack", values),
        }],
    };
    assert_roundtrip(&k);
}

/// NaN is not equal to itself, so it is compared by bits.
#[test]
fn nan_constant_roundtrips() {
    let k = Kernel {
        name: "nan".into(),
        buffers: vec![buf("out0", DType::F32, &[], true)],
        body: vec![Stmt::Store {
            buf: 0,
            offset: Idx::constant(0),
            value: c0(f32::NAN),
        }],
    };
    let back = parse_kernel(&k.to_string()).unwrap();
    let [Stmt::Store {
        value: Val::Const(t),
        ..
    }] = back.body.as_slice()
    else {
        panic!("not a store of a constant: {back}");
    };
    let Data::F32(v) = &t.data else {
        panic!("not f32: {back}")
    };
    assert!(v[0].is_nan() && t.shape.is_empty());
}

/// Names that are keywords of the form or not identifiers print quoted.
#[test]
fn odd_names_roundtrip() {
    let names = [
        "out", "for", "sum", "combine", "alloc", "min", "in", "kernel", "a b", "1x", "é", "",
        "x\"y",
    ];
    for name in names {
        let k = Kernel {
            name: name.into(),
            buffers: vec![
                buf(name, DType::F32, &[2], false),
                buf(&format!("{name}!"), DType::F32, &[2], true),
            ],
            body: vec![looped(
                name,
                Extent::Tail {
                    total: 2,
                    outer: name.into(),
                    factor: 3,
                },
                LoopKind::Serial,
                vec![
                    Stmt::Let {
                        name: name.into(),
                        dtype: DType::F32,
                        value: load(0, var(name)),
                    },
                    Stmt::Update {
                        name: name.into(),
                        combiner: Combiner::Min,
                        value: Val::Call(
                            Scalar {
                                op: name.into(),
                                attrs: [(name.to_string(), Attr::Int(1))].into(),
                            },
                            vec![Val::Local(name.into())],
                        ),
                    },
                    Stmt::Store {
                        buf: 1,
                        offset: var(name),
                        value: Val::Local(name.into()),
                    },
                ],
            )],
        };
        assert_roundtrip(&k);
    }
}

/// Outputs need not come last; the `out` mark says which they are.
#[test]
fn output_marks_roundtrip() {
    let k = Kernel {
        name: "k".into(),
        buffers: vec![
            buf("o", DType::F32, &[2], true),
            buf("x", DType::Bool, &[], false),
            buf("p", DType::I32, &[1, 0, 3], true),
        ],
        body: vec![],
    };
    assert_roundtrip(&k);
}

// ------------------------------------------------------------ errors

fn parse_error(src: &str) -> String {
    match parse_kernel(src) {
        Ok(k) => panic!("parsed:\n{k}"),
        Err(e) => e.message().to_string(),
    }
}

#[test]
fn errors_name_line_and_expectation() {
    let head = "kernel k(in0: f32[4], out out0: f32[4]) {\n";
    let cases = [
        (
            "  for i in 0..4 {\n    out0[i = in0[i]\n  }\n}",
            "line 3",
            "']'",
        ),
        (
            "  for i in 0..4 {\n    out0[i] = nope[i]\n  }\n}",
            "line 3",
            "unknown buffer",
        ),
        (
            "  let a: f32 = 0.0:f32\n  a = avg(a, in0[0])\n}",
            "line 3",
            "combiner",
        ),
        (
            "  let a: f32 = 0.0:f32\n  let i: i64 = 0:i64\n  i = argsum(a, in0[0], 0)\n}",
            "line 4",
            "unknown arg-reduction",
        ),
        ("  let a: q9 = 0.0:f32\n}", "line 2", "element type"),
        ("  out0[0] = 1.5:i64\n}", "line 2", "i64 literal"),
        (
            "  out0[0] = Mod{fmod=}(in0[0])\n}",
            "line 2",
            "attribute value",
        ),
        (
            "  for i in 0..min(4, 9 - 2*o) {\n  }\n}",
            "line 2",
            "factors differ",
        ),
        (
            "  for i in 0..4 {\n    out0[i] = in0[i]\n",
            "line 4",
            "a statement or '}'",
        ),
        ("  out0[0] = in0[(i floordiv)]\n}", "line 2", "a divisor"),
        (
            "  gemm b<1, m<2, n<3: out0[0] = sum in0[0] * in0[0]\n}",
            "line 2",
            "','",
        ),
    ];
    for (body, line, what) in cases {
        let msg = parse_error(&format!("{head}{body}"));
        assert!(
            msg.starts_with(&format!("{line}:")) && msg.contains(what),
            "for\n{body}\ngot: {msg}"
        );
    }
    let msg = parse_error(&format!("{head}}}\nextra"));
    assert!(
        msg.starts_with("line 3:") && msg.contains("end of the text"),
        "{msg}"
    );
}

// ------------------------------------------------------------ lowered kernels

fn cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-cpu/tests/cases");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("kiln-cpu/tests/cases")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "kiln"))
        .collect();
    v.sort();
    v
}

fn load_graph(path: &Path) -> Result<Graph> {
    let mut g = kiln_ir::text::parse(&std::fs::read_to_string(path)?)?;
    kiln_ops::infer::infer_graph(&mut g, &|_| None)?;
    Ok(g)
}

/// A node's kernels as the CPU backend builds them: the contraction (when
/// there is one) and the loop nest, with one-element constant inputs inlined.
struct NodeKernels {
    contraction: Option<Kernel>,
    loops: Kernel,
}

/// The kernels of every node that has a tensor expression.
fn lower_nodes(g: &Graph) -> Result<Vec<NodeKernels>> {
    let mut out = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let Some(te) = kiln_ops::te::classify::node_expr(g, node)? else {
            continue;
        };
        let dtypes: Vec<Option<DType>> = node
            .inputs
            .iter()
            .map(|v| v.map(|v| g.ty(v).dtype))
            .collect();
        let name = format!("k{i}");
        let present = node.inputs.iter().flatten();
        let mut constants = Vec::new();
        for (b, &v) in present.enumerate() {
            if let (Some(init), Some(1)) = (g.constant(v), g.ty(v).numel()) {
                constants.push((b, Tensor::new(vec![], init.to_tensor()?.data)?));
            }
        }
        out.push(NodeKernels {
            contraction: lower_contraction(&te, &name, &dtypes)?,
            loops: inline_constants(&kiln_loop::lower(&te, &name, &dtypes)?, &constants),
        });
    }
    Ok(out)
}

#[test]
fn lowering_cases_roundtrip() {
    let mut kernels = 0;
    let target = kiln_target::CpuPreset::X86_64V4.desc(2);
    for case in cases() {
        let g = load_graph(&case).unwrap_or_else(|e| panic!("{}: {e}", case.display()));
        for node in lower_nodes(&g).unwrap() {
            let scheduled = apply(&node.loops, &default_schedule(&node.loops, &target)).unwrap();
            for k in node.contraction.iter().chain([&node.loops, &scheduled]) {
                assert_roundtrip(k);
                kernels += 1;
            }
        }
    }
    assert!(kernels >= 16, "only {kernels} kernels in the cases");
}

/// Kernels of the cases lowered as loops (contractions too), with
/// schedules that exercise every rewrite.
#[test]
fn scheduled_kernels_roundtrip() {
    let split = |v: &str, factor| Directive::Split {
        var: v.into(),
        factor,
    };
    let schedules = [
        vec![split("i0", 3)],
        vec![split("i1", 5), Directive::Unroll("i1i".into())],
        vec![
            Directive::Fuse {
                outer: "i0".into(),
                inner: "i1".into(),
            },
            split("i0i1", 7),
            Directive::Parallel("i0i1o".into()),
        ],
        vec![Directive::Reorder {
            outer: "i0".into(),
            inner: "i1".into(),
        }],
        vec![
            Directive::AccumulateOutward("i3".into()),
            Directive::Vectorize("i3".into()),
        ],
        vec![split("r0", 2)],
        vec![Directive::CacheRead {
            buf: "in0".into(),
            at: "i0".into(),
        }],
    ];
    let mut applied = [0; 7];
    for case in cases() {
        for node in lower_nodes(&load_graph(&case).unwrap()).unwrap() {
            for (n, s) in schedules.iter().enumerate() {
                // Not every schedule fits every kernel (loops of extent 1
                // are dropped, reductions are rare); those that do count.
                if let Ok(scheduled) = apply(&node.loops, &Schedule(s.clone())) {
                    assert_roundtrip(&scheduled);
                    applied[n] += 1;
                }
            }
        }
    }
    assert!(
        applied.iter().all(|&n| n > 0),
        "schedules applied: {applied:?}"
    );
}

/// The kernels printed in the lowering tests' expected files parse and
/// reprint to the same text.
#[test]
fn expected_files_parse() {
    let mut kernels = 0;
    for case in cases() {
        let path = case.with_extension("expected");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        while let Some(first) = lines.next() {
            if !first.starts_with("kernel ") {
                continue;
            }
            let mut block = vec![first];
            for line in lines.by_ref() {
                block.push(line);
                if line == "}" {
                    break;
                }
            }
            let block = block.join("\n");
            let k = parse_kernel(&block).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(k.to_string(), block);
            kernels += 1;
        }
    }
    assert!(kernels >= 8, "only {kernels} kernels in the expected files");
}
