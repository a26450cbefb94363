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
    let lanes = (vector_bytes / 4) as f64;
    TargetDesc {
        name: "host".to_string(),
        arch,
        vector_bytes,
        half_conversions,
        cores,
        caches: read_caches().unwrap_or_else(typical_caches),
        local_memories: Vec::new(),
        // Two FMA pipes at a typical 3 GHz; `kiln peak` measures the truth.
        peak_gflops: cores as f64 * 3.0 * 2.0 * 2.0 * lanes,
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
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut levels = Vec::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).ok();
        let kind = read("type")?;
        if kind.trim() == "Instruction" {
            continue;
        }
        let level: usize = read("level")?.trim().parse().ok()?;
        let bytes = parse_size(read("size")?.trim())?;
        let shared = read("shared_cpu_list").unwrap_or_default();
        levels.push((
            level,
            MemLevel {
                name: format!("L{level}"),
                bytes,
                per_core: !shared.contains(['-', ',']),
            },
        ));
    }
    levels.sort_by_key(|(l, _)| *l);
    (!levels.is_empty()).then(|| levels.into_iter().map(|(_, m)| m).collect())
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
