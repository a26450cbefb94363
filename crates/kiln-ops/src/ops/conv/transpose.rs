//! ConvTranspose and Col2Im: a matrix product, then col2im scatters the
//! columns into the (larger) output image. A ConvTranspose whose kernel
//! tiles its output opens into a MatMul and a shuffle (`blocks`).

mod blocks;

use super::*;

/// Shapes of a transposed convolution: X `[N, C, in...]`, W `[C, M/group, kernel...]`;
/// the output image follows [`Geometry::transposed`].
struct ConvTransposeShape {
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    group: usize,
    geom: Geometry,
}

impl ConvTransposeShape {
    fn new(node: &Node, x: &[usize], w: &[usize]) -> Result<ConvTransposeShape> {
        ensure!(
            x.len() >= 3,
            "ConvTranspose input must have rank >= 3, got {x:?}"
        );
        ensure!(
            w.len() == x.len(),
            "weights of shape {w:?} do not match input rank {}",
            x.len()
        );
        let rank = x.len() - 2;
        let group = node.attr_int_or("group", 1)?;
        ensure!(group >= 1, "group must be positive, got {group}");
        let group = group as usize;
        ensure!(
            w[0] == x[1],
            "input has {} channels but weights {w:?} expect {}",
            x[1],
            w[0]
        );
        ensure!(
            x[1].is_multiple_of(group),
            "{} input channels do not divide into {group} groups",
            x[1]
        );
        let kernel = kernel_shape(node, Some(&w[2..]))?;
        let attrs = WindowAttrs::from_node(node, rank)?;
        let output_padding: Vec<usize> = match node.attr_ints("output_padding")? {
            Some(p) => {
                ensure!(
                    p.iter().all(|&v| v >= 0),
                    "output_padding must not be negative, got {p:?}"
                );
                p.iter().map(|&v| v as usize).collect()
            }
            None => vec![0; rank],
        };
        let output_shape: Option<Vec<usize>> = match node.attr_ints("output_shape")? {
            Some(s) => {
                ensure!(
                    s.iter().all(|&v| v >= 0),
                    "output_shape must not be negative, got {s:?}"
                );
                // Some exporters write the full [N, C, spatial...] shape.
                let spatial = if s.len() == rank + 2 { &s[2..] } else { s };
                Some(spatial.iter().map(|&v| v as usize).collect())
            }
            None => None,
        };
        let geom = Geometry::transposed(
            &attrs,
            &x[2..],
            &kernel,
            &output_padding,
            output_shape.as_deref(),
        )?;
        let out_channels = w[1]
            .checked_mul(group)
            .ok_or_else(|| kiln_ir::Error::new("too many output channels"))?;
        let shape = ConvTransposeShape {
            batch: x[0],
            in_channels: x[1],
            out_channels,
            group,
            geom,
        };
        checked_numel(&shape.out_shape())?;
        Ok(shape)
    }

    fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.batch, self.out_channels];
        s.extend(&self.geom.image);
        s
    }
}

pub(super) struct ConvTranspose;

struct ConvTransposeKernel<'a>(&'a ConvTransposeShape);

impl TypedKernel for ConvTransposeKernel<'_> {
    /// Per batch item and group: columns = W_gᵀ · X_g, scattered into the
    /// output image by col2im.
    fn run<T: GemmElem>(&self, inputs: &[&[T]]) -> Result<Vec<T>> {
        let s = self.0;
        let (x, w) = (inputs[0], inputs[1]);
        let g = &s.geom;
        let (cg, mg) = (s.in_channels / s.group, s.out_channels / s.group);
        let (kt, wins, plane) = (g.kernel_size(), g.window_count(), g.image_size());
        let taps = Taps::new(g);
        let mut cols = vec![T::zero(); mg * kt * wins];
        let mut out = vec![T::zero(); s.batch * s.out_channels * plane];
        for b in 0..s.batch {
            for gi in 0..s.group {
                let x_view = MatView::row_major(x, (b * s.in_channels + gi * cg) * wins, cg, wins)?;
                let w_view = MatView::row_major(w, gi * cg * mg * kt, cg, mg * kt)?;
                gemm(w_view.t(), x_view, &mut cols)?;
                let o_off = (b * s.out_channels + gi * mg) * plane;
                col2im(
                    &cols,
                    mg,
                    g,
                    &taps,
                    &mut out[o_off..o_off + mg * plane],
                    T::add,
                );
            }
        }
        if let Some(bias) = inputs.get(2) {
            add_bias(&mut out, bias, plane);
        }
        Ok(out)
    }
}

