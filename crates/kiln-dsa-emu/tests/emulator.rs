//! Graphs through the DSA emulator against the reference interpreter, on
//! the presets and on a variant of `stcp920` with a 4 KB LB (every kernel
//! tiled), a matrix product's tiles and DMA bytes under swTVM's
//! Algorithms 1 and 2, plus the LB-overflow error.

use kiln_dsa::{tile_kernel, DsaDesc};
use kiln_dsa_emu::{DsaModel, DsaOptions, DsaTarget};
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

/// Checks that the first node's one phase is dealt to the cores of
/// `desc` with tile loops `want` (variable, tile, outermost first), and
/// runs the graph against the interpreter (`check`).
fn tiled_counts(src: &str, desc: DsaDesc, want: &[(&str, i64)]) -> kiln_dsa_emu::DmaCounts {
    let g = load(src);
    let t = DsaTarget::new(desc);
    let lowered = kiln_cpu::select::lower_node(&g, &g.nodes[0], "k0", &t.target).expect("lowers");
    let device = tile_kernel(&lowered.kernel, &t.desc).expect("tiles");
    assert!(device.phases[0].spread);
    let tiles: Vec<(&str, i64)> = device.phases[0]
        .tiles
        .iter()
        .map(|l| (l.var.as_str(), l.tile))
        .collect();
    assert_eq!(tiles, want);
    check(src, &t.desc)
}

/// A depthwise 3×3 convolution, 96 channels of 56×56, on `stcp920`: by
/// hand, Algorithm 1 gives 64 channels (i1, the compvar, initialised
/// before the rows) of one row (i2) of 56 pixels; dealt to 32 cores the
/// channel tile becomes 2, and each 1-row output tile reads a 3-row input
/// box: 2688 tiles × (1344 + 448) B + 48 × 72 B = 4 820 352 B moved. The
/// halving tiles, 3 channels (for the cores) × 28 rows, move 64 × (20 160
/// + 18 816) B + 32 × 108 B = 2 497 920 B, so they are kept by bytes.
/// kiln's refinement then halves the channel tile to 2 (48 tiles, still
/// one per core) and grows the rows whole: a 2-channel input box (the
/// halo clipped to the image once the rows are whole: 2 × 56 × 56
/// floats, 25 088 B), the same output box and 72 B of weights fit the
/// 64 KB where 3 channels' did not. The image is read once, without the
/// halo rows read twice, so it is no longer staged in GB: DDR→LB is the
/// image and the weights once.
#[test]
fn a_depthwise_convolution_is_refined_to_whole_rows() {
    let src = r#"graph "g" opsets [""=17] {
  input %x: f32[1,96,56,56]
  input %w: f32[96,1,3,3]
  node "conv" %y: f32[1,96,56,56] = Conv(%x, %w) {pads=[1,1,1,1], group=96}
  output %y
}"#;
    let counts = tiled_counts(src, stcp920(), &[("i1", 2)]);
    const IMAGE: u64 = 96 * 56 * 56 * 4;
    assert_eq!(counts.ddr_to_lb.bytes, IMAGE + 96 * 9 * 4);
    assert_eq!(counts.gb_to_lb.bytes + counts.ddr_to_gb.bytes, 0);
    assert_eq!(counts.lb_to_ddr.bytes, IMAGE);
    // The halving tiles' 2 497 920 B.
    assert!(counts.ddr_to_lb.bytes + counts.lb_to_ddr.bytes < 2_497_920);
}

/// The padded 3×3 convolution of `GRAPHS` on a 4 KB LB: Algorithms 1 and
/// 2 put 12 one-row tiles outermost (channel tiles of 4 inside), which
/// would move fewer bytes but keep only 12 of the 32 cores busy; the
/// halving tiles deal 16 one-channel tiles (rows cut in two, 8-row input
/// boxes: 86 016 B from GB), and are kept by bytes and cores. kiln's
/// refinement halves the input channels (the reduction, 8 → 4) to grow
/// the rows whole: a 4-channel input box (the halo clipped to the image
/// once the rows are whole: 4 × 12 × 12 floats, 2 304 B), 144 B of
/// weights and 576 B of output fit the 4 KB (3 072 B aligned; 8 channels
/// would take 4 608 B of input). Each channel tile reads the image once
/// in two halves (16 × 2 × 2 304 B, from GB), the weights once, the same
/// 16 cores busy.
#[test]
fn a_convolution_on_a_small_lb_is_refined_to_whole_rows() {
    let counts = tiled_counts(GRAPHS[1], small_lb(), &[("i1", 1), ("r0", 4)]);
    assert_eq!(counts.gb_to_lb.bytes, 16 * 8 * 12 * 12 * 4);
    assert_eq!(counts.ddr_to_lb.bytes, 16 * 8 * 9 * 4);
    assert!(counts.gb_to_lb.bytes < 86_016);
}

