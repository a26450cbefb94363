//! The traffic and cycle simulator on the paper's example graphs
//! (`tests/graphs/*.kiln`) and on hand-made ones whose numbers can be
//! worked out by hand.

mod common;

use kiln_dsa::{simulate, DsaDesc, ScheduleKind, SimOptions, SimReport};
use kiln_ir::Graph;

fn stcp920() -> DsaDesc {
    DsaDesc::preset("stcp920").unwrap()
}

fn sim(g: &Graph, desc: &DsaDesc, schedule: ScheduleKind) -> SimReport {
    let opts = SimOptions {
        schedule,
        across_layer: None,
    };
    simulate(g, desc, opts).unwrap_or_else(|e| panic!("{}: {e}", schedule.name()))
}

/// A graph of `body`'s nodes (kiln text, inside the braces).
fn graph_of(body: &str) -> Graph {
    common::load(&format!("graph \"t\" opsets [\"\"=17] {{\n{body}}}\n")).unwrap()
}

/// `stcp920` with free DMA calls and an LB no kernel waits for, so that
/// one other rate bounds a kernel.
fn bounded_by_one_rate() -> DsaDesc {
    let mut desc = stcp920();
    desc.dma.setup_ns = 0.0;
    desc.local_buffer.gbps = 1e9;
    desc
}

fn cases() -> Vec<(String, Graph)> {
    common::cases()
        .iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            let g = common::graph(&name);
            (name, g)
        })
        .collect()
}

/// Table 3 in kind: the per-layer baseline puts every kernel output in
/// DDR; GraphTurbo keeps all but the graph's output on chip.
#[test]
fn per_layer_outputs_go_to_ddr_and_graphturbo_keeps_them_on_chip() {
    let desc = stcp920();
    for (name, g) in cases() {
        let base = sim(&g, &desc, ScheduleKind::PerLayer);
        assert_eq!(base.outputs_in_ddr, base.kernels, "{name}");
        assert_eq!(base.outputs_in_gb + base.outputs_in_lb, 0, "{name}");
        let turbo = sim(&g, &desc, ScheduleKind::Graphturbo);
        let on_chip = turbo.outputs_in_gb + turbo.outputs_in_lb;
        assert!(
            turbo.outputs_in_ddr <= 1 && on_chip + 1 >= turbo.kernels,
            "{name}: {} in DDR of {}",
            turbo.outputs_in_ddr,
            turbo.kernels
        );
    }
}

/// Every schedule moves at least the compulsory traffic, and
/// GraphTurbo's DDR traffic is never above the per-layer baseline's.
#[test]
fn ddr_traffic_is_at_least_the_floor_and_graphturbo_at_most_per_layer() {
    let desc = stcp920();
    for (name, g) in cases() {
        let reports: Vec<SimReport> = ScheduleKind::ALL
            .iter()
            .map(|&k| sim(&g, &desc, k))
            .collect();
        for r in &reports {
            assert!(
                r.ddr_bytes >= r.compulsory_ddr_bytes,
                "{name} {}: {} < {}",
                r.schedule,
                r.ddr_bytes,
                r.compulsory_ddr_bytes
            );
        }
        let (turbo, base) = (&reports[0], &reports[1]);
        assert!(turbo.ddr_bytes <= base.ddr_bytes, "{name}");
        assert!(turbo.cycles <= base.cycles, "{name}");
    }
}

/// Fig. 3a's four stages, worked out by hand: the floor is the input,
/// the seven weights and the output; the per-layer baseline (seven
/// layers) reads every layer's input from DDR and writes its output
/// there, plus the weights; GraphTurbo reads only the floor.
#[test]
fn fig3_traffic_matches_the_hand_count() {
    let g = common::graph("fig3_stages");
    let desc = stcp920();
    let image = 8 * 48 * 32 * 32 * 4; // %x, %ra
    let (da, db, dc, rd) = (
        8 * 96 * 16 * 16 * 4,
        8 * 192 * 8 * 8 * 4,
        8 * 384 * 4 * 4 * 4,
        8 * 384 * 4 * 4 * 4,
    );
    let weights = 4 * (48 * 48 + 96 * 48 * 4 + 96 * 96 + 192 * 96 * 4)
        + 4 * (192 * 192 + 384 * 192 * 4 + 384 * 384);
    let floor = image + weights + rd;
    let base = sim(&g, &desc, ScheduleKind::PerLayer);
    assert_eq!(base.compulsory_ddr_bytes, floor as u64);
    assert_eq!(base.kernels, 7);
    // Layer inputs x, ra, da, rb, db, rc, dc; outputs ra .. rd.
    let activations = image + 2 * (image + da + da + db + db + dc) + rd;
    // Every layer's smaller operand fits the 8 × 64 KB of LB, so no
    // layer reads an operand twice.
    assert_eq!(base.ddr_bytes, (activations + weights) as u64);
    assert!(base.per_kernel.iter().all(|k| k.traffic.rereads.is_empty()));
    let turbo = sim(&g, &desc, ScheduleKind::Graphturbo);
    assert_eq!(turbo.ddr_bytes, floor as u64);
}

