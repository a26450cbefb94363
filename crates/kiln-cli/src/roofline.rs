//! Roofline bounds of a compiled model's nodes: how fast each kernel could
//! run on this machine (Williams, Waterman & Patterson 2009).
//!
//! Needs: a graph whose value types have static shapes (a compiled
//! model's, fused nodes carrying their `body` graph) and the machine's
//! measured FMA peak and STREAM triad bandwidth ([`Machine::measure`]).
//! Guarantees: [`bound_ms`] is the slower of the node's arithmetic at the
//! peak and its compulsory memory traffic (each input and output once) at
//! the bandwidth: no kernel can beat it, so a kernel many times slower is a
//! cliff (`kiln bench --profile` prints the ratio; the roofline test fails
//! on it). FLOPs count 2 per multiply-accumulate of the contractions
//! ([`crate::flops`]) and one per output element of every other op.

use kiln_ir::{Graph, Node, Result};
use kiln_runtime::jit;

/// What this machine does per second with a given number of threads.
#[derive(Debug, Clone, Copy)]
pub struct Machine {
    pub gflops: f64,
    pub gbps: f64,
}

/// [`Machine::measure`]'s result: the machine on `threads` threads and the
/// FMA peak of one.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub machine: Machine,
    pub gflops_1thread: f64,
}

impl Machine {
    /// Measures the fp32 FMA peak (on one thread and on `threads`) and the
    /// STREAM triad bandwidth on `threads`, with small generated C kernels.
    pub fn measure(threads: usize) -> Result<Measured> {
        let cfg = jit::CompilerConfig::from_env();
        let units = [
            kiln_codegen::peak::peak_c(),
            kiln_codegen::bandwidth::triad_c(),
        ];
        let (lib, _) = jit::compile(&cfg, &units, 1)?;
        // SAFETY: peak_c defines `double kiln_fma_peak_gflops(int)`, triad_c
        // `double kiln_triad_gbps(int)`.
        let peak: unsafe extern "C" fn(i32) -> f64 = unsafe { lib.symbol("kiln_fma_peak_gflops")? };
        let triad: unsafe extern "C" fn(i32) -> f64 = unsafe { lib.symbol("kiln_triad_gbps")? };
        let threads = threads.max(1) as i32;
        // SAFETY: both take a thread count and only read their own buffers.
        let (one, gflops, gbps) = unsafe { (peak(1), peak(threads), triad(threads)) };
        Ok(Measured {
            machine: Machine { gflops, gbps },
            gflops_1thread: one,
        })
    }
}

/// Milliseconds `node` of `g` takes at best on `machine` (see the module
/// doc); `None` when a shape is unknown.
pub fn bound_ms(g: &Graph, node: &Node, machine: &Machine) -> Option<f64> {
    let flops = node_flops(g, node)? as f64;
    let bytes = traffic_bytes(g, node)? as f64;
    Some((flops / machine.gflops).max(bytes / machine.gbps) * 1e-6)
}

/// FLOPs of `node`: a fused node's body counted node by node.
fn node_flops(g: &Graph, node: &Node) -> Option<u64> {
    if let Ok(Some(body)) = node.attr_graph("body") {
        return body.nodes.iter().map(|n| node_flops(body, n)).sum();
    }
    match crate::flops::node_flops(g, node) {
        0 => output_elements(g, node),
        contraction => Some(contraction),
    }
}

fn output_elements(g: &Graph, node: &Node) -> Option<u64> {
    node.outputs
        .iter()
        .flatten()
        .map(|&v| g.ty(v).numel().map(|n| n as u64))
        .sum()
}

/// Bytes `node` must move: each distinct input and each output once.
fn traffic_bytes(g: &Graph, node: &Node) -> Option<u64> {
    let mut values: Vec<_> = node.inputs.iter().flatten().copied().collect();
    values.sort_unstable_by_key(|v| v.index());
    values.dedup();
    values.extend(node.outputs.iter().flatten().copied());
    values
        .iter()
        .map(|&v| {
            let ty = g.ty(v);
            ty.numel().map(|n| (n * ty.dtype.size()) as u64)
        })
        .sum()
}
