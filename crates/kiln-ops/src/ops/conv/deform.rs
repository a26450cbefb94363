//! DeformConv: a convolution whose taps are moved by per-window offsets
//! (sampled multilinearly, zero outside the image) and optionally scaled by
//! a mask; the sampled columns then go through the ordinary matrix product.

use super::window::for_each_kernel_tap;
use super::{add_bias, check_bias, infer_from, ConvShape};
use crate::ops::linalg::gemm::{gemm, run_typed, Accepts, GemmElem, MatView, TypedKernel};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{ensure, Node, Result, Tensor, TensorType};

pub(super) struct DeformConv;

/// Shapes of DeformConv(X, W, offset, B?, mask?).
struct DeformShape {
    conv: ConvShape,
    offset_groups: usize,
}

impl DeformShape {
    fn new(
        node: &Node,
        x: &[usize],
        w: &[usize],
        offset: &[usize],
        mask: Option<&[usize]>,
    ) -> Result<DeformShape> {
        let conv = ConvShape::new(node, x, w)?;
        let og = node.attr_int_or("offset_group", 1)?;
        ensure!(
            og >= 1 && conv.in_channels % og as usize == 0,
            "offset_group {og} must be positive and divide {} channels",
            conv.in_channels
        );
        let og = og as usize;
        let (rank, kt) = (conv.geom.image.len(), conv.geom.kernel_size());
        let expect = |per_tap: usize| {
            let mut s = vec![conv.batch, og * kt * per_tap];
            s.extend(&conv.geom.windows);
            s
        };
        ensure!(
            offset == expect(rank),
            "offset must have shape {:?}, got {offset:?}",
            expect(rank)
        );
        if let Some(m) = mask {
            ensure!(
                m == expect(1),
                "mask must have shape {:?}, got {m:?}",
                expect(1)
            );
        }
        Ok(DeformShape {
            conv,
            offset_groups: og,
        })
    }
}

struct DeformKernel<'a> {
    shape: &'a DeformShape,
    has_bias: bool,
    has_mask: bool,
}

/// The image value at fractional position `pos`: a multilinear blend of
/// the 2^rank surrounding pixels, pixels outside the image counting zero.
fn sample(plane: &[f64], image: &[usize], pos: &[f64]) -> f64 {
    let rank = image.len();
    let mut total = 0.0;
    'corners: for corner in 0..1usize << rank {
        let (mut weight, mut offset) = (1.0, 0usize);
        for d in 0..rank {
            let lo = pos[d].floor();
            let upper = corner >> d & 1 == 1;
            let c = if upper { lo + 1.0 } else { lo };
            if !(c >= 0.0 && c < image[d] as f64) {
                continue 'corners;
            }
            let frac = pos[d] - lo;
            weight *= if upper { frac } else { 1.0 - frac };
            offset = offset * image[d] + c as usize;
        }
        total += weight * plane[offset];
    }
    total
}

impl TypedKernel for DeformKernel<'_> {
    fn run<T: GemmElem>(&self, inputs: &[&[T]]) -> Result<Vec<T>> {
        let s = self.shape;
        let cs = &s.conv;
        let g = &cs.geom;
        let (x, w, offsets) = (inputs[0], inputs[1], inputs[2]);
        let bias = if self.has_bias { Some(inputs[3]) } else { None };
        let mask = if self.has_mask {
            Some(inputs[3 + self.has_bias as usize])
        } else {
            None
        };
        let (rank, kt, wins, plane) = (
            g.image.len(),
            g.kernel_size(),
            g.window_count(),
            g.image_size(),
        );
        let (c, og) = (cs.in_channels, s.offset_groups);
        let (cg, mg) = (c / cs.group, cs.out_channels / cs.group);
        // Each window's coordinates, row-major.
        let mut window_coords = vec![0usize; wins * rank];
        for wi in 0..wins {
            let mut rest = wi;
            for d in (0..rank).rev() {
                window_coords[wi * rank + d] = rest % g.windows[d];
                rest /= g.windows[d];
            }
        }
        let mut cols = vec![T::zero(); c * kt * wins];
        let mut out = vec![T::zero(); cs.batch * cs.out_channels * wins];
        let mut pos = vec![0f64; rank];
        for b in 0..cs.batch {
            for ch in 0..c {
                let img: Vec<f64> = x[(b * c + ch) * plane..(b * c + ch + 1) * plane]
                    .iter()
                    .map(|v| v.to_f64())
                    .collect();
                let ogi = ch / (c / og);
                for_each_kernel_tap(&g.kernel, |t, kc| {
                    let base = (b * og + ogi) * kt + t;
                    for wi in 0..wins {
                        for d in 0..rank {
                            let shift = offsets[(base * rank + d) * wins + wi].to_f64();
                            pos[d] = g.coord(d, window_coords[wi * rank + d], kc[d]) as f64 + shift;
                        }
                        let scale = mask.map_or(1.0, |m| m[base * wins + wi].to_f64());
                        cols[(ch * kt + t) * wins + wi] =
                            T::from_f64(sample(&img, &g.image, &pos) * scale);
                    }
                });
            }
            for gi in 0..cs.group {
                let w_view = MatView::row_major(w, gi * mg * cg * kt, mg, cg * kt)?;
                let col_view = MatView::row_major(&cols, gi * cg * kt * wins, cg * kt, wins)?;
                let o_off = (b * cs.out_channels + gi * mg) * wins;
                gemm(w_view, col_view, &mut out[o_off..o_off + mg * wins])?;
            }
        }
        if let Some(bias) = bias {
            add_bias(&mut out, bias, wins);
        }
        Ok(out)
    }
}

impl Op for DeformConv {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        let mask = cx.opt_input(4).map(|m| m.ty.shape.as_deref());
        if mask == Some(None) {
            return Ok(vec![TensorType::unknown_shape(dtype)]);
        }
        Ok(vec![infer_from(cx, dtype, &[0, 1, 2], |s| {
            let shape = DeformShape::new(cx.node, s[0], s[1], s[2], mask.flatten())?;
            check_bias(
                cx.opt_input(3).and_then(|b| b.ty.shape.as_deref()),
                shape.conv.out_channels,
            )?;
            Ok(shape.conv.out_shape())
        })?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, w, offset) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let (bias, mask) = (opt_arg(inputs, 3), opt_arg(inputs, 4));
        let shape = DeformShape::new(
            cx.node,
            &x.shape,
            &w.shape,
            &offset.shape,
            mask.map(|m| m.shape.as_slice()),
        )?;
        check_bias(bias.map(|b| b.shape.as_slice()), shape.conv.out_channels)?;
        let mut operands = vec![x, w, offset];
        operands.extend(bias);
        operands.extend(mask);
        let kernel = DeformKernel {
            shape: &shape,
            has_bias: bias.is_some(),
            has_mask: mask.is_some(),
        };
        let data = run_typed(&kernel, &operands, Accepts::Floats)?;
        Ok(vec![Tensor::new(shape.conv.out_shape(), data)?])
    }
}
