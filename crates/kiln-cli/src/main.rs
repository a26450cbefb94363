//! The `kiln` command-line tool.

use clap::{Parser, Subcommand};
use kiln_cli::{bench, classes_doc, flops, npy};
use kiln_ir::{bail, DType, Data, Error, Graph, Result, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A small MobileNetV2 (width 0.35, 96×96 input, 10 classes, random weights)
/// exported from torchvision; what `kiln run` runs when no model is given.
const DEFAULT_MODEL: &[u8] = include_bytes!("../assets/default.onnx");

#[derive(Parser)]
#[command(
    name = "kiln",
    version,
    about = "kiln: a deep-learning compiler for ONNX models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Memory budget every size taken from a model is checked against
    /// before allocation: bytes, or with a K, M or G suffix (default: the
    /// machine's memory).
    #[arg(long, global = true, value_name = "BYTES", value_parser = parse_bytes)]
    max_memory: Option<u64>,
}

/// "4096", "512K", "64M", "8G" → bytes.
fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
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
struct ModelArgs {
    /// Concrete shape for an input with symbolic dims: NAME=D0,D1,... (repeatable)
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    input_shapes: Vec<String>,
}

/// How the graph passes run after import.
#[derive(clap::Args)]
struct PassArgs {
    /// Skip the graph passes (compound ops stay unopened).
    #[arg(long)]
    no_opt: bool,
    /// Verify the graph after every pass.
    #[arg(long)]
    verify_each: bool,
    /// Print the graph after every run of the pass NAME that changed it.
    #[arg(long, value_name = "NAME")]
    print_after: Option<String>,
    /// Print a table of pass run times and node counts.
    #[arg(long)]
    time_passes: bool,
    /// Data layout of convolutions and pooling on the CPU backend: `auto`
    /// (channels-last when the model has a 2-D convolution), `nchw`
    /// or `nhwc`. The reference backend and `info` always take the graph as
    /// ONNX defines it (nchw).
    #[arg(long, default_value = "auto")]
    layout: kiln_passes::Layout,
}

/// How nodes are grouped into kernels.
#[derive(clap::Args)]
struct FusionArgs {
    /// Fusion planner: `none` (one kernel per op), `tvm` (TVM's greedy
    /// rules), `apollo` (APOLLO's partition and stitching) or `dp` (mapping
    /// rules with a cost-model search).
    #[arg(long, default_value = "apollo")]
    fusion: kiln_fuse::PlannerKind,
}

/// Options of `--emit aot`.
#[derive(clap::Args)]
struct AotArgs {
    /// Prefix of the export's files and C symbols (default: the model
    /// file's name as a C identifier).
    #[arg(long)]
    name: Option<String>,
    /// CPU to generate for: x86-64-v4, x86-64-v3, x86-64 or aarch64-neon
    /// (default: the host's).
    #[arg(long)]
    cpu: Option<String>,
    /// Threads: the export's most (default: all cores); also compiles.
    #[arg(long, conflicts_with = "no_openmp")]
    threads: Option<usize>,
    /// Export single-threaded code built without OpenMP.
    #[arg(long)]
    no_openmp: bool,
    /// `file` (NAME.weights.bin) or `embed` (a C array).
    #[arg(long, default_value = "file")]
    weights: String,
}

