//! The traffic and cycle simulator: a model's schedule on one cluster of
//! a DSA (GraphTurbo §5's measurements, modelled): per kernel (instance)
//! and for the model, the bytes moved DDR ↔ GB ↔ LB, LB reads and writes
//! per operand, cycles per compute unit, DMA and compute time, how much
//! of them overlapped, the total, and the compulsory DDR traffic floor.
//! The schedules are GraphTurbo's and the baselines of §5.2–5.3
//! ([`ScheduleKind`]); the traffic model is [`crate::traffic`]'s, the
//! timing [`crate::timing`]'s.
//!
//! Needs: a graph with static shapes and a [`DsaDesc`].
//! Guarantees: a [`SimReport`] whose model totals are the sums of its
//! kernels' (cycles: the end of the last one), `ddr_bytes ≥
//! compulsory_ddr_bytes`, kernels listed in execution order; it prints as
//! text ([`fmt::Display`]) and serializes to JSON.

use crate::baselines::{schedule, ScheduleKind};
use crate::desc::DsaDesc;
use crate::opgraph::OpGraph;
use crate::schedule::Schedule;
use crate::timing::{phases, timeline, InstanceTimes, Phases};
use crate::traffic::{compulsory_ddr_bytes, instance_traffic, InstanceTraffic, Traffic};
use kiln_ir::{Graph, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// How to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    pub schedule: ScheduleKind,
    /// §4.4's across-layer scheduling (weight prefetch behind compute);
    /// `None`: on for GraphTurbo, off for the baselines.
    pub across_layer: Option<bool>,
}

/// One phase's place on the timeline, in cycles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CycleSpan {
    pub start: u64,
    pub end: u64,
}

/// One kernel (a scheduled instance).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelReport {
    /// `group.instance`, numbered from 1 as in the schedule's text.
    pub name: String,
    pub nodes: usize,
    /// Pieces per axis its group's output is cut into (empty: whole).
    pub split: Vec<usize>,
    /// The value it writes and where that lives.
    pub output: String,
    pub scope: String,
    pub ddr_bytes: u64,
    pub gb_bytes: u64,
    pub lb_bytes: u64,
    pub flops: u64,
    /// What it moves per phase and level, LB reads and writes per
    /// operand, per node work, re-reads.
    #[serde(flatten)]
    pub traffic: InstanceTraffic,
    pub unit_cycles: BTreeMap<String, u64>,
    pub compute_cycles: u64,
    pub dma_cycles: u64,
    pub weights_at: CycleSpan,
    pub late_weights_at: CycleSpan,
    pub inputs_at: CycleSpan,
    pub compute_at: CycleSpan,
    pub outputs_at: CycleSpan,
}

/// A model's simulation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimReport {
    pub target: String,
    pub schedule: String,
    pub across_layer: bool,
    pub clock_ghz: f64,
    pub cores_per_cluster: u32,
    /// Bytes read from or written to DDR.
    pub ddr_bytes: u64,
    /// Bytes written to or read from GB.
    pub gb_bytes: u64,
    /// Bytes the compute reads from and writes to LB.
    pub lb_bytes: u64,
    /// From the first transfer to the end of the last kernel.
    pub cycles: u64,
    pub kernels: usize,
    pub outputs_in_ddr: usize,
    pub outputs_in_gb: usize,
    pub outputs_in_lb: usize,
    /// Each weight and model input read once, each output written once.
    pub compulsory_ddr_bytes: u64,
    pub compute_cycles: u64,
    pub dma_cycles: u64,
    /// DMA and compute cycles that ran at the same time.
    pub overlap_cycles: u64,
    pub unit_cycles: BTreeMap<String, u64>,
    pub flops: u64,
    pub traffic: Traffic,
    /// In execution order.
    pub per_kernel: Vec<KernelReport>,
}

