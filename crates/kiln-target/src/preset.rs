//! Named CPU targets (`kiln compile --cpu NAME`): an instruction-set level
//! and the flags that select it, with typical cache sizes. Cores come from
//! the caller (`--threads`).

use crate::{Arch, Atomics, MemLevel, TargetDesc};
use kiln_ir::{bail, Result};

/// A CPU instruction-set level kiln generates code for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuPreset {
    /// x86-64 with AVX-512 (`-march=x86-64-v4`).
    X86_64V4,
    /// x86-64 with AVX2 and FMA (`-march=x86-64-v3`).
    X86_64V3,
    /// Baseline x86-64 (SSE2).
    X86_64,
    /// 64-bit ARM with NEON (`-march=armv8-a`).
    Aarch64Neon,
}

impl CpuPreset {
    pub const ALL: [CpuPreset; 4] = [
        CpuPreset::X86_64V4,
        CpuPreset::X86_64V3,
        CpuPreset::X86_64,
        CpuPreset::Aarch64Neon,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CpuPreset::X86_64V4 => "x86-64-v4",
            CpuPreset::X86_64V3 => "x86-64-v3",
            CpuPreset::X86_64 => "x86-64",
            CpuPreset::Aarch64Neon => "aarch64-neon",
        }
    }

    /// The preset called `name`; the error lists them all.
    pub fn parse(name: &str) -> Result<CpuPreset> {
        match CpuPreset::ALL.into_iter().find(|p| p.name() == name) {
            Some(p) => Ok(p),
            None => {
                let names: Vec<&str> = CpuPreset::ALL.iter().map(|p| p.name()).collect();
                bail!("unknown CPU preset '{name}' (known: {})", names.join(", "))
            }
        }
    }

    fn vector_bytes(self) -> usize {
        match self {
            CpuPreset::X86_64V4 => 64,
            CpuPreset::X86_64V3 => 32,
            CpuPreset::X86_64 | CpuPreset::Aarch64Neon => 16,
        }
    }

    fn march(self) -> &'static str {
        match self {
            CpuPreset::X86_64V4 => "x86-64-v4",
            CpuPreset::X86_64V3 => "x86-64-v3",
            CpuPreset::X86_64 => "x86-64",
            CpuPreset::Aarch64Neon => "armv8-a",
        }
    }

    /// The description for `cores` cores at a typical 3 GHz with two FMA
    /// pipes (one on the SSE2 baseline).
    pub fn desc(self, cores: usize) -> TargetDesc {
        let cores = cores.max(1);
        let fma_pipes = if self == CpuPreset::X86_64 { 1.0 } else { 2.0 };
        let lanes = (self.vector_bytes() / 4) as f64;
        TargetDesc {
            name: self.name().to_string(),
            arch: match self {
                CpuPreset::Aarch64Neon => Arch::Aarch64,
                _ => Arch::X86_64,
            },
            vector_bytes: self.vector_bytes(),
            // x86-64-v3 and v4 include F16C; the SSE2 baseline does not.
            half_conversions: matches!(self, CpuPreset::X86_64V3 | CpuPreset::X86_64V4),
            cores,
            caches: typical_caches(),
            local_memories: Vec::new(),
            peak_gflops: cores as f64 * 3.0 * fma_pipes * 2.0 * lanes,
            memory_gbps: 10.0 * cores as f64,
            atomics: Atomics {
                int: true,
                f32_add: true,
            },
            cflags: vec![format!("-march={}", self.march())],
            gpu: None,
        }
    }
}

/// 32 KiB L1 and 1 MiB L2 per core, 8 MiB shared L3.
pub(crate) fn typical_caches() -> Vec<MemLevel> {
    let level = |name: &str, bytes: usize, per_core: bool| MemLevel {
        name: name.to_string(),
        bytes,
        per_core,
    };
    vec![
        level("L1", 32 << 10, true),
        level("L2", 1 << 20, true),
        level("L3", 8 << 20, false),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_back_from_its_name() {
        for p in CpuPreset::ALL {
            assert_eq!(CpuPreset::parse(p.name()).unwrap(), p);
            let d = p.desc(4);
            assert_eq!(d.f32_lanes() * 4, d.vector_bytes);
            assert!(d.cflags[0].starts_with("-march="));
        }
        let err = CpuPreset::parse("pentium").unwrap_err().to_string();
        assert!(
            err.contains("pentium") && err.contains("x86-64-v4"),
            "{err}"
        );
    }
}
