//! A model compiled for the CPU, and its executor.
//!
//! Needs: an optimized, verified graph.
//! Guarantees: [`CompiledModel::compile`] builds one shared library with a
//! kernel per node that has one ([`crate::select`]), through the JIT with
//! its on-disk cache (pieces compiled in parallel), and a memory plan: every
//! intermediate tensor of a C element type and static shape gets an offset
//! in one arena (liveness from the execution order, in place where a kernel
//! allows it); weights stay in the decoded initializers; graph outputs
//! live in the arena to the end and are copied out. [`CompiledModel::run`]
//! executes the steps in graph order over the model's one arena (allocated
//! once; runs of one model are serialised); nodes without a kernel run on the
//! reference interpreter on copies of their inputs. Results equal the
//! interpreter's up to float rounding; errors name the node.

use crate::select::{has_c_type, node_kernel, CpuGroupCheck, NodeKernel};
use kiln_exec::memplan::{self, Lifetime, MemoryPlan};
use kiln_fuse::apply::Applied;
use kiln_fuse::{Plan, PlanOptions, Planned, PlannerKind};
use kiln_ir::{bail, with_dtype, DType, Elem, Error, Graph, Result, Tensor, ValueId};
use kiln_runtime::jit::{self, CompileReport, CompilerConfig, Library};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How to compile.
#[derive(Debug, Clone)]
pub struct CpuOptions {
    /// Threads for kernels and for parallel compilation.
    pub threads: usize,
    pub compiler: CompilerConfig,
    /// The fusion planner (`none`: one kernel per node).
    pub fusion: PlannerKind,
    /// The CPU the fusion plan and the kernels' schedules are for.
    pub target: kiln_target::TargetDesc,
}

impl Default for CpuOptions {
    fn default() -> Self {
        CpuOptions {
            threads: kiln_runtime::cpu::available_threads(),
            compiler: CompilerConfig::from_env(),
            fusion: PlannerKind::default(),
            target: kiln_target::host(),
        }
    }
}

/// Where a value lives while the model runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loc {
    Input(usize),
    Weight(usize),
    Arena(usize),
    /// A tensor held by the executor (types or shapes the arena cannot hold).
    Boxed(usize),
    /// Not a value: a weight packed for a gemm before the first run
    /// (`packed[i]`), passed after the kernel's buffers.
    Packed(usize),
}

type KernelFn = unsafe extern "C" fn(*const *mut u8) -> i32;
type FloatsFn = unsafe extern "C" fn() -> std::ffi::c_long;
type BlockFn = unsafe extern "C" fn(*const *const *mut u8) -> i32;

/// One entry of the execution order.
enum Exec {
    Step(usize),
    /// Kernel steps run at the same time (APOLLO's parallelism stitching):
    /// one generated function runs each as an OpenMP section, so each gets
    /// one thread of the team (nested regions inside run on it alone).
    Concurrent {
        func: BlockFn,
        steps: Vec<usize>,
    },
}
type SetThreadsFn = unsafe extern "C" fn(i32);

enum Step {
    /// A compiled kernel and where its buffers live (resolved once, at
    /// compile time).
    Kernel {
        func: KernelFn,
        args: Vec<Loc>,
    },
    Interp,
    /// A view whose output shares its input's memory: nothing to do.
    Alias,
}

/// Time spent in one node over the profiled runs.
#[derive(Debug, Clone)]
pub struct NodeTime {
    pub node: String,
    pub op: String,
    pub compiled: bool,
    pub time: Duration,
}

pub struct CompiledModel {
    graph: Graph,
    steps: Vec<Step>,
    /// The execution order.
    exec: Vec<Exec>,
    loc: Vec<Option<Loc>>,
    weights: Vec<Tensor>,
    /// Weights packed for their gemms at compile time.
    packed: Vec<AlignedBytes>,
    boxed_count: usize,
    arena: std::sync::Mutex<AlignedBytes>,
    /// Sets the OpenMP team size of the calling thread (set per run: the
    /// setting is per thread, and runs may come from any thread).
    set_threads: Option<SetThreadsFn>,
    threads: usize,
    /// Kept alive: the kernels point into it.
    _library: Option<Library>,
    pub report: CompileSummary,
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
    /// Size of the planned arena, and the sum of the intermediate tensors
    /// it holds.
    pub arena_bytes: usize,
    pub intermediate_bytes: usize,
}