/// The baselines of Fig. 15: keeping layer outputs in GB or LB moves
/// less DDR traffic than the per-layer baseline, in LB less GB traffic
/// than in GB.
#[test]
fn layer_outputs_kept_on_chip_cut_ddr_traffic() {
    let g = common::graph("fig3_stages");
    let desc = stcp920();
    let base = sim(&g, &desc, ScheduleKind::PerLayer);
    let in_gb = sim(&g, &desc, ScheduleKind::LayersInGb);
    let in_lb = sim(&g, &desc, ScheduleKind::LayersInLb);
    let astitch = sim(&g, &desc, ScheduleKind::AstitchLike);
    assert_eq!(astitch.outputs_in_gb, 0);
    assert!(astitch.ddr_bytes >= in_lb.ddr_bytes);
    assert_eq!(in_gb.outputs_in_ddr, 1);
    assert_eq!(in_gb.outputs_in_gb, in_gb.kernels - 1);
    assert!(in_gb.ddr_bytes < base.ddr_bytes);
    assert!(in_lb.ddr_bytes <= in_gb.ddr_bytes);
    assert!(in_lb.outputs_in_lb > 0, "{in_lb}");
    assert!(in_lb.gb_bytes < in_gb.gb_bytes);
}

/// A Relu on 1 MiB is DMA-bound when compute and LB are fast: its cycles
/// are its bytes over the cluster's share of DDR bandwidth times the
/// clock (2 MiB at 51.2 / 4 GB/s and 1 GHz: 163 840).
#[test]
fn a_dma_bound_kernel_takes_bytes_over_bandwidth() {
    let g = graph_of(
        "input %x: f32[1,64,64,64]\nnode \"r\" %y: f32[1,64,64,64] = Relu(%x)\noutput %y\n",
    );
    let mut desc = bounded_by_one_rate();
    desc.units.iter_mut().for_each(|u| u.gflops = 1e9);
    let r = sim(&g, &desc, ScheduleKind::PerLayer);
    let bytes = 2 * 64 * 64 * 64 * 4;
    assert_eq!(r.ddr_bytes, bytes);
    let share = desc.ddr.gbps / f64::from(desc.clusters);
    let expected = bytes as f64 / share * desc.clock_ghz;
    assert_eq!(expected, 163_840.0);
    assert!((r.cycles as f64 - expected).abs() <= 1.0, "{}", r.cycles);
    assert_eq!(r.compute_cycles, 0);
    // Twice the clock, twice the cycles.
    desc.clock_ghz *= 2.0;
    let r2 = sim(&g, &desc, ScheduleKind::PerLayer);
    assert!((r2.cycles as f64 - 2.0 * expected).abs() <= 1.0);
}

/// A 1×1 convolution with large channels and a small image is
/// compute-bound on the matrix unit: cycles are its FLOPs over the
/// matrix engines of the bound cores.
#[test]
fn a_compute_bound_kernel_takes_flops_over_the_matrix_units() {
    let g = graph_of(
        "input %x: f32[8,512,1,1]\ninput %w: f32[512,512,1,1]\nnode \"c\" %y: f32[8,512,1,1] = Conv(%x, %w)\noutput %y\n",
    );
    let mut desc = bounded_by_one_rate();
    desc.ddr.gbps = 1e9;
    let r = sim(&g, &desc, ScheduleKind::PerLayer);
    let flops = 2.0 * 8.0 * 512.0 * 512.0;
    let k = &r.per_kernel[0];
    let mme = desc.units.iter().find(|u| u.name == "mme").unwrap();
    let expected = flops / (mme.gflops * k.traffic.cores as f64) * desc.clock_ghz;
    assert_eq!(k.flops as f64, flops);
    assert!((k.compute_cycles as f64 - expected).abs() <= 1.0);
    assert_eq!(k.unit_cycles.get("mme"), Some(&k.compute_cycles));
    assert!((r.cycles as f64 - expected).abs() <= 2.0, "{}", r.cycles);
}

