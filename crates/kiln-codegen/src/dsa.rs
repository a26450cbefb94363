//! The DSA C printer: a tiled kernel ([`DeviceKernel`], `kiln_dsa::tiling`)
//! as device code per core and host code (swTVM §4's host/accelerator
//! split: the management core calls every core and synchronises).
//!
//! Needs: a [`DeviceKernel`] and the [`DsaDesc`] it was tiled for.
//! Guarantees: after [`api::API`], per phase one device function
//! `static int NAME_pK(kiln_core*, int64_t core, int64_t cores, const
//! kiln_mem*)` — LB arrays at their fixed LB offsets, tile loops (the
//! outermost dealt to the cores in turn when the phase is spread, else run
//! by core 0 alone), `kiln_dma_get`/`kiln_dma_put` of each array's box at
//! its level, the compute on the LB arrays printed by the CPU printer's
//! statement and expression printer (`c.rs` [`Printer`]: one definition
//! of every scalar rule) — then the host function `int NAME(void* const*
//! args)` (the CPU kernels' signature: the DDR addresses of the buffers),
//! which stages GB inputs per cluster, runs each phase on every core and
//! waits at a barrier after it. Device code never sees a DDR address.

pub mod api;

use crate::c::Printer;
use crate::scalar_c::storage_type;
use kiln_dsa::device::{LbArray, Phase};
use kiln_dsa::{DeviceKernel, DsaDesc};
use kiln_ir::Result;
use std::fmt::Write;

/// The device and host C of `k` for `desc` (after the C prelude and
/// [`api::API`]).
pub fn kernel_dsa(k: &DeviceKernel, desc: &DsaDesc) -> Result<String> {
    let mut out = String::from(api::API);
    for (i, phase) in k.phases.iter().enumerate() {
        out += &device_function(k, i, phase)?;
    }
    out += &host_function(k, desc);
    Ok(out)
}

/// The device function of phase `i`.
fn device_function(k: &DeviceKernel, i: usize, phase: &Phase) -> Result<String> {
    let mut p = Printer::new(&phase.compute);
    writeln!(
        p.out,
        "static int {}_p{i}(kiln_core* core, int64_t id, int64_t cores, const kiln_mem* mem) {{\n  int err = 0;\n  (void)cores;",
        k.name
    )
    .ok();
    if !phase.spread {
        writeln!(p.out, "  if (id != 0) return 0;").ok();
    }
    for (a, b) in phase.arrays.iter().zip(&phase.compute.buffers) {
        let ty = storage_type(a.dtype)?;
        writeln!(
            p.out,
            "  {ty}* const {0} = ({ty}*)kiln_lb(core, {1});\n  (void){0};",
            b.name, a.offset
        )
        .ok();
    }
    tile_level(phase, 0, &mut p)?;
    writeln!(p.out, "  return err;\n}}").ok();
    Ok(p.out)
}

/// The DMA and loops at tile level `level` (0: outside every tile loop).
fn tile_level(phase: &Phase, level: usize, p: &mut Printer) -> Result<()> {
    let depth = level + 1;
    let pad = "  ".repeat(depth);
    let at_level = |a: &&LbArray| a.level == level;
    for (j, a) in phase
        .arrays
        .iter()
        .enumerate()
        .filter(|(_, a)| at_level(a) && a.get)
    {
        writeln!(p.out, "{pad}{};", dma(phase, j, a, true, p)?).ok();
    }
    match phase.tiles.get(level) {
        Some(t) => {
            let (start, step) = match (level, phase.spread) {
                (0, true) => ("id", "cores"),
                _ => ("0", "1"),
            };
            writeln!(
                p.out,
                "{pad}for (int64_t {v} = {start}; {v} < {n}; {v} += {step}) {{",
                v = t.tile_var,
                n = t.count()
            )
            .ok();
            tile_level(phase, level + 1, p)?;
            writeln!(p.out, "{pad}}}").ok();
        }
        None => {
            for s in &phase.compute.body {
                p.stmt(s, depth)?;
            }
        }
    }
    for (j, a) in phase
        .arrays
        .iter()
        .enumerate()
        .filter(|(_, a)| at_level(a) && a.put)
    {
        writeln!(p.out, "{pad}{};", dma(phase, j, a, false, p)?).ok();
    }
    Ok(())
}

/// The DMA call moving array `j`'s box in (`get`) or out.
fn dma(phase: &Phase, j: usize, a: &LbArray, get: bool, p: &Printer) -> Result<String> {
    let list = |v: Vec<String>| format!("(const int64_t[]){{{}}}", v.join(", "));
    let shape = list(a.dims.iter().map(|d| d.size.to_string()).collect());
    let lo = list(
        a.dims
            .iter()
            .map(|d| p.idx(&d.lo))
            .collect::<Result<Vec<_>>>()?,
    );
    let ext = list(a.dims.iter().map(|d| d.ext.to_string()).collect());
    let (lb, mem) = (&phase.compute.buffers[j].name, format!("mem[{}]", a.param));
    let elem = a.dtype.size();
    let nd = a.dims.len();
    Ok(if get {
        format!("kiln_dma_get(core, {lb}, {mem}, {nd}, {shape}, {lo}, {ext}, {elem})")
    } else {
        format!("kiln_dma_put(core, {mem}, {lb}, {nd}, {shape}, {lo}, {ext}, {elem})")
    })
}

/// The host function: handles, GB staging per cluster, each phase on
/// every core, barriers.
fn host_function(k: &DeviceKernel, desc: &DsaDesc) -> String {
    let (clusters, per) = (desc.clusters, desc.cores_per_cluster);
    let n = k.params.len().max(1);
    let mut s = format!(
        "int {}(void* const* args) {{\n  kiln_dsa* dev = kiln_dsa_begin();\n  int err = 0;\n  kiln_mem mem[{clusters}][{n}];\n  for (int64_t cl = 0; cl < {clusters}; ++cl) {{\n",
        k.name
    );
    for (i, b) in k.params.iter().enumerate() {
        let bytes = b.numel() * b.dtype.size();
        let ddr = format!("kiln_dsa_ddr(dev, args[{i}], {bytes})");
        match k.staged.iter().find(|(p, _)| *p == i) {
            Some((_, gb)) => writeln!(
                s,
                "    mem[cl][{i}] = kiln_dsa_stage(dev, cl, {ddr}, {gb}, {bytes});"
            ),
            None => writeln!(s, "    mem[cl][{i}] = {ddr};"),
        }
        .ok();
    }
    s += "  }\n";
    for i in 0..k.phases.len() {
        writeln!(
            s,
            "  for (int64_t id = 0; id < {}; ++id) {{\n    err |= {}_p{i}(kiln_dsa_core(dev, id), id, {}, mem[id / {per}]);\n  }}\n  kiln_dsa_barrier(dev);",
            clusters * per,
            k.name,
            clusters * per
        )
        .ok();
    }
    s += "  return kiln_dsa_end(dev) | err;\n}\n";
    s
}
