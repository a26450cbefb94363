//! Which nodes become compiled kernels, and their C source.
//!
//! Needs: an optimized graph (compounds opened) with static shapes where
//! kernels are wanted.
//! Guarantees: for each node either a [`NodeKernel`] (the node's tensor
//! expression lowered, scheduled by the default rule for a target
//! description and printed as C) or the reason it runs on the reference
//! interpreter instead: no expression (library ops such as TopK, control
//! flow), several outputs, an element type the C backend lacks
//! (strings), or a scalar rule without a C form. Falling back is per
//! node and never changes results.

use crate::tuning::{kernel_key, GemmTunings};
use kiln_codegen::c::kernel_c;
use kiln_codegen::gemm::{GemmWorkspace, Tuning};
use kiln_exec::{KernelInfo, WorkspaceNeed};
use kiln_fuse::GroupCheck;
use kiln_ir::{bail, DType, Graph, Node, Result, Tensor, ValueId};
use kiln_loop::group::{GroupExpr, GroupNode, Src};
use kiln_loop::inline_constants::inline_constants;
use kiln_loop::{default_schedule, Buffer, Kernel, Schedule, Scope, Stmt, Val};
use kiln_ops::ops::control::{FUSED_DOMAIN, FUSED_OP};
use kiln_ops::te::classify::{is_view, node_expr};
use kiln_target::TargetDesc;

/// A node compiled to one C function.
#[derive(Debug, Clone)]
pub struct NodeKernel {
    pub kernel: Kernel,
    pub schedule: Schedule,
    pub c: String,
    /// Node input positions passed as the kernel's input buffers, in order.
    pub inputs: Vec<usize>,
    /// Input position whose buffer the output may overwrite in place.
    pub in_place: Option<usize>,
    /// Input position whose bytes the output is (a reshape): the executor
    /// may alias the two and skip the kernel.
    pub view: Option<usize>,
    /// Input position of a weight the kernel packs once, before the first
    /// run, and then takes packed after its buffers
    /// (`kiln_codegen::c::PREPACK_SUFFIX`).
    pub packs: Option<usize>,
    /// Scratch memory it takes last (a generated matmul's packing buffers).
    pub workspace: GemmWorkspace,
    /// The gemm choices its C was printed with (`kiln tune`'s, or the
    /// defaults), so a rewritten kernel keeps them (`concat_in_place.rs`).
    pub tuning: Tuning,
}

impl NodeKernel {
    /// What the execution plan needs to know of it.
    pub fn info(&self) -> KernelInfo {
        KernelInfo {
            name: self.kernel.name.clone(),
            inputs: self.inputs.clone(),
            in_place: self.in_place,
            view: self.view,
            packs: self.packs,
            workspace: WorkspaceNeed {
                fixed: self.workspace.fixed * 4,
                per_thread: self.workspace.per_thread * 4,
            },
            assembled: false,
        }
    }
}

/// The C-backend element types.
pub fn has_c_type(dtype: DType) -> bool {
    kiln_codegen::scalar_c::c_type(dtype).is_ok()
}

/// A node lowered and scheduled for a target, before any printing.
#[derive(Debug, Clone)]
pub struct LoweredNode {
    pub kernel: Kernel,
    pub schedule: Schedule,
    /// Node input positions passed as the kernel's input buffers, in order.
    pub inputs: Vec<usize>,
    /// Kernel buffer the output may overwrite in place.
    pub alias: Option<usize>,
    /// Input position whose bytes the output is (a reshape).
    pub view: Option<usize>,
    /// Kernel buffers holding weights (a gemm may pack them once).
    pub constants: Vec<usize>,
}

/// The kernel for `node` (named `name`) scheduled for `target`, or why
/// there is none.
pub fn node_kernel(g: &Graph, node: &Node, name: &str, target: &TargetDesc) -> Result<NodeKernel> {
    node_kernel_tuned(g, node, name, target, &GemmTunings::default())
}

