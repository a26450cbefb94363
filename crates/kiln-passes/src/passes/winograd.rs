//! Winograd F(2x2, 3x3) convolutions (Lavin & Gray, CVPR 2016, §4.1):
//! a dense 3x3 stride-1 channels-last convolution becomes an input tile
//! transform, a batched MatMul of the 16 transformed positions against
//! weights transformed once here, and an output tile transform
//! (`kiln-ops` `winograd.rs` defines the transforms and the weight
//! transform). The product then does 16 multiply-adds per 2x2 output
//! pixels and input channel where the direct convolution does 36: 2.25×
//! fewer.
//!
//! Rule ([`pays`]): a `kiln.ChannelsLast` Conv with a 3x3 window, stride 1,
//! any dilation (a dilated side is several interleaved undilated images,
//! its phases), one group, explicit padding, f32 channels-last input and
//! constant weights, whose product has at least [`MIN_TILES`] rows (tiles)
//! and [`MIN_CHANNELS`] input and output channels and fewer multiply-adds
//! than the direct convolution, and whose transformed tensors stay in
//! cache or are worth their memory traffic on the target:
//!
//! - With fewer tiles the product has few rows against weights 16/9 the
//!   size of the originals: a 7x7x512 image at batch 1 (16 tiles) ran
//!   slower as Winograd than direct (BENCHMARKS.md, "Winograd F(2x2, 3x3)
//!   convolutions (issue 19, session 25)"). With few channels the
//!   transforms, which cost per element and not per product, weigh more
//!   against the saving; the 16-channel floor is a choice, not a measured
//!   crossover.
//! - A dilation wide against the image leaves most phases one pixel
//!   high or wide, whose 2x2 tiles compute up to four times the outputs
//!   they keep: DeepLabV3's atrous convolutions (dilation 12 over 14x14
//!   pixels) would do more multiply-adds than direct.
//! - The transformed input and output (16 values per 2x2 tile and
//!   channel, 4 per output element) are written once and read once. When
//!   they fit in half the target's last-level cache (the other half for
//!   the convolution's own input, output and weights, and for the sets
//!   the cache's associativity wastes), that traffic stays on chip. When
//!   they do not, it goes to memory, and the multiply-adds the product
//!   saves must take at least as long at the target's peak as that
//!   traffic at its memory bandwidth ([`TargetDesc::roofline_ns`]'s two
//!   sides). Shallow products lose there: squeezenet1_1 at batch 8 has 3x3
//!   convolutions from 16 channels whose 32 MB of transformed tensors made
//!   them slower than direct, while at batch 1 (4 MB) they are faster
//!   (BENCHMARKS.md, session 28, "Winograd only where its transformed
//!   tensors stay in cache or pay for their traffic").
//!
//! Needs: a graph after the layout pass (`channels_last`) and its cleanup
//! (weights folded to constant HWIO initializers), static shapes.
//! Guarantees: the same outputs up to floating-point rounding (the
//! transforms add and subtract inputs; a product's terms are summed in
//! another order); every other node unchanged; the replaced weights are
//! dropped when nothing else reads them.

use kiln_ir::{Attr, DType, Graph, Initializer, Node, Result, Tensor, TensorType, ValueId};
use kiln_ops::ops::channels_last::{CHANNELS_LAST_DOMAIN, CHANNELS_LAST_OP};
use kiln_ops::ops::winograd::{
    tiles_for, transform_weights, TILE, WINDOW, WINOGRAD_DOMAIN, WINOGRAD_INPUT_OP,
    WINOGRAD_OUTPUT_OP,
};
use kiln_target::TargetDesc;
use std::collections::BTreeMap;

/// Fewest tiles (rows of the batched product) a convolution must have.
pub const MIN_TILES: usize = 32;
/// Fewest input and output channels a convolution must have.
pub const MIN_CHANNELS: usize = 16;

/// Rewrites every convolution the rule accepts for `target`; true when any changed.
pub fn to_winograd(g: &mut Graph, target: &TargetDesc) -> Result<bool> {
    let nodes = std::mem::take(&mut g.nodes);
    let mut out = Vec::with_capacity(nodes.len());
    let mut replaced = Vec::new();
    for node in nodes {
        match candidate(g, &node, target) {
            Some(conv) => {
                let what = node.describe();
                out.extend(rewrite(g, &node, &conv).map_err(|e| e.context(what))?);
                replaced.push(conv.weights);
            }
            None => out.push(node),
        }
    }
    g.nodes = out;
    for w in &replaced {
        let read = g.nodes.iter().any(|n| n.inputs.contains(&Some(*w)));
        if !read && !g.outputs.contains(w) {
            g.initializers.remove(w);
        }
    }
    if !replaced.is_empty() {
        g.opsets.entry(WINOGRAD_DOMAIN.to_string()).or_insert(1);
    }
    Ok(!replaced.is_empty())
}