/// A node's op for profiles: a fused node's ops joined by `+`.
fn op_label(n: &kiln_ir::Node) -> String {
    match n.attr_graph("body") {
        Ok(Some(body)) if n.domain == kiln_ops::ops::control::FUSED_DOMAIN => body
            .nodes
            .iter()
            .map(|b| b.op.as_str())
            .collect::<Vec<_>>()
            .join("+"),
        _ => n.op.clone(),
    }
}

/// C source of the per-file preamble: helpers and the thread-count setter.
fn file_prelude() -> String {
    let mut s = kiln_codegen::c::prelude();
    s.push_str(
        "#ifdef _OPENMP\n#include <omp.h>\n#endif\n\
         void kiln_set_threads(int n) {\n#ifdef _OPENMP\n  omp_set_num_threads(n);\n#else\n  (void)n;\n#endif\n}\n",
    );
    s
}

impl CompiledModel {
    /// Plans fusion on `graph` (with the CPU backend's feedback), applies
    /// the plan, and compiles the fused graph.
    pub fn compile(graph: &Graph, opts: &CpuOptions) -> Result<CompiledModel> {
        let check = CpuGroupCheck {
            target: &opts.target,
        };
        let plan_opts = PlanOptions::for_target(opts.target.clone());
        let planned = kiln_fuse::plan(graph, opts.fusion, &check, &plan_opts)?;
        let applied = kiln_fuse::apply::apply_plan(graph, &planned.plan)?;
        Self::compile_fused(&applied, planned, opts)
    }

    /// Compiles `graph` fused by a given plan (no planner, no feedback).
    pub fn compile_with_plan(
        graph: &Graph,
        plan: Plan,
        opts: &CpuOptions,
    ) -> Result<CompiledModel> {
        let applied = kiln_fuse::apply::apply_plan(graph, &plan)?;
        let planned = Planned {
            plan,
            feedback: Vec::new(),
            notes: Vec::new(),
            seconds: 0.0,
        };
        Self::compile_fused(&applied, planned, opts)
    }

