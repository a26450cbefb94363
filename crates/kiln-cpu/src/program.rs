//! The CPU target's pipeline: a graph in, a program out (fusion plan,
//! kernels, execution plan, C sources). The JIT (`jit.rs`) compiles and
//! runs a program; the AOT exporter (`aot/`) writes it as a C library.
//!
//! Needs: an optimized, verified graph. Guarantees: fusion planned with
//! the CPU backend's feedback (APOLLO §4.1) and applied; per node of the
//! fused graph a kernel ([`crate::select`]) or the reason it runs outside
//! generated code; an execution plan (`kiln_exec::build`) whose kernel
//! steps name those kernels, with workspaces sized for `threads`; and the
//! C of the concurrent blocks. Nothing is compiled here.

use crate::concat_in_place::assemble_concats;
use crate::select::{has_c_type, node_kernel_tuned, CpuGroupCheck, NodeKernel};
use crate::shared_kernels::shared_sources;
use crate::tuning::GemmTunings;
use kiln_exec::{ExecPlan, KernelInfo, PlanRequest};
use kiln_fuse::{Plan, PlanOptions, Planned, PlannerKind};
use kiln_ir::{Error, Graph, Result, ValueId};
use kiln_runtime::jit::CompilerConfig;
use kiln_target::TargetDesc;
use std::borrow::Cow;

/// How to compile.
#[derive(Debug, Clone)]
pub struct CpuOptions {
    /// Threads for kernels and for parallel compilation.
    pub threads: usize,
    pub compiler: CompilerConfig,
    /// The fusion planner (`none`: one kernel per node).
    pub fusion: PlannerKind,
    /// The CPU the fusion plan and the kernels' schedules are for.
    pub target: TargetDesc,
    /// Gemm choices measured by `kiln tune` (by default this CPU's, from
    /// the cache directory).
    pub tunings: std::sync::Arc<GemmTunings>,
}

impl Default for CpuOptions {
    fn default() -> Self {
        let compiler = CompilerConfig::from_env();
        let target = kiln_target::host();
        CpuOptions {
            threads: kiln_runtime::cpu::available_threads(),
            tunings: std::sync::Arc::new(GemmTunings::load(&compiler.cache_dir, &target)),
            compiler,
            fusion: PlannerKind::default(),
            target,
        }
    }
}

/// How a program's C is named and sized.
#[derive(Debug, Clone)]
pub struct Naming {
    /// Prefix of every external C symbol (`PREFIX_k3`, `PREFIX_block7`): a
    /// C identifier.
    pub prefix: String,
    /// Threads the workspace holds (`KILN_MAX_THREADS`).
    pub threads: usize,
}

/// Alignment of arena offsets and workspace slices (a 64-byte vector).
pub const ALIGNMENT: usize = 64;

/// A model compiled for the CPU, before any C compiler runs.
pub struct CpuProgram {
    /// The fused graph the plan's node numbers refer to.
    pub graph: Graph,
    /// Per node of `graph`: its kernel, if it has one.
    pub kernels: Vec<Option<NodeKernel>>,
    pub plan: ExecPlan,
    pub fusion: Planned,
    /// Complete C translation units compiled beside the kernels (another
    /// target's runtime: the DSA emulator); none for the CPU.
    pub runtime_units: Vec<String>,
}

impl CpuProgram {
    /// Plans fusion on `graph`, applies it and selects the kernels.
    pub fn build(graph: &Graph, opts: &CpuOptions, naming: &Naming) -> Result<CpuProgram> {
        let check = CpuGroupCheck {
            target: &opts.target,
        };
        let plan_opts = PlanOptions::for_target(opts.target.clone());
        let planned = kiln_fuse::plan(graph, opts.fusion, &check, &plan_opts)?;
        Self::from_planned(graph, planned, opts, naming)
    }

    /// `build` with a given fusion plan (no planner, no feedback).
    pub fn with_plan(
        graph: &Graph,
        plan: Plan,
        opts: &CpuOptions,
        naming: &Naming,
    ) -> Result<CpuProgram> {
        let planned = Planned {
            plan,
            feedback: Vec::new(),
            notes: Vec::new(),
            seconds: 0.0,
        };
        Self::from_planned(graph, planned, opts, naming)
    }

