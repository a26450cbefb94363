//! The `kiln` command-line tool.

use clap::Parser;
use kiln_cli::{bench, classes_doc, flops, npy};
use kiln_ir::{bail, DType, Data, Error, Graph, Result, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A small MobileNetV2 (width 0.35, 96×96 input, 10 classes, random weights)
/// exported from torchvision; what `kiln run` runs when no model is given.
const DEFAULT_MODEL: &[u8] = include_bytes!("../assets/default.onnx");

mod cli;

use cli::args::{Cli, Command, CompileCmd, ExecArgs, ModelArgs, PassArgs, SimCmd};
use cli::explain::{explain, ExplainOutput};

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

/// glibc returns freed blocks of 128 KiB and more to the system (and
/// trims the heap), so a model whose outputs are large page-faults through
/// fresh memory on every run, which can cost more than the kernels
/// (BENCHMARKS.md, session 11, has a case). The kiln binary keeps freed
/// memory for reuse instead; a process embedding kiln makes its own choice.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's thresholds; called
    // before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

fn main() {
    restore_sigpipe();
    keep_freed_memory();
    let cli = Cli::parse();
    if let Some(bytes) = cli.max_memory {
        kiln_ir::limits::set_max_memory(bytes);
    }
    if let Err(e) = cli.command.run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

impl Command {
    /// Does what the command line asked.
    fn run(self) -> Result<()> {
        match self {
            Command::Info(c) => info(&c.model, c.json, c.classify, &c.args, &as_defined(c.passes)),
            Command::Run(c) => {
                let passes = layout_for_backend(c.passes, &c.exec);
                run(
                    c.model.as_deref(),
                    c.output_dir.as_deref(),
                    &c.exec,
                    &c.args,
                    &passes,
                )
            }
            Command::Bench(c) => {
                let opts = c
                    .flags
                    .options(cpu_options(&c.exec), c.exec.backend == "reference");
                bench_model(c.model.as_deref(), &c.exec, &c.args, c.passes, &opts)
            }
            Command::Tune(c) => tune(
                c.model.as_deref(),
                c.budget,
                c.runs,
                &c.exec,
                &c.args,
                &c.passes,
            ),
            Command::Compile(c) => compile(&c),
            Command::Peak(c) => bench::peak(
                c.threads
                    .unwrap_or_else(kiln_runtime::cpu::available_threads),
                c.json,
            ),
            Command::Ops(c) => {
                match c.markdown {
                    true => print!("{}", classes_doc::markdown()),
                    false => print!("{}", classes_doc::text(c.exprs)),
                }
                Ok(())
            }
            Command::Explain(c) => {
                let output = ExplainOutput {
                    html: c.output.as_deref(),
                    json: c.json,
                    feedback: c.explain_feedback,
                    profile: c.profile,
                };
                explain(&c.model, c.fusion, &output, &c.args, &c.passes)
            }
            Command::Sim(c) => sim(c),
            Command::Print(c) => print_graph(&c.model, c.elide, c.optimized, &c.args),
        }
    }
}

/// `kiln sim`: the model loaded as ONNX defines it and simulated on the DSA.
fn sim(c: SimCmd) -> Result<()> {
    let request = kiln_cli::sim::SimRequest {
        target: c.backend,
        schedule: c.schedule,
        across_layer: c.across_layer,
        float_bytes: c.float_bytes,
        json: c.json,
        html: c.output,
    };
    load_for_sim(c.model.as_deref(), c.batch, &c.args, &as_defined(c.passes))
        .and_then(|(g, label)| kiln_cli::sim::sim(&g, &label, &request))
}

/// `kiln print`: the imported (or optimized) graph in kiln's text IR.
fn print_graph(
    model: &Path,
    elide: Option<usize>,
    optimized: bool,
    args: &ModelArgs,
) -> Result<()> {
    let mut g = load(model, args)?;
    if optimized {
        kiln_passes::optimize(&mut g, &kiln_passes::Options::default())?;
    }
    print!("{}", kiln_ir::text::print_elided(&g, elide));
    Ok(())
}

/// `kiln bench`: the model prepared for `exec`'s backend and timed there.
fn bench_model(
    model: Option<&Path>,
    exec: &ExecArgs,
    args: &ModelArgs,
    passes: PassArgs,
    opts: &bench::BenchOptions,
) -> Result<()> {
    backend_flags(exec)?;
    let layout = layout_for_backend(passes, exec);
    let p = prepare(model, &exec.inputs, exec.seed, args, &layout)?;
    if exec.backend.starts_with("dsa:") {
        kiln_cli::dsa::bench(&p.graph, &p.label, &p.inputs, opts, &exec.backend)
    } else if exec.backend == "cuda" {
        kiln_cli::cuda::bench(&p.graph, &p.label, &p.inputs, opts, &cuda_options(exec))
    } else {
        bench::bench(&p.graph, &p.label, &p.inputs, opts)
    }
}

/// `kiln compile`: what the CPU pipeline generates for the model, written
/// to the output directory.
fn compile(c: &CompileCmd) -> Result<()> {
    let mut g = load(&c.model, &c.args)?;
    if matches!(c.emit, kiln_cli::emit::Emit::Cuda) {
        let mut cuda = c.passes.clone();
        cuda.for_cpu = false;
        optimize(&mut g, &cuda)?;
    } else {
        optimize(&mut g, &c.passes)?;
    }
    let options = c.aot.options(&c.model)?;
    let threads = c
        .aot
        .threads
        .unwrap_or_else(kiln_runtime::cpu::available_threads);
    let cpu = kiln_cpu::CpuOptions {
        fusion: c.fusion.fusion,
        threads,
        ..Default::default()
    };
    kiln_cli::emit::emit(&g, &cpu, c.emit, &options, c.tf32, &c.output_dir)
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
/// Flags that only one backend reads are refused with the others.
fn backend_flags(exec: &ExecArgs) -> Result<()> {
    if exec.tf32 && exec.backend != "cuda" {
        return Err(kiln_ir::Error::new(format!(
            "--tf32 applies to --backend cuda only (not {})",
            exec.backend
        )));
    }
    Ok(())
}

fn layout_for_backend(mut passes: PassArgs, exec: &ExecArgs) -> PassArgs {
    passes.for_cpu &= exec.backend == "cpu";
    match exec.backend.as_str() {
        "reference" => as_defined(passes),
        _ => passes,
    }
}

/// The passes without a layout change: the graph's ops as ONNX defines
/// them (`info` reports the model's ops and FLOPs).
fn as_defined(mut passes: PassArgs) -> PassArgs {
    passes.layout = kiln_passes::Layout::ChannelsFirst;
    passes.for_cpu = false;
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
        winograd: (p.for_cpu && !p.no_winograd).then(kiln_target::host),
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

/// The model at `model`, or the embedded default model, with its label.
fn load_or_default(
    model: Option<&Path>,
    opts: &kiln_onnx::ImportOptions,
) -> Result<(Graph, String)> {
    match model {
        Some(p) => Ok((kiln_onnx::load(p, opts)?.graph, p.display().to_string())),
        None => {
            let m = kiln_onnx::load_bytes(bytes_of_default(), None, opts)
                .map_err(|e| e.context("embedded default model"))?;
            Ok((
                m.graph,
                "embedded default model (MobileNetV2 ×0.35, 96×96)".to_string(),
            ))
        }
    }
}

/// `kiln sim`'s graph: loaded at `batch` (the first dimension of every
/// input `--input-shape` does not set), then optimized.
fn load_for_sim(
    model: Option<&Path>,
    batch: Option<usize>,
    args: &ModelArgs,
    passes: &PassArgs,
) -> Result<(Graph, String)> {
    let mut opts = import_options(args)?;
    if let Some(b) = batch {
        if b == 0 {
            bail!("--batch must be at least 1");
        }
        let (declared, _) = load_or_default(model, &opts)?;
        let shapes = kiln_cli::sim::rebatched_inputs(&declared, b, &opts.input_shapes);
        opts.input_shapes.extend(shapes);
    }
    let (mut g, label) = load_or_default(model, &opts)?;
    optimize(&mut g, passes)?;
    Ok((g, label))
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
    let (mut g, label) = load_or_default(model, &import_options(args)?)?;
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
            .zip(&g.inputs)
            .map(|(p, &id)| {
                let t = read_input(p)?;
                // The run checks types too; here the error can name the file.
                if !kiln_interp::accepts(g.ty(id), t.dtype(), &t.shape) {
                    bail!(
                        "{}: input '{}' must be {} but the file holds {}",
                        p.display(),
                        g.name(id),
                        g.ty(id),
                        t.ty()
                    );
                }
                Ok(t)
            })
            .collect::<Result<_>>()?
    };
    Ok(Prepared {
        graph: g,
        label,
        inputs,
        import_time,
    })
}

/// `kiln tune`: the cpu backend's gemm kernels measured and filed.
fn tune(
    model: Option<&Path>,
    budget: std::time::Duration,
    runs: usize,
    exec: &ExecArgs,
    args: &ModelArgs,
    passes: &PassArgs,
) -> Result<()> {
    if exec.backend != "cpu" {
        bail!(
            "kiln tune measures the cpu backend's kernels, not --backend {}",
            exec.backend
        );
    }
    let p = prepare(model, &exec.inputs, exec.seed, args, passes)?;
    println!("model: {}", p.label);
    let opts = kiln_cli::tune::TuneOptions {
        cpu: cpu_options(exec),
        budget,
        runs,
    };
    kiln_cli::tune::tune(&p.graph, &p.inputs, &opts)
}

fn cuda_options(exec: &ExecArgs) -> kiln_cuda::CudaOptions {
    kiln_cuda::CudaOptions {
        fusion: exec.fusion.fusion,
        tf32: exec.tf32,
        ..Default::default()
    }
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
    backend_flags(exec)?;
    let p = prepare(model, &exec.inputs, exec.seed, args, passes)?;
    let g = &p.graph;
    println!("model: {}", p.label);
    let t0 = Instant::now();
    let outputs = if exec.backend == "reference" {
        kiln_interp::run(g, &p.inputs)?
    } else if exec.backend.starts_with("dsa:") {
        let m = kiln_cli::dsa::compile(g, &exec.backend, exec.fusion.fusion, false)?;
        kiln_cli::dsa::run(&m, &p.inputs)?
    } else if exec.backend == "cuda" {
        let m = kiln_cli::cuda::compile(g, &cuda_options(exec))?;
        let t1 = Instant::now();
        let outs = m.run(&p.inputs)?;
        println!("run: {:.1} ms", t1.elapsed().as_secs_f64() * 1e3);
        outs
    } else {
        let m = kiln_cli::progress::while_working("compiling", || {
            kiln_cpu::CompiledModel::compile(g, &cpu_options(exec))
        })
        .map_err(|e| {
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
