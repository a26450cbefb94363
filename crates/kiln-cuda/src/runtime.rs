//! Running a [`CudaProgram`] on a GPU.
//!
//! Needs: a CUDA driver and NVRTC at run time (both loaded, never linked).
//! Guarantees: one device arena sized by the execution plan, weights
//! uploaded once, inputs copied in and outputs copied out per run, every
//! kernel launched in plan order on one stream; nodes without a kernel run
//! on the reference interpreter on the host, their inputs copied out and
//! outputs copied back. Each kernel step has its own error word, so a
//! data-dependent index out of range is reported naming its node. Runs of
//! one model are serialised (the arena is reused).

use crate::cache::compile_cached;
use crate::ffi::device::Gpu;
use crate::ffi::memory::DeviceBuffer;
use crate::ffi::module::{Function, Module};
use crate::ffi::nvrtc::Arch;
use crate::program::CudaProgram;
use crate::target::device_target;
use kiln_cpu::memory::{as_declared, data_ptr, from_bytes};
use kiln_exec::{Exec, Loc, Step};
use kiln_fuse::PlannerKind;
use kiln_ir::{bail, Error, Graph, Result, Tensor, ValueId};
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

/// How to compile for a GPU (default: the default planner on device 0,
/// kiln's cache).
#[derive(Debug, Clone, Default)]
pub struct CudaOptions {
    pub fusion: PlannerKind,
    /// Device ordinal.
    pub device: usize,
    /// Where compiled modules are cached (default: kiln's cache).
    pub cache_dir: Option<PathBuf>,
    /// f32 matrix products may use TF32 tensor cores
    /// (`kiln_target::GpuDesc::tf32`).
    pub tf32: bool,
}

/// What compiling took.
#[derive(Debug, Clone)]
pub struct CudaSummary {
    pub device: String,
    pub kernels: usize,
    pub launches: usize,
    /// Nodes run by the interpreter: (node, why).
    pub interpreted: Vec<(String, String)>,
    pub source_bytes: usize,
    pub seconds: f64,
    /// The module came from the cache.
    pub cached: bool,
}

/// The argument words of a launch and the pointers to them, reused by
/// every launch of a run.
#[derive(Default)]
struct LaunchArgs {
    words: Vec<u64>,
    params: Vec<*mut c_void>,
}

/// The steps of `plan` in order, concurrent blocks one after another.
fn step_order(plan: &kiln_exec::ExecPlan) -> Vec<usize> {
    let mut order = Vec::with_capacity(plan.steps.len());
    for e in &plan.exec {
        match e {
            Exec::Step(i) => order.push(*i),
            Exec::Concurrent { steps, .. } => order.extend(steps),
        }
    }
    order
}

/// One launch of a kernel step: the function and its configuration.
struct Launch {
    function: Function,
    grid: [u32; 3],
    block: [u32; 3],
    cooperative: bool,
    /// Dynamic shared memory per block, in bytes.
    shared_bytes: u32,
}

/// A model compiled for a GPU, ready to run.
pub struct CudaModel {
    graph: Graph,
    plan: kiln_exec::ExecPlan,
    /// Per step: its launches (empty for aliases and interpreted nodes).
    launches: Vec<Vec<Launch>>,
    /// Per step: where its kernel's arguments live (empty for others).
    step_args: Vec<Vec<Loc>>,
    /// The steps in plan order, concurrent blocks one after another.
    order: Vec<usize>,
    weights: Vec<DeviceBuffer>,
    host_weights: kiln_cpu::weights::Weights,
    arena: DeviceBuffer,
    /// One error word per step.
    errors: DeviceBuffer,
    /// Device copies of the inputs, reused across runs of the same sizes.
    inputs: Mutex<Vec<DeviceBuffer>>,
    summary: CudaSummary,
    // Dropped last: the functions above belong to it.
    _module: Module,
    gpu: Gpu,
}

