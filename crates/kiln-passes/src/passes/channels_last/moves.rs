//! The channels-last rewrite's data-movement rules: `Slice` with constant
//! axes, a constant-mode `Pad` with constant pads over every axis, and the
//! `Reshape`s and `Transpose`s that touch only the channel
//! axes (see the parent module's doc). Each runs the op on its input's
//! twin with the axes, shape or permutation carried over to the twin's
//! layout (`grouped_channels_last_perm`).

use super::Rewriter;
use kiln_ir::{Attr, Node, Result, Tensor, ValueId};
use kiln_ops::te::layout::{channels_last_perm, grouped_channels_last_perm, inverse};

impl Rewriter<'_> {
    /// The axes of a `Slice` of a value with a (one channel axis) twin,
    /// as channels-first axes in `0..rank`, when they are constant.
    pub(super) fn slice_axes(&self, node: &Node) -> Option<Vec<usize>> {
        if node.op != "Slice" || !node.domain.is_empty() || node.outputs.len() != 1 {
            return None;
        }
        let x = node.inputs.first().copied().flatten()?;
        self.twin.get(&x)?;
        let rank = self.g.ty(x).shape.as_ref()?.len() as i64;
        let axes = match node.inputs.get(3).copied().flatten() {
            Some(a) => self.constant_i64s(a)?,
            None => {
                let starts = node.inputs.get(1).copied().flatten()?;
                let n = self.g.ty(starts).shape.as_ref()?.first().copied()?;
                (0..n as i64).collect()
            }
        };
        axes.iter()
            .map(|&a| {
                (-rank..rank)
                    .contains(&a)
                    .then(|| a.rem_euclid(rank) as usize)
            })
            .collect()
    }

    /// `node` (a Slice along channels-first `axes`) slicing its input's twin
    /// along the permuted axes.
    pub(super) fn slice(&mut self, node: Node, axes: &[usize]) -> Result<()> {
        let Some(x) = node.inputs[0] else {
            kiln_ir::bail!("a Slice without data");
        };
        let rank = self.g.ty(x).shape.as_ref().map_or(0, |s| s.len());
        let position = inverse(&channels_last_perm(rank));
        let moved: Vec<i64> = axes.iter().map(|&a| position[a] as i64).collect();
        let like = node.inputs.get(3).copied().flatten().or(node.inputs[1]);
        let Some(like) = like else {
            kiln_ir::bail!("a Slice without starts");
        };
        let axes = self.constant(like, Tensor::from_vec(vec![moved.len()], moved)?);
        let mut inputs = node.inputs.clone();
        inputs.resize(inputs.len().max(4), None);
        inputs[0] = Some(self.twin[&x]);
        inputs[3] = Some(axes);
        self.rebuilt(node, inputs)
    }

    /// The pads of a constant-mode `Pad` over every axis (no `axes` input)
    /// of a value with a (one channel axis) twin, when they are constant:
    /// the pads permuted to the twin's layout.
    pub(super) fn pad_of_twin(&self, node: &Node) -> Option<Vec<i64>> {
        if node.op != "Pad" || !node.domain.is_empty() || node.outputs.len() != 1 {
            return None;
        }
        let mode = node
            .attr_string("mode")
            .ok()
            .flatten()
            .unwrap_or("constant");
        if mode != "constant" || node.inputs.get(3).copied().flatten().is_some() {
            return None;
        }
        let x = node.inputs.first().copied().flatten()?;
        self.twin.get(&x)?;
        let rank = self.g.ty(x).shape.as_ref()?.len();
        let pads = self.constant_i64s(node.inputs.get(1).copied().flatten()?)?;
        if pads.len() != 2 * rank {
            return None;
        }
        let perm = channels_last_perm(rank);
        let (begins, ends) = pads.split_at(rank);
        Some(
            perm.iter()
                .map(|&a| begins[a])
                .chain(perm.iter().map(|&a| ends[a]))
                .collect(),
        )
    }

    /// `node` (a Pad, see [`Rewriter::pad_of_twin`]) padding its input's twin
    /// by `pads`.
    pub(super) fn pad(&mut self, node: Node, pads: Vec<i64>) -> Result<()> {
        let (Some(x), Some(like)) = (node.inputs[0], node.inputs[1]) else {
            kiln_ir::bail!("a Pad without data or pads");
        };
        let pads = self.constant(like, Tensor::from_vec(vec![pads.len()], pads)?);
        let mut inputs = node.inputs.clone();
        inputs[0] = Some(self.twin[&x]);
        inputs[1] = Some(pads);
        self.rebuilt(node, inputs)
    }

    /// A `Reshape` of a value with a twin that keeps the batch axis and the
    /// image axes and reshapes only the channel axes between them: the
    /// input's twin, the output twin's dims and its number of channel axes.
    pub(super) fn channel_reshape(&self, node: &Node) -> Option<(ValueId, Vec<i64>, usize)> {
        if node.op != "Reshape" || !node.domain.is_empty() || node.outputs.len() != 1 {
            return None;
        }
        let x = node.inputs.first().copied().flatten()?;
        let y = node.outputs[0]?;
        let (twin, kx) = self.layout_of(x)?;
        let xs = self.g.ty(x).shape.clone()?;
        let ys = self.g.ty(y).shape.clone()?;
        let images = xs.len().checked_sub(1 + kx)?;
        let ky = ys.len().checked_sub(1 + images)?;
        let kept = ky >= 1
            && xs.first() == ys.first()
            && xs[xs.len() - images..] == ys[ys.len() - images..];
        let dims = grouped_channels_last_perm(ys.len(), ky)
            .iter()
            .map(|&a| ys[a] as i64)
            .collect();
        kept.then_some((twin, dims, ky))
    }

    /// `node` (see [`Rewriter::channel_reshape`]) reshaping `twin` to `dims`.
    pub(super) fn reshape(
        &mut self,
        node: Node,
        twin: ValueId,
        dims: &[i64],
        k: usize,
    ) -> Result<()> {
        let Some(shape) = node.inputs.get(1).copied().flatten() else {
            kiln_ir::bail!("a Reshape without a shape");
        };
        let shape = self.constant(shape, Tensor::from_vec(vec![dims.len()], dims.to_vec())?);
        self.rebuilt_with(node, vec![Some(twin), Some(shape)], k)
    }

    /// A `Transpose` of a value with a twin that keeps the batch axis and
    /// the image axes in place and permutes only the channel axes: the
    /// input's twin, the permutation of the twin and its channel axes.
    pub(super) fn channel_transpose(&self, node: &Node) -> Option<(ValueId, Vec<i64>, usize)> {
        if node.op != "Transpose" || !node.domain.is_empty() || node.outputs.len() != 1 {
            return None;
        }
        let x = node.inputs.first().copied().flatten()?;
        let (twin, k) = self.layout_of(x)?;
        let rank = self.g.ty(x).shape.as_ref()?.len();
        let perm = node.attr_ints("perm").ok()??;
        let images = rank.checked_sub(1 + k)?;
        let channels_only = perm.len() == rank
            && perm[0] == 0
            && (1 + k..rank).all(|i| perm[i] == i as i64)
            && perm[1..1 + k].iter().all(|&p| (1..=k as i64).contains(&p));
        if !channels_only {
            return None;
        }
        // The twin is [N, images…, channels…]: its channel axis j is the
        // input's channel axis perm[1 + j].
        let mut moved: Vec<i64> = (0..=images as i64).collect();
        moved.extend(perm[1..1 + k].iter().map(|&p| images as i64 + p));
        Some((twin, moved, k))
    }

    /// `node` (see [`Rewriter::channel_transpose`]) permuting `twin` by `perm`.
    pub(super) fn transpose(
        &mut self,
        mut node: Node,
        twin: ValueId,
        perm: Vec<i64>,
        k: usize,
    ) -> Result<()> {
        node.attrs.insert("perm".to_string(), Attr::Ints(perm));
        self.rebuilt_with(node, vec![Some(twin)], k)
    }
}