/// Simulates `g` on one cluster of `desc` under `opts`.
pub fn simulate(g: &Graph, desc: &DsaDesc, opts: SimOptions) -> Result<SimReport> {
    let schedule = schedule(g, desc, opts.schedule)?;
    let og = OpGraph::for_device(g, desc)?;
    let traffic = instance_traffic(g, &og, &schedule, desc);
    let phases: Vec<Phases> = traffic.iter().map(|t| phases(t, desc)).collect();
    let across_layer = opts
        .across_layer
        .unwrap_or(opts.schedule == ScheduleKind::Graphturbo);
    let times = timeline(&phases, &schedule.order, across_layer);
    let cycles = |ns: f64| (ns * desc.clock_ghz).round() as u64;
    let per_kernel: Vec<KernelReport> = schedule
        .order
        .iter()
        .map(|&i| kernel_report(&schedule, i, &traffic[i], &phases[i], &times[i], &cycles))
        .collect();
    let counts = schedule.output_counts();
    let mut report = SimReport {
        target: desc.name.clone(),
        schedule: opts.schedule.name().to_string(),
        across_layer,
        clock_ghz: desc.clock_ghz,
        cores_per_cluster: desc.cores_per_cluster,
        ddr_bytes: 0,
        gb_bytes: 0,
        lb_bytes: 0,
        cycles: per_kernel
            .iter()
            .map(|k| k.outputs_at.end)
            .max()
            .unwrap_or(0),
        kernels: per_kernel.len(),
        outputs_in_ddr: counts.ddr,
        outputs_in_gb: counts.gb,
        outputs_in_lb: counts.lb,
        compulsory_ddr_bytes: compulsory_ddr_bytes(&og),
        compute_cycles: 0,
        dma_cycles: 0,
        overlap_cycles: 0,
        unit_cycles: BTreeMap::new(),
        flops: 0,
        traffic: Traffic::default(),
        per_kernel,
    };
    report.add_up();
    Ok(report)
}

fn kernel_report(
    schedule: &Schedule,
    i: usize,
    t: &InstanceTraffic,
    p: &Phases,
    at: &InstanceTimes,
    cycles: &dyn Fn(f64) -> u64,
) -> KernelReport {
    let inst = &schedule.instances[i];
    let total = t.total();
    let span = |s: crate::timing::Span| CycleSpan {
        start: cycles(s.start),
        end: cycles(s.end),
    };
    KernelReport {
        name: format!("{}.{}", inst.group + 1, inst.index + 1),
        nodes: schedule.groups[inst.group].nodes.len(),
        split: schedule.groups[inst.group]
            .split
            .as_ref()
            .map_or_else(Vec::new, |s| s.factors.clone()),
        output: inst.output.clone(),
        scope: inst.scope.to_string(),
        ddr_bytes: total.ddr_bytes(),
        gb_bytes: total.gb_bytes(),
        lb_bytes: t.lb_bytes(),
        flops: t.work.iter().map(|w| w.flops).sum(),
        traffic: t.clone(),
        unit_cycles: p
            .unit_ns
            .iter()
            .map(|(unit, &ns)| (unit.clone(), cycles(ns)))
            .collect(),
        compute_cycles: cycles(p.compute_ns),
        dma_cycles: cycles(p.dma_ns()),
        weights_at: span(at.weights),
        late_weights_at: span(at.late_weights),
        inputs_at: span(at.inputs),
        compute_at: span(at.compute),
        outputs_at: span(at.outputs),
    }
}

impl SimReport {
    /// The model's totals from its kernels'.
    fn add_up(&mut self) {
        for k in &self.per_kernel {
            self.ddr_bytes += k.ddr_bytes;
            self.gb_bytes += k.gb_bytes;
            self.lb_bytes += k.lb_bytes;
            self.compute_cycles += k.compute_cycles;
            self.dma_cycles += k.dma_cycles;
            self.flops += k.flops;
            self.traffic.add(&k.traffic.total());
            for (unit, &c) in &k.unit_cycles {
                *self.unit_cycles.entry(unit.clone()).or_default() += c;
            }
        }
        let busy = self.compute_cycles + self.dma_cycles;
        self.overlap_cycles = busy.saturating_sub(self.cycles);
    }

