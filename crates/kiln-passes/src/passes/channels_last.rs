//! Layout choice: convolutions and pooling on channels-last data (NHWC),
//! with the layout changes placed at graph level.
//!
//! Rule ([`prefers_channels_last`]): a graph with a 2-D convolution runs
//! channels-last. A depthwise convolution on NCHW data reduces along short
//! image rows (7–112 wide) and reads strided rows at stride 2; on NHWC data
//! each output pixel is a whole vector of channels (every model's channel
//! counts are multiples of 16), whatever the stride or the image width. A
//! dense convolution on NHWC data is a matmul whose A rows (output pixels)
//! the micro-kernel reads in place through row pointers, against weights
//! packed once: no per-call packing, and rows that are pixels fill the
//! register tiles where 7x7 and 14x14 images leave NCHW panels of pixels
//! part empty (ResNet-50: 41–51 ms channels-last against 53–65 ms NCHW on
//! the 2-core Zen 4 VM, alternating runs). Graphs without 2-D
//! convolutions keep the ONNX layout. [`Layout`] lets a caller force
//! either.
//!
//! Rewrite ([`to_channels_last`]), in one walk in graph order:
//! - `Conv` (no bias: the bias is a separate Add once compounds are
//!   opened) and single-output `MaxPool` become `kiln.ChannelsLast`
//!   nodes reading the channels-last twin of their input (a dense
//!   convolution of a value without one, like the model's input image,
//!   reads it channels-first: `channels_last_input=0`);
//! - element-wise ops (the registry's scalar-rule ops) with an input that
//!   has a channels-last twin run channels-last: constant operands are
//!   permuted (after numpy's leading unit axes), other operands of full
//!   rank get a Transpose;
//! - `ReduceSum/Max/Min/Prod` with `keepdims=1` and constant axes reduce
//!   the twin along the permuted axes;
//! - `Concat` with an input that has a twin joins the twins along the
//!   permuted axis (DenseNet's, Inception's and SqueezeNet's channel
//!   concatenations stay channels-last instead of transposing both ways);
//! - `Slice` with constant axes slices the twin along the permuted axes,
//!   and a constant-mode `Pad` with constant pads pads it by the permuted
//!   pads;
//! - a `Reshape` that keeps the batch and image axes and only splits or
//!   merges the channels, and a `Transpose` that only permutes the channel
//!   axes, run on twins too. A twin then may hold several channel axes
//!   (`[N, C/g, g, H, W]` is held as `[N, H, W, C/g, g]`, `grouped_channels_last_perm`),
//!   so ShuffleNet's channel shuffle (Reshape, Transpose, Reshape) becomes a
//!   permutation within each pixel instead of two whole-tensor transposes.
//!
//! Every rewritten node's original output stays defined, as a Transpose
//! of its twin back to channels-first, so nodes the walk leaves alone
//! (and graph outputs) read what they read before; the cleanup passes
//! then drop the unused ones (`dce`), merge transposes that meet, and turn
//! those that move only unit axes into reshapes (`canonicalize_layout`).
//!
//! Needs: an optimized graph (compounds opened) with static shapes.
//! Guarantees: the same outputs (pure data movement around the same
//! arithmetic); changes only the top-level graph.

use kiln_ir::{Attr, DType, Graph, Node, Result, Tensor, TensorType, ValueId};
use kiln_ops::ops::channels_last::{CHANNELS_LAST_DOMAIN, CHANNELS_LAST_OP};
use kiln_ops::te::layout::{
    channels_last_perm, grouped_channels_last_perm, inverse, permuted, weights_last_perm,
};
use kiln_ops::util::transpose;
use std::collections::{BTreeMap, HashMap, HashSet};

mod moves;

/// Which layout convolutions and pooling run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// By [`prefers_channels_last`].
    #[default]
    Auto,
    /// Channels-first (NCHW), as ONNX defines the ops: no rewrite.
    ChannelsFirst,
    /// Channels-last (NHWC) wherever the rewrite applies.
    ChannelsLast,
}

