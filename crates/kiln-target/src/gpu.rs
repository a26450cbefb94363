//! GPU target descriptions (`--backend cuda`): what the CUDA code generator
//! and its schedules read — multiprocessors, threads, shared memory, the
//! compute capability the code is compiled for — next to the roofline
//! numbers every target has.
//!
//! Presets are the data sheets' figures for the chips kiln is tested on;
//! the CUDA runtime replaces the counts it can read from the device
//! (multiprocessors, shared memory, compute capability) with the real ones.

use crate::{Arch, Atomics, MemLevel, TargetDesc};
use kiln_ir::{bail, Result};

/// What a GPU target description adds to [`TargetDesc`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDesc {
    /// Compute capability as `major * 10 + minor` (80: A100, 90: H100/H200).
    pub compute_capability: u32,
    /// Streaming multiprocessors.
    pub sm_count: usize,
    /// Threads in one warp (the width of a warp-level reduction).
    pub warp_size: usize,
    /// Most threads one block may have.
    pub max_threads_per_block: usize,
    /// Threads per block of element-wise and reduction kernels.
    pub block_threads: usize,
    /// Shared memory one block may use without opting in, in bytes.
    pub shared_bytes_per_block: usize,
    /// Shared memory one block may use once its function opts in
    /// (dynamic shared memory above `shared_bytes_per_block`), in bytes.
    pub shared_bytes_optin: usize,
    /// Blocks per multiprocessor a grid-stride kernel launches at most
    /// (more only queue).
    pub blocks_per_sm: usize,
    /// f32 matrix products may round their factors to TF32 (10-bit
    /// mantissa) and run on tensor cores (compute capability 80 on). A
    /// precision choice the user opts into (`--tf32`), off in every preset:
    /// with it, products keep f32 accumulation but lose factor precision.
    pub tf32: bool,
}

/// A named GPU kiln generates code for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuPreset {
    /// NVIDIA A100 (sm_80).
    Sm80,
    /// NVIDIA H100/H200 (sm_90).
    Sm90,
}

impl GpuPreset {
    pub const ALL: [GpuPreset; 2] = [GpuPreset::Sm80, GpuPreset::Sm90];

    pub fn name(self) -> &'static str {
        match self {
            GpuPreset::Sm80 => "sm_80",
            GpuPreset::Sm90 => "sm_90",
        }
    }

    /// The preset called `name`; the error lists them all.
    pub fn parse(name: &str) -> Result<GpuPreset> {
        match GpuPreset::ALL.into_iter().find(|p| p.name() == name) {
            Some(p) => Ok(p),
            None => {
                let names: Vec<&str> = GpuPreset::ALL.iter().map(|p| p.name()).collect();
                bail!("unknown GPU preset '{name}' (known: {})", names.join(", "))
            }
        }
    }

    /// The description from the chip's data sheet (fp32 non-tensor peak,
    /// HBM bandwidth, L2).
    pub fn desc(self) -> TargetDesc {
        // Opt-in shared memory per block: 163 KiB on A100, 227 KiB on
        // H100 (the CUDA programming guide's compute capability table).
        let (cc, sms, peak, gbps, l2, optin) = match self {
            GpuPreset::Sm80 => (80, 108, 19_500.0, 1_555.0, 40usize << 20, 163 << 10),
            GpuPreset::Sm90 => (90, 132, 67_000.0, 3_350.0, 50usize << 20, 227 << 10),
        };
        TargetDesc {
            name: self.name().to_string(),
            arch: Arch::Cuda,
            // One warp's f32 accesses: the unit a coalesced load moves.
            vector_bytes: 128,
            half_conversions: false,
            cores: sms,
            caches: vec![MemLevel {
                name: "L2".into(),
                bytes: l2,
                per_core: false,
            }],
            local_memories: vec![MemLevel {
                name: "shared".into(),
                bytes: 48 << 10,
                per_core: true,
            }],
            peak_gflops: peak,
            memory_gbps: gbps,
            atomics: Atomics {
                int: true,
                f32_add: true,
            },
            cflags: Vec::new(),
            gpu: Some(GpuDesc {
                compute_capability: cc,
                sm_count: sms,
                warp_size: 32,
                max_threads_per_block: 1024,
                block_threads: 256,
                shared_bytes_per_block: 48 << 10,
                shared_bytes_optin: optin,
                blocks_per_sm: 8,
                tf32: false,
            }),
        }
    }
}

impl GpuDesc {
    /// f32 matrix products run on tensor cores in TF32: allowed and
    /// present.
    pub fn tf32_products(&self) -> bool {
        self.tf32 && self.compute_capability >= 80
    }

    /// Blocks of a grid-stride launch over `n` independent iterations:
    /// one thread per iteration up to a full machine of resident blocks.
    pub fn grid_for(&self, n: i64) -> u32 {
        let threads = self.block_threads as i64;
        let blocks = (n.max(1) + threads - 1) / threads;
        blocks.min((self.sm_count * self.blocks_per_sm) as i64) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_back_and_are_gpus() {
        for p in GpuPreset::ALL {
            assert_eq!(GpuPreset::parse(p.name()).unwrap(), p);
            let d = p.desc();
            assert!(d.is_gpu() && d.arch == Arch::Cuda);
        }
        let err = GpuPreset::parse("sm_1").unwrap_err().to_string();
        assert!(err.contains("sm_1") && err.contains("sm_90"), "{err}");
    }

    #[test]
    fn a_grid_covers_small_work_and_caps_large_work() {
        let g = GpuPreset::Sm90.desc().gpu.unwrap();
        assert_eq!(g.grid_for(1), 1);
        assert_eq!(g.grid_for(257), 2);
        assert_eq!(g.grid_for(1 << 40), (132 * 8) as u32);
    }
}