/// [`node_kernel`] with a gemm's choices taken from `tunings` where they
/// hold its key (`kiln tune`).
pub fn node_kernel_tuned(
    g: &Graph,
    node: &Node,
    name: &str,
    target: &TargetDesc,
    tunings: &GemmTunings,
) -> Result<NodeKernel> {
    let lowered = lower_node(g, node, name, target)?;
    let k = &lowered.kernel;
    let default = kernel_c(
        k,
        lowered.alias,
        &lowered.constants,
        target,
        &Tuning::default(),
    )?;
    let tuned = (!tunings.is_empty())
        .then(|| tunings.get(&kernel_key(&default.c, &k.name, target)))
        .flatten();
    let (source, tuning) = match tuned {
        Some(t) => (
            kernel_c(k, lowered.alias, &lowered.constants, target, t)?,
            t.clone(),
        ),
        None => (default, Tuning::default()),
    };
    let inputs = lowered.inputs;
    Ok(NodeKernel {
        c: source.c,
        packs: source.packed_buffer.map(|b| inputs[b]),
        workspace: source.workspace,
        kernel: lowered.kernel,
        schedule: lowered.schedule,
        in_place: lowered.alias.map(|b| inputs[b]),
        view: lowered.view,
        inputs,
        tuning,
    })
}

/// `node` lowered for `target` (see [`LoweredNode`]), or why it has no
/// kernel; the element types must be C types (`has_c_type`), which every
/// dialect of the C printer shares.
pub fn lower_node(g: &Graph, node: &Node, name: &str, target: &TargetDesc) -> Result<LoweredNode> {
    if node.domain == FUSED_DOMAIN && node.op == FUSED_OP {
        let all: Vec<usize> = (0..node.inputs.len()).collect();
        return lower_fused(node, name, constant_buffers(g, node, &all), target);
    }
    let outputs: Vec<_> = node.outputs.iter().flatten().collect();
    if outputs.len() != 1 || node.outputs.len() != 1 {
        bail!("{} has {} outputs", node.op, node.outputs.len());
    }
    let Some(te) = node_expr(g, node)? else {
        bail!("{} has no tensor expression here", node.op);
    };
    let dtypes: Vec<Option<DType>> = node
        .inputs
        .iter()
        .map(|i| i.map(|i| g.ty(i).dtype))
        .collect();
    for d in dtypes.iter().flatten().chain([&te.dtype]) {
        if !has_c_type(*d) {
            bail!("{} on {d} tensors", node.op);
        }
    }
    let inputs: Vec<usize> = (0..te.inputs.len())
        .filter(|&i| te.inputs[i].is_some())
        .collect();
    // A scratchpad target has no gemm template (its nests are tiled).
    let contraction = match target.is_scratchpad() {
        true => None,
        false => kiln_loop::contraction::lower_contraction(&te, name, &dtypes)?,
    };
    if let Some(kernel) = contraction {
        return Ok(LoweredNode {
            constants: constant_buffers(g, node, &inputs),
            kernel,
            schedule: Schedule::default(),
            inputs,
            alias: None,
            view: None,
        });
    }
    // A window reduction alone (its epilogue in another kernel) still
    // takes the CPU's window form: accumulated in registers, borders
    // peeled; a Winograd transform its own.
    if !target.is_gpu() && !target.is_scratchpad() {
        let op = kiln_loop::group::op_type(&node.domain, &node.op);
        let form = match kiln_loop::winograd::lower_winograd_node(&te, &op, name, &dtypes)? {
            Some(lowered) => Some(lowered),
            None => kiln_loop::window::lower_window_node(&te, name, &dtypes, target)?,
        };
        if let Some(lowered) = form {
            return Ok(LoweredNode {
                kernel: lowered.kernel,
                schedule: lowered.schedule,
                inputs,
                alias: None,
                view: None,
                constants: Vec::new(),
            });
        }
    }
    let kernel = kiln_loop::lower(&te, name, &dtypes)?;
    let kernel = inline_constants(&kernel, &scalar_constants(g, node, &inputs)?);
    let alias = in_place_input(&kernel);
    let schedule = default_schedule(&kernel, target);
    Ok(LoweredNode {
        kernel: kiln_loop::apply(&kernel, &schedule)?,
        schedule,
        alias,
        inputs,
        view: is_view(&te).then(|| te.accesses[0].input),
        constants: Vec::new(),
    })
}