impl std::str::FromStr for Layout {
    type Err = String;

    /// `auto`, `nchw` or `nhwc`.
    fn from_str(s: &str) -> std::result::Result<Layout, String> {
        match s {
            "auto" => Ok(Layout::Auto),
            "nchw" => Ok(Layout::ChannelsFirst),
            "nhwc" => Ok(Layout::ChannelsLast),
            _ => Err(format!(
                "unknown layout '{s}' (expected auto, nchw or nhwc)"
            )),
        }
    }
}

impl Layout {
    /// Whether `g` runs channels-last under this choice.
    pub fn channels_last_for(self, g: &Graph) -> bool {
        match self {
            Layout::Auto => prefers_channels_last(g),
            Layout::ChannelsFirst => false,
            Layout::ChannelsLast => true,
        }
    }
}

/// The layout rule: true when `g` has a 2-D convolution (a 4-D image).
pub fn prefers_channels_last(g: &Graph) -> bool {
    g.nodes.iter().any(|n| {
        let rank = n
            .inputs
            .first()
            .copied()
            .flatten()
            .and_then(|x| g.ty(x).shape.as_ref().map(|s| s.len()));
        n.op == "Conv" && n.domain.is_empty() && rank == Some(4)
    })
}

/// Rewrites `g` to run its convolutions and pooling channels-last (see the
/// module doc); true when anything changed.
pub fn to_channels_last(g: &mut Graph) -> Result<bool> {
    let nodes = g.nodes.clone();
    let mut rw = Rewriter {
        names: g.values.iter().map(|v| v.name.clone()).collect(),
        g,
        twin: HashMap::new(),
        grouped: HashMap::new(),
        out: Vec::with_capacity(nodes.len()),
    };
    for node in nodes {
        let what = node.describe();
        rw.node(node).map_err(|e| e.context(what))?;
    }
    let Rewriter { g, out, twin, .. } = rw;
    if twin.is_empty() {
        return Ok(false);
    }
    g.nodes = out;
    g.opsets
        .entry(CHANNELS_LAST_DOMAIN.to_string())
        .or_insert(1);
    Ok(true)
}

struct Rewriter<'g> {
    g: &'g mut Graph,
    names: HashSet<String>,
    /// Channels-first value → its channels-last twin.
    twin: HashMap<ValueId, ValueId>,
    /// Channels-first value → its twin with `k > 1` channel axes, and `k`
    /// (`grouped_channels_last_perm`): only reshapes and transposes read these.
    grouped: HashMap<ValueId, (ValueId, usize)>,
    out: Vec<Node>,
}