impl AotArgs {
    fn options(&self, model: &Path) -> Result<kiln_cpu::aot::AotOptions> {
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
struct ExecArgs {
    /// Input tensor file (.npy or ONNX TensorProto .pb), in graph-input order.
    #[arg(short = 'i', long = "input", value_name = "FILE")]
    inputs: Vec<PathBuf>,
    /// Execution backend: `cpu` (generated C, compiled and cached) or
    /// `reference` (the interpreter).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "reference"])]
    backend: String,
    /// Threads for the CPU backend (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Seed for random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    fusion: FusionArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Show a model's inputs, outputs, op histogram, parameters and FLOPs.
    Info {
        model: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// List every node with its APOLLO and mapping classes.
        #[arg(long)]
        classify: bool,
        #[command(flatten)]
        args: ModelArgs,
        #[command(flatten)]
        passes: PassArgs,
    },
    /// Run a model (the embedded default model when MODEL is omitted).
    Run {
        model: Option<PathBuf>,
        /// Directory to write output_<k>.npy into.
        #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
        output_dir: Option<PathBuf>,
        #[command(flatten)]
        exec: ExecArgs,
        #[command(flatten)]
        args: ModelArgs,
        #[command(flatten)]
        passes: PassArgs,
    },
    /// Time a model: warm-up runs, then the median and minimum of timed runs,
    /// plus compile time (cold or cached, then cached).
    Bench {
        model: Option<PathBuf>,
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
        #[command(flatten)]
        exec: ExecArgs,
        #[command(flatten)]
        args: ModelArgs,
        #[command(flatten)]
        passes: PassArgs,
    },
    /// Compile a model and write what was generated.
    Compile {
        model: PathBuf,
        /// What to write: `c` (the C source of every kernel), `loops` (the
        /// scheduled loop IR), `plan` (the execution plan) or `aot` (a
        /// standalone C library with an example program and Makefile).
        #[arg(long, default_value = "c")]
        emit: kiln_cli::emit::Emit,
        /// Directory to write into.
        #[arg(short = 'o', long = "output-dir", value_name = "DIR")]
        output_dir: PathBuf,
        #[command(flatten)]
        fusion: FusionArgs,
        #[command(flatten)]
        aot: AotArgs,
        #[command(flatten)]
        args: ModelArgs,
        #[command(flatten)]
        passes: PassArgs,
    },
    /// Measure the machine's fp32 FMA peak (GFLOP/s) with a small generated C kernel.
    Peak {
        /// Threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List the primitive ops with their APOLLO and mapping classes, derived
    /// from their tensor expressions (and the compound and library ops).
    Ops {
        /// Also print each instance's tensor expression.
        #[arg(long)]
        exprs: bool,
        /// Print docs/classification.md instead.
        #[arg(long)]
        markdown: bool,
    },
    /// Plan operator fusion and report the kernels: a text summary (or
    /// JSON) and, with -o, an HTML page drawing the graph with each fused
    /// group outlined.
    Explain {
        model: PathBuf,
        /// Fusion planner.
        #[arg(long, default_value = "apollo", value_name = "none|tvm|apollo|dp")]
        fusion: kiln_fuse::PlannerKind,
        /// Write the HTML report (graph drawing) to FILE.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
        /// Print one JSON object instead of the text summary.
        #[arg(long)]
        json: bool,
        /// List the groups the backend refused, why, and how they were split.
        #[arg(long)]
        explain_feedback: bool,
        /// Compile and run the model (random inputs) and label each kernel
        /// with its time.
        #[arg(long)]
        profile: bool,
        #[command(flatten)]
        args: ModelArgs,
        #[command(flatten)]
        passes: PassArgs,
    },
    /// Print the imported graph in kiln's textual IR.
    Print {
        model: PathBuf,
        /// Show at most this many elements of each constant (the output then does not parse back).
        #[arg(long)]
        elide: Option<usize>,
        /// Print the graph after the graph passes instead of as imported.
        #[arg(long)]
        optimized: bool,
        #[command(flatten)]
        args: ModelArgs,
    },
}

/// Output piped into a reader that exits early (`kiln bench ... | head`)
/// ends kiln quietly, as it does other Unix tools, instead of panicking on
/// the failed write (Rust ignores SIGPIPE by default).
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: sets the default disposition of one signal before any thread
    // starts; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() {
    restore_sigpipe();
    let cli = Cli::parse();
    if let Some(bytes) = cli.max_memory {
        kiln_ir::limits::set_max_memory(bytes);
    }
    let res = match cli.command {
        Command::Info {
            model,
            json,
            classify,
            args,
            passes,
        } => info(&model, json, classify, &args, &as_defined(passes)),
        Command::Run {
            model,
            output_dir,
            exec,
            args,
            passes,
        } => run(
            model.as_deref(),
            output_dir.as_deref(),
            &exec,
            &args,
            &layout_for_backend(passes, &exec),
        ),
        Command::Bench {
            model,
            runs,
            warmup,
            cold,
            profile,
            json,
            versus,
            exec,
            args,
            passes,
        } => prepare(
            model.as_deref(),
            &exec.inputs,
            exec.seed,
            &args,
            &layout_for_backend(passes, &exec),
        )
        .and_then(|p| {
            let opts = bench::BenchOptions {
                runs,
                warmup,
                cold,
                profile,
                json,
                versus,
                cpu: cpu_options(&exec),
                reference: exec.backend == "reference",
            };
            bench::bench(&p.graph, &p.label, &p.inputs, &opts)
        }),
        Command::Compile {
            model,
            emit,
            output_dir,
            fusion,
            aot,
            args,
            passes,
        } => load(&model, &args).and_then(|mut g| {
            optimize(&mut g, &passes)?;
            let options = aot.options(&model)?;
            let threads = aot
                .threads
                .unwrap_or_else(kiln_runtime::cpu::available_threads);
            let cpu = kiln_cpu::CpuOptions {
                fusion: fusion.fusion,
                threads,
                ..Default::default()
            };
            kiln_cli::emit::emit(&g, &cpu, emit, &options, &output_dir)
        }),
        Command::Peak { threads, json } => bench::peak(
            threads.unwrap_or_else(kiln_runtime::cpu::available_threads),
            json,
        ),
        Command::Ops { exprs, markdown } => {
            if markdown {
                print!("{}", classes_doc::markdown());
            } else {
                print!("{}", classes_doc::text(exprs));
            }
            Ok(())
        }
        Command::Explain {
            model,
            fusion,
            output,
            json,
            explain_feedback,
            profile,
            args,
            passes,
        } => explain(
            &model,
            fusion,
            &ExplainOutput {
                html: output.as_deref(),
                json,
                feedback: explain_feedback,
                profile,
            },
            &args,
            &passes,
        ),
        Command::Print {
            model,
            elide,
            optimized,
            args,
        } => load(&model, &args).and_then(|mut g| {
            if optimized {
                kiln_passes::optimize(&mut g, &kiln_passes::Options::default())?;
            }
            print!("{}", kiln_ir::text::print_elided(&g, elide));
            Ok(())
        }),
    };
    if let Err(e) = res {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn import_options(args: &ModelArgs) -> Result<kiln_onnx::ImportOptions> {
    let mut opts = kiln_onnx::ImportOptions::default();
    for spec in &args.input_shapes {
        let Some((name, dims)) = spec.split_once('=') else {
            bail!("--input-shape expects NAME=D0,D1,..., got '{spec}'")
        };
        let dims: Vec<usize> = if dims.is_empty() {
            Vec::new()
        } else {
            dims.split(',')
                .map(|d| {
                    d.trim().parse().map_err(|_| {
                        Error::new(format!("bad dimension '{d}' in --input-shape {spec}"))
                    })
                })
                .collect::<Result<_>>()?
        };
        opts.input_shapes.insert(name.to_string(), dims);
    }
    Ok(opts)
}

fn load(path: &Path, args: &ModelArgs) -> Result<Graph> {
    Ok(kiln_onnx::load(path, &import_options(args)?)?.graph)
}

/// The reference backend runs the graph as ONNX defines it: the layout
/// choice is the CPU backend's.
fn layout_for_backend(passes: PassArgs, exec: &ExecArgs) -> PassArgs {
    match exec.backend.as_str() {
        "reference" => as_defined(passes),
        _ => passes,
    }
}

/// The passes without a layout change: the graph's ops as ONNX defines
/// them (`info` reports the model's ops and FLOPs).
fn as_defined(mut passes: PassArgs) -> PassArgs {
    passes.layout = kiln_passes::Layout::ChannelsFirst;
    passes
}

/// Runs the graph passes as `p` asks, printing graphs (`--print-after`)
/// and the timing table (`--time-passes`) to stderr.
fn optimize(g: &mut Graph, p: &PassArgs) -> Result<()> {
    if p.no_opt {
        return Ok(());
    }
    let opts = kiln_passes::Options {
        verify_each: p.verify_each,
        print_after: p.print_after.clone(),
        layout: p.layout,
        ..Default::default()
    };
    let report = kiln_passes::optimize_to(g, &opts, &mut std::io::stderr())?;
    if p.time_passes {
        eprint!("{report}");
    }
    Ok(())
}

/// Node counts of an optimized graph: (nodes, primitive nodes).
fn primitive_count(g: &Graph) -> Result<usize> {
    let mut n = 0;
    for node in &g.nodes {
        if kiln_ops::te::classify::node_expr(g, node)?.is_some() {
            n += 1;
        }
    }
    Ok(n)
}

fn info(path: &Path, json: bool, classify: bool, args: &ModelArgs, p: &PassArgs) -> Result<()> {
    let mut g = load(path, args)?;
    let nodes_imported = g.nodes.len();
    // Parameters as the model file has them (passes fold and drop constants).
    let parameters = g.parameter_count();
    optimize(&mut g, p)?;
    let primitive_nodes = primitive_count(&g)?;
    let mut hist: BTreeMap<String, usize> = BTreeMap::new();
    for n in &g.nodes {
        *hist.entry(n.op.clone()).or_default() += 1;
    }
    let classes = if classify {
        g.nodes
            .iter()
            .map(|n| Ok((n, kiln_ops::te::classify::classify_node(&g, n)?)))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let flops = flops::graph_flops(&g);
    let io = |ids: &[kiln_ir::ValueId]| -> Vec<(String, String)> {
        ids.iter()
            .map(|&i| (g.name(i).to_string(), g.ty(i).to_string()))
            .collect()
    };
    let (inputs, outputs) = (io(&g.inputs), io(&g.outputs));
    if json {
        let tensors = |ids: &[kiln_ir::ValueId]| -> serde_json::Value {
            ids.iter()
                .map(|&id| {
                    let t = g.ty(id);
                    serde_json::json!({"name": g.name(id), "dtype": t.dtype.name(), "shape": t.shape})
                })
                .collect()
        };
        let mut obj = serde_json::json!({
            "model": path.display().to_string(),
            "opset": g.opset(),
            "inputs": tensors(&g.inputs),
            "outputs": tensors(&g.outputs),
            "nodes_imported": nodes_imported,
            "nodes_after_passes": g.nodes.len(),
            "primitive_nodes": primitive_nodes,
            "op_histogram": hist,
            "parameters": parameters,
            "flops": flops,
            "gflops": flops as f64 / 1e9,
        });
        if classify {
            obj["classes"] = classes
                .iter()
                .map(|(n, c)| {
                    serde_json::json!({"node": n.name, "op": n.op,
                        "apollo": c.apollo.to_string(), "mapping": c.mapping.to_string()})
                })
                .collect();
        }
        println!("{obj}");
        return Ok(());
    }
    println!("model: {} (opset {})", path.display(), g.opset());
    for (n, t) in &inputs {
        println!("input  {n}: {t}");
    }
    for (n, t) in &outputs {
        println!("output {n}: {t}");
    }
    println!(
        "nodes: {} imported, {} after passes, {primitive_nodes} primitive",
        nodes_imported,
        g.nodes.len()
    );
    println!("parameters: {parameters}");
    println!("FLOPs: {flops} ({:.3} GFLOP)", flops as f64 / 1e9);
    println!("ops:");
    let mut by_count: Vec<_> = hist.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (op, c) in by_count {
        println!("  {op:<24} {c}");
    }
    if classify {
        println!("classes:");
        for (n, c) in &classes {
            println!(
                "  {:<40} {:<14} {:<22} {}",
                n.name, n.op, c.apollo, c.mapping
            );
        }
    }
    Ok(())
}

fn read_input(path: &Path) -> Result<Tensor> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => npy::read(path),
        Some("pb") => kiln_onnx::read_tensor_pb(path),
        _ => bail!("input {} must be a .npy or .pb file", path.display()),
    }
}

/// Deterministic pseudo-random input for a graph input (SplitMix64).
fn random_input(ty: &kiln_ir::TensorType, name: &str, seed: &mut u64) -> Result<Tensor> {
    let Some(shape) = ty.shape.clone() else {
        bail!("input '{name}' has no static shape; pass -i or --input-shape")
    };
    kiln_ir::limits::check_tensor(&format!("random input '{name}'"), ty.dtype, &shape)?;
    let n: usize = shape.iter().product();
    let mut next = || {
        *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    // floats uniform in [-1, 1); integers in [0, 10) so they are valid indices/ids
    let unit = |r: u64| (r >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    let data = match ty.dtype {
        DType::Bool => Data::Bool((0..n).map(|_| next() & 1 == 1).collect()),
        DType::Str => bail!("input '{name}' is a string tensor; pass it with -i"),
        d if d.is_float() => Data::from_f64(d, &(0..n).map(|_| unit(next())).collect::<Vec<_>>())?,
        d => Data::from_f64(d, &(0..n).map(|_| (next() % 10) as f64).collect::<Vec<_>>())?,
    };
    Tensor::new(shape, data)
}

/// A model ready to execute: optimized graph, a label, and its inputs.
struct Prepared {
    graph: Graph,
    label: String,
    inputs: Vec<Tensor>,
    import_time: std::time::Duration,
}

/// Loads (or takes the embedded default model), optimizes, and reads or
/// makes the inputs.
fn prepare(
    model: Option<&Path>,
    input_files: &[PathBuf],
    seed: u64,
    args: &ModelArgs,
    passes: &PassArgs,
) -> Result<Prepared> {
    let start = Instant::now();
    let (mut g, label) = match model {
        Some(p) => (load(p, args)?, p.display().to_string()),
        None => {
            let m = kiln_onnx::load_bytes(bytes_of_default(), None, &import_options(args)?)
                .map_err(|e| e.context("embedded default model"))?;
            (
                m.graph,
                "embedded default model (MobileNetV2 ×0.35, 96×96)".to_string(),
            )
        }
    };
    optimize(&mut g, passes)?;
    let import_time = start.elapsed();
    if !input_files.is_empty() && input_files.len() != g.inputs.len() {
        bail!(
            "the model has {} inputs but {} -i files were given",
            g.inputs.len(),
            input_files.len()
        );
    }
    let mut rng = seed;
    let inputs: Vec<Tensor> = if input_files.is_empty() {
        g.inputs
            .iter()
            .map(|&id| random_input(g.ty(id), g.name(id), &mut rng))
            .collect::<Result<_>>()?
    } else {
        input_files
            .iter()
            .map(|p| read_input(p))
            .collect::<Result<_>>()?
    };
    Ok(Prepared {
        graph: g,
        label,
        inputs,
        import_time,
    })
}

fn cpu_options(exec: &ExecArgs) -> kiln_cpu::CpuOptions {
    let mut o = kiln_cpu::CpuOptions::default();
    if let Some(t) = exec.threads {
        o.threads = t.max(1);
    }
    o.fusion = exec.fusion.fusion;
    o
}

fn run(
    model: Option<&Path>,
    out_dir: Option<&Path>,
    exec: &ExecArgs,
    args: &ModelArgs,
    passes: &PassArgs,
) -> Result<()> {
    let p = prepare(model, &exec.inputs, exec.seed, args, passes)?;
    let g = &p.graph;
    println!("model: {}", p.label);
    let t0 = Instant::now();
    let outputs = if exec.backend == "reference" {
        kiln_interp::run(g, &p.inputs)?
    } else {
        let m = kiln_cpu::CompiledModel::compile(g, &cpu_options(exec)).map_err(|e| {
            Error::new(format!(
                "{e}\n(the cpu backend compiles generated C; `--backend reference` runs without a compiler)"
            ))
        })?;
        println!("{}", bench::compile_line(&m));
        let t1 = Instant::now();
        let outs = m.run(&p.inputs)?;
        println!("run: {:.1} ms", t1.elapsed().as_secs_f64() * 1e3);
        outs
    };
    println!(
        "backend: {}   import + passes: {:.1} ms   compile + run: {:.1} ms",
        exec.backend,
        p.import_time.as_secs_f64() * 1e3,
        t0.elapsed().as_secs_f64() * 1e3
    );
    if let Some(dir) = out_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    }
    for (k, (t, &id)) in outputs.iter().zip(&g.outputs).enumerate() {
        println!("output {k} '{}': {} {}", g.name(id), t.ty(), summary(t));
        if let Some(dir) = out_dir {
            npy::write(&dir.join(format!("output_{k}.npy")), t)?;
        }
    }
    if let Some(dir) = out_dir {
        println!("wrote {} outputs to {}", outputs.len(), dir.display());
    }
    Ok(())
}

fn bytes_of_default() -> bytes::Bytes {
    bytes::Bytes::from_static(DEFAULT_MODEL)
}

fn summary(t: &Tensor) -> String {
    let Ok(v) = t.data.to_f64_vec() else {
        return String::new();
    };
    if v.is_empty() {
        return "(empty)".into();
    }
    let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    format!("min {min:.6} max {max:.6} mean {mean:.6}")
}

/// What `kiln explain` prints and writes.
/// Mean time in ms of each group's kernel (by group index) over a few
/// profiled runs of `g` compiled with `planned`'s plan on random inputs.
fn group_times(g: &Graph, planned: &kiln_fuse::Planned) -> Result<Vec<(usize, f64)>> {
    const RUNS: usize = 3;
    let model = kiln_cpu::CompiledModel::compile_with_plan(
        g,
        planned.plan.clone(),
        &kiln_cpu::CpuOptions::default(),
    )?;
    let mut seed = 0;
    let inputs: Vec<Tensor> = g
        .inputs
        .iter()
        .map(|&id| random_input(g.ty(id), g.name(id), &mut seed))
        .collect::<Result<_>>()?;
    model.run(&inputs)?;
    // Fused nodes are named `fused<group>_<first node>` by the apply step.
    let mut group_of: HashMap<String, usize> = HashMap::new();
    for (gi, group) in planned.plan.groups.iter().enumerate() {
        let first = &g.nodes[group.nodes[0]].name;
        let name = match group.nodes.len() {
            1 => first.clone(),
            _ => format!("fused{gi}_{first}"),
        };
        group_of.insert(name, gi);
    }
    let mut ms: HashMap<usize, f64> = HashMap::new();
    for _ in 0..RUNS {
        for t in model.run_profiled(&inputs)?.1 {
            if let Some(&gi) = group_of.get(&t.node) {
                *ms.entry(gi).or_default() += t.time.as_secs_f64() * 1e3 / RUNS as f64;
            }
        }
    }
    let mut times: Vec<(usize, f64)> = ms.into_iter().collect();
    times.sort_by_key(|t| t.0);
    Ok(times)
}

struct ExplainOutput<'a> {
    /// Where to write the HTML report.
    html: Option<&'a Path>,
    /// JSON instead of the text summary.
    json: bool,
    /// Also list the feedback entries (text output).
    feedback: bool,
    /// Time every kernel.
    profile: bool,
}

/// `kiln explain`: import and optimize as `kiln run` does, plan, report.
fn explain(
    model: &Path,
    fusion: kiln_fuse::PlannerKind,
    out: &ExplainOutput,
    args: &ModelArgs,
    passes: &PassArgs,
) -> Result<()> {
    if !model.is_file() {
        bail!("model file {} does not exist", model.display());
    }
    let mut g = load(model, args)?;
    optimize(&mut g, passes)?;
    let planned = plan_for_explain(&g, fusion, &kiln_target::host())?;
    let times = if out.profile {
        group_times(&g, &planned)?
    } else {
        Vec::new()
    };
    if let Some(path) = out.html {
        std::fs::write(path, kiln_fuse::report::html(&g, &planned, &times))
            .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
    }
    if out.json {
        println!("{}", kiln_fuse::report::json_profiled(&g, &planned, &times));
        return Ok(());
    }
    print!("{}", kiln_fuse::report::text(&g, &planned, &times));
    if out.feedback {
        print!("{}", kiln_fuse::report::feedback_text(&g, &planned));
    }
    if let Some(path) = out.html {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Plans `g` with planner `kind` for `target`, the CPU backend judging
/// which groups can become one kernel.
fn plan_for_explain(
    g: &Graph,
    kind: kiln_fuse::PlannerKind,
    target: &kiln_target::TargetDesc,
) -> Result<kiln_fuse::Planned> {
    let check = kiln_cpu::select::CpuGroupCheck { target };
    let opts = kiln_fuse::PlanOptions::for_target(target.clone());
    kiln_fuse::plan(g, kind, &check, &opts)
}
