//! ONNX backend node-test harness. Loads each case under the test directory
//! (`<case>/model.onnx`, `<case>/test_data_set_<k>/{input,output}_<j>.pb`),
//! runs it on a backend and compares with the expected outputs using ONNX's
//! runner tolerances (rtol 1e-3, atol 1e-7; exact for integers, bools and
//! strings). The committed list of passing cases per backend lives in
//! `expected/<backend>.txt`; `KILN_BLESS=1` rewrites it and the per-op table.

pub mod aot;
pub mod cuda;
pub mod differential;
pub mod dsa;
pub mod products;
pub mod random_graph;

use kiln_ir::{Data, Result, Tensor};
use std::path::{Path, PathBuf};

pub const RTOL: f64 = 1e-3;
pub const ATOL: f64 = 1e-7;

/// Where the node tests live: `$KILN_ONNX_NODE_TESTS`, else `../shared/onnx-node-tests`
/// beside the repository.
pub fn test_dir() -> PathBuf {
    if let Ok(d) = std::env::var("KILN_ONNX_NODE_TESTS") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/onnx-node-tests")
}

/// All case names (directories holding a model.onnx), sorted.
pub fn cases(dir: &Path) -> Result<Vec<String>> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| kiln_ir::Error::new(format!("cannot list {}: {e}", dir.display())))?;
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("model.onnx").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    Ok(v)
}

/// One data set: inputs and expected outputs.
pub struct DataSet {
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
}

fn numbered(dir: &Path, prefix: &str) -> Result<Vec<Tensor>> {
    let mut v = Vec::new();
    loop {
        let p = dir.join(format!("{prefix}_{}.pb", v.len()));
        if !p.exists() {
            return Ok(v);
        }
        v.push(kiln_onnx::read_tensor_pb(&p)?);
    }
}

pub fn data_sets(case_dir: &Path) -> Result<Vec<DataSet>> {
    let mut sets = Vec::new();
    for k in 0.. {
        let d = case_dir.join(format!("test_data_set_{k}"));
        if !d.is_dir() {
            break;
        }
        sets.push(DataSet {
            inputs: numbered(&d, "input")?,
            outputs: numbered(&d, "output")?,
        });
    }
    Ok(sets)
}

/// A backend under test: imports and runs one model.
pub trait Backend: Sync {
    fn name(&self) -> &str;
    /// Runs the model on `inputs`; `model` is the case's model.onnx.
    fn run(&self, model: &Path, inputs: &[Tensor]) -> Result<Vec<Tensor>>;
}

/// The reference interpreter as a backend. Input shapes are bound from the
/// test data (the models sometimes declare symbolic dims).
pub struct Reference;

impl Backend for Reference {
    fn name(&self) -> &str {
        "reference"
    }
    fn run(&self, model: &Path, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        kiln_interp::run(&import(model, inputs)?, inputs)
    }
}

/// The graph passes, then the reference interpreter: the default pipeline
/// with the graph verified after every pass. Passing the same cases as
/// [`Reference`] shows the passes preserve semantics.
pub struct Optimized;

impl Backend for Optimized {
    fn name(&self) -> &str {
        "optimized"
    }
    fn run(&self, model: &Path, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut g = import(model, inputs)?;
        let opts = kiln_passes::Options {
            verify_each: true,
            ..Default::default()
        };
        kiln_passes::optimize(&mut g, &opts)?;
        kiln_interp::run(&g, inputs)
    }
}

/// The graph passes, then the CPU backend (kernels compiled by the system C
/// compiler, one thread per case since cases run in parallel). Counts the
/// nodes it compiled and the ones left to the interpreter, with why.
#[derive(Default)]
pub struct Cpu {
    /// The fusion planner the backend uses (default: `apollo`).
    pub fusion: kiln_fuse::PlannerKind,
    /// Run convolutions and pooling channels-last (the layout pass forced
    /// to `nhwc`); otherwise as ONNX defines them.
    pub channels_last: bool,
    /// Primitive nodes run by compiled kernels (fused or not).
    pub compiled: std::sync::atomic::AtomicUsize,
    pub interpreted: std::sync::Mutex<Vec<(String, String)>>,
}

impl Cpu {
    pub fn with_fusion(fusion: kiln_fuse::PlannerKind) -> Cpu {
        Cpu {
            fusion,
            ..Cpu::default()
        }
    }
}

