//! The execution plan's data.

use kiln_ir::DType;

/// Where a value lives while the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    /// The `i`-th graph input (caller's memory).
    Input(usize),
    /// The `i`-th weight (`ExecPlan::weights`).
    Weight(usize),
    /// A byte offset in the arena.
    Arena(usize),
    /// Held by the executor as a tensor (types or shapes the arena cannot
    /// hold, produced by nodes outside generated code).
    Boxed(usize),
}

/// One value of the graph that the plan places.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanValue {
    /// The graph's value index.
    pub id: usize,
    pub name: String,
    pub dtype: DType,
    /// `None`: known only when computed (a data-dependent shape).
    pub shape: Option<Vec<usize>>,
    pub loc: Loc,
}

impl PlanValue {
    /// Bytes of the value (0 when its shape is unknown).
    pub fn bytes(&self) -> usize {
        self.shape
            .as_ref()
            .map_or(0, |s| s.iter().product::<usize>() * self.dtype.size())
    }
}

/// A weight packed for its kernel before the first run: the kernel's
/// `NAME_prepack` entry point reads `weight` and writes `bytes` bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Packing {
    pub kernel: String,
    /// Graph value id of the weight read.
    pub weight: usize,
    /// Size of the packing; 0 until the kernel has been asked.
    pub bytes: usize,
}

/// A kernel's slice of the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceSlice {
    pub offset: usize,
    pub bytes: usize,
}

/// What one graph node does at run time.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Calls the generated function `kernel` with its arguments: the
    /// values `args` (graph value ids), then the packing, then the
    /// workspace slice, where present.
    Kernel {
        node: usize,
        kernel: String,
        args: Vec<usize>,
        packing: Option<usize>,
        workspace: Option<WorkspaceSlice>,
    },
    /// A view: `value` is `of`'s bytes; nothing runs.
    Alias {
        node: usize,
        value: usize,
        of: usize,
    },
    /// A concatenation whose parts their producers wrote in place into
    /// `value`'s bytes (`KernelInfo::assembled`): nothing runs.
    Assembled { node: usize, value: usize },
    /// A node outside generated code (run by the reference interpreter in
    /// the JIT; an AOT export refuses it).
    Interp { node: usize, reason: String },
}

impl Step {
    pub fn node(&self) -> usize {
        match self {
            Step::Kernel { node, .. }
            | Step::Alias { node, .. }
            | Step::Assembled { node, .. }
            | Step::Interp { node, .. } => *node,
        }
    }
}

/// One entry of the execution order.
#[derive(Debug, Clone, PartialEq)]
pub enum Exec {
    /// `steps[i]` alone.
    Step(usize),
    /// Kernel steps run at the same time (APOLLO's parallelism stitching)
    /// by the generated function `func`, one OpenMP section each; their
    /// buffers and workspace slices are disjoint.
    Concurrent { func: String, steps: Vec<usize> },
}

impl Exec {
    pub fn steps(&self) -> &[usize] {
        match self {
            Exec::Step(i) => std::slice::from_ref(i),
            Exec::Concurrent { steps, .. } => steps,
        }
    }
}

/// A compiled model as data.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecPlan {
    /// Every placed value, by increasing graph value id.
    pub values: Vec<PlanValue>,
    /// Graph value ids of the inputs and outputs, in graph order.
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    /// Graph value ids of the weights (`Loc::Weight(i)` is `weights[i]`).
    pub weights: Vec<usize>,
    pub packings: Vec<Packing>,
    /// One per graph node, in graph order.
    pub steps: Vec<Step>,
    /// The execution order.
    pub exec: Vec<Exec>,
    /// Alignment of arena offsets, workspace slices and packings, in bytes.
    pub alignment: usize,
    pub arena_bytes: usize,
    /// The largest total size of arena values live at the same step: no
    /// arena can be smaller.
    pub arena_bound: usize,
    /// The sum of the arena values' sizes (no sharing).
    pub arena_total: usize,
    pub workspace_bytes: usize,
    /// Threads the workspace is sized for (each kernel's per-thread part
    /// times this).
    pub threads: usize,
    /// Values held by the executor (`Loc::Boxed` slots).
    pub boxed: usize,
}

impl ExecPlan {
    /// The placed value with graph id `id`.
    pub fn value(&self, id: usize) -> Option<&PlanValue> {
        self.values
            .binary_search_by_key(&id, |v| v.id)
            .ok()
            .map(|i| &self.values[i])
    }

    /// Kernel steps.
    pub fn kernels(&self) -> impl Iterator<Item = &Step> {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Kernel { .. }))
    }

    /// Steps that run outside generated code.
    pub fn interpreted(&self) -> impl Iterator<Item = &Step> {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Interp { .. }))
    }
}
