//! Target descriptions (DESIGN.md "Targets"): what differs per target is
//! data, read by the fusion cost model, the schedule rules and the code
//! generators instead of constants.
//!
//! Needs nothing. Guarantees: [`TargetDesc`] for the host CPU (read from
//! the machine; never fails, unknown values fall back to conservative
//! ones) or for a named CPU preset ([`CpuPreset`]), each with the C
//! compiler flags that select its instruction set and the vector width the
//! generated C is forced to ([`TargetDesc::vector_bytes`]).

mod gpu;
mod host;
mod preset;

pub use gpu::{GpuDesc, GpuPreset};
pub use host::{host, host_model};
pub use preset::CpuPreset;

/// Instruction-set family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
    /// Any other CPU: generic C, 16-byte vectors.
    Generic,
    /// An NVIDIA GPU (CUDA C through NVRTC); [`TargetDesc::gpu`] says which.
    Cuda,
    /// A scratchpad accelerator (DSA C, `kiln-dsa`): its cores compute only
    /// on local-buffer data its DMA moves, so its loops are tiled by its
    /// own lowering (`kiln_dsa::tiling`), not by the CPU or GPU schedules.
    Dsa,
}

/// One level of the memory hierarchy (a cache, or a scratchpad a program
/// manages itself).
#[derive(Debug, Clone, PartialEq)]
pub struct MemLevel {
    pub name: String,
    pub bytes: usize,
    /// Private to one core (true) or shared by all.
    pub per_core: bool,
}

/// Which atomic read-modify-write operations the target has in memory
/// (used to combine partial reductions in one kernel, PANAMERA §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Atomics {
    /// Integer add/min/max on 32 and 64 bits.
    pub int: bool,
    /// f32 add (compare-and-swap loops on CPUs count).
    pub f32_add: bool,
}

/// Everything target-dependent that kiln's cost models and generators read.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetDesc {
    /// Preset name (`x86-64-v4`, …) or `host`.
    pub name: String,
    pub arch: Arch,
    /// Bytes in one SIMD register the generated code uses (16, 32, 64).
    pub vector_bytes: usize,
    /// Whether vector instructions convert between f16 and f32 (x86's F16C):
    /// the generated C then widens and narrows a vector loop's f16 elements a
    /// block at a time with them instead of in integer arithmetic.
    pub half_conversions: bool,
    /// Cores the code may use by default.
    pub cores: usize,
    /// Caches, innermost first.
    pub caches: Vec<MemLevel>,
    /// Scratchpad memories a program manages (empty on CPUs).
    pub local_memories: Vec<MemLevel>,
    /// fp32 peak of all cores, in GFLOP/s (a multiply-add counts 2).
    pub peak_gflops: f64,
    /// Main-memory bandwidth of all cores, in GB/s.
    pub memory_gbps: f64,
    pub atomics: Atomics,
    /// C compiler flags selecting the instruction set (`-march=…`); empty
    /// for the host, which the JIT compiles for with `-march=native`.
    pub cflags: Vec<String>,
    /// What a GPU target adds (`None` on CPUs): how loops map to blocks
    /// and threads instead of cores and vector lanes.
    pub gpu: Option<GpuDesc>,
}

impl TargetDesc {
    /// f32 lanes in one vector.
    pub fn f32_lanes(&self) -> usize {
        self.vector_bytes / 4
    }

    /// Independent vector accumulators a loop that only loads and adds
    /// keeps, so that consecutive vectors do not wait on each other's
    /// addition: the adder's latency (3-4 cycles on current x86 and Arm
    /// cores) at one or two additions a cycle needs 4-8; 4 already keeps
    /// such a loop at the speed of its loads from L2 and beyond.
    pub fn sum_accumulators(&self) -> usize {
        4
    }

    /// Vectors a row of a row program (a Softmax's, a LayerNorm's) may span and still be
    /// short: its time goes to the latency of dependent steps (a vector's lanes summed, the
    /// row's max fed to an exp) more than to its work, so two rows are computed together
    /// and their chains overlap. An out-of-order window of current x86 and Arm cores (a few
    /// hundred instructions) holds about one row of eight vectors' work (BENCHMARKS.md,
    /// session 32).
    pub fn short_row_vectors(&self) -> usize {
        8
    }