impl CudaModel {
    /// Compiles `graph` (optimized, static shapes) for GPU `opts.device`.
    pub fn compile(graph: &Graph, opts: &CudaOptions) -> Result<CudaModel> {
        let start = Instant::now();
        let gpu = Gpu::open(opts.device)?;
        let mut target = device_target(&gpu)?;
        if let Some(g) = target.gpu.as_mut() {
            g.tf32 = opts.tf32;
        }
        let program = CudaProgram::build(graph, opts.fusion, &target, "kiln")?;
        let source = program.source();
        let cc = target.gpu.as_ref().map_or(80, |g| g.compute_capability);
        let cache_dir = opts
            .cache_dir
            .clone()
            .unwrap_or_else(kiln_runtime::jit::default_cache_dir);
        let image = compile_cached(&source, Arch::Compute(cc), &cache_dir)?;
        let module = gpu.load_module(&image.bytes)?;
        let launches = resolve_launches(&program, &module)?;
        let step_args = resolve_args(&program.plan)?;
        let order = step_order(&program.plan);
        let host_weights = kiln_cpu::weights::Weights::all(&program.graph, &program.plan)?;
        let weights = (0..host_weights.len())
            .map(|w| upload_tensor(&gpu, host_weights.tensor(w)?))
            .collect::<Result<Vec<_>>>()?;
        let arena = gpu.alloc(program.plan.arena_bytes)?;
        let errors = gpu.alloc(4 * program.plan.steps.len().max(1))?;
        let summary = CudaSummary {
            device: gpu.name()?,
            kernels: program.kernels.iter().flatten().count(),
            launches: launches.iter().map(Vec::len).sum(),
            interpreted: program.interpreted(),
            source_bytes: source.len(),
            seconds: start.elapsed().as_secs_f64(),
            cached: image.cached,
        };
        Ok(CudaModel {
            graph: program.graph,
            plan: program.plan,
            launches,
            step_args,
            order,
            weights,
            host_weights,
            arena,
            errors,
            inputs: Mutex::new(Vec::new()),
            summary,
            _module: module,
            gpu,
        })
    }

    pub fn summary(&self) -> &CudaSummary {
        &self.summary
    }

