//! The command line's arguments (clap): commands and their option groups.

use clap::{Parser, Subcommand};
use kiln_ir::Result;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "kiln",
    version,
    about = "kiln: a deep-learning compiler for ONNX models"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Memory budget every size taken from a model is checked against
    /// before allocation: bytes, or with a K, M or G suffix (default: the
    /// machine's memory).
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_bytes)]
    pub(crate) max_memory: Option<u64>,
}

/// "4096", "512K", "64M", "8G" → bytes.
pub(crate) fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let (digits, shift) = match s.strip_suffix(['K', 'k']) {
        Some(d) => (d, 10),
        None => match s.strip_suffix(['M', 'm']) {
            Some(d) => (d, 20),
            None => match s.strip_suffix(['G', 'g']) {
                Some(d) => (d, 30),
                None => (s, 0),
            },
        },
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{s}' is not a size (bytes, or with K, M or G)"))?;
    n.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("'{s}' is not a positive size that fits in 64 bits"))
}

#[derive(clap::Args)]
pub(crate) struct ModelArgs {
    /// Concrete shape for an input with symbolic dims: NAME=D0,D1,... (repeatable)
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub(crate) input_shapes: Vec<String>,
}

/// How the graph passes run after import.
#[derive(clap::Args, Clone)]
pub(crate) struct PassArgs {
    /// Skip the graph passes (compound ops stay unopened).
    #[arg(long)]
    pub(crate) no_opt: bool,
    /// Verify the graph after every pass.
    #[arg(long)]
    pub(crate) verify_each: bool,
    /// Print the graph after every run of the pass NAME that changed it.
    #[arg(long, value_name = "NAME")]
    pub(crate) print_after: Option<String>,
    /// Print a table of pass run times and node counts.
    #[arg(long)]
    pub(crate) time_passes: bool,
    /// Data layout of convolutions and pooling on the CPU backend: `auto`
    /// (channels-last when the model has a 2-D convolution), `nchw`
    /// or `nhwc`. The reference backend and `info` always take the graph as
    /// ONNX defines it (nchw).
    #[arg(long, default_value = "auto")]
    pub(crate) layout: kiln_passes::Layout,
    /// Keep dense 3x3 stride-1 convolutions direct instead of computing
    /// them as Winograd F(2x2, 3x3) tile transforms around a batched
    /// matmul (the CPU backend's default where it pays).
    #[arg(long)]
    pub(crate) no_winograd: bool,
    /// Whether the graph is prepared for the CPU code generator (the only
    /// one with the Winograd transforms' form); the commands for other
    /// backends and for the graph as ONNX defines it clear it.
    #[arg(skip = true)]
    pub(crate) for_cpu: bool,
}

/// How nodes are grouped into kernels.
#[derive(clap::Args)]
pub(crate) struct FusionArgs {
    /// Fusion planner: `none` (one kernel per op), `tvm` (TVM's greedy
    /// rules), `apollo` (APOLLO's partition and stitching) or `dp` (mapping
    /// rules with a cost-model search).
    #[arg(long, default_value = "apollo")]
    pub(crate) fusion: kiln_fuse::PlannerKind,
}

/// Options of `--emit aot`.
#[derive(clap::Args)]
pub(crate) struct AotArgs {
    /// Prefix of the export's files and C symbols (default: the model
    /// file's name as a C identifier).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// CPU to generate for: x86-64-v4, x86-64-v3, x86-64 or aarch64-neon
    /// (default: the host's).
    #[arg(long)]
    pub(crate) cpu: Option<String>,
    /// Threads: the export's most (default: all cores); also compiles.
    #[arg(long, conflicts_with = "no_openmp")]
    pub(crate) threads: Option<usize>,
    /// Export single-threaded code built without OpenMP.
    #[arg(long)]
    pub(crate) no_openmp: bool,
    /// `file` (NAME.weights.bin) or `embed` (a C array).
    #[arg(long, default_value = "file")]
    pub(crate) weights: String,
}

