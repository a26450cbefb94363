//! Scratchpad accelerator (DSA) descriptions: GraphTurbo §1's abstraction
//! (Fig. 1) of d clusters × c cores × u compute units, a local buffer (LB)
//! per core, a global buffer (GB) per cluster and DDR reached by DMA, plus
//! swTVM §2.1's management (host) core.
//!
//! Needs a TOML file (the presets are `presets/*.toml`, compiled in).
//! Guarantees: a [`DsaDesc`] whose counts, sizes and rates are positive;
//! any other input is an error naming the file and the field.

use kiln_ir::{bail, ensure, Error, Result};
use kiln_target::{Arch, Atomics, MemLevel, TargetDesc};
use serde::Deserialize;
use std::path::Path;

/// The kind of arithmetic a compute unit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnitKind {
    Scalar,
    Vector,
    Matrix,
}

/// One compute unit of a core.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitDesc {
    pub name: String,
    pub kind: UnitKind,
    /// Peak throughput in GFLOP/s.
    pub gflops: f64,
}

/// One level of memory: its size and how fast it is reached.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemDesc {
    pub bytes: u64,
    /// Bandwidth in GB/s.
    pub gbps: f64,
    /// Latency of one access in nanoseconds.
    pub latency_ns: f64,
}

/// The DMA engines moving data between DDR and the buffers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaDesc {
    pub engines_per_cluster: u32,
    /// Elements one transfer should move at least to reach good bandwidth;
    /// swTVM's Algorithm 1 starts each buffered dimension at this size
    /// (64 floats on Sunway, §5.2).
    pub initial_buffer_elems: u64,
    /// Fixed cost of one transfer in nanoseconds.
    pub setup_ns: f64,
}

/// A management core that runs the host side of the generated code.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostDesc {
    pub name: String,
    pub gflops: f64,
}

/// A scratchpad accelerator.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DsaDesc {
    pub name: String,
    pub clusters: u32,
    pub cores_per_cluster: u32,
    /// Core clock in GHz: the simulator's cycles are nanoseconds × this.
    pub clock_ghz: f64,
    /// The compute units of every core.
    pub units: Vec<UnitDesc>,
    /// LB: private to each core.
    pub local_buffer: MemDesc,
    /// GB: shared by the cores of a cluster (absent on Sunway).
    pub global_buffer: Option<MemDesc>,
    pub ddr: MemDesc,
    pub dma: DmaDesc,
    pub host: Option<HostDesc>,
    /// Bytes of a floating-point element on the device (2: FP16, as
    /// STCP920 computes, GraphTurbo Fig. 16); absent: the model's types.
    /// GraphTurbo's schedule and the simulator size tensors by it.
    #[serde(default)]
    pub float_bytes: Option<u32>,
}

/// The presets: name and TOML text.
const PRESETS: [(&str, &str); 3] = [
    ("stcp920", include_str!("../presets/stcp920.toml")),
    ("goya-like", include_str!("../presets/goya-like.toml")),
    ("sunway-cg", include_str!("../presets/sunway-cg.toml")),
];