    /// DDR traffic over the compulsory floor.
    pub fn ddr_over_floor(&self) -> f64 {
        self.ddr_bytes as f64 / self.compulsory_ddr_bytes.max(1) as f64
    }
}

/// Kernels the text form lists: the longest.
const LISTED_KERNELS: usize = 12;

/// A summary, then the longest kernels:
///
/// ```text
/// sim graphturbo on stcp920 (across-layer scheduling on, 1 GHz, 8 cores per cluster)
/// kernels 15: outputs DDR 1, GB 0, LB 14
/// cycles 123456 (compute 100000, DMA 40000, overlapped 16544)
/// ...
/// ```
impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = if self.across_layer { "on" } else { "off" };
        writeln!(
            f,
            "sim {} on {} (across-layer scheduling {on}, {} GHz, {} cores per cluster)",
            self.schedule, self.target, self.clock_ghz, self.cores_per_cluster
        )?;
        writeln!(
            f,
            "kernels {}: outputs DDR {}, GB {}, LB {}",
            self.kernels, self.outputs_in_ddr, self.outputs_in_gb, self.outputs_in_lb
        )?;
        writeln!(
            f,
            "cycles {} (compute {}, DMA {}, overlapped {})",
            self.cycles, self.compute_cycles, self.dma_cycles, self.overlap_cycles
        )?;
        let t = &self.traffic;
        writeln!(
            f,
            "DDR {} bytes ({:.2}x the compulsory {}): DDR->LB {}, LB->DDR {}, DDR->GB {}",
            self.ddr_bytes,
            self.ddr_over_floor(),
            self.compulsory_ddr_bytes,
            t.ddr_to_lb,
            t.lb_to_ddr,
            t.ddr_to_gb
        )?;
        writeln!(
            f,
            "GB {} bytes: GB->LB {}, LB->GB {}; LB {} bytes read and written by compute; {} DMA calls",
            self.gb_bytes, t.gb_to_lb, t.lb_to_gb, self.lb_bytes, t.dma_calls
        )?;
        let units: Vec<String> = self
            .unit_cycles
            .iter()
            .map(|(u, c)| format!("{u} {c}"))
            .collect();
        writeln!(f, "busy cycles per unit: {}", units.join(", "))?;
        self.longest_kernels(f)
    }
}

impl SimReport {
    fn longest_kernels(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kernels: Vec<&KernelReport> = self.per_kernel.iter().collect();
        let length =
            |k: &KernelReport| k.outputs_at.end - k.weights_at.start.min(k.inputs_at.start);
        kernels.sort_by_key(|k| std::cmp::Reverse(length(k)));
        writeln!(
            f,
            "{:<10} {:>6} {:>5} {:<4} {:>12} {:>12} {:>12} {:>12} {:>12}  output",
            "kernel", "nodes", "cores", "in", "DDR B", "GB B", "LB B", "compute cyc", "DMA cyc"
        )?;
        for k in kernels.iter().take(LISTED_KERNELS) {
            writeln!(
                f,
                "{:<10} {:>6} {:>5} {:<4} {:>12} {:>12} {:>12} {:>12} {:>12}  %{}",
                k.name,
                k.nodes,
                k.traffic.cores,
                k.scope,
                k.ddr_bytes,
                k.gb_bytes,
                k.lb_bytes,
                k.compute_cycles,
                k.dma_cycles,
                k.output
            )?;
        }
        if self.per_kernel.len() > LISTED_KERNELS {
            writeln!(
                f,
                "({} longest of {} kernels; the JSON form lists all)",
                LISTED_KERNELS, self.kernels
            )?;
        }
        Ok(())
    }
}