impl AotArgs {
    pub(crate) fn options(&self, model: &Path) -> Result<kiln_cpu::aot::AotOptions> {
        Ok(kiln_cpu::aot::AotOptions {
            name: self
                .name
                .clone()
                .unwrap_or_else(|| kiln_cpu::aot::default_name(model)),
            preset: match &self.cpu {
                Some(p) => kiln_target::CpuPreset::parse(p)?,
                None => kiln_cpu::aot::host_preset(),
            },
            threads: self
                .threads
                .unwrap_or_else(kiln_runtime::cpu::available_threads),
            openmp: !self.no_openmp,
            weights: kiln_cpu::aot::WeightsMode::parse(&self.weights)?,
        })
    }
}

/// Where and how a model executes.
#[derive(clap::Args)]
pub(crate) struct ExecArgs {
    /// Input tensor file (.npy or ONNX TensorProto .pb), in graph-input order.
    #[arg(short = 'i', long = "input", value_name = "FILE")]
    pub(crate) inputs: Vec<PathBuf>,
    /// Execution backend: `cpu` (generated C, compiled and cached), `cuda`
    /// (generated CUDA on the first NVIDIA GPU, through the driver and
    /// NVRTC loaded at run time), `reference` (the interpreter), or
    /// `dsa:PRESET` / `dsa:PATH.toml` (DSA C for a scratchpad accelerator,
    /// run by the functional emulator; presets stcp920, goya-like,
    /// sunway-cg).
    #[arg(long, default_value = "cpu", value_parser = kiln_cli::dsa::parse_backend)]
    pub(crate) backend: String,
    /// Threads for the CPU backend (default: all cores).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// With `--backend cuda`: f32 matrix products and convolutions on tensor
    /// cores in TF32 (factors rounded to a 10-bit mantissa, sums in f32; as
    /// PyTorch's `allow_tf32`). Off by default: products are exact f32.
    #[arg(long)]
    pub(crate) tf32: bool,
    /// Seed for random inputs.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    #[command(flatten)]
    pub(crate) fusion: FusionArgs,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Show a model's inputs, outputs, op histogram, parameters and FLOPs.
    Info(InfoCmd),
    /// Run a model (the embedded default model when MODEL is omitted).
    Run(RunCmd),
    /// Time a model: warm-up runs, then the median and minimum of timed runs,
    /// plus compile time (cold or cached, then cached).
    Bench(BenchCmd),
    /// Measure gemm choices (register tile, orientation, K block) for every
    /// distinct matrix product and convolution of a model on this machine,
    /// check each round's outputs against the interpreter, and file the
    /// fastest in the tuning cache, which later compiles read.
    Tune(TuneCmd),
    /// Compile a model and write what was generated.
    Compile(CompileCmd),
    /// Measure the machine's fp32 FMA peak (GFLOP/s) and memory bandwidth
    /// (STREAM triad, GB/s) with small generated C kernels.
    Peak(PeakCmd),
    /// List the primitive ops with their APOLLO and mapping classes, derived
    /// from their tensor expressions (and the compound and library ops).
    Ops(OpsCmd),
    /// Plan operator fusion and report the kernels: a text summary (or
    /// JSON) and, with -o, an HTML page drawing the graph with each fused
    /// group outlined.
    Explain(ExplainCmd),
    /// Simulate a model's memory traffic and cycles on one cluster of a DSA
    /// under a schedule (GraphTurbo's or a baseline's): a summary (or
    /// JSON) and, with -o, an HTML page drawing the kernels on the cores
    /// over time. Takes the graph in ONNX's layout (nchw).
    Sim(SimCmd),
    /// Print the imported graph in kiln's textual IR.
    Print(PrintCmd),
}

/// `kiln info`'s arguments.
#[derive(clap::Args)]
pub(crate) struct InfoCmd {
    pub(crate) model: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// List every node with its APOLLO and mapping classes.
    #[arg(long)]
    pub(crate) classify: bool,
    #[command(flatten)]
    pub(crate) args: ModelArgs,
    #[command(flatten)]
    pub(crate) passes: PassArgs,
}