    fn compile_fused(
        applied: &Applied,
        planned: Planned,
        opts: &CpuOptions,
    ) -> Result<CompiledModel> {
        let graph = &applied.graph;
        let mut kernels: Vec<Option<NodeKernel>> = Vec::new();
        let mut interpreted = Vec::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            let static_outputs = node
                .outputs
                .iter()
                .flatten()
                .all(|&o| graph.ty(o).shape.is_some());
            let k = if static_outputs {
                node_kernel(graph, node, &format!("kiln_k{i}"), &opts.target)
            } else {
                Err(Error::new(format!(
                    "{}: output shape depends on data",
                    node.op
                )))
            };
            match k {
                Ok(k) => kernels.push(Some(k)),
                Err(e) => {
                    interpreted.push((node.describe(), e.to_string()));
                    kernels.push(None);
                }
            }
        }
        let blocks = execution_blocks(graph.nodes.len(), &applied.parallel, &kernels);
        let loc_plan = Layout::new(graph, &kernels, &blocks)?;
        let blocks_c: String = blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() > 1)
            .map(|(n, b)| block_c(n, b, &kernels))
            .collect();
        let (library, compile) = build(&kernels, &blocks_c, opts)?;
        let mut steps = Vec::new();
        // (step, kernel, arguments) of the kernels whose weight is packed.
        let mut to_pack: Vec<(usize, String, Vec<Loc>)> = Vec::new();
        for ((node, k), &aliased) in graph.nodes.iter().zip(&kernels).zip(&loc_plan.aliased) {
            steps.push(match (k, &library) {
                _ if aliased => Step::Alias,
                (Some(k), Some(lib)) => {
                    // SAFETY: every kernel is printed as `int NAME(void* const*)`.
                    let func: KernelFn = unsafe { lib.symbol(&k.kernel.name)? };
                    let mut values: Vec<ValueId> =
                        k.inputs.iter().filter_map(|&p| node.inputs[p]).collect();
                    values.extend(node.outputs.iter().flatten().copied());
                    let args: Vec<Loc> = values
                        .iter()
                        .map(|&v| match loc_plan.loc[v.index()] {
                            Some(Loc::Boxed(_)) | None => bail!(
                                "{}: value '{}' is not in memory a kernel can read",
                                node.describe(),
                                graph.name(v)
                            ),
                            Some(l) => Ok(l),
                        })
                        .collect::<Result<_>>()?;
                    if k.prepacked {
                        to_pack.push((steps.len(), k.kernel.name.clone(), args.clone()));
                    }
                    Step::Kernel { func, args }
                }
                _ => Step::Interp,
            });
        }
        let packed = match &library {
            Some(lib) => prepack_all(lib, &to_pack, &loc_plan.weights, opts.threads.max(1))?,
            None => Vec::new(),
        };
        for (p, (step, ..)) in to_pack.iter().enumerate() {
            if let Step::Kernel { args, .. } = &mut steps[*step] {
                args.push(Loc::Packed(p));
            }
        }
        let kernel_steps = steps
            .iter()
            .filter(|s| matches!(s, Step::Kernel { .. }))
            .count();
        let compiled_nodes = graph
            .nodes
            .iter()
            .zip(&steps)
            .filter(|(_, s)| !matches!(s, Step::Interp))
            .map(|(n, _)| match n.attr_graph("body") {
                Ok(Some(body)) => body.nodes.len(),
                _ => 1,
            })
            .sum();
        let set_threads = match &library {
            // SAFETY: the prelude defines `void kiln_set_threads(int)`.
            Some(lib) => Some(unsafe { lib.symbol::<SetThreadsFn>("kiln_set_threads")? }),
            None => None,
        };
        let mut exec = Vec::with_capacity(blocks.len());
        for (n, block) in blocks.into_iter().enumerate() {
            exec.push(match (&library, block.len()) {
                (Some(lib), k) if k > 1 => Exec::Concurrent {
                    // SAFETY: `block_c` prints `int NAME(void* const* const*)`.
                    func: unsafe { lib.symbol(&block_name(n))? },
                    steps: block,
                },
                _ => Exec::Step(block[0]),
            });
        }
        let concurrent_blocks = exec
            .iter()
            .filter(|e| matches!(e, Exec::Concurrent { .. }))
            .count();
        Ok(CompiledModel {
            graph: graph.clone(),
            steps,
            exec,
            loc: loc_plan.loc,
            weights: loc_plan.weights,
            boxed_count: loc_plan.boxed,
            report: CompileSummary {
                kernels: kernel_steps,
                compiled_nodes,
                concurrent_blocks,
                prepacked_weights: packed.len(),
                interpreted,
                compile,
                fusion: planned,
                arena_bytes: loc_plan.plan.arena_bytes,
                intermediate_bytes: loc_plan.plan.total_bytes,
            },
            arena: std::sync::Mutex::new(AlignedBytes::new(loc_plan.plan.arena_bytes)),
            packed,
            set_threads,
            threads: opts.threads.max(1),
            _library: library,
        })
    }

    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.run_inner(inputs, None)
    }

    /// Runs once, returning the time of each node too.
    pub fn run_profiled(&self, inputs: &[Tensor]) -> Result<(Vec<Tensor>, Vec<NodeTime>)> {
        let mut times = vec![Duration::ZERO; self.steps.len()];
        let outs = self.run_inner(inputs, Some(&mut times))?;
        let t = self
            .graph
            .nodes
            .iter()
            .zip(&self.steps)
            .zip(times)
            .map(|((n, s), time)| NodeTime {
                node: n.name.clone(),
                op: op_label(n),
                compiled: !matches!(s, Step::Interp),
                time,
            })
            .collect();
        Ok((outs, t))
    }

    fn run_inner(
        &self,
        inputs: &[Tensor],
        mut times: Option<&mut Vec<Duration>>,
    ) -> Result<Vec<Tensor>> {
        kiln_interp::check_inputs(&self.graph, inputs)?;
        let g = &self.graph;
        // One run at a time per model: the arena is reused, not reallocated.
        let mut guard = self
            .arena
            .lock()
            .map_err(|_| Error::new("a previous run of this model panicked"))?;
        let arena: &mut AlignedBytes = &mut guard;
        if let Some(set) = self.set_threads {
            // SAFETY: `kiln_set_threads(int)` from the loaded library.
            unsafe { set(self.threads as i32) };
        }
        let mut boxed: Vec<Option<Tensor>> = vec![None; self.boxed_count];
        let mut ptrs: Vec<*mut u8> = Vec::new();
        let mut block_args: Vec<Vec<*mut u8>> = Vec::new();
        for e in &self.exec {
            let start = Instant::now();
            match e {
                Exec::Step(i) => self.run_step(*i, inputs, arena, &mut boxed, &mut ptrs)?,
                Exec::Concurrent { func, steps } => {
                    self.run_concurrent(*func, steps, inputs, arena, &mut block_args)?
                }
            }
            if let Some(t) = times.as_deref_mut() {
                let steps: &[usize] = match e {
                    Exec::Step(i) => std::slice::from_ref(i),
                    Exec::Concurrent { steps, .. } => steps,
                };
                // Concurrent kernels share the block's time equally.
                for &i in steps {
                    t[i] += start.elapsed() / steps.len() as u32;
                }
            }
        }
        g.outputs
            .iter()
            .map(|&o| self.read(o, inputs, arena, &boxed))
            .collect()
    }

    /// Runs step `i` (a kernel, an alias or an interpreted node).
    fn run_step(
        &self,
        i: usize,
        inputs: &[Tensor],
        arena: &mut AlignedBytes,
        boxed: &mut [Option<Tensor>],
        ptrs: &mut Vec<*mut u8>,
    ) -> Result<()> {
        let node = &self.graph.nodes[i];
        match &self.steps[i] {
            Step::Kernel { func, args } => {
                ptrs.clear();
                for &l in args {
                    ptrs.push(self.pointer(l, inputs, arena)?);
                }
                // SAFETY: the arguments are the kernel's buffers, each
                // as large as its declared shape, as the kernel expects.
                let rc = unsafe { func(ptrs.as_ptr()) };
                if rc != 0 {
                    bail!(
                        "{}: an index read from data is out of range",
                        node.describe()
                    );
                }
            }
            Step::Alias => {}
            Step::Interp => {
                let ins: Vec<Option<Tensor>> = node
                    .inputs
                    .iter()
                    .map(|v| v.map(|v| self.read(v, inputs, arena, boxed)).transpose())
                    .collect::<Result<_>>()?;
                let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
                let scope = self.scope(node, inputs, arena, boxed)?;
                let outs = kiln_interp::eval_node(&self.graph, node, &refs, &scope)?;
                for (o, t) in node.outputs.iter().zip(outs) {
                    if let Some(o) = o {
                        self.write(*o, t, arena, boxed)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs the kernel steps `steps` through their block function;
    /// `args` holds one reused pointer array per kernel.
    fn run_concurrent(
        &self,
        func: BlockFn,
        steps: &[usize],
        inputs: &[Tensor],
        arena: &mut AlignedBytes,
        args: &mut Vec<Vec<*mut u8>>,
    ) -> Result<()> {
        if args.len() < steps.len() {
            args.resize_with(steps.len(), Vec::new);
        }
        for (&i, ptrs) in steps.iter().zip(args.iter_mut()) {
            let Step::Kernel { args: locs, .. } = &self.steps[i] else {
                bail!("internal error: a concurrent block holds a step that is not a kernel");
            };
            ptrs.clear();
            for &l in locs {
                ptrs.push(self.pointer(l, inputs, arena)?);
            }
        }
        let arrays: Vec<*const *mut u8> = args[..steps.len()].iter().map(|a| a.as_ptr()).collect();
        // SAFETY: each array holds its kernel's buffers (as for one step);
        // the kernels of a block write disjoint buffers, which the memory
        // plan keeps apart (their lifetimes overlap).
        let rc = unsafe { func(arrays.as_ptr()) };
        if rc != 0 {
            let names: Vec<String> = steps
                .iter()
                .map(|&i| self.graph.nodes[i].describe())
                .collect();
            bail!(
                "{}: an index read from data is out of range",
                names.join(" or ")
            );
        }
        Ok(())
    }

    /// Values the subgraphs of `node` read by name.
    fn scope(
        &self,
        node: &kiln_ir::Node,
        inputs: &[Tensor],
        arena: &AlignedBytes,
        boxed: &[Option<Tensor>],
    ) -> Result<HashMap<String, Tensor>> {
        let mut scope = HashMap::new();
        for name in kiln_interp::subgraph_reads(node) {
            if let Some(id) = self.graph.find(&name) {
                scope.insert(name, self.read(id, inputs, arena, boxed)?);
            }
        }
        Ok(scope)
    }

    fn location(&self, v: ValueId) -> Result<Loc> {
        self.loc[v.index()]
            .ok_or_else(|| Error::new(format!("value '{}' has no storage", self.graph.name(v))))
    }

    fn pointer(&self, l: Loc, inputs: &[Tensor], arena: &mut AlignedBytes) -> Result<*mut u8> {
        Ok(match l {
            Loc::Input(i) => data_ptr(&inputs[i])?,
            Loc::Weight(w) => data_ptr(&self.weights[w])?,
            Loc::Arena(off) => arena.ptr(off),
            Loc::Packed(p) => self.packed[p].ptr_const(0) as *mut u8,
            Loc::Boxed(_) => bail!("a kernel argument is not in memory a kernel can read"),
        })
    }

    /// `t` with value `v`'s declared shape (they differ for views).
    fn as_declared(&self, v: ValueId, t: Tensor) -> Result<Tensor> {
        match &self.graph.ty(v).shape {
            Some(shape) if *shape != t.shape => t.reshaped(shape.clone()),
            _ => Ok(t),
        }
    }

    fn read(
        &self,
        v: ValueId,
        inputs: &[Tensor],
        arena: &AlignedBytes,
        boxed: &[Option<Tensor>],
    ) -> Result<Tensor> {
        Ok(match self.location(v)? {
            // A view of an input or weight shares its memory: same data,
            // the view's shape.
            Loc::Input(i) => self.as_declared(v, inputs[i].clone())?,
            Loc::Weight(w) => self.as_declared(v, self.weights[w].clone())?,
            Loc::Boxed(b) => boxed[b].clone().ok_or_else(|| {
                Error::new(format!("value '{}' was not computed", self.graph.name(v)))
            })?,
            Loc::Arena(off) => {
                let ty = self.graph.ty(v);
                let shape = ty.shape.clone().unwrap_or_default();
                from_bytes(ty.dtype, shape, arena.ptr_const(off))?
            }
            Loc::Packed(_) => bail!("value '{}' has no tensor storage", self.graph.name(v)),
        })
    }

    fn write(
        &self,
        v: ValueId,
        t: Tensor,
        arena: &mut AlignedBytes,
        boxed: &mut [Option<Tensor>],
    ) -> Result<()> {
        match self.location(v)? {
            Loc::Boxed(b) => boxed[b] = Some(t),
            Loc::Arena(off) => {
                let src = data_ptr(&t)?;
                let n = t.len() * t.dtype().size();
                // SAFETY: the planner sized this slot for the value's type.
                unsafe { std::ptr::copy_nonoverlapping(src, arena.ptr(off), n) };
            }
            Loc::Input(_) | Loc::Weight(_) | Loc::Packed(_) => {
                bail!("value '{}' is written twice", self.graph.name(v))
            }
        }
        Ok(())
    }
}

/// Storage decisions for every value.
struct Layout {
    loc: Vec<Option<Loc>>,
    /// Nodes whose output is their input's memory (views).
    aliased: Vec<bool>,
    weights: Vec<Tensor>,
    boxed: usize,
    plan: MemoryPlan,
}

impl Layout {
    /// `blocks`: the execution order, nodes of one block running
    /// concurrently (their lifetimes then start and end together, and none
    /// runs in place).
    fn new(g: &Graph, kernels: &[Option<NodeKernel>], blocks: &[Vec<usize>]) -> Result<Layout> {
        let mut time = vec![0usize; g.nodes.len()];
        let mut concurrent = vec![false; g.nodes.len()];
        for (t, block) in blocks.iter().enumerate() {
            for &n in block {
                time[n] = t;
                concurrent[n] = block.len() > 1;
            }
        }
        let mut loc: Vec<Option<Loc>> = vec![None; g.values.len()];
        let mut weights = Vec::new();
        let mut boxed = 0;
        for (i, &v) in g.inputs.iter().enumerate() {
            loc[v.index()] = Some(Loc::Input(i));
        }
        for (&v, init) in &g.initializers {
            loc[v.index()] = Some(Loc::Weight(weights.len()));
            weights.push(init.to_tensor()?);
        }
        let arena_able = |v: ValueId| {
            let t = g.ty(v);
            has_c_type(t.dtype) && t.shape.is_some()
        };
        // Lifetimes of the arena values in step order.
        let mut index_of: HashMap<ValueId, usize> = HashMap::new();
        let mut lifetimes: Vec<Lifetime> = Vec::new();
        let mut values = Vec::new();
        let mut aliases = Vec::new();
        let mut aliased = vec![false; g.nodes.len()];
        for (step, node) in g.nodes.iter().enumerate() {
            for &i in node.inputs.iter().flatten() {
                if let Some(&l) = index_of.get(&i) {
                    lifetimes[l].last = lifetimes[l].last.max(time[step]);
                }
            }
            let view = kernels[step].as_ref().and_then(|k| k.view);
            if let (Some(p), [Some(o)]) = (view, node.outputs.as_slice()) {
                if let Some(Some(i)) = node.inputs.get(p) {
                    // The output is the input's bytes: share its storage.
                    match (loc[i.index()], index_of.get(i).copied()) {
                        (Some(l @ (Loc::Input(_) | Loc::Weight(_))), _) => {
                            loc[o.index()] = Some(l);
                            aliased[step] = true;
                        }
                        (_, Some(l)) => {
                            index_of.insert(*o, l);
                            aliases.push((*o, l));
                            aliased[step] = true;
                        }
                        _ => {}
                    }
                    if aliased[step] {
                        continue;
                    }
                }
            }
            for &o in node.outputs.iter().flatten() {
                if loc[o.index()].is_some() {
                    continue;
                }
                if !arena_able(o) {
                    loc[o.index()] = Some(Loc::Boxed(boxed));
                    boxed += 1;
                    continue;
                }
                let ty = g.ty(o);
                index_of.insert(o, lifetimes.len());
                values.push(o);
                lifetimes.push(Lifetime {
                    size: ty.numel().unwrap_or(0) * ty.dtype.size(),
                    first: time[step],
                    last: time[step],
                    inplace_of: None,
                });
            }
        }
        // Graph outputs live to the end; subgraph reads by name keep values
        // alive until the reading node.
        for o in &g.outputs {
            if let Some(&l) = index_of.get(o) {
                lifetimes[l].last = g.nodes.len();
            }
        }
        for (step, node) in g.nodes.iter().enumerate() {
            for name in kiln_interp::subgraph_reads(node) {
                if let Some(l) = g.find(&name).and_then(|v| index_of.get(&v)) {
                    lifetimes[*l].last = lifetimes[*l].last.max(time[step]);
                }
            }
        }
        for (step, (node, k)) in g.nodes.iter().zip(kernels).enumerate() {
            let Some(p) = k.as_ref().and_then(|k| k.in_place) else {
                continue;
            };
            let (Some(Some(input)), Some(Some(out))) = (node.inputs.get(p), node.outputs.first())
            else {
                continue;
            };
            if let (Some(&src), Some(&dst)) = (index_of.get(input), index_of.get(out)) {
                if lifetimes[src].last == time[step] && !concurrent[step] {
                    lifetimes[dst].inplace_of = Some(src);
                }
            }
        }
        let plan = memplan::plan(&lifetimes, 64);
        for (l, v) in values.iter().enumerate() {
            loc[v.index()] = Some(Loc::Arena(plan.offsets[l]));
        }
        for (v, l) in aliases {
            loc[v.index()] = Some(Loc::Arena(plan.offsets[l]));
        }
        Ok(Layout {
            loc,
            aliased,
            weights,
            boxed,
            plan,
        })
    }
}

/// Compiles every kernel into one library (pieces in parallel).
/// `blocks_c`: the C of the concurrent blocks (in the first unit).
fn build(
    kernels: &[Option<NodeKernel>],
    blocks_c: &str,
    opts: &CpuOptions,
) -> Result<(Option<Library>, Option<CompileReport>)> {
    let sources: Vec<&str> = kernels.iter().flatten().map(|k| k.c.as_str()).collect();
    if sources.is_empty() {
        return Ok((None, None));
    }
    let pieces = opts.threads.clamp(1, sources.len());
    let per = sources.len().div_ceil(pieces);
    let units: Vec<String> = sources
        .chunks(per)
        .enumerate()
        .map(|(i, chunk)| {
            // The thread-count setter is defined once, in the first unit.
            let mut s = if i == 0 {
                file_prelude() + blocks_c
            } else {
                kiln_codegen::c::prelude()
            };
            for k in chunk {
                s.push_str(k);
                s.push('\n');
            }
            s
        })
        .collect();
    let (lib, report) = jit::compile(&opts.compiler, &units, opts.threads.max(1))?;
    Ok((Some(lib), Some(report)))
}

fn block_name(n: usize) -> String {
    format!("kiln_block{n}")
}

/// The C function running block `n`'s kernels (all compiled, named
/// `kiln_k<step>`) as OpenMP sections: `int NAME(void* const* const* args)`,
/// `args[j]` the arguments of the `j`-th kernel; nonzero when any failed.
fn block_c(n: usize, steps: &[usize], kernels: &[Option<NodeKernel>]) -> String {
    let names: Vec<&str> = steps
        .iter()
        .filter_map(|&i| kernels[i].as_ref().map(|k| k.kernel.name.as_str()))
        .collect();
    let mut c = String::new();
    for name in &names {
        c += &format!("int {name}(void* const* restrict args);\n");
    }
    c += &format!(
        "int {}(void* const* const* args) {{\n  int rc = 0;\n#ifdef _OPENMP\n#pragma omp parallel sections num_threads({}) reduction(|:rc)\n#endif\n  {{\n",
        block_name(n),
        names.len()
    );
    for (j, name) in names.iter().enumerate() {
        c +=
            &format!("#ifdef _OPENMP\n#pragma omp section\n#endif\n    rc |= {name}(args[{j}]);\n");
    }
    c += "  }\n  return rc;\n}\n";
    c
}

/// The execution order: the plan's parallel sets (node positions) whose
/// members are all compiled kernels (not views), each as one block;
/// every other node alone.
fn execution_blocks(
    nodes: usize,
    parallel: &[Vec<usize>],
    kernels: &[Option<NodeKernel>],
) -> Vec<Vec<usize>> {
    let mut block_at: Vec<Option<usize>> = vec![None; nodes];
    let runnable = |n: usize| kernels[n].as_ref().is_some_and(|k| k.view.is_none());
    for (b, set) in parallel.iter().enumerate() {
        if set.len() > 1 && set.iter().all(|&n| n < nodes && runnable(n)) {
            set.iter().for_each(|&n| block_at[n] = Some(b));
        }
    }
    let mut blocks: Vec<Vec<usize>> = Vec::new();
    for n in 0..nodes {
        match block_at[n] {
            Some(b) if n > 0 && block_at[n - 1] == Some(b) => {
                if let Some(last) = blocks.last_mut() {
                    last.push(n);
                }
            }
            _ => blocks.push(vec![n]),
        }
    }
    blocks
}

/// The packings of `jobs` (step, kernel, arguments), in order, made by
/// `threads` threads (packing is bound by first touches of fresh memory;
/// BERT-base packs 340 MB).
fn prepack_all(
    lib: &Library,
    jobs: &[(usize, String, Vec<Loc>)],
    weights: &[Tensor],
    threads: usize,
) -> Result<Vec<AlignedBytes>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Vec<Result<Vec<(usize, AlignedBytes)>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(jobs.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((_, name, args)) = jobs.get(i) else {
                            return Ok(mine);
                        };
                        mine.push((i, prepack(lib, name, args, weights)?));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(Error::new("a weight-packing thread panicked")))
            })
            .collect()
    });
    let mut packed: Vec<Option<AlignedBytes>> = (0..jobs.len()).map(|_| None).collect();
    for (i, packing) in done
        .into_iter()
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
    {
        packed[i] = Some(packing);
    }
    packed
        .into_iter()
        .map(|p| p.ok_or_else(|| Error::new("a weight was not packed")))
        .collect()
}