impl Backend for Cpu {
    fn name(&self) -> &str {
        match self.fusion {
            _ if self.channels_last => "cpu (channels-last)",
            kiln_fuse::PlannerKind::None => "cpu (fusion none)",
            kiln_fuse::PlannerKind::Tvm => "cpu (fusion tvm)",
            kiln_fuse::PlannerKind::Apollo => "cpu (fusion apollo)",
            kiln_fuse::PlannerKind::Dp => "cpu (fusion dp)",
        }
    }
    fn run(&self, model: &Path, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut g = import(model, inputs)?;
        let passes = kiln_passes::Options {
            layout: if self.channels_last {
                kiln_passes::Layout::ChannelsLast
            } else {
                kiln_passes::Layout::ChannelsFirst
            },
            ..kiln_passes::Options::default()
        };
        kiln_passes::optimize(&mut g, &passes)?;
        let opts = kiln_cpu::CpuOptions {
            threads: 1,
            fusion: self.fusion,
            ..Default::default()
        };
        let m = kiln_cpu::CompiledModel::compile(&g, &opts)?;
        self.compiled.fetch_add(
            m.report.compiled_nodes,
            std::sync::atomic::Ordering::Relaxed,
        );
        if let Ok(mut v) = self.interpreted.lock() {
            v.extend(m.report.interpreted.iter().cloned());
        }
        m.run(inputs)
    }
}

/// Imports a case's model with its input shapes bound from the test data
/// (the models sometimes declare symbolic dims).
pub(crate) fn import(model: &Path, inputs: &[Tensor]) -> Result<kiln_ir::Graph> {
    let names = kiln_onnx::graph_input_names(&kiln_onnx::decode_proto(model)?);
    let mut opts = kiln_onnx::ImportOptions::default();
    for (n, t) in names.iter().zip(inputs) {
        opts.input_shapes.insert(n.clone(), t.shape.clone());
    }
    Ok(kiln_onnx::load(model, &opts)?.graph)
}

/// Compares one output with its expected value; `Err` says how it differs.
pub fn compare(got: &Tensor, want: &Tensor) -> std::result::Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!(
            "dtype {} != expected {}",
            got.dtype(),
            want.dtype()
        ));
    }
    if got.shape != want.shape {
        return Err(format!(
            "shape {:?} != expected {:?}",
            got.shape, want.shape
        ));
    }
    match (&got.data, &want.data) {
        (Data::Str(a), Data::Str(b)) => {
            if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
                return Err(format!("element {i}: {:?} != expected {:?}", a[i], b[i]));
            }
        }
        (a, b) if a.dtype().is_float() => {
            for i in 0..a.len() {
                let (x, y) = (a.get_f64(i), b.get_f64(i));
                let ok =
                    (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= ATOL + RTOL * y.abs();
                if !ok {
                    return Err(format!("element {i}: {x} != expected {y}"));
                }
            }
        }
        (a, b) => {
            if a != b {
                let i = (0..a.len())
                    .find(|&i| a.get_f64(i) != b.get_f64(i))
                    .unwrap_or(0);
                return Err(format!(
                    "element {i}: {} != expected {}",
                    a.get_f64(i),
                    b.get_f64(i)
                ));
            }
        }
    }
    Ok(())
}

/// Runs one case on `backend`; `Err` explains the failure.
pub fn run_case(backend: &dyn Backend, case_dir: &Path) -> std::result::Result<(), String> {
    let sets = data_sets(case_dir).map_err(|e| e.to_string())?;
    if sets.is_empty() {
        return Err("no test data".into());
    }
    let model = case_dir.join("model.onnx");
    for (k, set) in sets.iter().enumerate() {
        let got = backend
            .run(&model, &set.inputs)
            .map_err(|e| e.to_string())?;
        if got.len() < set.outputs.len() || set.outputs.is_empty() {
            return Err(format!(
                "data set {k}: {} outputs, expected {} (non-tensor outputs are not written)",
                got.len(),
                set.outputs.len()
            ));
        }
        for (j, (g, w)) in got.iter().zip(&set.outputs).enumerate() {
            compare(g, w).map_err(|e| format!("data set {k}, output {j}: {e}"))?;
        }
    }
    Ok(())
}

/// The op a case is about: the model's op whose snake_case name starts the
/// case name, else the case name itself; "(expanded)" for function bodies.
pub fn case_op(case: &str, model_ops: &[String]) -> String {
    let name = case.trim_start_matches("test_");
    let best = model_ops
        .iter()
        .filter(|op| name.starts_with(&snake(op)))
        .max_by_key(|op| op.len())
        .cloned();
    let op = best.unwrap_or_else(|| {
        let base = name.split("_expanded").next().unwrap_or(name);
        base.split('_').next().unwrap_or(base).to_string()
    });
    if name.contains("_expanded") {
        format!("{op} (expanded)")
    } else {
        op
    }
}

fn snake(op: &str) -> String {
    let mut s = String::new();
    let chars: Vec<char> = op.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase()
            && i > 0
            && (chars[i - 1].is_lowercase() || chars.get(i + 1).is_some_and(|n| n.is_lowercase()))
        {
            s.push('_');
        }
        s.push(c.to_ascii_lowercase());
    }
    s
}