/// `kiln run`'s arguments.
#[derive(clap::Args)]
pub(crate) struct RunCmd {
    pub(crate) model: Option<PathBuf>,
    /// Directory to write output_<k>.npy into.
    #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
    pub(crate) output_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) exec: ExecArgs,
    #[command(flatten)]
    pub(crate) args: ModelArgs,
    #[command(flatten)]
    pub(crate) passes: PassArgs,
}

/// `kiln bench`'s arguments.
#[derive(clap::Args)]
pub(crate) struct BenchCmd {
    pub(crate) model: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) flags: BenchFlags,
    #[command(flatten)]
    pub(crate) exec: ExecArgs,
    #[command(flatten)]
    pub(crate) args: ModelArgs,
    #[command(flatten)]
    pub(crate) passes: PassArgs,
}

/// `kiln tune`'s arguments.
#[derive(clap::Args)]
pub(crate) struct TuneCmd {
    pub(crate) model: Option<PathBuf>,
    /// No new candidate starts after this long: seconds, or with an s,
    /// m or h suffix.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub(crate) budget: std::time::Duration,
    /// Profiled runs per candidate (each kernel's median counts).
    #[arg(long, default_value_t = 7)]
    pub(crate) runs: usize,
    #[command(flatten)]
    pub(crate) exec: ExecArgs,
    #[command(flatten)]
    pub(crate) args: ModelArgs,
    #[command(flatten)]
    pub(crate) passes: PassArgs,
}

/// `kiln compile`'s arguments.
#[derive(clap::Args)]
pub(crate) struct CompileCmd {
    pub(crate) model: PathBuf,
    /// What to write: `c` (the C source of every kernel), `loops` (the
    /// scheduled loop IR), `plan` (the execution plan) or `aot` (a
    /// standalone C library with an example program and Makefile).
    #[arg(long, default_value = "c")]
    pub(crate) emit: kiln_cli::emit::Emit,
    /// Directory to write into.
    #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
    pub(crate) output_dir: PathBuf,
    #[command(flatten)]
    pub(crate) fusion: FusionArgs,
    #[command(flatten)]
    pub(crate) aot: AotArgs,
    /// With `--emit cuda`: f32 products on TF32 tensor cores (as `run
    /// --backend cuda --tf32`).
    #[arg(long)]
    pub(crate) tf32: bool,
    #[command(flatten)]
    pub(crate) args: ModelArgs,
    #[command(flatten)]
    pub(crate) passes: PassArgs,
}

