//! Builds an execution plan from a graph and the kernels chosen for its
//! nodes.
//!
//! Needs: a verified graph in execution order (fused nodes already
//! applied) and, per node, the kernel a target chose for it or why there
//! is none. Guarantees: every value a step reads or writes has a place;
//! intermediate values of a type and static shape kernels can hold get an
//! arena offset from one memory plan (swTVM §4: one plan computed at
//! compile time; greedy by size, `memplan.rs`), in place where a kernel
//! allows it and its input dies there; a view's output takes its input's
//! place (no step runs); the parts of a concatenation marked assembled take
//! its output's place, live from its first part's step (no step runs for
//! it; a mark `assemble.rs` does not accept fails the build); graph outputs
//! live to the end; the plan's
//! parallel sets whose members are all kernels become concurrent blocks,
//! whose members get one time step (their buffers never share memory) and
//! disjoint workspace slices. The workspace is the largest need of any
//! entry of the execution order. Arena and workspace together fit the
//! memory budget (`kiln_ir::limits`), or the build fails saying so.

use crate::assemble::part_producers;
use crate::memplan::{self, Lifetime};
use crate::plan::{Exec, ExecPlan, Loc, Packing, PlanValue, Step, WorkspaceSlice};
use kiln_ir::{DType, Graph, Result, ValueId};
use std::collections::HashMap;

/// Scratch memory a kernel needs per call, in bytes: `fixed` once plus
/// `per_thread` for every thread the plan is sized for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkspaceNeed {
    pub fixed: usize,
    pub per_thread: usize,
}

impl WorkspaceNeed {
    pub fn bytes(&self, threads: usize) -> usize {
        self.fixed + self.per_thread * threads.max(1)
    }
}

/// What a target compiled one node into.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelInfo {
    /// The generated function.
    pub name: String,
    /// Node input positions passed as the kernel's input buffers, in order
    /// (the outputs follow).
    pub inputs: Vec<usize>,
    /// Input position whose buffer the output may overwrite in place.
    pub in_place: Option<usize>,
    /// Input position whose bytes the output is (a reshape): no call.
    pub view: Option<usize>,
    /// Input position of a weight the kernel packs once, before the first
    /// run, and then reads packed.
    pub packs: Option<usize>,
    pub workspace: WorkspaceNeed,
    /// A concatenation whose parts their producers write in place into its
    /// output (`assemble.rs`): no call.
    pub assembled: bool,
}

/// Everything [`build`] reads.
pub struct PlanRequest<'a> {
    pub graph: &'a Graph,
    /// Per node: its kernel, or why it runs outside generated code.
    pub kernels: &'a [std::result::Result<KernelInfo, String>],
    /// Sets of nodes that may run at the same time.
    pub parallel: &'a [Vec<usize>],
    /// Per node: values its subgraphs read by name (kept alive until it runs).
    pub scope_reads: &'a [Vec<ValueId>],
    pub threads: usize,
    /// Prefix of the concurrent blocks' function names (`PREFIX_block3`).
    pub prefix: &'a str,
    /// Whether arena values must hold a C element type (others are boxed).
    pub arena_dtype: &'a dyn Fn(DType) -> bool,
    pub alignment: usize,
}

