//! How long a schedule's instances take on one cluster: the timing half of
//! the simulator. Durations come from an instance's traffic
//! ([`crate::traffic`]) and the description's rates; the timeline places
//! them on two resources, the cluster's DMA and its cores, either one
//! instance after the other or with GraphTurbo's across-layer instruction
//! scheduling (§4.4, Fig. 13): the next instance's weight promotion runs
//! while the current one computes.
//!
//! Rates, all from the [`DsaDesc`]:
//! - DDR: `ddr.gbps` shared by the `clusters`, which run the same
//!   schedule on their own batches at once (§2.1, §5.1); GB → LB and
//!   LB → GB at `global_buffer.gbps`; each DMA call costs `dma.setup_ns`,
//!   spread over `dma.engines_per_cluster` engines. A DDR → GB promotion
//!   is limited by DDR.
//! - A node runs on the fastest unit of its kind (matrix for a
//!   contraction, vector otherwise, the fastest unit when the core has
//!   none of that kind) of every core the instance runs on, and takes
//!   the longer of its arithmetic (`flops / (gflops × cores)`) and its LB
//!   accesses (`lb_bytes / (local_buffer.gbps × cores)`). Nodes of an
//!   instance run one after another.
//! - Cycles are nanoseconds × `clock_ghz`.
//!
//! Timeline, in execution order, per instance: the first layer's weights
//! in, the later layers' weights in, activations in, compute, outputs
//! out. Without across-layer scheduling each phase waits for the one
//! before and the next instance for the last. With it, the DMA is a
//! queue of its own: instance k's activations, then its later layers'
//! weights, which load while its first layers compute (compute ends no
//! earlier than they arrive), then instance k+1's first weights, into the
//! buffer instance k−1 used (two weight buffers: they wait for k−1's
//! compute), so they load while k computes; compute waits for its first
//! weights and activations; activations of k+1 wait for k's outputs on
//! the DMA queue, which keeps each producer's off-chip output ahead of
//! its readers. LB space for the prefetched weights is not checked
//! (§2.2: "a small, fixed size of buffers in LB").
//!
//! Needs: per instance its [`Phases`], and an order listing each once.
//! Guarantees: every span starts after the spans it depends on end, no
//! two DMA spans overlap, no two compute spans overlap.

use crate::desc::{DsaDesc, UnitDesc, UnitKind};
use crate::traffic::{InstanceTraffic, Traffic};
use serde::Serialize;
use std::collections::BTreeMap;

/// How long each phase of one instance takes, in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Phases {
    pub weights_ns: f64,
    pub late_weights_ns: f64,
    pub inputs_ns: f64,
    pub compute_ns: f64,
    pub outputs_ns: f64,
    /// Busy time per compute unit (by name).
    pub unit_ns: BTreeMap<String, f64>,
}

impl Phases {
    /// DMA time of all three transfer phases.
    pub fn dma_ns(&self) -> f64 {
        self.weights_ns + self.late_weights_ns + self.inputs_ns + self.outputs_ns
    }
}

/// When something runs, in nanoseconds from the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Span {
    pub start: f64,
    pub end: f64,
}

impl Span {
    fn after(start: f64, length: f64) -> Span {
        Span {
            start,
            end: start + length,
        }
    }
}

/// When each phase of one instance runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct InstanceTimes {
    pub weights: Span,
    pub late_weights: Span,
    pub inputs: Span,
    pub compute: Span,
    pub outputs: Span,
}