    /// The graph the plan's steps belong to (node `i` is step `i`).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn plan(&self) -> &kiln_exec::ExecPlan {
        &self.plan
    }

    /// Runs the model on host tensors and returns the outputs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut device_inputs = self.lock_inputs()?;
        self.upload_inputs(inputs, &mut device_inputs)?;
        let mut boxed = vec![None; self.plan.boxed];
        self.execute(inputs, &device_inputs, &mut boxed)?;
        self.check_errors()?;
        let outputs = self.graph.outputs.clone();
        outputs
            .iter()
            .map(|&o| self.read(o, inputs, &boxed))
            .collect()
    }

    /// Milliseconds of each of `runs` executions on the device (inputs
    /// uploaded once before, outputs left on the device), timed by events.
    pub fn time_device(&self, inputs: &[Tensor], runs: usize) -> Result<Vec<f32>> {
        let mut device_inputs = self.lock_inputs()?;
        self.upload_inputs(inputs, &mut device_inputs)?;
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let mut boxed = vec![None; self.plan.boxed];
            let ms = self
                .gpu
                .elapsed_ms(|| self.execute(inputs, &device_inputs, &mut boxed))?;
            times.push(ms);
        }
        self.check_errors()?;
        Ok(times)
    }

    /// Milliseconds on the device of each step (indexed like the plan's
    /// steps, so like the graph's nodes) in one run, inputs uploaded
    /// before; an interpreted step's time includes its copies.
    pub fn time_steps(&self, inputs: &[Tensor]) -> Result<Vec<f32>> {
        let mut device_inputs = self.lock_inputs()?;
        self.upload_inputs(inputs, &mut device_inputs)?;
        self.clear_errors()?;
        let mut boxed = vec![None; self.plan.boxed];
        let mut args = LaunchArgs::default();
        let ms = self.gpu.elapsed_each_ms(self.order.len(), |k| {
            let step = self.order[k];
            self.run_step(step, inputs, &device_inputs, &mut boxed, &mut args)
        })?;
        self.check_errors()?;
        let mut per_step = vec![0f32; self.plan.steps.len()];
        for (&step, t) in self.order.iter().zip(ms) {
            per_step[step] = t;
        }
        Ok(per_step)
    }

    fn lock_inputs(&self) -> Result<std::sync::MutexGuard<'_, Vec<DeviceBuffer>>> {
        self.inputs
            .lock()
            .map_err(|_| Error::new("a previous run of this model panicked"))
    }

    fn upload_inputs(&self, inputs: &[Tensor], device: &mut Vec<DeviceBuffer>) -> Result<()> {
        kiln_interp::check_inputs(&self.graph, inputs)?;
        device.truncate(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            let bytes = device_bytes(t)?;
            if device.get(i).is_none_or(|b| b.bytes() != bytes.len()) {
                let buf = self.gpu.alloc(bytes.len())?;
                if i < device.len() {
                    device[i] = buf;
                } else {
                    device.push(buf);
                }
            }
            self.gpu.upload(&device[i], 0, bytes)?;
        }
        Ok(())
    }

    /// Every step in plan order (concurrent blocks one after another).
    fn execute(
        &self,
        inputs: &[Tensor],
        device: &[DeviceBuffer],
        boxed: &mut [Option<Tensor>],
    ) -> Result<()> {
        self.clear_errors()?;
        let mut args = LaunchArgs::default();
        for &step in &self.order {
            self.run_step(step, inputs, device, boxed, &mut args)?;
        }
        Ok(())
    }

    fn clear_errors(&self) -> Result<()> {
        self.gpu.memset_zero(self.errors.ptr(), self.errors.bytes())
    }

    /// Queues step `step`: its launches, or its node on the interpreter.
    fn run_step(
        &self,
        step: usize,
        inputs: &[Tensor],
        device: &[DeviceBuffer],
        boxed: &mut [Option<Tensor>],
        args: &mut LaunchArgs,
    ) -> Result<()> {
        match &self.plan.steps[step] {
            Step::Kernel { .. } => self.launch(step, device, args),
            Step::Interp { node, .. } => self.interpret(*node, inputs, boxed),
            Step::Alias { .. } | Step::Assembled { .. } => Ok(()),
        }
    }

    /// Launches step `step`'s functions on its arguments (their places
    /// resolved at compile time) and its error word.
    fn launch(&self, step: usize, device: &[DeviceBuffer], args: &mut LaunchArgs) -> Result<()> {
        let LaunchArgs { words, params } = args;
        words.clear();
        for &loc in &self.step_args[step] {
            words.push(self.device_ptr(loc, device)?);
        }
        words.push(self.errors.ptr() + 4 * step as u64);
        // The launch copies the parameters these point at.
        params.clear();
        params.extend(words.iter_mut().map(|p| p as *mut u64 as *mut c_void));
        for l in &self.launches[step] {
            // SAFETY: every generated function takes the kernel's buffers
            // (device pointers, `args` in order) then the error word: one
            // u64 per parameter, which `params` points at.
            unsafe {
                self.gpu.launch(
                    &l.function,
                    l.grid,
                    l.block,
                    l.shared_bytes,
                    l.cooperative,
                    params,
                )?
            };
        }
        Ok(())
    }

    /// The device address of place `loc`.
    fn device_ptr(&self, loc: Loc, device: &[DeviceBuffer]) -> Result<u64> {
        Ok(match loc {
            Loc::Input(i) => device[i].ptr(),
            Loc::Weight(w) => self.weights[w].ptr(),
            Loc::Arena(off) => self.arena.ptr() + off as u64,
            Loc::Boxed(_) => bail!("a kernel argument is not in device memory"),
        })
    }

    fn location(&self, v: ValueId) -> Result<Loc> {
        self.plan
            .value(v.index())
            .map(|p| p.loc)
            .ok_or_else(|| Error::new(format!("value '{}' has no storage", self.graph.name(v))))
    }

    /// Runs node `n` on the interpreter, reading and writing device memory.
    fn interpret(&self, n: usize, inputs: &[Tensor], boxed: &mut [Option<Tensor>]) -> Result<()> {
        let node = &self.graph.nodes[n];
        let outs = kiln_interp::eval_node_reading(&self.graph, node, &mut |v| {
            self.read(v, inputs, boxed)
        })?;
        for (o, t) in outs {
            self.write(o, t, boxed)?;
        }
        Ok(())
    }

    /// Value `v` on the host (inputs and weights from their host copies).
    fn read(&self, v: ValueId, inputs: &[Tensor], boxed: &[Option<Tensor>]) -> Result<Tensor> {
        let loc = self.location(v)?;
        match loc {
            Loc::Input(i) => as_declared(&self.graph, v, inputs[i].clone()),
            Loc::Weight(w) => as_declared(&self.graph, v, self.host_weights.tensor(w)?.clone()),
            Loc::Boxed(b) => boxed[b].clone().ok_or_else(|| {
                Error::new(format!("value '{}' was not computed", self.graph.name(v)))
            }),
            Loc::Arena(off) => {
                let ty = self.graph.ty(v);
                let shape = ty.shape.clone().unwrap_or_default();
                let mut bytes = vec![0u8; shape.iter().product::<usize>() * ty.dtype.size()];
                self.gpu.download(&self.arena, off, &mut bytes)?;
                from_bytes(ty.dtype, shape, bytes.as_ptr())
            }
        }
    }

    fn write(&self, v: ValueId, t: Tensor, boxed: &mut [Option<Tensor>]) -> Result<()> {
        match self.location(v)? {
            Loc::Boxed(b) => boxed[b] = Some(t),
            Loc::Arena(off) => self.gpu.upload(&self.arena, off, tensor_bytes(&t)?)?,
            Loc::Input(_) | Loc::Weight(_) => {
                bail!("value '{}' is written twice", self.graph.name(v))
            }
        }
        Ok(())
    }

    /// An error naming the first kernel whose data-dependent index was out
    /// of range.
    fn check_errors(&self) -> Result<()> {
        let mut words = vec![0u8; self.errors.bytes()];
        self.gpu.download(&self.errors, 0, &mut words)?;
        let failed = words.chunks_exact(4).position(|w| w != [0, 0, 0, 0]);
        if let Some(step) = failed {
            bail!(
                "{}: an index read from data is out of range",
                self.graph.nodes[step].describe()
            );
        }
        Ok(())
    }
}