/// Runs kernel `name`'s prepacking entry point on its weight: the packing
/// it then reads after its buffers. Only the weights among `args` are
/// read; the other buffers are passed as null.
fn prepack(lib: &Library, name: &str, args: &[Loc], weights: &[Tensor]) -> Result<AlignedBytes> {
    let suffix = kiln_codegen::c::PREPACK_SUFFIX;
    // SAFETY: a prepacked kernel's source defines both entry points
    // (`long NAME_prepack_floats(void)`, `int NAME_prepack(void* const*)`).
    let (floats, pack): (FloatsFn, KernelFn) = unsafe {
        (
            lib.symbol(&format!("{name}{suffix}_floats"))?,
            lib.symbol(&format!("{name}{suffix}"))?,
        )
    };
    // SAFETY: no arguments; returns a size.
    let n = usize::try_from(unsafe { floats() })
        .map_err(|_| Error::new("negative weight packing size"))?;
    let mut packing = AlignedBytes::new(n * 4);
    let mut ptrs = Vec::with_capacity(args.len() + 1);
    for &l in args {
        ptrs.push(match l {
            Loc::Weight(w) => data_ptr(&weights[w])?,
            _ => std::ptr::null_mut(),
        });
    }
    ptrs.push(packing.ptr(0));
    // SAFETY: the weight pointers hold the kernel's declared shapes and the
    // packing has the size the kernel asked for; nothing else is read.
    let rc = unsafe { pack(ptrs.as_ptr()) };
    if rc != 0 {
        bail!("kernel {name}: packing its weight failed");
    }
    Ok(packing)
}