/// The durations of one instance's phases on `desc`.
pub fn phases(t: &InstanceTraffic, desc: &DsaDesc) -> Phases {
    let mut phases = Phases {
        weights_ns: dma_ns(&t.weights, desc),
        late_weights_ns: dma_ns(&t.late_weights, desc),
        inputs_ns: dma_ns(&t.inputs, desc),
        outputs_ns: dma_ns(&t.outputs, desc),
        ..Phases::default()
    };
    let cores = t.cores.max(1) as f64;
    for work in &t.work {
        let Some(unit) = unit_for(desc, work.contraction) else {
            continue;
        };
        let arithmetic = work.flops as f64 / (unit.gflops * cores);
        let lb = work.lb_bytes as f64 / (desc.local_buffer.gbps * cores);
        let ns = arithmetic.max(lb);
        phases.compute_ns += ns;
        *phases.unit_ns.entry(unit.name.clone()).or_default() += ns;
    }
    phases
}

/// DMA time of `t`: DDR bytes at the cluster's share of DDR, GB ↔ LB bytes
/// at GB's rate, and the calls' setup.
pub fn dma_ns(t: &Traffic, desc: &DsaDesc) -> f64 {
    let ddr_share = desc.ddr.gbps / f64::from(desc.clusters);
    let ddr = t.ddr_bytes() as f64 / ddr_share;
    let gb = desc
        .global_buffer
        .as_ref()
        .map_or(0.0, |gb| (t.gb_to_lb + t.lb_to_gb) as f64 / gb.gbps);
    let setup = t.dma_calls as f64 * desc.dma.setup_ns / f64::from(desc.dma.engines_per_cluster);
    ddr + gb + setup
}

/// The fastest unit of the kind a node needs, else the fastest of all
/// (`None` only for a description without units, which validation
/// refuses).
fn unit_for(desc: &DsaDesc, contraction: bool) -> Option<&UnitDesc> {
    let kind = if contraction {
        UnitKind::Matrix
    } else {
        UnitKind::Vector
    };
    let by_rate = |a: &&UnitDesc, b: &&UnitDesc| a.gflops.total_cmp(&b.gflops);
    let units = desc.units.iter();
    units
        .clone()
        .filter(|u| u.kind == kind)
        .max_by(by_rate)
        .or_else(|| units.max_by(by_rate))
}

/// Places every instance's phases in `order`.
pub fn timeline(phases: &[Phases], order: &[usize], across_layer: bool) -> Vec<InstanceTimes> {
    if across_layer {
        overlapped(phases, order)
    } else {
        serial(phases, order)
    }
}

/// One phase after another, one instance after another.
fn serial(phases: &[Phases], order: &[usize]) -> Vec<InstanceTimes> {
    let mut times = vec![InstanceTimes::default(); phases.len()];
    let mut now = 0.0;
    for &i in order {
        let p = &phases[i];
        let weights = Span::after(now, p.weights_ns);
        let late_weights = Span::after(weights.end, p.late_weights_ns);
        let inputs = Span::after(late_weights.end, p.inputs_ns);
        let compute = Span::after(inputs.end, p.compute_ns);
        let outputs = Span::after(compute.end, p.outputs_ns);
        now = outputs.end;
        times[i] = InstanceTimes {
            weights,
            late_weights,
            inputs,
            compute,
            outputs,
        };
    }
    times
}