/// Totals are the sums of the kernels'; serially the cycles are compute
/// plus DMA; across-layer scheduling overlaps them and is faster.
#[test]
fn totals_add_up_and_across_layer_scheduling_overlaps() {
    let g = common::graph("fig3_stages");
    let desc = stcp920();
    let serial = simulate(
        &g,
        &desc,
        SimOptions {
            schedule: ScheduleKind::Graphturbo,
            across_layer: Some(false),
        },
    )
    .unwrap();
    let overlapped = sim(&g, &desc, ScheduleKind::Graphturbo);
    assert!(overlapped.across_layer && !serial.across_layer);
    for r in [&serial, &overlapped] {
        let sum = |f: fn(&kiln_dsa::sim::KernelReport) -> u64| -> u64 {
            r.per_kernel.iter().map(f).sum()
        };
        assert_eq!(r.ddr_bytes, sum(|k| k.ddr_bytes));
        assert_eq!(r.gb_bytes, sum(|k| k.gb_bytes));
        assert_eq!(r.lb_bytes, sum(|k| k.lb_bytes));
        assert_eq!(r.kernels, r.per_kernel.len());
    }
    let busy = serial.compute_cycles + serial.dma_cycles;
    assert!(serial.cycles.abs_diff(busy) <= 2 * serial.kernels as u64);
    assert_eq!(serial.overlap_cycles, busy.saturating_sub(serial.cycles));
    assert!(overlapped.cycles < serial.cycles);
    assert!(overlapped.overlap_cycles > serial.overlap_cycles);
    assert_eq!(overlapped.ddr_bytes, serial.ddr_bytes);
}

/// Fig. 3a's stages a, b and c run as 8, 4 and 2 instances (split along
/// the batch), each reading its stage's weights whole: they are promoted
/// DDR → GB once and hoisted GB → LB by every instance; stage d (one
/// instance) reads its weights from DDR.
#[test]
fn weights_read_whole_by_every_instance_are_staged_in_gb_once() {
    let g = common::graph("fig3_stages");
    let r = sim(&g, &stcp920(), ScheduleKind::Graphturbo);
    let stage = |conv: usize, down: usize| 4 * (conv + down);
    let (a, b, c) = (
        stage(48 * 48, 96 * 48 * 4),
        stage(96 * 96, 192 * 96 * 4),
        stage(192 * 192, 384 * 192 * 4),
    );
    let d = 4 * 384 * 384;
    let weights = |f: fn(&kiln_dsa::traffic::Traffic) -> u64| -> u64 {
        r.per_kernel
            .iter()
            .map(|k| f(&k.traffic.weights) + f(&k.traffic.late_weights))
            .sum()
    };
    assert_eq!(weights(|t| t.ddr_to_gb), (a + b + c) as u64);
    assert_eq!(weights(|t| t.gb_to_lb), (8 * a + 4 * b + 2 * c) as u64);
    assert_eq!(weights(|t| t.ddr_to_lb), d as u64);
}

/// A description's `float_bytes` sizes floating-point tensors: FP16
/// halves the compulsory traffic on Fig. 3a, and the per-layer
/// baseline's at least.
#[test]
fn float_bytes_size_the_tensors() {
    let g = common::graph("fig3_stages");
    let mut desc = stcp920();
    let f32_run = sim(&g, &desc, ScheduleKind::PerLayer);
    desc.float_bytes = Some(2);
    let f16_run = sim(&g, &desc, ScheduleKind::PerLayer);
    // Half the bytes, and tiles twice the elements: fewer re-reads.
    assert!(2 * f16_run.ddr_bytes <= f32_run.ddr_bytes);
    assert_eq!(
        2 * f16_run.compulsory_ddr_bytes,
        f32_run.compulsory_ddr_bytes
    );
}

/// A 1024² × 1024² matrix product (4 MiB operands) does not fit 8 × 64
/// KiB of LB: tiled in 8 blocks of one operand, it streams the other 8
/// times, from GB, which holds it: DDR moves each operand once. With a
/// 1 MiB GB the repeated reads come from DDR.
#[test]
fn a_tiled_matrix_product_rereads_from_gb_when_it_fits() {
    let g = graph_of(
        "input %x: f32[1024,1024]\ninput %w: f32[1024,1024]\nnode \"mm\" %y: f32[1024,1024] = MatMul(%x, %w)\noutput %y\n",
    );
    let mib = 1u64 << 20;
    let mut desc = stcp920();
    let r = sim(&g, &desc, ScheduleKind::PerLayer);
    assert_eq!(r.per_kernel[0].traffic.rereads, vec![("x".to_string(), 8)]);
    assert_eq!(r.ddr_bytes, 12 * mib);
    assert_eq!(r.compulsory_ddr_bytes, 12 * mib);
    // Kept in GB once, read from it 7 times more.
    assert_eq!(
        (r.traffic.lb_to_gb, r.traffic.gb_to_lb),
        (4 * mib, 28 * mib)
    );
    desc.global_buffer.as_mut().unwrap().bytes = mib;
    let small = sim(&g, &desc, ScheduleKind::PerLayer);
    assert_eq!(small.ddr_bytes, (12 + 28) * mib);
    assert_eq!(small.gb_bytes, 0);
}