/// `kiln peak`'s arguments.
#[derive(clap::Args)]
pub(crate) struct PeakCmd {
    /// Threads (default: all cores).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Print one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `kiln ops`'s arguments.
#[derive(clap::Args)]
pub(crate) struct OpsCmd {
    /// Also print each instance's tensor expression.
    #[arg(long)]
    pub(crate) exprs: bool,
    /// Print docs/classification.md instead.
    #[arg(long)]
    pub(crate) markdown: bool,
}

/// `kiln explain`'s arguments.
#[derive(clap::Args)]
pub(crate) struct ExplainCmd {
    pub(crate) model: PathBuf,
    /// Fusion planner.
    #[arg(long, default_value = "apollo", value_name = "none|tvm|apollo|dp")]
    pub(crate) fusion: kiln_fuse::PlannerKind,
    /// Write the HTML report (graph drawing) to FILE.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Print one JSON object instead of the text summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// List the groups the backend refused, why, and how they were split.
    #[arg(long)]
    pub(crate) explain_feedback: bool,
    /// Compile and run the model (random inputs) and label each kernel
    /// with its time.
    #[arg(long)]
    pub(crate) profile: bool,
    #[command(flatten)]
    pub(crate) args: ModelArgs,
    #[command(flatten)]
    pub(crate) passes: PassArgs,
}

/// `kiln sim`'s arguments.
#[derive(clap::Args)]
pub(crate) struct SimCmd {
    /// The ONNX model (default: the embedded MobileNetV2 ×0.35).
    pub(crate) model: Option<PathBuf>,
    /// The DSA: dsa:PRESET (stcp920, goya-like, sunway-cg) or
    /// dsa:PATH.toml.
    #[arg(long, default_value = "dsa:stcp920", value_parser = kiln_cli::sim::parse_dsa_target)]
    pub(crate) backend: String,
    /// `graphturbo`, `per-layer` (TVM: every kernel output in DDR),
    /// `astitch-like` (one kernel per layer, outputs kept in LB, else
    /// DDR), `layers-in-gb` (outputs kept in GB) or `layers-in-lb`
    /// (kept in LB, else GB).
    #[arg(long, default_value = "graphturbo", value_parser = kiln_cli::sim::parse_schedule)]
    pub(crate) schedule: kiln_dsa::ScheduleKind,
    /// Across-layer scheduling (weight prefetch behind compute,
    /// GraphTurbo §4.4): `auto` (on for graphturbo only), `on`, `off`.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) across_layer: kiln_cli::sim::AcrossLayer,
    /// Batch per cluster: the first dimension of every model input.
    #[arg(long)]
    pub(crate) batch: Option<usize>,
    /// Bytes of a floating-point element on the device (2: FP16, as
    /// STCP920 computes); default: the description's, else the
    /// model's types.
    #[arg(long, value_parser = kiln_cli::sim::parse_float_bytes)]
    pub(crate) float_bytes: Option<u32>,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write the HTML report (timeline of kernels on cores) to FILE.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) args: ModelArgs,
    #[command(flatten)]
    pub(crate) passes: PassArgs,
}

/// `kiln print`'s arguments.
#[derive(clap::Args)]
pub(crate) struct PrintCmd {
    pub(crate) model: PathBuf,
    /// Show at most this many elements of each constant (the output then does not parse back).
    #[arg(long)]
    pub(crate) elide: Option<usize>,
    /// Print the graph after the graph passes instead of as imported.
    #[arg(long)]
    pub(crate) optimized: bool,
    #[command(flatten)]
    pub(crate) args: ModelArgs,
}

/// `90`, `90s`, `5m` or `1h`.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let (number, unit) = match text
        .trim()
        .char_indices()
        .find(|(_, c)| c.is_ascii_alphabetic())
    {
        Some((at, _)) => text.trim().split_at(at),
        None => (text.trim(), "s"),
    };
    let scale = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("'{text}' is not a duration like 90s, 5m or 1h")),
    };
    match number.parse::<f64>() {
        Ok(n) if n >= 0.0 && n.is_finite() => Ok(std::time::Duration::from_secs_f64(n * scale)),
        _ => Err(format!("'{text}' is not a duration like 90s, 5m or 1h")),
    }
}

/// How `kiln bench` times a model.
#[derive(clap::Args)]
pub struct BenchFlags {
    /// Timed runs.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Untimed warm-up runs.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Compile into a fresh, empty cache (measures a cold compile).
    #[arg(long)]
    cold: bool,
    /// Print the time per node (kernel), the median of 11 runs, slowest first.
    #[arg(long)]
    profile: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Also compile the model with this fusion planner and alternate the two, inference
    /// by inference (the order flipping each pair), so both see the same machine state:
    /// prints both medians and the median of the per-pair time ratios.
    #[arg(long, value_name = "PLANNER")]
    versus: Option<kiln_fuse::PlannerKind>,
}

impl BenchFlags {
    /// The options for a backend's bench: these flags, the CPU options and
    /// whether the reference interpreter is timed.
    pub fn options(
        self,
        cpu: kiln_cpu::CpuOptions,
        reference: bool,
    ) -> kiln_cli::bench::BenchOptions {
        kiln_cli::bench::BenchOptions {
            runs: self.runs,
            warmup: self.warmup,
            cold: self.cold,
            profile: self.profile,
            json: self.json,
            versus: self.versus,
            cpu,
            reference,
        }
    }
}