/// Each kernel step's functions, looked up in `module`.
fn resolve_launches(program: &CudaProgram, module: &Module) -> Result<Vec<Vec<Launch>>> {
    program
        .plan
        .steps
        .iter()
        .map(|s| {
            let Step::Kernel { node, .. } = s else {
                return Ok(Vec::new());
            };
            let Some(k) = &program.kernels[*node] else {
                bail!("internal error: kernel step {node} has no kernel");
            };
            k.source
                .launches
                .iter()
                .map(|l| {
                    Ok(Launch {
                        function: module.function(&l.function)?,
                        grid: l.grid,
                        block: l.block,
                        cooperative: l.cooperative,
                        shared_bytes: l.shared_bytes,
                    })
                })
                .collect()
        })
        .collect()
}

/// Each kernel step's argument places; a value the device cannot hold is
/// an error naming it.
fn resolve_args(plan: &kiln_exec::ExecPlan) -> Result<Vec<Vec<Loc>>> {
    plan.steps
        .iter()
        .map(|s| {
            let Step::Kernel { args, .. } = s else {
                return Ok(Vec::new());
            };
            args.iter()
                .map(|&id| match plan.value(id) {
                    Some(v) if matches!(v.loc, Loc::Boxed(_)) => {
                        bail!("value '{}' is not in memory a kernel can read", v.name)
                    }
                    Some(v) => Ok(v.loc),
                    None => bail!("internal error: value {id} has no storage"),
                })
                .collect()
        })
        .collect()
}

/// A tensor's elements as bytes.
fn tensor_bytes(t: &Tensor) -> Result<&[u8]> {
    let n = t.len() * t.dtype().size();
    let p = data_ptr(t)?;
    // SAFETY: `data_ptr` points at the tensor's `len` initialised elements,
    // alive as long as `t`.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, n) })
}

/// What of a graph input or weight goes to the device: its bytes, or
/// nothing for types no kernel reads (strings stay on the host, where the
/// interpreter reads them).
fn device_bytes(t: &Tensor) -> Result<&[u8]> {
    if kiln_cpu::select::has_c_type(t.dtype()) {
        tensor_bytes(t)
    } else {
        Ok(&[])
    }
}

fn upload_tensor(gpu: &Gpu, t: &Tensor) -> Result<DeviceBuffer> {
    let bytes = device_bytes(t)?;
    let buf = gpu.alloc(bytes.len())?;
    gpu.upload(&buf, 0, bytes)?;
    Ok(buf)
}