/// Two padded 3×3 convolutions with ReLUs over 8 images of 32 × 64 × 64
/// (512 KB each in f32: one image's tensors do not fit eight 64 KB LBs):
/// GraphTurbo cuts images and rows, the halo rows are read twice from LB
/// or GB, never from DDR, and DDR sees exactly the floor: the input, the
/// weights and the output once each. The per-layer baseline writes and
/// reads back the three 4 MB tensors between its layers.
#[test]
fn a_halo_split_chain_moves_only_the_compulsory_ddr_bytes() {
    let g = graph_of(
        "  input %x: f32[8,32,64,64]
  input %w1: f32[32,32,3,3]
  input %w2: f32[32,32,3,3]
  node \"c1\" %a: f32[8,32,64,64] = Conv(%x, %w1) {pads=[1,1,1,1]}
  node \"r1\" %b: f32[8,32,64,64] = Relu(%a)
  node \"c2\" %c: f32[8,32,64,64] = Conv(%b, %w2) {pads=[1,1,1,1]}
  node \"r2\" %d: f32[8,32,64,64] = Relu(%c)
  output %d
",
    );
    let desc = stcp920();
    let turbo = sim(&g, &desc, ScheduleKind::Graphturbo);
    let tensor = 8 * 32 * 64 * 64 * 4;
    let weights = 2 * 32 * 32 * 9 * 4;
    assert_eq!(turbo.compulsory_ddr_bytes, 2 * tensor + weights);
    assert_eq!(turbo.ddr_bytes, turbo.compulsory_ddr_bytes);
    assert!(
        turbo.kernels > 8,
        "images and rows: {} kernels",
        turbo.kernels
    );
    let base = sim(&g, &desc, ScheduleKind::PerLayer);
    assert!(base.ddr_bytes >= turbo.ddr_bytes + 2 * tensor);
    assert!(turbo.cycles < base.cycles);
}

/// A 3×3 convolution whose 9 MiB f32 weight is larger than GB (8 MiB),
/// over 16 images of 512 × 7 × 7, after a 1×1 convolution: split by
/// images alone, every instance would read the weight from DDR again.
/// GraphTurbo cuts its output channels too: each instance reads a slice,
/// the instances sharing a slice run one after another, and each slice
/// is promoted DDR → GB once, so DDR sees the floor: the input, both
/// weights and the output once each.
#[test]
fn a_weight_larger_than_gb_is_read_once_slice_by_slice() {
    let g = graph_of(
        "  input %x: f32[16,512,7,7]
  input %w1: f32[512,512,1,1]
  input %w2: f32[512,512,3,3]
  node \"c1\" %a: f32[16,512,7,7] = Conv(%x, %w1)
  node \"r1\" %b: f32[16,512,7,7] = Relu(%a)
  node \"c2\" %c: f32[16,512,7,7] = Conv(%b, %w2) {pads=[1,1,1,1]}
  node \"r2\" %d: f32[16,512,7,7] = Relu(%c)
  output %d
",
    );
    let desc = stcp920();
    let tensor = 16 * 512 * 7 * 7 * 4;
    let (w1, w2) = (512 * 512 * 4, 512 * 512 * 9 * 4);
    assert!(w2 > desc.global_buffer.as_ref().unwrap().bytes);
    let turbo = sim(&g, &desc, ScheduleKind::Graphturbo);
    assert_eq!(turbo.compulsory_ddr_bytes, 2 * tensor + w1 + w2);
    assert_eq!(turbo.ddr_bytes, turbo.compulsory_ddr_bytes);
    let reads_w2 = |k: &&kiln_dsa::sim::KernelReport| k.traffic.lb_reads.contains_key("w2");
    let kernels: Vec<_> = turbo.per_kernel.iter().filter(reads_w2).collect();
    // Images and output channels cut: two slices, each read by 8 instances.
    assert!(kernels
        .iter()
        .all(|k| k.split.len() == 4 && k.split[1] == 2));
    assert_eq!(kernels.len(), 2 * kernels[0].split[0]);
    let late: Vec<_> = kernels.iter().map(|k| k.traffic.late_weights).collect();
    let promoted: Vec<u64> = late.iter().map(|t| t.ddr_to_gb).collect();
    // Slice by slice: the first instance of each run promotes its half.
    let promoting: Vec<usize> = (0..promoted.len()).filter(|&i| promoted[i] > 0).collect();
    assert_eq!(promoting, vec![0, kernels.len() / 2]);
    assert_eq!(promoted.iter().sum::<u64>(), w2);
    assert!(late.iter().all(|t| t.ddr_to_lb == 0));
    let hoisted: u64 = late.iter().map(|t| t.gb_to_lb).sum();
    assert_eq!(hoisted, w2 / 2 * kernels.len() as u64);
    // The order that keeps a slice's instances together still runs every
    // producer before its readers.
    let s = kiln_dsa::graphturbo(&g, &desc).unwrap();
    let mut position = vec![0; s.order.len()];
    s.order
        .iter()
        .enumerate()
        .for_each(|(p, &i)| position[i] = p);
    assert!(s
        .edges
        .iter()
        .all(|e| position[e.producer] < position[e.consumer]));
}