/// §4.4: the next instance's weights, and this one's later layers',
/// load while this one computes.
fn overlapped(phases: &[Phases], order: &[usize]) -> Vec<InstanceTimes> {
    let mut times = vec![InstanceTimes::default(); phases.len()];
    let (mut dma_free, mut cores_free) = (0.0f64, 0.0f64);
    if let Some(&first) = order.first() {
        times[first].weights = Span::after(0.0, phases[first].weights_ns);
        dma_free = times[first].weights.end;
    }
    for (k, &i) in order.iter().enumerate() {
        let p = &phases[i];
        times[i].inputs = Span::after(dma_free, p.inputs_ns);
        times[i].late_weights = Span::after(times[i].inputs.end, p.late_weights_ns);
        dma_free = times[i].late_weights.end;
        if let Some(&next) = order.get(k + 1) {
            // Two weight buffers: the next weights reuse k−1's.
            let buffer_free = k
                .checked_sub(1)
                .map_or(0.0, |prev| times[order[prev]].compute.end);
            times[next].weights = Span::after(dma_free.max(buffer_free), phases[next].weights_ns);
            dma_free = times[next].weights.end;
        }
        let ready = cores_free
            .max(times[i].inputs.end)
            .max(times[i].weights.end);
        // The later layers' weights load while the first layers compute.
        let length = p.compute_ns.max(times[i].late_weights.end - ready);
        times[i].compute = Span::after(ready, length);
        cores_free = times[i].compute.end;
        times[i].outputs = if p.outputs_ns > 0.0 {
            let out = Span::after(dma_free.max(cores_free), p.outputs_ns);
            dma_free = out.end;
            out
        } else {
            Span::after(cores_free, 0.0)
        };
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(weights: f64, inputs: f64, compute: f64, outputs: f64) -> Phases {
        Phases {
            weights_ns: weights,
            late_weights_ns: 0.0,
            inputs_ns: inputs,
            compute_ns: compute,
            outputs_ns: outputs,
            unit_ns: BTreeMap::new(),
        }
    }

    fn makespan(times: &[InstanceTimes]) -> f64 {
        times.iter().map(|t| t.outputs.end).fold(0.0, f64::max)
    }

    /// Serially the makespan is the sum of all phases.
    #[test]
    fn serial_adds_every_phase() {
        let p = [phase(1.0, 2.0, 3.0, 4.0), phase(5.0, 6.0, 7.0, 8.0)];
        let times = timeline(&p, &[0, 1], false);
        assert_eq!(makespan(&times), 36.0);
        assert_eq!(times[1].weights.start, 10.0);
    }

    /// With across-layer scheduling the second instance's weights load
    /// during the first's compute, and compute waits for them.
    #[test]
    fn across_layer_hides_the_next_weights_behind_compute() {
        let p = [phase(4.0, 1.0, 10.0, 1.0), phase(4.0, 1.0, 10.0, 1.0)];
        let times = timeline(&p, &[0, 1], true);
        // w0 [0,4], i0 [4,5], w1 [5,9], c0 [5,15], o0 [15,16], i1 [16,17],
        // c1 [17,27], o1 [27,28].
        assert_eq!(
            times[1].weights,
            Span {
                start: 5.0,
                end: 9.0
            }
        );
        assert_eq!(
            times[0].compute,
            Span {
                start: 5.0,
                end: 15.0
            }
        );
        assert_eq!(makespan(&times), 28.0);
        assert!(makespan(&times) < makespan(&timeline(&p, &[0, 1], false)));
    }

    /// The third instance's weights wait for the first's compute (two
    /// weight buffers).
    #[test]
    fn weights_wait_for_a_free_buffer() {
        let p = [
            phase(0.0, 0.0, 100.0, 0.0),
            phase(0.0, 0.0, 1.0, 0.0),
            phase(5.0, 0.0, 1.0, 0.0),
        ];
        let times = timeline(&p, &[0, 1, 2], true);
        assert_eq!(times[2].weights.start, 100.0);
    }

    /// The later layers' weights load during the instance's compute; its
    /// compute ends no earlier than they arrive.
    #[test]
    fn later_layers_weights_load_during_compute() {
        let mut p = [phase(1.0, 1.0, 10.0, 0.0)];
        p[0].late_weights_ns = 4.0;
        let overlapped = timeline(&p, &[0], true);
        // w [0,1], i [1,2], late [2,6], compute [2,12].
        assert_eq!(
            overlapped[0].late_weights,
            Span {
                start: 2.0,
                end: 6.0
            }
        );
        assert_eq!(makespan(&overlapped), 12.0);
        assert_eq!(makespan(&timeline(&p, &[0], false)), 16.0);
        p[0].late_weights_ns = 20.0;
        assert_eq!(makespan(&timeline(&p, &[0], true)), 22.0);
    }
}
