//! The JIT: a [`CpuProgram`] compiled into one shared library and executed
//! over its execution plan.
//!
//! Needs: an optimized, verified graph. Guarantees: [`CompiledModel::compile`]
//! builds the program (`program.rs`), compiles its C into one library
//! through the JIT with its on-disk cache (pieces compiled in parallel),
//! packs every prepacked weight once, and resolves every step's function
//! and argument locations. [`CompiledModel::run`] executes the plan's
//! order over the model's one arena and workspace (allocated once; runs of
//! one model are serialised); interpreter steps run on copies of their
//! inputs. Results equal the interpreter's up to float rounding; errors
//! name the node.

use crate::inputs::Input;
use crate::memory::{
    as_declared, data_ptr, from_bytes, output_storage, AlignedBytes, OutputStorage,
};
use crate::packed_cache::Packed;
use crate::program::{config_defines, CpuOptions, CpuProgram, Naming};
use crate::weights::{prepack_all, raw_weights, Weights};
use kiln_exec::{Exec, ExecPlan, Loc, Step};
use kiln_fuse::{Plan, Planned};
use kiln_ir::{bail, Error, Graph, Result, Tensor, ValueId};
use kiln_runtime::jit::{self, CompileReport, Library};
use std::collections::HashMap;
use std::time::{Duration, Instant};

type KernelFn = unsafe extern "C" fn(*const *mut u8) -> i32;
type BlockFn = unsafe extern "C" fn(*const *const *mut u8) -> i32;
type SetThreadsFn = unsafe extern "C" fn(i32);

/// One argument of a kernel call.
#[derive(Debug, Clone, Copy)]
enum Arg {
    Value(Loc),
    /// The storage of graph output `k`, written in place (see
    /// [`direct_outputs`]).
    Output(usize),
    /// `packed[i]`.
    Packed(usize),
    /// The workspace at this byte offset.
    Workspace(usize),
}

/// A step resolved against the loaded library.
enum Resolved {
    Kernel {
        func: KernelFn,
        args: Vec<Arg>,
    },
    /// A view (nothing runs) or a node for the interpreter.
    Other,
}

/// Time spent in one node over the profiled runs.
#[derive(Debug, Clone)]
pub struct NodeTime {
    pub node: String,
    pub op: String,
    pub compiled: bool,
    pub time: Duration,
}

/// What compilation did.
#[derive(Debug, Clone)]
pub struct CompileSummary {
    /// Nodes run as C kernels (views aliased to their input are not).
    pub kernels: usize,
    /// Primitive nodes computed by kernels or aliased (a fused kernel
    /// counts its body's nodes).
    pub compiled_nodes: usize,
    /// Blocks of kernels run concurrently (parallelism stitching).
    pub concurrent_blocks: usize,
    /// Weights packed for their gemms at compile time.
    pub prepacked_weights: usize,
    /// Nodes left to the interpreter: (node, why).
    pub interpreted: Vec<(String, String)>,
    /// What the JIT did (`None`: no kernel to compile).
    pub compile: Option<CompileReport>,
    /// What the fusion planner did.
    pub fusion: Planned,
    /// Size of the planned arena, its lower bound (the most bytes live at
    /// one step), and the sum of the intermediate tensors it holds.
    pub arena_bytes: usize,
    pub arena_bound: usize,
    pub intermediate_bytes: usize,
    pub workspace_bytes: usize,
    /// Bytes of the weights kept as they are, and of the packings (a
    /// weight only a packing reads is not kept).
    pub weight_bytes: usize,
    pub packed_bytes: usize,
    /// The packings were mapped from the cache, written by an earlier
    /// start ([`crate::packed_cache`]), not packed by this one.
    pub packed_from_cache: bool,
}

/// The memory one run uses.
struct Scratch {
    arena: AlignedBytes,
    workspace: AlignedBytes,
}

pub struct CompiledModel {
    graph: Graph,
    plan: ExecPlan,
    resolved: Vec<Resolved>,
    /// Graph outputs kernels write straight into the returned tensors:
    /// value id → output position.
    direct: HashMap<usize, usize>,
    blocks: HashMap<String, BlockFn>,
    weights: Weights,
    /// Weights packed for their gemms at compile time.
    packed: Vec<Packed>,
    scratch: std::sync::Mutex<Scratch>,
    /// Sets the OpenMP team size of the calling thread (set per run: the
    /// setting is per thread, and runs may come from any thread).
    set_threads: Option<SetThreadsFn>,
    threads: usize,
    /// Kept alive: the kernels point into it.
    library: Option<Library>,
    pub report: CompileSummary,
}