impl Rewriter<'_> {
    fn node(&mut self, node: Node) -> Result<()> {
        if let Some(x) = self.spatial_input(&node) {
            return self.spatial(node, x);
        }
        if self.is_elementwise_on_twins(&node) {
            if let Some(inputs) = self.elementwise_inputs(&node)? {
                return self.rebuilt(node, inputs);
            }
        }
        if let Some(axes) = self.reduce_axes(&node) {
            return self.reduce(node, &axes);
        }
        if let Some(axis) = self.concat_axis(&node) {
            return self.concat(node, axis);
        }
        if let Some(axes) = self.slice_axes(&node) {
            return self.slice(node, &axes);
        }
        if let Some(pads) = self.pad_of_twin(&node) {
            return self.pad(node, pads);
        }
        if let Some((twin, dims, k)) = self.channel_reshape(&node) {
            return self.reshape(node, twin, &dims, k);
        }
        if let Some((twin, perm, k)) = self.channel_transpose(&node) {
            return self.transpose(node, twin, perm, k);
        }
        self.out.push(node);
        Ok(())
    }

    /// Input 0 of a Conv without bias or a single-output MaxPool over a
    /// static image of rank ≥ 3.
    fn spatial_input(&self, node: &Node) -> Option<ValueId> {
        let outputs = node.outputs.iter().flatten().count();
        let fits = match (node.domain.as_str(), node.op.as_str()) {
            ("", "Conv") => node.inputs.len() == 2 || node.inputs.get(2) == Some(&None),
            ("", "MaxPool") => true,
            _ => false,
        };
        let x = node.inputs.first().copied().flatten()?;
        let rank = self.g.ty(x).shape.as_ref()?.len();
        (fits && outputs == 1 && node.outputs[0].is_some() && rank >= 3).then_some(x)
    }

    fn spatial(&mut self, node: Node, x: ValueId) -> Result<()> {
        let mut attrs = node.attrs.clone();
        attrs.insert("op".to_string(), Attr::String(node.op.clone()));
        // A channels-first image without a twin (the model's input) is
        // read as it is by a dense convolution (a gemm over windows of
        // pixel rows): no transpose runs before it. A grouped or depthwise
        // one vectorizes along the channels, which must be contiguous.
        let dense = node.attr_int_or("group", 1)? == 1;
        let x_read = if node.op == "Conv" && dense && !self.twin.contains_key(&x) {
            attrs.insert("channels_last_input".to_string(), Attr::Int(0));
            x
        } else {
            self.twin_of(x)?
        };
        let rank = self.g.ty(x).shape.as_ref().map_or(0, |s| s.len());
        let mut inputs = vec![Some(x_read)];
        for &w in &node.inputs[1..] {
            let same_rank = w.and_then(|w| self.g.ty(w).shape.as_ref().map(|s| s.len() == rank));
            inputs.push(match (w, same_rank) {
                (Some(w), Some(true)) => Some(self.transposed(w, &weights_last_perm(rank))?),
                _ => w,
            });
        }
        self.rebuilt(wrapping(node, attrs), inputs)
    }

    /// `node` with `inputs`, writing a new channels-last output; the
    /// original output becomes its transpose back.
    fn rebuilt(&mut self, node: Node, inputs: Vec<Option<ValueId>>) -> Result<()> {
        self.rebuilt_with(node, inputs, 1)
    }

    /// [`Rewriter::rebuilt`] for an output twin with `k` channel axes.
    fn rebuilt_with(
        &mut self,
        mut node: Node,
        inputs: Vec<Option<ValueId>>,
        k: usize,
    ) -> Result<()> {
        let Some(y) = node.outputs.first().copied().flatten() else {
            kiln_ir::bail!("expected one output");
        };
        let Some(rank) = self.g.ty(y).shape.as_ref().map(|s| s.len()) else {
            kiln_ir::bail!("output shape unknown");
        };
        let perm = grouped_channels_last_perm(rank, k);
        let yl = self.value(y, self.permuted_type(y, &perm));
        node.inputs = inputs;
        node.outputs = vec![Some(yl)];
        self.out.push(node);
        self.push_transpose(yl, y, &inverse(&perm));
        if k == 1 {
            self.twin.insert(y, yl);
        } else {
            self.grouped.insert(y, (yl, k));
        }
        Ok(())
    }

    /// `v`'s twin and its number of channel axes.
    fn layout_of(&self, v: ValueId) -> Option<(ValueId, usize)> {
        match self.twin.get(&v) {
            Some(&t) => Some((t, 1)),
            None => self.grouped.get(&v).copied(),
        }
    }

    /// The channels-last twin of `x`, made when it has none.
    fn twin_of(&mut self, x: ValueId) -> Result<ValueId> {
        if let Some(&t) = self.twin.get(&x) {
            return Ok(t);
        }
        let rank = self.g.ty(x).shape.as_ref().map_or(0, |s| s.len());
        let xl = self.transposed(x, &channels_last_perm(rank))?;
        self.twin.insert(x, xl);
        Ok(xl)
    }

    /// `x` transposed by `perm`: a permuted constant, or a Transpose node.
    fn transposed(&mut self, x: ValueId, perm: &[usize]) -> Result<ValueId> {
        if let Some(init) = self.g.constant(x) {
            let t = transpose(&init.to_tensor()?, perm)?;
            return Ok(self.constant(x, t));
        }
        let xl = self.value(x, self.permuted_type(x, perm));
        self.push_transpose(x, xl, perm);
        Ok(xl)
    }

    /// `v`'s type with its shape permuted by `perm`.
    fn permuted_type(&self, v: ValueId, perm: &[usize]) -> TensorType {
        let ty = self.g.ty(v);
        TensorType {
            dtype: ty.dtype,
            shape: ty.shape.as_deref().map(|s| permuted(s, perm)),
        }
    }

    /// A new constant `t` named after `like`.
    fn constant(&mut self, like: ValueId, t: Tensor) -> ValueId {
        let c = self.value(like, t.ty());
        self.g
            .initializers
            .insert(c, kiln_ir::Initializer::Tensor(t));
        c
    }

    /// A new value of type `ty` named after `like`.
    fn value(&mut self, like: ValueId, ty: TensorType) -> ValueId {
        let name = kiln_ir::unique_name(&format!("{}_nhwc", self.g.name(like)), &|n| {
            self.names.contains(n)
        });
        self.names.insert(name.clone());
        self.g.add_value(name, ty)
    }

    fn push_transpose(&mut self, from: ValueId, to: ValueId, perm: &[usize]) {
        let p = perm.iter().map(|&a| a as i64).collect();
        self.out.push(Node {
            name: format!("{}/transpose", self.g.name(to)),
            op: "Transpose".to_string(),
            domain: String::new(),
            inputs: vec![Some(from)],
            outputs: vec![Some(to)],
            attrs: BTreeMap::from([("perm".to_string(), Attr::Ints(p))]),
        });
    }

    /// An element-wise op (one output) reading a value that has a twin.
    fn is_elementwise_on_twins(&self, node: &Node) -> bool {
        let scalar_rule = kiln_ops::registry::lookup(&node.domain, &node.op)
            .is_some_and(|op| op.scalar_kernel().is_some());
        scalar_rule
            && node.outputs.len() == 1
            && node
                .inputs
                .iter()
                .flatten()
                .any(|v| self.twin.contains_key(v))
    }

    /// The operands of element-wise `node` run channels-last, or `None`
    /// when one of them cannot be (a computed operand of lower rank).
    fn elementwise_inputs(&mut self, node: &Node) -> Result<Option<Vec<Option<ValueId>>>> {
        let Some(y) = node.outputs[0] else {
            return Ok(None);
        };
        let Some(rank) = self.g.ty(y).shape.as_ref().map(|s| s.len()) else {
            return Ok(None);
        };
        let mut inputs = Vec::new();
        for &v in &node.inputs {
            let Some(v) = v else {
                return Ok(None);
            };
            let Some(shape) = self.g.ty(v).shape.clone() else {
                return Ok(None);
            };
            let converted = if let Some(&t) = self.twin.get(&v) {
                t
            } else if shape.iter().all(|&d| d == 1) {
                v
            } else if let Some(c) = self.permuted_constant(v, &shape, rank)? {
                c
            } else if shape.len() == rank {
                self.twin_of(v)?
            } else {
                return Ok(None);
            };
            inputs.push(Some(converted));
        }
        Ok(Some(inputs))
    }

    /// Constant `v` broadcast to rank `rank` and permuted channels-last.
    fn permuted_constant(
        &mut self,
        v: ValueId,
        shape: &[usize],
        rank: usize,
    ) -> Result<Option<ValueId>> {
        let Some(init) = self.g.constant(v) else {
            return Ok(None);
        };
        if shape.len() > rank {
            return Ok(None);
        }
        let mut full = vec![1; rank - shape.len()];
        full.extend_from_slice(shape);
        let t = Tensor::new(full, init.to_tensor()?.data.clone())?;
        let t = transpose(&t, &channels_last_perm(rank))?;
        Ok(Some(self.constant(v, t)))
    }

    /// The reduced axes of a keepdims reduction over a value with a twin.
    fn reduce_axes(&self, node: &Node) -> Option<Vec<i64>> {
        let reduce = matches!(
            node.op.as_str(),
            "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd"
        );
        if !reduce || !node.domain.is_empty() || node.attr_int_or("keepdims", 1).ok()? != 1 {
            return None;
        }
        let x = node.inputs.first().copied().flatten()?;
        self.twin.get(&x)?;
        self.constant_i64s(node.inputs.get(1).copied().flatten()?)
    }

    /// The values of `v` when it is a constant i64 tensor.
    fn constant_i64s(&self, v: ValueId) -> Option<Vec<i64>> {
        let t = self.g.constant(v)?.to_tensor().ok()?;
        (t.dtype() == DType::I64).then(|| t.data.to_i64_vec().ok())?
    }

    fn reduce(&mut self, node: Node, axes: &[i64]) -> Result<()> {
        let (Some(x), Some(a)) = (node.inputs[0], node.inputs[1]) else {
            kiln_ir::bail!("expected data and axes");
        };
        let rank = self.g.ty(x).shape.as_ref().map_or(0, |s| s.len());
        // Where each channels-first axis sits channels-last.
        let position = inverse(&channels_last_perm(rank));
        let new_axes: Vec<i64> = axes
            .iter()
            .map(|&a| position[a.rem_euclid(rank as i64) as usize] as i64)
            .collect();
        let al = self.constant(a, Tensor::from_vec(vec![new_axes.len()], new_axes)?);
        let mut inputs = node.inputs.clone();
        inputs[0] = Some(self.twin[&x]);
        inputs[1] = Some(al);
        self.rebuilt(node, inputs)
    }

    /// The axis and rank of a Concat of values of one rank (3 or more),
    /// one of which has a twin.
    fn concat_axis(&self, node: &Node) -> Option<(usize, usize)> {
        if node.op != "Concat" || !node.domain.is_empty() || node.outputs.len() != 1 {
            return None;
        }
        let inputs: Option<Vec<ValueId>> = node.inputs.iter().copied().collect();
        let inputs = inputs?;
        let rank = self.g.ty(*inputs.first()?).shape.as_ref()?.len();
        let full_rank = inputs
            .iter()
            .all(|&v| self.g.ty(v).shape.as_ref().is_some_and(|s| s.len() == rank));
        let any_twin = inputs.iter().any(|v| self.twin.contains_key(v));
        let axis = node.attr_int_or("axis", 0).ok()?;
        (full_rank && any_twin && rank >= 3 && (-(rank as i64)..rank as i64).contains(&axis))
            .then_some((axis.rem_euclid(rank as i64) as usize, rank))
    }

    /// `node` (a Concat along `axis`, see [`Rewriter::concat_axis`]) joining
    /// its inputs' twins along the permuted axis.
    fn concat(&mut self, mut node: Node, (axis, rank): (usize, usize)) -> Result<()> {
        let position = inverse(&channels_last_perm(rank));
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for &v in &node.inputs {
            let Some(v) = v else {
                kiln_ir::bail!("a Concat input is missing");
            };
            inputs.push(Some(self.twin_of(v)?));
        }
        node.attrs
            .insert("axis".to_string(), Attr::Int(position[axis] as i64));
        self.rebuilt(node, inputs)
    }
}

/// `node` as the `kiln.ChannelsLast` node with `attrs` (which name it).
fn wrapping(node: Node, attrs: BTreeMap<String, Attr>) -> Node {
    Node {
        op: CHANNELS_LAST_OP.to_string(),
        domain: CHANNELS_LAST_DOMAIN.to_string(),
        attrs,
        ..node
    }
}