/// What the rewrite needs of an accepted convolution.
struct Conv {
    x: ValueId,
    weights: ValueId,
    y: ValueId,
    /// `[N, H, W, C]` in, `[N, Ho, Wo, K]` out.
    input: [usize; 4],
    output: [usize; 4],
    /// Top and left padding.
    pads: [usize; 2],
    /// Dilation of each image side.
    dilations: [usize; 2],
}

impl Conv {
    /// Tiles per phase of each side.
    fn tiles(&self) -> [usize; 2] {
        let [dh, dw] = self.dilations;
        [tiles_for(self.output[1], dh), tiles_for(self.output[2], dw)]
    }

    /// Tiles over every phase and image: the batched product's rows.
    fn tile_count(&self) -> usize {
        let ([th, tw], [dh, dw]) = (self.tiles(), self.dilations);
        self.input[0] * th * dh * tw * dw
    }

    /// Bytes of the transformed input and output together.
    fn transformed_bytes(&self) -> f64 {
        let per_tile = TILE * TILE * (self.input[3] + self.output[3]);
        (self.tile_count() * per_tile * std::mem::size_of::<f32>()) as f64
    }

    /// Multiply-adds the product saves against the direct convolution.
    fn saved_multiply_adds(&self) -> f64 {
        let [n, ho, wo, k] = self.output;
        let direct = n * ho * wo * WINDOW * WINDOW;
        let winograd = self.tile_count() * TILE * TILE;
        (direct as f64 - winograd as f64) * (self.input[3] * k) as f64
    }
}

/// `node` as a convolution the rule accepts for `target`, or `None`.
fn candidate(g: &Graph, node: &Node, target: &TargetDesc) -> Option<Conv> {
    let wrapped = node.attr_string("op").ok().flatten();
    if node.domain != CHANNELS_LAST_DOMAIN || node.op != CHANNELS_LAST_OP || wrapped != Some("Conv")
    {
        return None;
    }
    let ints = |name: &str| node.attr_ints(name).ok().flatten().map(<[i64]>::to_vec);
    let all = |name: &str, v: i64| ints(name).is_none_or(|s| s.iter().all(|&x| x == v));
    let explicit = node
        .attr_string("auto_pad")
        .ok()
        .flatten()
        .is_none_or(|p| p == "NOTSET");
    let layout = node.attr_int_or("channels_last_input", 1).ok() == Some(1)
        && node.attr_int_or("group", 1).ok() == Some(1);
    if !(explicit && layout && all("strides", 1)) {
        return None;
    }
    let pads = ints("pads").unwrap_or(vec![0; 4]);
    let dilations = ints("dilations").unwrap_or(vec![1; 2]);
    let positive = |i: usize| usize::try_from(*dilations.get(i)?).ok().filter(|&d| d > 0);
    let ([x, w], [y]) = (
        node.inputs[..].try_into().ok()?,
        node.outputs[..].try_into().ok()?,
    );
    let (x, weights, y) = (x?, w?, y?);
    let shape = |v: ValueId| g.ty(v).shape.clone();
    let (xs, ws, ys) = (shape(x)?, shape(weights)?, shape(y)?);
    let conv = Conv {
        x,
        weights,
        y,
        input: xs[..].try_into().ok()?,
        output: ys[..].try_into().ok()?,
        pads: [
            usize::try_from(*pads.first()?).ok()?,
            usize::try_from(*pads.get(1)?).ok()?,
        ],
        dilations: [positive(0)?, positive(1)?],
    };
    let f32_in = g.ty(x).dtype == DType::F32 && g.ty(weights).dtype == DType::F32;
    let window = ws[..2] == [WINDOW, WINDOW] && g.initializers.contains_key(&weights);
    (f32_in && window && pays(&conv, target)).then_some(conv)
}

/// The rule's size and cost conditions (see the module doc).
fn pays(conv: &Conv, target: &TargetDesc) -> bool {
    let channels = conv.input[3].min(conv.output[3]);
    let large = conv.tile_count() >= MIN_TILES && channels >= MIN_CHANNELS;
    large
        && conv.saved_multiply_adds() > 0.0
        && (stays_in_cache(conv, target) || saving_outweighs_traffic(conv, target))
}

/// Whether the transformed tensors fit in half the last-level cache.
fn stays_in_cache(conv: &Conv, target: &TargetDesc) -> bool {
    conv.transformed_bytes() <= (target.last_level_cache_bytes() / 2) as f64
}