/// A node's op for profiles: a fused node's ops joined by `+`; a
/// channels-last node as the op it wraps (`Conv[nhwc]`).
pub fn op_label(n: &kiln_ir::Node) -> String {
    match n.attr_graph("body") {
        Ok(Some(body)) if n.domain == kiln_ops::ops::control::FUSED_DOMAIN => body
            .nodes
            .iter()
            .map(one_op_label)
            .collect::<Vec<_>>()
            .join("+"),
        _ => one_op_label(n),
    }
}

fn one_op_label(n: &kiln_ir::Node) -> String {
    use kiln_ops::ops::channels_last::{CHANNELS_LAST_DOMAIN, CHANNELS_LAST_OP};
    match n.attr_string("op") {
        Ok(Some(wrapped)) if n.domain == CHANNELS_LAST_DOMAIN && n.op == CHANNELS_LAST_OP => {
            format!("{wrapped}[nhwc]")
        }
        _ => n.op.clone(),
    }
}

/// C of the first unit: the thread-count setter.
const SET_THREADS_C: &str = "#ifdef _OPENMP\n#include <omp.h>\n#endif\n\
     void kiln_set_threads(int n) {\n#ifdef _OPENMP\n  omp_set_num_threads(n);\n#else\n  (void)n;\n#endif\n}\n";

/// The JIT's symbols are `kiln_…`; workspaces hold at least the machine's
/// threads, so the C (and its cache entry) does not change with
/// `--threads`.
fn naming(opts: &CpuOptions) -> Naming {
    Naming {
        prefix: "kiln".to_string(),
        threads: opts.threads.max(kiln_runtime::cpu::available_threads()),
    }
}

impl CompiledModel {
    /// Plans fusion on `graph` (with the CPU backend's feedback), applies
    /// the plan, and compiles the fused graph.
    pub fn compile(graph: &Graph, opts: &CpuOptions) -> Result<CompiledModel> {
        Self::load(CpuProgram::build(graph, opts, &naming(opts))?, opts)
    }

    /// Compiles `graph` fused by a given plan (no planner, no feedback).
    pub fn compile_with_plan(
        graph: &Graph,
        plan: Plan,
        opts: &CpuOptions,
    ) -> Result<CompiledModel> {
        Self::load(
            CpuProgram::with_plan(graph, plan, opts, &naming(opts))?,
            opts,
        )
    }

    /// Compiles `program`'s C, packs its weights and resolves its steps.
    pub fn load(program: CpuProgram, opts: &CpuOptions) -> Result<CompiledModel> {
        let threads = opts.threads.max(1);
        let defines = config_defines(program.plan.threads, None);
        let units = program.c_units(threads, &defines, SET_THREADS_C);
        let (library, compile) = if units.is_empty() {
            (None, None)
        } else {
            let (lib, report) = jit::compile(&opts.compiler, &units, threads)?;
            (Some(lib), Some(report))
        };
        let mut plan = program.plan;
        let weights = Weights::decode(&program.graph, &plan, &raw_weights(&program.graph, &plan))?;
        let direct = direct_outputs(&program.graph, &plan);
        let (resolved, blocks, packed, set_threads) = match &library {
            Some(lib) => {
                let packed = prepack_all(lib, &program.graph, &mut plan, &weights, threads)?;
                let resolved = resolve_steps(lib, &plan, &direct)?;
                let blocks = resolve_blocks(lib, &plan)?;
                // SAFETY: the first unit defines `void kiln_set_threads(int)`.
                let set: SetThreadsFn = unsafe { lib.symbol("kiln_set_threads")? };
                (resolved, blocks, packed, Some(set))
            }
            None => (
                plan.steps.iter().map(|_| Resolved::Other).collect(),
                HashMap::new(),
                Vec::new(),
                None,
            ),
        };
        let report = CompileSummary {
            kernels: plan.kernels().count(),
            compiled_nodes: CpuProgram::count_compiled(&program.graph, &plan),
            concurrent_blocks: blocks.len(),
            prepacked_weights: packed.len(),
            interpreted: CpuProgram::interpreted_in(&program.graph, &plan),
            compile,
            fusion: program.fusion,
            arena_bytes: plan.arena_bytes,
            arena_bound: plan.arena_bound,
            intermediate_bytes: plan.arena_total,
            workspace_bytes: plan.workspace_bytes,
            weight_bytes: weights.bytes(),
            packed_bytes: packed.iter().map(Packed::len).sum(),
            packed_from_cache: packed.iter().any(Packed::is_mapped),
        };
        Ok(CompiledModel {
            scratch: std::sync::Mutex::new(Scratch {
                arena: AlignedBytes::new(plan.arena_bytes),
                workspace: AlignedBytes::new(plan.workspace_bytes),
            }),
            graph: program.graph,
            plan,
            resolved,
            direct,
            blocks,
            weights,
            packed,
            set_threads,
            threads,
            library,
            report,
        })
    }

