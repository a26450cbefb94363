//! The host CPU's description, read from the machine (Linux: /proc/cpuinfo
//! flags for the vector width, /sys for cache sizes).

use crate::preset::typical_caches;
use crate::{Arch, Atomics, MemLevel, TargetDesc};

/// The machine kiln runs on.
pub fn host() -> TargetDesc {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let flags = cpu_flags();
    let arch = if cfg!(target_arch = "x86_64") {
        Arch::X86_64
    } else if cfg!(target_arch = "aarch64") {
        Arch::Aarch64
    } else {
        Arch::Generic
    };
    let vector_bytes = vector_bytes(arch, &flags);
    let half_conversions = half_conversions(arch, &flags);
    // FMA throughput counted on at most 256-bit vectors: many cores with
    // AVX-512 (AMD Zen 4, Intel parts with one 512-bit FMA port) retire the
    // same flops per cycle on 512-bit vectors as on two 256-bit ones.
    let fma_lanes = (vector_bytes / 4).min(8) as f64;
    TargetDesc {
        name: "host".to_string(),
        arch,
        vector_bytes,
        half_conversions,
        cores,
        caches: read_caches().unwrap_or_else(typical_caches),
        local_memories: Vec::new(),
        // Two FMA pipes at a typical 3 GHz; `kiln peak` measures the truth.
        peak_gflops: cores as f64 * 3.0 * 2.0 * 2.0 * fma_lanes,
        memory_gbps: 10.0 * cores as f64,
        atomics: Atomics {
            int: true,
            f32_add: true,
        },
        cflags: Vec::new(),
        gpu: None,
    }
}

/// The CPU's model name (`model name` of /proc/cpuinfo, or an ARM core's
/// implementer and part), `unknown` where unreadable: what machine-measured
/// data (`kiln tune`'s tunings) is filed under.
pub fn host_model() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_string())
        })
    };
    match (
        field("model name"),
        field("CPU implementer"),
        field("CPU part"),
    ) {
        (Some(model), _, _) => model,
        (None, Some(implementer), Some(part)) => format!("arm {implementer} {part}"),
        _ => "unknown".to_string(),
    }
}

/// The widest vectors the generated C uses on this CPU.
fn vector_bytes(arch: Arch, flags: &[String]) -> usize {
    let has = |f: &str| flags.iter().any(|x| x == f);
    match arch {
        Arch::X86_64 if has("avx512f") => 64,
        Arch::X86_64 if has("avx") => 32,
        _ => 16,
    }
}

/// Whether the CPU converts between f16 and f32 in vector registers (x86's F16C; other
/// architectures keep the generated C's integer conversions for now).
fn half_conversions(arch: Arch, flags: &[String]) -> bool {
    arch == Arch::X86_64 && flags.iter().any(|f| f == "f16c")
}

/// The `flags` line of /proc/cpuinfo (empty where unreadable).
fn cpu_flags() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    text.lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "flags").then(|| value.split_whitespace().map(String::from).collect())
        })
        .unwrap_or_default()
}

/// Data and unified caches of CPU 0 from /sys (None where absent).
fn read_caches() -> Option<Vec<MemLevel>> {
    read_caches_in(std::path::Path::new("/sys/devices/system/cpu/cpu0/cache"))
}

/// The caches described under `dir` (laid out as /sys's `cpu0/cache`).
fn read_caches_in(dir: &std::path::Path) -> Option<Vec<MemLevel>> {
    let mut levels = Vec::new();
    // Entries other than the `indexN` directories (a `uevent` file) are skipped.
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        if let Some(level) = read_cache_level(&entry.path()) {
            levels.push(level);
        }
    }
    levels.sort_by_key(|(l, _)| *l);
    (!levels.is_empty()).then(|| levels.into_iter().map(|(_, m)| m).collect())
}

/// One `/sys/.../cache/indexN` directory: its level and description, or
/// `None` for an instruction cache or anything unreadable.
fn read_cache_level(dir: &std::path::Path) -> Option<(usize, MemLevel)> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    if read("type")?.trim() == "Instruction" {
        return None;
    }
    let level: usize = read("level")?.trim().parse().ok()?;
    let bytes = parse_size(read("size")?.trim())?;
    let shared = read("shared_cpu_list").unwrap_or_default();
    let cache = MemLevel {
        name: format!("L{level}"),
        bytes,
        per_core: !shared.contains(['-', ',']),
    };
    Some((level, cache))
}

/// "48K", "2048K", "32M" → bytes.
fn parse_size(s: &str) -> Option<usize> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: usize = digits.parse().ok()?;
    Some(match unit {
        "" => n,
        "K" => n << 10,
        "M" => n << 20,
        "G" => n << 30,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("1Q"), None);
    }

    /// /sys's cache directory holds a `uevent` file beside the `indexN`
    /// directories; it once made the whole reading fail, and the host fell
    /// back to typical sizes.
    #[test]
    fn caches_read_from_sys_layout_skipping_other_entries() {
        let dir = std::env::temp_dir().join(format!("kiln-caches-{}", std::process::id()));
        let index = |n: usize, kind: &str, level: usize, size: &str, shared: &str| {
            let d = dir.join(format!("index{n}"));
            std::fs::create_dir_all(&d).unwrap();
            for (file, text) in [("type", kind), ("size", size), ("shared_cpu_list", shared)] {
                std::fs::write(d.join(file), format!("{text}\n")).unwrap();
            }
            std::fs::write(d.join("level"), format!("{level}\n")).unwrap();
        };
        index(0, "Data", 1, "48K", "0");
        index(1, "Instruction", 1, "32K", "0");
        index(2, "Unified", 2, "1024K", "0");
        index(3, "Unified", 3, "32768K", "0-1");
        std::fs::write(dir.join("uevent"), "").unwrap();
        let caches = read_caches_in(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let summary: Vec<(String, usize, bool)> = caches
            .into_iter()
            .map(|c| (c.name, c.bytes, c.per_core))
            .collect();
        assert_eq!(
            summary,
            [
                ("L1".to_string(), 48 << 10, true),
                ("L2".to_string(), 1 << 20, true),
                ("L3".to_string(), 32 << 20, false),
            ]
        );
    }

    #[test]
    fn widths_follow_flags() {
        let f = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(vector_bytes(Arch::X86_64, &f("sse2 avx avx2 avx512f")), 64);
        assert_eq!(vector_bytes(Arch::X86_64, &f("sse2 avx avx2")), 32);
        assert_eq!(vector_bytes(Arch::Aarch64, &f("neon")), 16);
        assert!(half_conversions(Arch::X86_64, &f("sse2 avx f16c")));
        assert!(!half_conversions(Arch::X86_64, &f("sse2 avx")));
        assert!(!half_conversions(Arch::Aarch64, &f("neon f16c")));
    }
}