/// Whether the saved multiply-adds take longer at peak than writing and
/// reading the transformed tensors once at memory bandwidth.
fn saving_outweighs_traffic(conv: &Conv, target: &TargetDesc) -> bool {
    let saved = target.roofline_ns(2.0 * conv.saved_multiply_adds(), 0.0);
    let traffic = target.roofline_ns(0.0, 2.0 * conv.transformed_bytes());
    saved >= traffic
}

/// The six nodes replacing `node`: input transform, reshape and transpose
/// to the batched product's rows (read in place by the product), product,
/// reshape to tiles, output transform (writing the convolution's own
/// output value).
fn rewrite(g: &mut Graph, node: &Node, conv: &Conv) -> Result<Vec<Node>> {
    let w = g.initializers[&conv.weights].to_tensor()?;
    let u = transform_weights(&w)?;
    let [n, _, _, c] = conv.input;
    let [_, ho, wo, k] = conv.output;
    let ([th, tw], [dh, dw]) = (conv.tiles(), conv.dilations);
    let t = conv.tile_count();
    let base = g.name(conv.y).to_string();
    let f32_value = |g: &mut Graph, suffix: &str, shape: Vec<usize>| {
        add(
            g,
            &format!("{base}/{suffix}"),
            TensorType::new(DType::F32, shape),
        )
    };
    let v = f32_value(g, "winograd_in", vec![n, th, dh, tw, dw, TILE, TILE, c]);
    let tiles = f32_value(g, "winograd_tile_rows", vec![t, TILE * TILE, c]);
    let rows = f32_value(g, "winograd_rows", vec![TILE * TILE, t, c]);
    let product = f32_value(g, "winograd_product", vec![TILE * TILE, t, k]);
    let tiled = vec![TILE, TILE, n, th, dh, tw, dw, k];
    let m = f32_value(g, "winograd_tiles", tiled.clone());
    let u = constant(g, &format!("{base}/winograd_weights"), u)?;
    let to_rows = shape_constant(g, &format!("{base}/rows_shape"), &[t, TILE * TILE, c])?;
    let to_tiles = shape_constant(g, &format!("{base}/tiles_shape"), &tiled)?;
    let pair = |a: usize, b: usize| Attr::Ints(vec![a as i64, b as i64]);
    let perm = Attr::Ints(vec![1, 0, 2]);
    let name = |step: &str| format!("{}/winograd_{step}", node.name);
    let dilations = ("dilations", pair(dh, dw));
    let input_attrs = [
        ("pads", pair(conv.pads[0], conv.pads[1])),
        ("tiles", pair(th, tw)),
        dilations.clone(),
    ];
    Ok(vec![
        op(name("input"), WINOGRAD_INPUT_OP, [conv.x], v, &input_attrs),
        op(name("tile_rows"), "Reshape", [v, to_rows], tiles, &[]),
        op(name("rows"), "Transpose", [tiles], rows, &[("perm", perm)]),
        op(name("product"), "MatMul", [rows, u], product, &[]),
        op(name("tiles"), "Reshape", [product, to_tiles], m, &[]),
        op(
            name("output"),
            WINOGRAD_OUTPUT_OP,
            [m],
            conv.y,
            &[("image", pair(ho, wo)), dilations],
        ),
    ])
}

/// A node of one output; ops other than the transforms are ONNX's.
fn op<const I: usize>(
    name: String,
    op: &str,
    inputs: [ValueId; I],
    output: ValueId,
    attrs: &[(&str, Attr)],
) -> Node {
    let transform = op == WINOGRAD_INPUT_OP || op == WINOGRAD_OUTPUT_OP;
    Node {
        name,
        op: op.to_string(),
        domain: if transform { WINOGRAD_DOMAIN } else { "" }.to_string(),
        inputs: inputs.into_iter().map(Some).collect(),
        outputs: vec![Some(output)],
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn add(g: &mut Graph, hint: &str, ty: TensorType) -> ValueId {
    let name = kiln_ir::unique_name(hint, &|n| g.values.iter().any(|v| v.name == n));
    g.add_value(name, ty)
}

fn constant(g: &mut Graph, hint: &str, t: Tensor) -> Result<ValueId> {
    let v = add(g, hint, t.ty());
    g.initializers.insert(v, Initializer::Tensor(t));
    Ok(v)
}

fn shape_constant(g: &mut Graph, hint: &str, dims: &[usize]) -> Result<ValueId> {
    let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    constant(g, hint, Tensor::from_vec(vec![dims.len()], dims)?)
}