    /// The graph this model runs (fused nodes carry their `body`); the
    /// nodes of [`CompiledModel::run_profiled`]'s times, in order.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The execution plan this model runs.
    pub fn plan(&self) -> &ExecPlan {
        &self.plan
    }

    /// The loaded library (`None` when no kernel was compiled): where a
    /// runtime compiled beside the kernels (`CpuProgram::runtime_units`)
    /// is reached.
    pub fn library(&self) -> Option<&Library> {
        self.library.as_ref()
    }

    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let inputs: Vec<Input> = inputs.iter().map(Input::Tensor).collect();
        self.run_inner(&inputs, None)
    }

    /// Runs on inputs that may be memory the caller owns, read in place.
    pub fn run_inputs(&self, inputs: &[Input]) -> Result<Vec<Tensor>> {
        self.run_inner(inputs, None)
    }

    /// Runs once, returning the time of each node too.
    pub fn run_profiled(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, Vec<NodeTime>)> {
        let mut times = vec![Duration::ZERO; self.plan.steps.len()];
        let inputs: Vec<Input> = inputs.iter().map(Input::Tensor).collect();
        let outs = self.run_inner(&inputs, Some(&mut times))?;
        let t = self
            .graph
            .nodes
            .iter()
            .zip(&self.plan.steps)
            .zip(times)
            .map(|((n, s), time)| NodeTime {
                node: n.name.clone(),
                op: op_label(n),
                compiled: !matches!(s, Step::Interp { .. }),
                time,
            })
            .collect();
        Ok((outs, t))
    }

    fn run_inner(
        &self,
        inputs: &[Input],
        mut times: Option<&mut Vec<Duration>>,
    ) -> Result<Vec<Tensor>> {
        kiln_interp::check_input_types(&self.graph, inputs.iter().map(|i| (i.dtype(), i.shape())))?;
        // One run at a time per model: the arena is reused, not reallocated.
        let mut guard = self
            .scratch
            .lock()
            .map_err(|_| Error::new("a previous run of this model panicked"))?;
        let scratch: &mut Scratch = &mut guard;
        if let Some(set) = self.set_threads {
            // SAFETY: `kiln_set_threads(int)` from the loaded library.
            unsafe { set(self.threads as i32) };
        }
        let mut run = Run {
            model: self,
            inputs,
            scratch,
            boxed: vec![None; self.plan.boxed],
            fresh: self.fresh_outputs()?,
            ptrs: Vec::new(),
            block_args: Vec::new(),
        };
        for e in &self.plan.exec {
            let start = Instant::now();
            match e {
                Exec::Step(i) => run.step(*i)?,
                Exec::Concurrent { func, steps } => run.concurrent(self.blocks[func], steps)?,
            }
            if let Some(t) = times.as_deref_mut() {
                // Concurrent kernels share the block's time equally.
                let steps = e.steps();
                for &i in steps {
                    t[i] += start.elapsed() / steps.len() as u32;
                }
            }
        }
        let fresh = std::mem::take(&mut run.fresh);
        self.graph
            .outputs
            .iter()
            .zip(fresh)
            .map(|(&o, storage)| match storage {
                Some(s) => s.into_tensor(self.graph.ty(o).shape.clone().unwrap_or_default()),
                None => run.read(o),
            })
            .collect()
    }

    /// Storage for the outputs kernels write in place, by output position.
    fn fresh_outputs(&self) -> Result<Vec<Option<Box<dyn OutputStorage>>>> {
        let mut fresh: Vec<Option<Box<dyn OutputStorage>>> =
            (0..self.graph.outputs.len()).map(|_| None).collect();
        for (&v, &k) in &self.direct {
            let ty = self.graph.ty(ValueId(v as u32));
            let n = ty.shape.as_ref().map_or(0, |s| s.iter().product());
            fresh[k] = Some(output_storage(ty.dtype, n)?);
        }
        Ok(fresh)
    }

    fn location(&self, v: ValueId) -> Result<Loc> {
        self.plan
            .value(v.index())
            .map(|p| p.loc)
            .ok_or_else(|| Error::new(format!("value '{}' has no storage", self.graph.name(v))))
    }
}