    /// The cache level named `name` (`L1`, `L2`, `L3`).
    pub fn cache(&self, name: &str) -> Option<&MemLevel> {
        self.caches.iter().find(|c| c.name == name)
    }

    /// SIMD registers the instruction set names (16 with SSE and AVX2, 32 with AVX-512
    /// and on NEON): how many vector accumulators a loop keeps without spilling.
    pub fn vector_registers(&self) -> usize {
        match self.arch {
            Arch::X86_64 if self.vector_bytes >= 64 => 32,
            Arch::Aarch64 => 32,
            _ => 16,
        }
    }

    /// Whether vector loads and stores take a per-lane mask and do not fault on the lanes it
    /// turns off (AVX-512's mask registers): a short loop then runs its last, partial vector
    /// as a masked whole one instead of element by element.
    pub fn masked_vectors(&self) -> bool {
        self.arch == Arch::X86_64 && self.vector_bytes >= 64
    }

    /// Bytes of L2 one core has (the default when unknown: 256 KiB).
    pub fn l2_per_core(&self) -> usize {
        self.per_core("L2").unwrap_or(256 << 10)
    }

    /// Bytes of L1 data cache one core has (the default when unknown: 32 KiB).
    pub fn l1_per_core(&self) -> usize {
        self.per_core("L1").unwrap_or(32 << 10)
    }

    /// Bytes of the outermost cache, all cores' together (a private level
    /// counts once per core); 8 MiB when the description gives no cache.
    pub fn last_level_cache_bytes(&self) -> usize {
        self.caches
            .last()
            .map_or(8 << 20, |level| match level.per_core {
                true => level.bytes * self.cores.max(1),
                false => level.bytes,
            })
    }

    /// Bytes of the cache level `name` one core has, when the description gives the level.
    fn per_core(&self, name: &str) -> Option<usize> {
        self.cache(name).map(|level| match level.per_core {
            true => level.bytes,
            false => level.bytes / self.cores.max(1),
        })
    }

    /// Whether code for this target runs on a GPU.
    pub fn is_gpu(&self) -> bool {
        self.gpu.is_some()
    }

    /// Whether code for this target runs on a scratchpad accelerator
    /// ([`Arch::Dsa`]): kernels are lowered unscheduled and tiled for its
    /// local buffers.
    pub fn is_scratchpad(&self) -> bool {
        self.arch == Arch::Dsa
    }

    /// Nanoseconds to do `flops` operations and move `bytes` bytes, the
    /// slower of the two (a roofline estimate).
    pub fn roofline_ns(&self, flops: f64, bytes: f64) -> f64 {
        (flops / self.peak_gflops).max(bytes / self.memory_gbps)
    }
}

impl std::fmt::Display for TargetDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({:?}): {}-byte vectors, {} cores, {:.0} GFLOP/s, {:.0} GB/s",
            self.name, self.arch, self.vector_bytes, self.cores, self.peak_gflops, self.memory_gbps
        )?;
        for c in self.caches.iter().chain(&self.local_memories) {
            let scope = if c.per_core { "per core" } else { "shared" };
            write!(f, ", {} {} KiB {scope}", c.name, c.bytes >> 10)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_usable() {
        let t = host();
        assert!(matches!(t.vector_bytes, 16 | 32 | 64));
        assert!(t.cores >= 1);
        assert!(t.peak_gflops > 0.0 && t.memory_gbps > 0.0);
        assert!(t.l2_per_core() > 0);
        assert!(t.to_string().starts_with("host"));
    }

    #[test]
    fn last_level_cache_counts_private_levels_per_core() {
        let mut t = CpuPreset::X86_64V3.desc(4);
        assert_eq!(t.last_level_cache_bytes(), 8 << 20);
        t.caches.pop();
        assert_eq!(t.last_level_cache_bytes(), 4 << 20);
        t.caches.clear();
        assert_eq!(t.last_level_cache_bytes(), 8 << 20);
    }

    #[test]
    fn roofline_takes_the_slower_side() {
        let t = CpuPreset::X86_64V3.desc(2);
        let compute = t.roofline_ns(1e9, 1.0);
        let memory = t.roofline_ns(1.0, 1e9);
        assert!((compute - 1e9 / t.peak_gflops).abs() < 1e-6);
        assert!((memory - 1e9 / t.memory_gbps).abs() < 1e-6);
    }
}