/// The kernel buffers (numbered by `inputs`, the node input positions
/// passed as buffers) that hold a weight: an initializer of `g`.
pub(crate) fn constant_buffers(g: &Graph, node: &Node, inputs: &[usize]) -> Vec<usize> {
    (0..inputs.len())
        .filter(|&j| node.inputs[inputs[j]].is_some_and(|v| g.initializers.contains_key(&v)))
        .collect()
}

/// The kernel of a fused node (see [`lower_fused`]) printed as C.
pub fn fused_kernel(
    node: &Node,
    name: &str,
    constants: &[usize],
    target: &TargetDesc,
) -> Result<NodeKernel> {
    let lowered = lower_fused(node, name, constants.to_vec(), target)?;
    let source = kernel_c(&lowered.kernel, None, constants, target, &Tuning::default())?;
    Ok(NodeKernel {
        c: source.c,
        // A fused node's kernel buffers are its inputs, in order.
        packs: source.packed_buffer,
        workspace: source.workspace,
        kernel: lowered.kernel,
        schedule: lowered.schedule,
        inputs: lowered.inputs,
        in_place: None,
        view: None,
        tuning: Tuning::default(),
    })
}

/// A fused node's body lowered as one group, scheduled for `target`.
/// `constants`: its inputs that hold weights.
pub fn lower_fused(
    node: &Node,
    name: &str,
    constants: Vec<usize>,
    target: &TargetDesc,
) -> Result<LoweredNode> {
    let Some(body) = node.attr_graph("body")? else {
        bail!("fused node {} has no body", node.name);
    };
    let group = group_expr(body)?;
    let lowered = kiln_loop::fused::lower_group(&group, name, target)?;
    Ok(LoweredNode {
        kernel: lowered.kernel,
        schedule: lowered.schedule,
        inputs: (0..node.inputs.len()).collect(),
        alias: None,
        view: None,
        constants,
    })
}

/// The group of a fused body: kernel inputs are the body's inputs; one-
/// element initializers are constants; the outputs are the body's.
fn group_expr(body: &Graph) -> Result<GroupExpr> {
    let mut inputs = Vec::new();
    for (j, &v) in body.inputs.iter().enumerate() {
        let ty = body.ty(v);
        let Some(shape) = ty.shape.clone() else {
            bail!("input '{}' has no static shape", body.name(v));
        };
        if !has_c_type(ty.dtype) {
            bail!("input '{}' is {}", body.name(v), ty.dtype);
        }
        inputs.push(Buffer {
            name: format!("in{j}"),
            dtype: ty.dtype,
            shape,
            output: false,
            scope: Scope::Param,
        });
    }
    let producers = body.producers();
    let mut nodes = Vec::new();
    for node in &body.nodes {
        if node.outputs.len() != 1 {
            bail!("{} has {} outputs", node.describe(), node.outputs.len());
        }
        let Some(te) = node_expr(body, node)? else {
            bail!(
                "{} has no tensor expression (a library op)",
                node.describe()
            );
        };
        if !has_c_type(te.dtype) {
            bail!("{} on {} tensors", node.describe(), te.dtype);
        }
        let args = node
            .inputs
            .iter()
            .map(|i| i.map(|v| source(body, &producers, v)).transpose())
            .collect::<Result<Vec<_>>>()?;
        nodes.push(GroupNode {
            te,
            args: args.into_iter().map(Option::flatten).collect(),
            label: node.describe(),
            op: kiln_loop::group::op_type(&node.domain, &node.op),
        });
    }
    let outputs = body
        .outputs
        .iter()
        .map(|v| match producers[v.index()] {
            Some(n) => Ok(n),
            None => bail!(
                "fused output '{}' is not computed in the group",
                body.name(*v)
            ),
        })
        .collect::<Result<_>>()?;
    Ok(GroupExpr {
        inputs,
        nodes,
        outputs,
    })
}