fn stcp920() -> DsaDesc {
    DsaDesc::preset("stcp920").expect("preset")
}

/// A BERT-sized projection, `[128, 768] × [768, 768]` in f32 on
/// `stcp920` (64 KB LB, Algorithm 1 starting at 64 elements). Its kernel
/// is `for i0 < 128, i1 < 768 { acc = Σ_r0 a[i0][r0]·b[r0][i1]; y[i0][i1]
/// = acc }`. With r0 whole, by hand, in floats, with 3 × 64 bytes of
/// alignment reserved (16 336 floats): i1 (sizevar) 64 → 768 + 49 152 +
/// 64, too many, halved to 16 (768 + 12 288 + 16); i0 (compvar) 64 →
/// halved to 4 (3 072 + 12 288 + 64 = 15 424; 8 would be 18 560);
/// doubling i1 to 32 overflows. Algorithm 2: i0 outside i1 moves b's
/// 768-row tile 32 · 48 times (1 179 648 runs), i1 outside i0 48 times
/// (36 864 runs), so i1 is the outer tile loop and b is read once, a 48
/// times (from GB). Those tiles (i1 16, i0 4) are kept by bytes.
///
/// kiln's refinement starts from each tiling; from the one with r0 cut
/// (r0 keeps Algorithm 1's 64: a larger tile moves no fewer bytes) it
/// grows i0 whole and i1 to 24, the largest tile that leaves every core
/// one (32 tiles): a's box 128 × 64 (32 768 B), b's 64 × 24 (6 144 B),
/// y's 128 × 24 (12 288 B) fit. b is still read once and y written once,
/// a is read once per i1 tile: 32 times instead of 48, at the same DDR
/// bytes.
#[test]
fn a_matmul_reads_its_weights_once_and_its_activations_once_per_core() {
    let src = r#"graph "g" opsets [""=17] {
  input %a: f32[128,768]
  input %b: f32[768,768]
  node "mm" %y: f32[128,768] = MatMul(%a, %b)
  output %y
}"#;
    let counts = tiled_counts(src, stcp920(), &[("i1", 24), ("r0", 64)]);
    const F32: u64 = 4;
    // b once (not staged: read once); a, read once per i1 tile, staged in
    // each cluster's GB; y put once.
    assert_eq!(counts.ddr_to_lb.bytes, 768 * 768 * F32);
    assert_eq!(counts.gb_to_lb.bytes, 32 * 128 * 768 * F32);
    assert_eq!(counts.ddr_to_gb.bytes, 4 * 128 * 768 * F32);
    assert_eq!(counts.lb_to_ddr.bytes, 128 * 768 * F32);
    // The halving tiles (before Algorithms 1 and 2): i0 halved to 4 for
    // the 32 cores, then i1 (saving the most) to 12 to fit; i0 outer, so
    // b is read once per i0 tile (32 times) and a once.
    let halving = 32 * 768 * 768 * F32 + 128 * 768 * F32;
    assert!(counts.ddr_to_lb.bytes + counts.gb_to_lb.bytes < halving / 3);
}

/// A mean of rows too long for the LB, `x: f32[32, 32768]` over its last
/// axis on `stcp920`, opened by the graph passes into a sum and a
/// division that the planner fuses into one kernel when it tiles: `for
/// i0 < 32 { acc = Σ_r0 x[i0][r0]; y[i0] = acc / 32768 }`, an epilogue
/// after the sum. Whole, a row (128 KB) does not fit one core's 64 KB;
/// with r0 cut (the partial sums stored as they are, the division on the
/// last tile only) the fused kernel tiles, so the model is one kernel
/// (before, the planner's feedback split the division off into a second
/// one). x is read once, y written once.
#[test]
fn a_mean_of_rows_too_long_for_the_lb_is_one_kernel_with_its_reduction_cut() {
    let src = r#"graph "g" opsets [""=18] {
  input %x: f32[32,32768]
  init %axes: i64[1] = [1]
  node "mean" %y: f32[32] = ReduceMean(%x, %axes) {keepdims=0}
  output %y
}"#;
    let counts = check(src, &stcp920());
    assert_eq!(counts.kernel_calls, 1, "{counts}");
    assert_eq!(
        counts.ddr_to_lb.bytes + counts.gb_to_lb.bytes,
        32 * 32768 * 4
    );
    assert_eq!(counts.lb_to_ddr.bytes, 32 * 4);
}