impl DsaDesc {
    /// The names [`DsaDesc::preset`] knows.
    pub fn preset_names() -> Vec<&'static str> {
        PRESETS.iter().map(|(name, _)| *name).collect()
    }

    /// The preset called `name`; the error lists them all.
    pub fn preset(name: &str) -> Result<DsaDesc> {
        match PRESETS.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => DsaDesc::from_toml_str(text, &format!("preset '{name}'")),
            None => bail!(
                "unknown DSA preset '{name}' (known: {})",
                DsaDesc::preset_names().join(", ")
            ),
        }
    }

    /// Reads a description from a TOML file.
    pub fn from_toml_file(path: &Path) -> Result<DsaDesc> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::new(format!("cannot read: {e}")).in_file(origin.clone()))?;
        DsaDesc::from_toml_str(&text, &origin)
    }

    /// Parses a description; `origin` (a file or preset name) prefixes
    /// every error.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<DsaDesc> {
        let parsed: DsaDesc = toml::from_str(text)
            .map_err(|e| Error::new(one_line(&e.to_string())).in_file(origin))?;
        parsed.validate().map_err(|e| e.in_file(origin))?;
        Ok(parsed)
    }

    /// Cores in all clusters.
    pub fn total_cores(&self) -> u64 {
        u64::from(self.clusters) * u64::from(self.cores_per_cluster)
    }

    /// The description the target-neutral layers read ([`Arch::Dsa`]:
    /// kernels lowered unscheduled, tiled by `tiling.rs`): all cores, the
    /// LB per core and the GB per cluster as scratchpads, the units'
    /// throughput and the DDR bandwidth.
    pub fn target_desc(&self) -> TargetDesc {
        let mut local_memories = vec![MemLevel {
            name: "LB".into(),
            bytes: self.local_buffer.bytes as usize,
            per_core: true,
        }];
        local_memories.extend(self.global_buffer.as_ref().map(|gb| MemLevel {
            name: "GB".into(),
            bytes: gb.bytes as usize,
            per_core: false,
        }));
        let per_core: f64 = self.units.iter().map(|u| u.gflops).sum();
        TargetDesc {
            name: format!("dsa:{}", self.name),
            arch: Arch::Dsa,
            vector_bytes: 16,
            half_conversions: false,
            cores: self.total_cores() as usize,
            caches: Vec::new(),
            local_memories,
            peak_gflops: per_core * self.total_cores() as f64,
            memory_gbps: self.ddr.gbps,
            atomics: Atomics {
                int: false,
                f32_add: false,
            },
            cflags: Vec::new(),
            gpu: None,
        }
    }

    fn validate(&self) -> Result<()> {
        ensure!(self.clusters > 0, "clusters must be at least 1");
        ensure!(
            self.cores_per_cluster > 0,
            "cores_per_cluster must be at least 1"
        );
        positive(self.clock_ghz, "clock_ghz")?;
        ensure!(!self.units.is_empty(), "units: a core needs a compute unit");
        for (i, unit) in self.units.iter().enumerate() {
            positive(unit.gflops, &format!("units[{i}].gflops"))?;
        }
        self.local_buffer.validate("local_buffer")?;
        if let Some(gb) = &self.global_buffer {
            gb.validate("global_buffer")?;
        }
        self.ddr.validate("ddr")?;
        ensure!(
            self.dma.engines_per_cluster > 0,
            "dma.engines_per_cluster must be at least 1"
        );
        ensure!(
            self.dma.initial_buffer_elems > 0,
            "dma.initial_buffer_elems must be at least 1"
        );
        non_negative(self.dma.setup_ns, "dma.setup_ns")?;
        if let Some(host) = &self.host {
            positive(host.gflops, "host.gflops")?;
        }
        ensure!(
            self.float_bytes.is_none_or(|b| [1, 2, 4, 8].contains(&b)),
            "float_bytes must be 1, 2, 4 or 8"
        );
        Ok(())
    }
}

impl MemDesc {
    fn validate(&self, table: &str) -> Result<()> {
        ensure!(self.bytes > 0, "{table}.bytes must be positive");
        positive(self.gbps, &format!("{table}.gbps"))?;
        non_negative(self.latency_ns, &format!("{table}.latency_ns"))
    }
}

fn positive(value: f64, field: &str) -> Result<()> {
    ensure!(
        value.is_finite() && value > 0.0,
        "{field} must be positive (got {value})"
    );
    Ok(())
}

fn non_negative(value: f64, field: &str) -> Result<()> {
    ensure!(
        value.is_finite() && value >= 0.0,
        "{field} must not be negative (got {value})"
    );
    Ok(())
}