/// A zeroed, 64-byte aligned byte buffer.
struct AlignedBytes {
    words: Vec<Align64>,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Align64([u8; 64]);

impl AlignedBytes {
    fn new(n: usize) -> AlignedBytes {
        AlignedBytes {
            words: vec![Align64([0; 64]); n.div_ceil(64)],
        }
    }

    fn ptr(&mut self, off: usize) -> *mut u8 {
        // SAFETY: offsets come from the plan, inside the arena.
        unsafe { (self.words.as_mut_ptr() as *mut u8).add(off) }
    }

    fn ptr_const(&self, off: usize) -> *const u8 {
        // SAFETY: as above.
        unsafe { (self.words.as_ptr() as *const u8).add(off) }
    }
}

/// The address of a tensor's elements (numeric types).
fn data_ptr(t: &Tensor) -> Result<*mut u8> {
    kiln_ir::dispatch_num!(
        &t.data,
        |v: T| Ok(v.as_ptr() as *mut u8),
        bail!("string tensors have no C representation")
    )
}

/// A tensor copied from `n` elements of raw memory.
fn from_bytes(dtype: DType, shape: Vec<usize>, p: *const u8) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let data = with_dtype!(dtype, |T| {
        // SAFETY: the arena slot holds `n` initialised elements of `T`
        // written by a kernel or by `write`.
        let s = unsafe { std::slice::from_raw_parts(p as *const T, n) };
        T::wrap(s.to_vec())
    });
    Tensor::new(shape, data)
}