    fn from_planned(
        graph: &Graph,
        fusion: Planned,
        opts: &CpuOptions,
        naming: &Naming,
    ) -> Result<CpuProgram> {
        let (target, tunings) = (&opts.target, opts.tunings.as_ref());
        let applied = kiln_fuse::apply::apply_plan(graph, &fusion.plan)?;
        let graph = applied.graph;
        let placing = KernelPlacing {
            parallel: &applied.parallel,
            threads: naming.threads,
            prefix: &naming.prefix,
            alignment: ALIGNMENT,
        };
        let mut chosen = select_kernels(
            &graph,
            &|node, name| node_kernel_tuned(&graph, node, name, target, tunings),
            &placing,
        );
        let assembled = assemble_concats(&graph, &mut chosen, &scope_reads(&graph), target)?;
        let infos: Vec<_> = chosen
            .iter()
            .zip(&assembled)
            .map(|(k, &assembled)| {
                k.as_ref()
                    .map(|k| KernelInfo {
                        assembled,
                        ..k.info()
                    })
                    .map_err(Clone::clone)
            })
            .collect();
        let plan = place_kernels(&graph, &infos, &placing)?;
        // An assembled concatenation's kernel is never called: no C for it.
        let kernels = chosen
            .into_iter()
            .zip(assembled)
            .map(|(k, assembled)| k.ok().filter(|_| !assembled))
            .collect();
        Ok(CpuProgram {
            kernels,
            graph,
            plan,
            fusion,
            runtime_units: Vec::new(),
        })
    }

    /// The C of the concurrent blocks: one function per block running its
    /// kernels as OpenMP sections, `int NAME(void* const* const* args)`
    /// (`args[j]`: the arguments of the block's `j`-th kernel; nonzero
    /// when any failed).
    pub fn blocks_c(&self) -> String {
        let mut c = String::new();
        for e in &self.plan.exec {
            let kiln_exec::Exec::Concurrent { func, steps } = e else {
                continue;
            };
            let names: Vec<&str> = steps
                .iter()
                .filter_map(|&i| self.kernels[i].as_ref().map(|k| k.kernel.name.as_str()))
                .collect();
            for name in &names {
                c += &format!("int {name}(void* const* restrict args);\n");
            }
            // A team of at most the run's threads: more would share the
            // cores with the run's own team, and OpenMP keeps every thread
            // it started spinning between regions, slowing later kernels.
            c += &format!(
                "int {func}(void* const* const* args) {{\n  int rc = 0;\n#ifdef _OPENMP\n  const int team = omp_get_max_threads() < {n} ? omp_get_max_threads() : {n};\n#pragma omp parallel sections num_threads(team) reduction(|:rc)\n#endif\n  {{\n",
                n = names.len()
            );
            for (j, name) in names.iter().enumerate() {
                c += &format!(
                    "#ifdef _OPENMP\n#pragma omp section\n#endif\n    rc |= {name}(args[{j}]);\n"
                );
            }
            c += "  }\n  return rc;\n}\n";
        }
        c
    }