/// The toml crate's messages span several lines (a source excerpt); kiln's
/// errors are one line.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('|') && !l.contains(" | "))
        .collect();
    lines.join(": ")
}

/// The description a target string names: `dsa:NAME` for a preset,
/// `dsa:PATH.toml` for a file. The error lists the presets.
pub fn parse_target(target: &str) -> Result<DsaDesc> {
    let Some(rest) = target.strip_prefix("dsa:") else {
        bail!(
            "'{target}' is not a DSA target: use dsa:NAME (presets: {}) or dsa:PATH.toml",
            DsaDesc::preset_names().join(", ")
        )
    };
    if rest.ends_with(".toml") {
        DsaDesc::from_toml_file(Path::new(rest))
    } else {
        DsaDesc::preset(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_and_matches_its_paper() {
        for name in DsaDesc::preset_names() {
            let d = DsaDesc::preset(name).unwrap();
            assert_eq!(d.name, name);
        }
        let stcp = DsaDesc::preset("stcp920").unwrap();
        assert_eq!(
            (stcp.clusters, stcp.cores_per_cluster, stcp.units.len()),
            (4, 8, 3)
        );
        assert_eq!(stcp.local_buffer.bytes, 64 << 10);
        assert_eq!(stcp.global_buffer.as_ref().unwrap().bytes, 8 << 20);
        assert_eq!(stcp.units[2].kind, UnitKind::Matrix);
        let goya = DsaDesc::preset("goya-like").unwrap();
        assert_eq!(
            (goya.clusters, goya.cores_per_cluster, goya.units.len()),
            (1, 9, 1)
        );
        let sw = DsaDesc::preset("sunway-cg").unwrap();
        assert_eq!(sw.total_cores(), 64);
        assert_eq!(sw.local_buffer.bytes, 64 << 10);
        assert_eq!(sw.ddr.gbps, 34.1);
        assert_eq!(sw.dma.initial_buffer_elems, 64);
        assert!(sw.host.is_some() && sw.global_buffer.is_none());
    }

    #[test]
    fn target_strings_name_presets_or_files() {
        assert_eq!(parse_target("dsa:sunway-cg").unwrap().name, "sunway-cg");
        let err = parse_target("dsa:tpu").unwrap_err().to_string();
        assert!(
            err.contains("tpu") && err.contains("stcp920, goya-like, sunway-cg"),
            "{err}"
        );
        let err = parse_target("cpu").unwrap_err().to_string();
        assert!(err.contains("sunway-cg"), "{err}");
        let err = parse_target("dsa:/nonexistent/x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/x.toml"), "{err}");
    }

    #[test]
    fn a_file_with_a_missing_field_names_file_and_field() {
        let dir = std::env::temp_dir().join(format!("kiln-dsa-desc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        let text = include_str!("../presets/sunway-cg.toml").replace("gbps = 34.1", "");
        std::fs::write(&path, text).unwrap();
        let err = parse_target(&format!("dsa:{}", path.display())).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("bad.toml") && msg.contains("gbps"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn values_out_of_range_name_their_field() {
        let base = include_str!("../presets/stcp920.toml");
        let cases = [
            ("clusters = 4", "clusters = 0", "clusters"),
            ("bytes = 8388608", "bytes = 0", "global_buffer.bytes"),
            ("gflops = 1024.0", "gflops = -1.0", "units[2].gflops"),
            ("kind = \"matrix\"", "kind = \"tensor\"", "tensor"),
            ("clusters = 4", "clusters = 4\nspeed = 1", "speed"),
            (
                "clusters = 4",
                "clusters = 4\nfloat_bytes = 3",
                "float_bytes",
            ),
            ("clock_ghz = 1.0", "clock_ghz = 0.0", "clock_ghz"),
        ];
        for (from, to, field) in cases {
            let err = DsaDesc::from_toml_str(&base.replace(from, to), "t.toml").unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with("t.toml: ") && msg.contains(field), "{msg}");
        }
    }
}