/// The execution plan of `req`.
pub fn build(req: &PlanRequest) -> Result<ExecPlan> {
    let g = req.graph;
    let blocks = execution_blocks(req);
    let mut places = Places::new(req, &blocks)?;
    places.place_arena(req, &blocks);
    let mut packings = Vec::new();
    let mut steps = Vec::with_capacity(g.nodes.len());
    for (n, node) in g.nodes.iter().enumerate() {
        steps.push(match &req.kernels[n] {
            Ok(k) if k.assembled => Step::Assembled {
                node: n,
                value: node.outputs[0].map_or(0, |v| v.index()),
            },
            _ if places.aliased[n] => {
                let (Some(Some(of)), Some(Some(value))) = (
                    req.kernels[n]
                        .as_ref()
                        .ok()
                        .and_then(|k| k.view)
                        .map(|p| node.inputs[p]),
                    node.outputs.first(),
                ) else {
                    unreachable!("an aliased node is a view with one output")
                };
                Step::Alias {
                    node: n,
                    value: value.index(),
                    of: of.index(),
                }
            }
            Ok(k) => {
                let mut args: Vec<usize> = k
                    .inputs
                    .iter()
                    .filter_map(|&p| node.inputs[p])
                    .map(|v| v.index())
                    .collect();
                args.extend(node.outputs.iter().flatten().map(|v| v.index()));
                for &a in &args {
                    if matches!(places.loc[a], None | Some(Loc::Boxed(_))) {
                        kiln_ir::bail!(
                            "{}: value '{}' is not in memory a kernel can read",
                            node.describe(),
                            g.values[a].name
                        );
                    }
                }
                let packing = k.packs.and_then(|p| node.inputs[p]).map(|w| {
                    packings.push(Packing {
                        kernel: k.name.clone(),
                        weight: w.index(),
                        bytes: 0,
                    });
                    packings.len() - 1
                });
                Step::Kernel {
                    node: n,
                    kernel: k.name.clone(),
                    args,
                    packing,
                    workspace: None,
                }
            }
            Err(reason) => Step::Interp {
                node: n,
                reason: reason.clone(),
            },
        });
    }
    let exec: Vec<Exec> = blocks
        .iter()
        .enumerate()
        .map(|(b, block)| match block.as_slice() {
            [one] => Exec::Step(*one),
            _ => Exec::Concurrent {
                func: format!("{}_block{b}", req.prefix),
                steps: block.clone(),
            },
        })
        .collect();
    let workspace_bytes = place_workspaces(req, &exec, &mut steps);
    kiln_ir::limits::check_bytes(
        &"the model's arena and workspace",
        places.arena_bytes as u128 + workspace_bytes as u128,
    )?;
    let values = places.values(g);
    Ok(ExecPlan {
        values,
        inputs: g.inputs.iter().map(|v| v.index()).collect(),
        outputs: g.outputs.iter().map(|v| v.index()).collect(),
        weights: places.weights,
        packings,
        steps,
        exec,
        alignment: req.alignment,
        arena_bytes: places.arena_bytes,
        arena_bound: places.arena_bound,
        arena_total: places.arena_total,
        workspace_bytes,
        threads: req.threads.max(1),
        boxed: places.boxed,
    })
}

/// Gives every kernel with a workspace need its slice: the members of a
/// concurrent block side by side, every entry of the order from offset 0.
/// Returns the workspace size.
fn place_workspaces(req: &PlanRequest, exec: &[Exec], steps: &mut [Step]) -> usize {
    let align = |n: usize| n.div_ceil(req.alignment.max(1)) * req.alignment.max(1);
    let mut size = 0;
    for e in exec {
        let mut offset = 0;
        for &s in e.steps() {
            let Ok(k) = &req.kernels[s] else { continue };
            let bytes = k.workspace.bytes(req.threads);
            if k.workspace == WorkspaceNeed::default() {
                continue;
            }
            if let Step::Kernel { workspace, .. } = &mut steps[s] {
                *workspace = Some(WorkspaceSlice { offset, bytes });
                offset = align(offset + bytes);
            }
        }
        size = size.max(offset);
    }
    size
}

/// The execution order: the parallel sets (node positions) whose members
/// are all kernels (not views), each as one block; every other node alone.
fn execution_blocks(req: &PlanRequest) -> Vec<Vec<usize>> {
    let nodes = req.graph.nodes.len();
    let mut block_at: Vec<Option<usize>> = vec![None; nodes];
    let runnable = |n: usize| {
        req.kernels[n]
            .as_ref()
            .is_ok_and(|k| k.view.is_none() && !k.assembled)
    };
    for (b, set) in req.parallel.iter().enumerate() {
        if set.len() > 1 && set.iter().all(|&n| n < nodes && runnable(n)) {
            set.iter().for_each(|&n| block_at[n] = Some(b));
        }
    }
    let mut blocks: Vec<Vec<usize>> = Vec::new();
    for n in 0..nodes {
        match (block_at[n], blocks.last_mut()) {
            (Some(b), Some(last)) if n > 0 && block_at[n - 1] == Some(b) => last.push(n),
            _ => blocks.push(vec![n]),
        }
    }
    blocks
}

/// Storage decisions for every value.
struct Places {
    loc: Vec<Option<Loc>>,
    /// Nodes whose output is their input's memory (views).
    aliased: Vec<bool>,
    /// The parts of assembled concatenations, each with its whole.
    part_of: HashMap<ValueId, ValueId>,
    weights: Vec<usize>,
    boxed: usize,
    /// Time step (block) of each node, and whether its block is concurrent.
    time: Vec<usize>,
    concurrent: Vec<bool>,
    arena_bytes: usize,
    arena_bound: usize,
    arena_total: usize,
}