    /// The C to compile for the kernels, in node order: a kernel whose C
    /// repeats an earlier one's but for its name forwards to it
    /// (`shared_kernels.rs`).
    pub fn kernel_sources(&self) -> Vec<Cow<'_, str>> {
        shared_sources(self.kernels.iter().flatten())
    }

    /// Nodes left outside generated code: (node, why).
    pub fn interpreted(&self) -> Vec<(String, String)> {
        Self::interpreted_in(&self.graph, &self.plan)
    }

    /// The interpreter steps of `plan` over `g`: (node, why).
    pub fn interpreted_in(g: &Graph, plan: &ExecPlan) -> Vec<(String, String)> {
        plan.steps
            .iter()
            .filter_map(|s| match s {
                kiln_exec::Step::Interp { node, reason } => {
                    Some((g.nodes[*node].describe(), reason.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Primitive nodes of `g` computed by kernels or aliased in `plan` (a
    /// fused kernel counts its body's nodes).
    pub fn count_compiled(g: &Graph, plan: &ExecPlan) -> usize {
        plan.steps
            .iter()
            .filter(|s| !matches!(s, kiln_exec::Step::Interp { .. }))
            .map(|s| match g.nodes[s.node()].attr_graph("body") {
                Ok(Some(body)) => body.nodes.len(),
                _ => 1,
            })
            .sum()
    }
}

/// How a fused graph's kernels are placed in its execution plan.
pub struct KernelPlacing<'a> {
    /// Sets of nodes that may run at the same time.
    pub parallel: &'a [Vec<usize>],
    /// Threads the workspace is sized for.
    pub threads: usize,
    /// Prefix of kernel (`PREFIX_kN`) and block names: a C identifier.
    pub prefix: &'a str,
    pub alignment: usize,
}

/// For a fused graph, any target: each node's kernel from `select` (given
/// the node and its name, `PREFIX_kN`), or why it has none (an output
/// shape that depends on data, or `select`'s error), and the execution
/// plan placing them (`info` says what the plan needs of a kernel).
pub fn kernels_and_plan<K>(
    graph: &Graph,
    select: &dyn Fn(&kiln_ir::Node, &str) -> Result<K>,
    info: fn(&K) -> kiln_exec::KernelInfo,
    placing: &KernelPlacing,
) -> Result<(Vec<Option<K>>, ExecPlan)> {
    let chosen = select_kernels(graph, select, placing);
    let infos: Vec<_> = chosen
        .iter()
        .map(|k| k.as_ref().map(info).map_err(Clone::clone))
        .collect();
    let plan = place_kernels(graph, &infos, placing)?;
    Ok((chosen.into_iter().map(Result::ok).collect(), plan))
}

/// Each node's kernel from `select` (given the node and its name,
/// `PREFIX_kN`), or why it has none.
fn select_kernels<K>(
    graph: &Graph,
    select: &dyn Fn(&kiln_ir::Node, &str) -> Result<K>,
    placing: &KernelPlacing,
) -> Vec<std::result::Result<K, String>> {
    graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            static_outputs(graph, node)
                .and_then(|()| select(node, &format!("{}_k{i}", placing.prefix)))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// The execution plan placing the kernels `infos` describes.
fn place_kernels(
    graph: &Graph,
    infos: &[std::result::Result<kiln_exec::KernelInfo, String>],
    placing: &KernelPlacing,
) -> Result<ExecPlan> {
    kiln_exec::build(&PlanRequest {
        graph,
        kernels: infos,
        parallel: placing.parallel,
        scope_reads: &scope_reads(graph),
        threads: placing.threads,
        prefix: placing.prefix,
        arena_dtype: &has_c_type,
        alignment: placing.alignment,
    })
}

/// An error when an output's shape depends on data (no kernel then, on
/// any target).
fn static_outputs(g: &Graph, node: &kiln_ir::Node) -> Result<()> {
    if node
        .outputs
        .iter()
        .flatten()
        .all(|&o| g.ty(o).shape.is_some())
    {
        Ok(())
    } else {
        Err(Error::new(format!(
            "{}: output shape depends on data",
            node.op
        )))
    }
}

/// Per node, the values its subgraphs read by name.
fn scope_reads(g: &Graph) -> Vec<Vec<ValueId>> {
    g.nodes
        .iter()
        .map(|n| {
            n.subgraph_reads()
                .into_iter()
                .filter_map(|name| g.find(&name))
                .collect()
        })
        .collect()
}

impl CpuProgram {
    /// The C sources split into at most `pieces` compile units (compiled
    /// in parallel), each opening with `defines` and the shared prelude
    /// (what its own sources need of it);
    /// the first also holds `first_extra` and the concurrent blocks.
    /// `runtime_units` follow as they are.
    pub fn c_units(&self, pieces: usize, defines: &str, first_extra: &str) -> Vec<String> {
        let sources = self.kernel_sources();
        if sources.is_empty() {
            return Vec::new();
        }
        let mut bodies = vec![String::new(); pieces.clamp(1, sources.len())];
        bodies[0].push_str(first_extra);
        bodies[0].push_str(&self.blocks_c());
        for (unit, source) in balanced(&sources, bodies.len()) {
            bodies[unit].push_str(source);
            bodies[unit].push('\n');
        }
        let mut units: Vec<String> = bodies
            .into_iter()
            .map(|body| format!("{defines}{}{body}", kiln_codegen::c::prelude_for(&body)))
            .collect();
        units.extend(self.runtime_units.iter().cloned());
        units
    }
}

/// Which of `units` each source goes to, largest source first to the unit
/// with the least C so far (the pieces compile in parallel: the largest
/// one bounds the time); sources keep their order within a unit.
fn balanced<'s>(sources: &'s [Cow<'_, str>], units: usize) -> Vec<(usize, &'s str)> {
    let mut by_size: Vec<usize> = (0..sources.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(sources[i].len()));
    let mut load = vec![0usize; units];
    let mut unit_of = vec![0usize; sources.len()];
    for i in by_size {
        let lightest = (0..units).min_by_key(|&u| load[u]).unwrap_or(0);
        load[lightest] += sources[i].len();
        unit_of[i] = lightest;
    }
    sources
        .iter()
        .zip(unit_of)
        .map(|(s, u)| (u, s.as_ref()))
        .collect()
}

/// `#define`s every compile unit of a program opens with: the threads its
/// workspace holds, and (for an export) the vector width its weights were
/// packed for.
pub fn config_defines(threads: usize, vector_bytes: Option<usize>) -> String {
    let mut s = format!("#define KILN_MAX_THREADS {}\n", threads.max(1));
    if let Some(v) = vector_bytes {
        s += &format!("#define KILN_FORCE_VBYTES {v}\n");
    }
    s
}

/// Plans `g` with planner `kind` for `target`, the CPU backend judging
/// which groups can become one kernel (no feedback rounds: what `kiln
/// explain` shows).
pub fn plan_fusion(g: &Graph, kind: PlannerKind, target: &TargetDesc) -> Result<Planned> {
    let check = CpuGroupCheck { target };
    let opts = PlanOptions::for_target(target.clone());
    kiln_fuse::plan(g, kind, &check, &opts)
}