impl Op for ConvTranspose {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        Ok(vec![infer_from(cx, dtype, &[0, 1], |s| {
            let shape = ConvTransposeShape::new(cx.node, s[0], s[1])?;
            check_bias(
                cx.opt_input(2).and_then(|b| b.ty.shape.as_deref()),
                shape.out_channels,
            )?;
            Ok(shape.out_shape())
        })?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, w, b) = (arg(inputs, 0)?, arg(inputs, 1)?, opt_arg(inputs, 2));
        let shape = ConvTransposeShape::new(cx.node, &x.shape, &w.shape)?;
        check_bias(b.map(|b| b.shape.as_slice()), shape.out_channels)?;
        let mut operands = vec![x, w];
        operands.extend(b);
        let data = run_typed(&ConvTransposeKernel(&shape), &operands, Accepts::Floats)?;
        Ok(vec![Tensor::new(shape.out_shape(), data)?])
    }

    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        blocks::decompose(cx, b, inputs)
    }
}

/// Col2Im(input [N, C*prod(block), L], image_shape, block_shape): sums the
/// sliding blocks back into images `[N, C, image...]`.
pub(super) struct Col2Im;

struct Col2ImShape {
    batch: usize,
    channels: usize,
    geom: Geometry,
}

impl Col2ImShape {
    fn new(node: &Node, input: &[usize], image: &Tensor, block: &Tensor) -> Result<Col2ImShape> {
        let to_dims = |t: &Tensor, what: &str| -> Result<Vec<usize>> {
            let v = ints(t)?;
            ensure!(
                t.rank() == 1 && !v.is_empty(),
                "{what} must be a non-empty 1-D tensor"
            );
            ensure!(
                v.iter().all(|&x| x >= 1),
                "{what} must be positive, got {v:?}"
            );
            Ok(v.into_iter().map(|x| x as usize).collect())
        };
        let (image, block) = (
            to_dims(image, "image_shape")?,
            to_dims(block, "block_shape")?,
        );
        ensure!(
            image.len() == block.len(),
            "image_shape {image:?} and block_shape {block:?} differ in rank"
        );
        ensure!(
            input.len() == 3,
            "Col2Im input must be [N, C*prod(block_shape), L], got {input:?}"
        );
        let attrs = WindowAttrs::from_node(node, image.len())?;
        let geom = Geometry::forward(&attrs, &image, &block)?;
        let kt = geom.kernel_size();
        ensure!(
            input[1].is_multiple_of(kt),
            "input dim 1 ({}) is not a multiple of the block size {kt}",
            input[1]
        );
        ensure!(
            input[2] == geom.window_count(),
            "input has {} blocks but the geometry gives {}",
            input[2],
            geom.window_count()
        );
        let shape = Col2ImShape {
            batch: input[0],
            channels: input[1] / kt,
            geom,
        };
        checked_numel(&shape.out_shape())?;
        Ok(shape)
    }

    fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.batch, self.channels];
        s.extend(&self.geom.image);
        s
    }
}

struct Col2ImKernel<'a>(&'a Col2ImShape);

impl TypedKernel for Col2ImKernel<'_> {
    fn run<T: GemmElem>(&self, inputs: &[&[T]]) -> Result<Vec<T>> {
        let s = self.0;
        let g = &s.geom;
        let taps = Taps::new(g);
        let (per_in, per_out) = (
            s.channels * g.kernel_size() * g.window_count(),
            s.channels * g.image_size(),
        );
        let mut out = vec![T::zero(); s.batch * per_out];
        for b in 0..s.batch {
            col2im(
                &inputs[0][b * per_in..(b + 1) * per_in],
                s.channels,
                g,
                &taps,
                &mut out[b * per_out..(b + 1) * per_out],
                T::add,
            );
        }
        Ok(out)
    }
}

impl Op for Col2Im {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        match (cx.shape(0)?, cx.value(1), cx.value(2)) {
            (Some(input), Some(image), Some(block)) => Ok(vec![TensorType::new(
                dtype,
                Col2ImShape::new(cx.node, input, image, block)?.out_shape(),
            )]),
            _ => Ok(vec![TensorType::unknown_shape(dtype)]),
        }
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let shape = Col2ImShape::new(cx.node, &x.shape, arg(inputs, 1)?, arg(inputs, 2)?)?;
        if x.dtype() == DType::Bool || x.dtype() == DType::Str {
            bail!("Col2Im does not support {}", x.dtype());
        }
        let data = run_typed(&Col2ImKernel(&shape), &[x], Accepts::Numbers)?;
        Ok(vec![Tensor::new(shape.out_shape(), data)?])
    }
}