/// Softmax's rows form stores each row, then reads it back: its output
/// is got and put. Each core's rows are its own (the output box moves by
/// its extent from tile to tile), so the phase is dealt to the cores,
/// on `stcp920` and on a 4 KB LB, and matches the interpreter.
#[test]
fn softmax_rows_are_dealt_to_the_cores() {
    let src = r#"graph "g" opsets [""=17] {
  input %x: f32[64,300]
  node "sm" %y: f32[64,300] = Softmax(%x) {axis=1}
  output %y
}"#;
    let g = load(src);
    for desc in [stcp920(), small_lb()] {
        let t = DsaTarget::new(desc);
        // The planner fuses the opened Softmax into one group.
        let all: Vec<usize> = (0..g.nodes.len()).collect();
        let node = kiln_fuse::apply::group_node(&g, &all).expect("groups");
        let lowered =
            kiln_cpu::select::lower_fused(&node, "k0", Vec::new(), &t.target).expect("lowers");
        let device = tile_kernel(&lowered.kernel, &t.desc).expect("tiles");
        let read_back: Vec<_> = device
            .phases
            .iter()
            .filter(|p| p.arrays.iter().any(|a| a.get && a.put))
            .collect();
        assert!(!read_back.is_empty(), "no output read back");
        assert!(read_back.iter().all(|p| p.spread), "{}", t.desc.name);
        let counts = check(src, &t.desc);
        assert_eq!(counts.kernel_calls, 1, "{counts}");
    }
}

/// A kernel whose DMA of an input is deleted reads the LB's poison (0xFF
/// bytes, NaN), not the input: device code cannot reach DDR by itself.
#[test]
fn a_kernel_without_its_dma_reads_garbage() {
    let g = load(GRAPHS[0]);
    let ins = inputs(&g).expect("inputs");
    let t = kiln_dsa_emu::DsaTarget::new(DsaDesc::preset("stcp920").expect("preset"));
    let opts = DsaOptions::default();
    let cpu = |t: &kiln_dsa_emu::DsaTarget| kiln_cpu::CpuOptions {
        threads: 1,
        compiler: opts.compiler.clone(),
        fusion: opts.fusion,
        target: t.target.clone(),
        tunings: Default::default(),
    };
    let run = |drop_get: bool| {
        let mut p = kiln_dsa_emu::model::build_program(&g, &t, opts.fusion).expect("builds");
        for k in p.kernels.iter_mut().flatten() {
            if drop_get {
                let kept: Vec<&str> =
                    k.c.lines()
                        .filter(|l| !l.contains("kiln_dma_get(core, in0_lb"))
                        .collect();
                assert!(kept.len() < k.c.lines().count(), "no get of in0: {}", k.c);
                k.c = kept.join("\n");
            }
        }
        let m = kiln_cpu::CompiledModel::load(p, &cpu(&t)).expect("compiles");
        m.run(&ins).expect("runs")[0].data.to_f64_vec().unwrap()
    };
    let want = kiln_interp::run(&g, &ins).expect("interpreter")[0]
        .data
        .to_f64_vec()
        .unwrap();
    let with = run(false);
    assert!(with.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5));
    let without = run(true);
    let wrong = without
        .iter()
        .zip(&want)
        .filter(|(a, b)| (*a - *b).abs() >= 1e-5 || a.is_nan())
        .count();
    assert!(
        wrong > without.len() / 2,
        "{wrong} of {} wrong",
        without.len()
    );
}

/// A `kiln_mem` is a handle, not an address: device code that tries to
/// read DDR through it does not compile.
#[test]
fn device_code_cannot_dereference_a_ddr_handle() {
    let mut config = DsaOptions::default().compiler;
    config.cache_dir = std::env::temp_dir().join("kiln-dsa-handle-test");
    let ok = format!(
        "{}\nvoid f(kiln_core* c, kiln_mem m, float* lb) {{\n  kiln_dma_get(c, lb, m, 1, (const int64_t[]){{4}}, (const int64_t[]){{0}}, (const int64_t[]){{4}}, 4);\n}}\n",
        kiln_codegen::dsa::api::API
    );
    assert!(kiln_runtime::jit::compile(&config, std::slice::from_ref(&ok), 1).is_ok());
    for read in ["((float*)m)[0]", "*(float*)m", "m[0]"] {
        let bad = ok.replace(
            "  kiln_dma_get",
            &format!("  lb[0] = {read};\n  kiln_dma_get"),
        );
        let err = kiln_runtime::jit::compile(&config, &[bad], 1);
        assert!(err.is_err(), "{read} compiled");
    }
}