/// Where a body value comes from; `None` for a constant of several
/// elements (shapes, axes: read by definitions, never by expressions).
fn source(body: &Graph, producers: &[Option<usize>], v: ValueId) -> Result<Option<Src>> {
    if let Some(j) = body.inputs.iter().position(|&i| i == v) {
        return Ok(Some(Src::Input(j)));
    }
    if let Some(n) = producers[v.index()] {
        return Ok(Some(Src::Node(n)));
    }
    match body.constant(v) {
        Some(init) if body.ty(v).numel() == Some(1) => Ok(Some(Src::Const(init.to_tensor()?))),
        Some(_) => Ok(None),
        None => bail!("value '{}' of a fused body has no source", body.name(v)),
    }
}

/// The CPU backend's answer to the planners (APOLLO's feedback): a group
/// is accepted when it lowers to one kernel for `target` (the target the
/// model is compiled for) that prints as C.
pub struct CpuGroupCheck<'a> {
    pub target: &'a TargetDesc,
}

impl GroupCheck for CpuGroupCheck<'_> {
    fn check(&self, g: &Graph, nodes: &[usize]) -> std::result::Result<(), String> {
        let attempt = || -> Result<()> {
            let node = kiln_fuse::apply::group_node(g, nodes)?;
            fused_kernel(&node, "check", &[], self.target).map(|_| ())
        };
        attempt().map_err(|e| e.to_string())
    }
}

/// The one-element constant inputs, by kernel buffer number (0-d).
fn scalar_constants(g: &Graph, node: &Node, inputs: &[usize]) -> Result<Vec<(usize, Tensor)>> {
    let mut out = Vec::new();
    for (b, &p) in inputs.iter().enumerate() {
        let Some(v) = node.inputs[p] else { continue };
        if g.ty(v).numel() != Some(1) {
            continue;
        }
        if let Some(init) = g.constant(v) {
            let t = init.to_tensor()?;
            out.push((b, Tensor::new(vec![], t.data)?));
        }
    }
    Ok(out)
}

/// An input buffer the output may share: same element size and count, and
/// every read of it is at exactly the offset being stored, unguarded, in a
/// kernel without reductions. Each output element then depends only on the
/// input element it replaces.
fn in_place_input(k: &Kernel) -> Option<usize> {
    let out = k.buffers.iter().position(|b| b.output)?;
    let (store, value) = single_store(&k.body)?;
    (0..k.buffers.len()).find(|&b| {
        let buf = &k.buffers[b];
        !buf.output
            && buf.scope == Scope::Param
            && buf.numel() == k.buffers[out].numel()
            && buf.dtype.size() == k.buffers[out].dtype.size()
            && reads_only_at(value, b, store)
            && value.reads(b)
    })
}

/// The store of a loop nest without reductions: its offset and value.
fn single_store(body: &[Stmt]) -> Option<(&kiln_loop::Idx, &Val)> {
    match body {
        [Stmt::Loop(l)] => single_store(&l.body),
        [Stmt::Store { offset, value, .. }] => Some((offset, value)),
        _ => None,
    }
}

fn reads_only_at(v: &Val, b: usize, at: &kiln_loop::Idx) -> bool {
    match v {
        Val::Load { buf, offset, guard } if *buf == b => offset == at && guard.is_empty(),
        Val::Load { offset, .. } => !offset_reads(offset, b),
        Val::Call(_, args) => args.iter().all(|a| reads_only_at(a, b, at)),
        Val::Index(i) => !offset_reads(i, b),
        Val::InBounds(_) | Val::Const(_) | Val::Local(_) => true,
    }
}

/// Whether a data-dependent index inside `i` reads buffer `b`.
fn offset_reads(i: &kiln_loop::Idx, b: usize) -> bool {
    i.terms.iter().any(|(a, _)| match a {
        kiln_loop::Atom::Data { value, .. } => value.reads(b),
        kiln_loop::Atom::Div(e, _) | kiln_loop::Atom::Mod(e, _) => offset_reads(e, b),
        kiln_loop::Atom::Var(_) => false,
    })
}