impl Places {
    fn new(req: &PlanRequest, blocks: &[Vec<usize>]) -> Result<Places> {
        let g = req.graph;
        let mut time = vec![0usize; g.nodes.len()];
        let mut concurrent = vec![false; g.nodes.len()];
        for (t, block) in blocks.iter().enumerate() {
            for &n in block {
                time[n] = t;
                concurrent[n] = block.len() > 1;
            }
        }
        let mut loc: Vec<Option<Loc>> = vec![None; g.values.len()];
        for (i, &v) in g.inputs.iter().enumerate() {
            loc[v.index()] = Some(Loc::Input(i));
        }
        let mut weights = Vec::new();
        for &v in g.initializers.keys() {
            loc[v.index()] = Some(Loc::Weight(weights.len()));
            weights.push(v.index());
        }
        Ok(Places {
            loc,
            aliased: vec![false; g.nodes.len()],
            part_of: assembled_parts(req)?,
            weights,
            boxed: 0,
            time,
            concurrent,
            arena_bytes: 0,
            arena_bound: 0,
            arena_total: 0,
        })
    }

    /// Lifetimes of the arena values in step order, aliases, then one
    /// memory plan.
    fn place_arena(&mut self, req: &PlanRequest, blocks: &[Vec<usize>]) {
        let g = req.graph;
        let mut arena = self.arena_values(req);
        // Graph outputs live to the end.
        for o in &g.outputs {
            if let Some(&l) = arena.index_of.get(o) {
                arena.lifetimes[l].last = blocks.len();
            }
        }
        self.request_in_place(req, &arena.index_of, &mut arena.lifetimes);
        let plan = memplan::plan(&arena.lifetimes, req.alignment);
        for (l, v) in arena.values.iter().enumerate() {
            self.loc[v.index()] = Some(Loc::Arena(plan.offsets[l]));
        }
        for (v, l) in arena.aliases {
            self.loc[v.index()] = Some(Loc::Arena(plan.offsets[l]));
        }
        self.arena_bytes = plan.arena_bytes;
        self.arena_total = plan.total_bytes;
        self.arena_bound = live_bytes_bound(&arena.lifetimes, blocks.len());
    }

    /// The arena values with their lifetimes, in step order: each node's
    /// outputs, except views (their input's storage) and parts of an
    /// assembled concatenation (the whole's, live from the first part's
    /// step); values kernels cannot hold are boxed instead.
    fn arena_values(&mut self, req: &PlanRequest) -> ArenaValues {
        let g = req.graph;
        let mut arena = ArenaValues::default();
        for (step, node) in g.nodes.iter().enumerate() {
            let t = self.time[step];
            for &i in node.inputs.iter().flatten().chain(&req.scope_reads[step]) {
                if let Some(&l) = arena.index_of.get(&i) {
                    arena.lifetimes[l].last = arena.lifetimes[l].last.max(t);
                }
            }
            let view = req.kernels[step].as_ref().ok().and_then(|k| k.view);
            if let (Some(p), [Some(o)]) = (view, node.outputs.as_slice()) {
                if let Some(Some(i)) = node.inputs.get(p) {
                    // The output is the input's bytes: share its storage.
                    match (self.loc[i.index()], arena.index_of.get(i).copied()) {
                        (Some(l @ (Loc::Input(_) | Loc::Weight(_))), _) => {
                            self.loc[o.index()] = Some(l);
                            self.aliased[step] = true;
                        }
                        (_, Some(l)) => {
                            arena.alias(*o, l);
                            self.aliased[step] = true;
                        }
                        _ => {}
                    }
                    if self.aliased[step] {
                        continue;
                    }
                }
            }
            for &o in node.outputs.iter().flatten() {
                if self.loc[o.index()].is_some() || arena.index_of.contains_key(&o) {
                    continue;
                }
                if let Some(&whole) = self.part_of.get(&o) {
                    let l = match arena.index_of.get(&whole) {
                        Some(&l) => l,
                        None => arena.add(whole, value_bytes(g, whole), t),
                    };
                    arena.alias(o, l);
                } else if arena_able(req, o) {
                    arena.add(o, value_bytes(g, o), t);
                } else {
                    self.loc[o.index()] = Some(Loc::Boxed(self.boxed));
                    self.boxed += 1;
                }
            }
        }
        arena
    }