/// The state of one run.
struct Run<'a> {
    model: &'a CompiledModel,
    inputs: &'a [Input<'a>],
    scratch: &'a mut Scratch,
    boxed: Vec<Option<Tensor>>,
    /// Per graph output: its storage when kernels write it in place.
    fresh: Vec<Option<Box<dyn OutputStorage>>>,
    ptrs: Vec<*mut u8>,
    block_args: Vec<Vec<*mut u8>>,
}

impl Run<'_> {
    /// Runs step `i` (a kernel, an alias or an interpreted node).
    fn step(&mut self, i: usize) -> Result<()> {
        let m = self.model;
        let node = &m.graph.nodes[i];
        match (&m.resolved[i], &m.plan.steps[i]) {
            (Resolved::Kernel { func, args }, _) => {
                let mut ptrs = std::mem::take(&mut self.ptrs);
                self.pointers(args, &mut ptrs)?;
                // SAFETY: the arguments are the kernel's buffers, each as
                // large as its declared shape, then its packing and
                // workspace slice, as the kernel expects.
                let rc = unsafe { func(ptrs.as_ptr()) };
                self.ptrs = ptrs;
                if rc != 0 {
                    bail!(
                        "{}: an index read from data is out of range",
                        node.describe()
                    );
                }
            }
            (_, Step::Interp { .. }) => self.interpret(node)?,
            _ => {}
        }
        Ok(())
    }

    /// Runs the kernel steps `steps` through their block function.
    fn concurrent(&mut self, func: BlockFn, steps: &[usize]) -> Result<()> {
        let m = self.model;
        // One reused pointer array per member (blocks recur every run).
        let mut arrays = std::mem::take(&mut self.block_args);
        arrays.resize_with(arrays.len().max(steps.len()), Vec::new);
        for (&i, ptrs) in steps.iter().zip(arrays.iter_mut()) {
            let Resolved::Kernel { args, .. } = &m.resolved[i] else {
                bail!("internal error: a concurrent block holds a step that is not a kernel");
            };
            self.pointers(args, ptrs)?;
        }
        let heads: Vec<*const *mut u8> = arrays[..steps.len()].iter().map(|a| a.as_ptr()).collect();
        // SAFETY: each array holds its kernel's arguments (as for one
        // step); the kernels of a block write disjoint buffers and
        // workspace slices, which the plan keeps apart.
        let rc = unsafe { func(heads.as_ptr()) };
        self.block_args = arrays;
        if rc != 0 {
            let names: Vec<String> = steps.iter().map(|&i| m.graph.nodes[i].describe()).collect();
            bail!(
                "{}: an index read from data is out of range",
                names.join(" or ")
            );
        }
        Ok(())
    }

    fn pointers(&mut self, args: &[Arg], out: &mut Vec<*mut u8>) -> Result<()> {
        out.clear();
        for &a in args {
            out.push(match a {
                Arg::Value(l) => self.pointer(l)?,
                Arg::Output(k) => self.output_ptr(k)?,
                Arg::Packed(p) => self.model.packed[p].ptr() as *mut u8,
                Arg::Workspace(off) => self.scratch.workspace.ptr(off),
            });
        }
        Ok(())
    }

    fn pointer(&mut self, l: Loc) -> Result<*mut u8> {
        Ok(match l {
            Loc::Input(i) => self.inputs[i].ptr()?,
            Loc::Weight(w) => self.model.weights.pointer(w)?,
            Loc::Arena(off) => self.scratch.arena.ptr(off),
            Loc::Boxed(_) => bail!("a kernel argument is not in memory a kernel can read"),
        })
    }

    fn interpret(&mut self, node: &kiln_ir::Node) -> Result<()> {
        let outs = kiln_interp::eval_node_reading(&self.model.graph, node, &mut |v| self.read(v))?;
        for (o, t) in outs {
            self.write(o, t)?;
        }
        Ok(())
    }

    /// Where graph output `k`, written in place, lives.
    fn output_ptr(&mut self, k: usize) -> Result<*mut u8> {
        match self.fresh.get_mut(k).and_then(|s| s.as_mut()) {
            Some(s) => s.ptr(),
            None => bail!("internal error: output {k} has no storage"),
        }
    }

    fn read(&mut self, v: ValueId) -> Result<Tensor> {
        let m = self.model;
        if let Some(&k) = m.direct.get(&v.index()) {
            let ty = m.graph.ty(v);
            let p = self.output_ptr(k)?;
            return from_bytes(ty.dtype, ty.shape.clone().unwrap_or_default(), p);
        }
        Ok(match m.location(v)? {
            // A view of an input or weight shares its memory: same data,
            // the view's shape.
            Loc::Input(i) => as_declared(&m.graph, v, self.inputs[i].to_tensor()?)?,
            Loc::Weight(w) => as_declared(&m.graph, v, m.weights.tensor(w)?.clone())?,
            Loc::Boxed(b) => self.boxed[b].clone().ok_or_else(|| {
                Error::new(format!("value '{}' was not computed", m.graph.name(v)))
            })?,
            Loc::Arena(off) => {
                let ty = m.graph.ty(v);
                let shape = ty.shape.clone().unwrap_or_default();
                from_bytes(ty.dtype, shape, self.scratch.arena.ptr_const(off))?
            }
        })
    }

    fn write(&mut self, v: ValueId, t: Tensor) -> Result<()> {
        match self.model.location(v)? {
            Loc::Boxed(b) => self.boxed[b] = Some(t),
            Loc::Arena(off) => {
                let src = data_ptr(&t)?;
                let n = t.len() * t.dtype().size();
                // SAFETY: the planner sized this slot for the value's type.
                unsafe { std::ptr::copy_nonoverlapping(src, self.scratch.arena.ptr(off), n) };
            }
            Loc::Input(_) | Loc::Weight(_) => {
                bail!("value '{}' is written twice", self.model.graph.name(v))
            }
        }
        Ok(())
    }
}

