//! The target description of the GPU a model runs on.
//!
//! Needs: an open device. Guarantees: the preset nearest its compute
//! capability (`kiln_target::GpuPreset`) with the counts the driver reports
//! put in its place: compute capability, multiprocessors, shared memory
//! per block, threads per block, L2.

use crate::ffi::device::Gpu;
use crate::ffi::driver::attr;
use kiln_ir::Result;
use kiln_target::{GpuPreset, TargetDesc};

/// The description of `gpu` (see the module doc).
pub fn device_target(gpu: &Gpu) -> Result<TargetDesc> {
    let (major, minor) = gpu.compute_capability()?;
    let cc = (major * 10 + minor).max(0) as u32;
    let mut t = preset_for(cc).desc();
    t.name = gpu.name()?;
    t.cores = gpu.sm_count()?.max(1) as usize;
    if let Some(l2) = t.caches.first_mut() {
        l2.bytes = gpu.attribute(attr::L2_CACHE_SIZE)?.max(0) as usize;
    }
    if let Some(g) = t.gpu.as_mut() {
        g.compute_capability = cc;
        g.sm_count = t.cores;
        g.shared_bytes_per_block =
            gpu.attribute(attr::MAX_SHARED_MEMORY_PER_BLOCK)?.max(0) as usize;
        g.shared_bytes_optin = (gpu
            .attribute(attr::MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?
            .max(0) as usize)
            .max(g.shared_bytes_per_block);
        g.max_threads_per_block = gpu.attribute(attr::MAX_THREADS_PER_BLOCK)?.max(1) as usize;
        g.warp_size = gpu.attribute(attr::WARP_SIZE)?.max(1) as usize;
    }
    Ok(t)
}

/// The preset whose code runs on compute capability `cc`.
pub fn preset_for(cc: u32) -> GpuPreset {
    if cc >= 90 {
        GpuPreset::Sm90
    } else {
        GpuPreset::Sm80
    }
}