    /// In-place requests: a kernel's output over the input it names, where
    /// that input dies at this step and the step runs alone.
    fn request_in_place(
        &self,
        req: &PlanRequest,
        index_of: &HashMap<ValueId, usize>,
        lifetimes: &mut [Lifetime],
    ) {
        let g = req.graph;
        for (step, node) in g.nodes.iter().enumerate() {
            let Some(p) = req.kernels[step].as_ref().ok().and_then(|k| k.in_place) else {
                continue;
            };
            let (Some(Some(input)), Some(Some(out))) = (node.inputs.get(p), node.outputs.first())
            else {
                continue;
            };
            if self.part_of.contains_key(out) {
                continue;
            }
            if let (Some(&src), Some(&dst)) = (index_of.get(input), index_of.get(out)) {
                if lifetimes[src].last == self.time[step] && !self.concurrent[step] {
                    lifetimes[dst].inplace_of = Some(src);
                }
            }
        }
    }

    /// The placed values, by graph id.
    fn values(&self, g: &Graph) -> Vec<PlanValue> {
        self.loc
            .iter()
            .enumerate()
            .filter_map(|(id, l)| {
                let loc = (*l)?;
                let v = &g.values[id];
                Some(PlanValue {
                    id,
                    name: v.name.clone(),
                    dtype: v.ty.dtype,
                    shape: v.ty.shape.clone(),
                    loc,
                })
            })
            .collect()
    }
}

/// Arena values collected in step order.
#[derive(Default)]
struct ArenaValues {
    /// Lifetime index of each value placed (an alias: its storage's).
    index_of: HashMap<ValueId, usize>,
    lifetimes: Vec<Lifetime>,
    /// The value owning each lifetime.
    values: Vec<ValueId>,
    /// Values sharing another's lifetime and place.
    aliases: Vec<(ValueId, usize)>,
}

impl ArenaValues {
    /// A value of its own, `size` bytes, produced at time step `t`.
    fn add(&mut self, v: ValueId, size: usize, t: usize) -> usize {
        let l = self.lifetimes.len();
        self.index_of.insert(v, l);
        self.values.push(v);
        self.lifetimes.push(Lifetime {
            size,
            first: t,
            last: t,
            inplace_of: None,
        });
        l
    }

    /// `v` lives in lifetime `l`'s storage.
    fn alias(&mut self, v: ValueId, l: usize) {
        self.index_of.insert(v, l);
        self.aliases.push((v, l));
    }
}

/// Whether value `v` can live in the arena: a C element type and a static shape.
fn arena_able(req: &PlanRequest, v: ValueId) -> bool {
    let t = req.graph.ty(v);
    (req.arena_dtype)(t.dtype) && t.shape.is_some()
}

fn value_bytes(g: &Graph, v: ValueId) -> usize {
    let ty = g.ty(v);
    ty.numel().unwrap_or(0) * ty.dtype.size()
}

/// The parts of the concatenations marked assembled, each with the whole it
/// is written into; an error where a target marked one that cannot be
/// (its producers would then write outside their own buffers).
fn assembled_parts(req: &PlanRequest) -> Result<HashMap<ValueId, ValueId>> {
    let g = req.graph;
    let runs_kernel = |p: usize| {
        req.kernels[p]
            .as_ref()
            .is_ok_and(|k| k.view.is_none() && !k.assembled)
    };
    let mut part_of = HashMap::new();
    for (n, node) in g.nodes.iter().enumerate() {
        if !req.kernels[n].as_ref().is_ok_and(|k| k.assembled) {
            continue;
        }
        let producers = part_producers(g, n, &runs_kernel, req.scope_reads);
        let whole = match (producers, node.outputs.as_slice()) {
            (Some(_), [Some(whole)]) if arena_able(req, *whole) => *whole,
            _ => kiln_ir::bail!(
                "{}: marked assembled in place, but its parts cannot be written into its output",
                node.describe()
            ),
        };
        part_of.extend(node.inputs.iter().flatten().map(|&v| (v, whole)));
    }
    Ok(part_of)
}

/// The largest total size of tensors live at one step: no arena holding
/// them can be smaller (in-place pairs aside, which share a buffer).
pub fn live_bytes_bound(lifetimes: &[Lifetime], steps: usize) -> usize {
    let mut delta = vec![0i128; steps + 2];
    for l in lifetimes {
        delta[l.first] += l.size as i128;
        delta[l.last.max(l.first) + 1] -= l.size as i128;
    }
    let mut live = 0i128;
    let mut best = 0i128;
    for d in delta {
        live += d;
        best = best.max(live);
    }
    best as usize
}
