//! ConvInteger and QLinearConv: the convolution's direct kernel on exact,
//! zero-point-centered integers (QLinearConv then requantizes).

use super::*;

/// How a convolution zero point broadcasts: a scalar, or one value per
/// index of `axis` (channels of X, output channels of W).
fn channel_param_shape(p: &Tensor, rank: usize, axis: usize) -> Vec<usize> {
    if p.len() == 1 {
        return vec![];
    }
    let mut s = vec![1; rank];
    s[axis] = p.len();
    s
}

/// `x - x_zp` and `w - w_zp` as exact i32 values and the convolution of them.
fn integer_conv(
    node: &Node,
    x: &Tensor,
    x_zp: Option<&Tensor>,
    w: &Tensor,
    w_zp: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<(ConvShape, Vec<i32>)> {
    let cs = ConvShape::new(node, &x.shape, &w.shape)?;
    let xc = centered(
        x,
        x_zp,
        &x_zp.map_or(vec![], |z| channel_param_shape(z, x.rank(), 1)),
    )?;
    let wc = centered(
        w,
        w_zp,
        &w_zp.map_or(vec![], |z| channel_param_shape(z, w.rank(), 0)),
    )?;
    let bias = match bias {
        Some(b) => {
            check_bias(Some(&b.shape), cs.out_channels)?;
            Some(b.as_slice::<i32>()?)
        }
        None => None,
    };
    let out = conv_forward(&cs, &xc, &wc, bias)?;
    Ok((cs, out))
}

/// ConvInteger(x, w, x_zero_point?, w_zero_point?) -> i32.
pub(super) struct ConvInteger;

impl Op for ConvInteger {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![infer_from(cx, DType::I32, &[0, 1], |s| {
            Ok(ConvShape::new(cx.node, s[0], s[1])?.out_shape())
        })?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, w) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let (cs, out) = integer_conv(cx.node, x, opt_arg(inputs, 2), w, opt_arg(inputs, 3), None)?;
        Ok(vec![Tensor::from_vec(cs.out_shape(), out)?])
    }
}

/// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?).
pub(super) struct QLinearConv;

impl Op for QLinearConv {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx
            .opt_input(7)
            .map_or(cx.input(0)?.ty.dtype, |z| z.ty.dtype);
        Ok(vec![infer_from(cx, dtype, &[0, 3], |s| {
            Ok(ConvShape::new(cx.node, s[0], s[1])?.out_shape())
        })?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, x_scale, w, w_scale, y_scale) = (
            arg(inputs, 0)?,
            arg(inputs, 1)?,
            arg(inputs, 3)?,
            arg(inputs, 4)?,
            arg(inputs, 6)?,
        );
        let y_zp = opt_arg(inputs, 7);
        let (cs, acc) = integer_conv(
            cx.node,
            x,
            opt_arg(inputs, 2),
            w,
            opt_arg(inputs, 5),
            opt_arg(inputs, 8),
        )?;
        ensure!(
            x_scale.len() == 1 && y_scale.len() == 1,
            "QLinearConv x_scale and y_scale must be scalars"
        );
        ensure!(
            w_scale.len() == 1 || w_scale.shape == [cs.out_channels],
            "w_scale must be a scalar or have shape [{}], got {:?}",
            cs.out_channels,
            w_scale.shape
        );
        let scale_dtype = x_scale.dtype();
        ensure!(
            scale_dtype.is_float(),
            "QLinearConv scales must be floats, got {scale_dtype}"
        );
        let (xs, ys) = (x_scale.data.get_f64(0), y_scale.data.get_f64(0));
        let multipliers: Vec<f64> = w_scale
            .data
            .to_f64_vec()?
            .into_iter()
            .map(|ws| combined_scale(scale_dtype, xs, ws, ys))
            .collect();
        let zp = match y_zp {
            Some(z) => {
                ensure!(z.len() == 1, "QLinearConv y_zero_point must be a scalar");
                z.data.get_f64(0)
            }
            None => 0.0,
        };
        let plane = cs.geom.window_count().max(1);
        let values = acc.iter().enumerate().map(|(i, &v)| {
            v as f64 * multipliers[(i / plane) % cs.out_channels % multipliers.len()] + zp
        });
        let dtype = y_zp.map_or(x.dtype(), |z| z.dtype());
        Ok(vec![Tensor::new(
            cs.out_shape(),
            saturate_round(dtype, values)?,
        )?])
    }
}