/// Two bottleneck blocks at 16 images of 1024 × 14 × 14, f32, the first
/// with a stride-2 3×3 convolution and a down-sampling 1×1 one that run
/// whole (their 9 MiB and 8 MiB weights fit no split): their outputs,
/// kept in GB, are read image by image by the split group after them.
/// An image's part is dead once its readers have run, so GB has room
/// again for the block's output `%y`, which lives across the second
/// block's weight-sliced convolution and is spilled from LB: all of it
/// goes to GB, none to DDR, where the whole-batch tensors held GB until
/// their last reader (BENCHMARKS.md, session 29, has the numbers).
#[test]
fn parts_of_a_whole_kernel_output_read_image_by_image_free_gb_for_spills() {
    let g = graph_of(
        "  input %x: f32[16,1024,14,14]
  input %w1: f32[512,1024,1,1]
  input %w2: f32[512,512,3,3]
  input %w3: f32[2048,512,1,1]
  input %ws: f32[2048,1024,1,1]
  input %w4: f32[512,2048,1,1]
  input %w5: f32[512,512,3,3]
  input %w6: f32[2048,512,1,1]
  node \"conv1\" %c1: f32[16,512,14,14] = Conv(%x, %w1)
  node \"relu1\" %r1: f32[16,512,14,14] = Relu(%c1)
  node \"conv2\" %c2: f32[16,512,7,7] = Conv(%r1, %w2) {pads=[1,1,1,1], strides=[2,2]}
  node \"relu2\" %r2: f32[16,512,7,7] = Relu(%c2)
  node \"conv3\" %c3: f32[16,2048,7,7] = Conv(%r2, %w3)
  node \"convs\" %cs: f32[16,2048,7,7] = Conv(%x, %ws) {strides=[2,2]}
  node \"add\" %a: f32[16,2048,7,7] = Add(%c3, %cs)
  node \"relu\" %y: f32[16,2048,7,7] = Relu(%a)
  node \"conv4\" %c4: f32[16,512,7,7] = Conv(%y, %w4)
  node \"relu4\" %r4: f32[16,512,7,7] = Relu(%c4)
  node \"conv5\" %c5: f32[16,512,7,7] = Conv(%r4, %w5) {pads=[1,1,1,1]}
  node \"relu5\" %r5: f32[16,512,7,7] = Relu(%c5)
  node \"conv6\" %c6: f32[16,2048,7,7] = Conv(%r5, %w6)
  node \"add2\" %a2: f32[16,2048,7,7] = Add(%c6, %y)
  node \"relu6\" %z: f32[16,2048,7,7] = Relu(%a2)
  output %z
",
    );
    let turbo = sim(&g, &stcp920(), ScheduleKind::Graphturbo);
    let kernels = |output: &str| -> Vec<&kiln_dsa::sim::KernelReport> {
        turbo
            .per_kernel
            .iter()
            .filter(|k| k.output == output)
            .collect()
    };
    for whole in ["c2", "cs"] {
        let k = kernels(whole);
        assert!(k.len() == 1 && k[0].split.is_empty() && k[0].scope == "GB");
    }
    let y = kernels("y");
    assert_eq!(y.len(), 32, "images and columns");
    assert!(y.iter().all(|k| k.scope == "GB"));
    let floor = turbo.compulsory_ddr_bytes as f64;
    assert!(
        (turbo.ddr_bytes as f64) < 1.5 * floor,
        "{} DDR bytes against a floor of {floor}",
        turbo.ddr_bytes
    );
}