/// A kernel whose one-element tiles overflow the LB is not compiled: the
/// error names the kernel, its arrays and the LB, and the node runs on the
/// interpreter. With its input channels (the reduction) cut to one, the
/// padded 3×3 convolution needs 64 + 64 + 4 bytes (36-byte boxes aligned
/// to 64).
#[test]
fn an_lb_too_small_is_an_error_naming_the_kernel_and_sizes() {
    let mut tiny = DsaDesc::preset("stcp920").expect("preset");
    tiny.local_buffer.bytes = 128;
    let g = load(GRAPHS[1]);
    let m = DsaModel::compile(&g, &tiny, &DsaOptions::default()).expect("compiles");
    let why = &m.model.report.interpreted;
    assert_eq!(why.len(), 1, "{why:?}");
    let reason = &why[0].1;
    assert!(
        reason.contains("kernel kiln_k0: its smallest tiles need 132 bytes")
            && reason.contains("in0 box [1, 1, 3, 3] 36 B")
            && reason.contains("but a core of stcp920 has 128 bytes"),
        "{reason}"
    );
    let ins = inputs(&g).expect("inputs");
    let (got, counts) = m.run(&ins).expect("runs on the interpreter");
    assert_eq!(got, kiln_interp::run(&g, &ins).expect("interpreter"));
    assert_eq!(counts.ddr_bytes(), 0);
}

/// The same convolution on a 256-byte LB, where its 8 input channels
/// whole (a 288-byte input box) overflowed: once the output tiles are
/// one element the reduction over the input channels is halved too, its
/// partial sums kept in the output's LB array across its tiles.
#[test]
fn a_reduction_too_long_for_the_lb_is_cut() {
    let mut tiny = DsaDesc::preset("stcp920").expect("preset");
    tiny.local_buffer.bytes = 256;
    check(GRAPHS[1], &tiny);
}

/// A sum of rows too long for the LB, `x: f32[32, 32768]` over its last
/// axis on `stcp920` (64 KB LB less 2 × 64 bytes of alignment: 16 352
/// floats): `for i0 < 32 { acc = Σ_r0 x[i0][r0]; y[i0] = acc }`. Kept
/// whole, r0 does not fit (128 KB a row), so Algorithm 1 gets no nest
/// without it. Sized by Algorithm 1, by hand: r0 (the sizevar: x's
/// contiguous index) gets 64, i0 (compvar) 32, its whole extent (2 080
/// floats); the expanding part doubles r0 (i0 has left `varSet`) to 128
/// and 256 (8 224 floats); 512 (16 416) overflows. r0's tile loop goes
/// inside i0's, which is dealt to the 32 cores (one row each); x is read
/// once, y written once. The halving tiles (i0 one row, then r0 halved
/// to 8 192) move the same bytes, so the choice is kept.
#[test]
fn algorithm_1_cuts_a_long_reduction_and_partial_sums_stay_in_lb() {
    let src = r#"graph "g" opsets [""=17] {
  input %x: f32[32,32768]
  init %axes: i64[1] = [1]
  node "sum" %y: f32[32] = ReduceSum(%x, %axes) {keepdims=0}
  output %y
}"#;
    let counts = tiled_counts(src, stcp920(), &[("i0", 1), ("r0", 256)]);
    assert_eq!(
        counts.ddr_to_lb.bytes + counts.gb_to_lb.bytes,
        32 * 32768 * 4
    );
    assert_eq!(counts.lb_to_ddr.bytes, 32 * 4);
}

/// A matrix product with a reduction too long for the LB, `[32, 16384] ×
/// [16384, 2]` in f32 on `stcp920` (16 336 floats with 3 × 64 bytes of
/// alignment). Its kernel is the projection's above; with r0 whole a row
/// of a and a column of b (32 768 floats) do not fit. Algorithm 1 by
/// hand: i1 (sizevar) gets 2, its extent (a 1 + b 2 + y 2 floats); r0
/// (compvar) 64 (194 floats); i1 whole makes i0 a compvar: 32, its
/// extent (2 048 + 128 + 64); the expanding part doubles r0 to 128 and
/// 256 (8 192 + 512 + 64); 512 (16 384 + 1 024 + 64) overflows. i0 is
/// dealt to the cores (one row each), r0's tiles inside: a read once
/// (2 MB), b once per row (32 × 128 KB, from GB). The halving tiles (one
/// row, one column, r0 halved to 4 096) read a twice and b 64 times.
#[test]
fn a_matmul_whose_k_algorithm_1_cuts_accumulates_in_lb() {
    let src = r#"graph "g" opsets [""=17] {
  input %a: f32[32,16384]
  input %b: f32[16384,2]
  node "mm" %y: f32[32,2] = MatMul(%a, %b)
  output %y
}"#;
    let counts = tiled_counts(src, stcp920(), &[("i0", 1), ("r0", 256)]);
    const F32: u64 = 4;
    assert_eq!(counts.ddr_to_lb.bytes, 32 * 16384 * F32);
    assert_eq!(counts.gb_to_lb.bytes, 32 * 16384 * 2 * F32);
    assert_eq!(counts.lb_to_ddr.bytes, 32 * 2 * F32);
}