/// Every kernel step's function and arguments.
fn resolve_steps(
    lib: &Library,
    plan: &ExecPlan,
    direct: &HashMap<usize, usize>,
) -> Result<Vec<Resolved>> {
    plan.steps
        .iter()
        .map(|s| {
            let Step::Kernel {
                kernel,
                args,
                packing,
                workspace,
                ..
            } = s
            else {
                return Ok(Resolved::Other);
            };
            // SAFETY: every kernel is printed as `int NAME(void* const*)`.
            let func: KernelFn = unsafe { lib.symbol(kernel)? };
            let mut resolved = args
                .iter()
                .map(|&a| match direct.get(&a) {
                    Some(&k) => Ok(Arg::Output(k)),
                    None => Ok(Arg::Value(value_loc(plan, a)?)),
                })
                .collect::<Result<Vec<_>>>()?;
            resolved.extend(packing.map(Arg::Packed));
            resolved.extend(workspace.map(|w| Arg::Workspace(w.offset)));
            Ok(Resolved::Kernel {
                func,
                args: resolved,
            })
        })
        .collect()
}

/// The graph outputs a kernel can write straight into the returned tensor
/// (value id → output position): computed by a kernel into the arena,
/// listed once among the outputs, and sharing no bytes with another value
/// (no view of or by it). The rest are copied out of the arena.
fn direct_outputs(graph: &Graph, plan: &ExecPlan) -> HashMap<usize, usize> {
    let mut viewed = std::collections::HashSet::new();
    let mut by_kernel = std::collections::HashSet::new();
    for s in &plan.steps {
        match s {
            Step::Alias { value, of, .. } => {
                viewed.insert(*value);
                viewed.insert(*of);
            }
            Step::Assembled { value, .. } => {
                viewed.insert(*value);
            }
            Step::Kernel { node, .. } => {
                by_kernel.extend(
                    graph.nodes[*node]
                        .outputs
                        .iter()
                        .flatten()
                        .map(|v| v.index()),
                );
            }
            Step::Interp { .. } => {}
        }
    }
    let mut count: HashMap<usize, usize> = HashMap::new();
    for o in &graph.outputs {
        *count.entry(o.index()).or_default() += 1;
    }
    graph
        .outputs
        .iter()
        .enumerate()
        .map(|(k, o)| (o.index(), k))
        .filter(|(v, _)| {
            count[v] == 1
                && by_kernel.contains(v)
                && !viewed.contains(v)
                && matches!(plan.value(*v).map(|p| p.loc), Some(Loc::Arena(_)))
        })
        .collect()
}

fn value_loc(plan: &ExecPlan, id: usize) -> Result<Loc> {
    plan.value(id)
        .map(|v| v.loc)
        .ok_or_else(|| Error::new(format!("execution plan: value %{id} has no place")))
}

fn resolve_blocks(lib: &Library, plan: &ExecPlan) -> Result<HashMap<String, BlockFn>> {
    let mut blocks = HashMap::new();
    for e in &plan.exec {
        if let Exec::Concurrent { func, .. } = e {
            // SAFETY: `blocks_c` prints `int NAME(void* const* const*)`.
            blocks.insert(func.clone(), unsafe { lib.symbol::<BlockFn>(func)? });
        }
    }
    Ok(blocks)
}
