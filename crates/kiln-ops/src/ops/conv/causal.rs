//! CausalConvWithState: a depthwise causal convolution over a sequence that
//! continues a saved state, and the next state.

use super::*;

/// CausalConvWithState(input [B, C, L], weight [C, 1, k], bias?, past_state?)
/// -> (output [B, C, L], present_state [B, C, k-1]): per channel, the
/// sequence `past_state ++ input` (zeros when there is no state) is
/// convolved with the channel's kernel, optionally followed by SiLU; the
/// last k-1 positions of that sequence are the next state.
pub(super) struct CausalConvWithState;

impl CausalConvWithState {
    /// (kernel size, whether SiLU follows) after checking the shapes.
    fn check(
        node: &Node,
        x: &[usize],
        w: &[usize],
        bias: Option<&[usize]>,
        past: Option<&[usize]>,
    ) -> Result<(usize, bool)> {
        ensure!(
            x.len() == 3,
            "input must be [batch, channels, length], got {x:?}"
        );
        ensure!(
            w.len() == 3 && w[0] == x[1] && w[1] == 1 && w[2] >= 1,
            "weight must be [{}, 1, k] with k >= 1, got {w:?}",
            x[1]
        );
        check_bias(bias, x[1])?;
        if let Some(p) = past {
            ensure!(
                p == [x[0], x[1], w[2] - 1],
                "past_state must be [{}, {}, {}], got {p:?}",
                x[0],
                x[1],
                w[2] - 1
            );
        }
        let silu = match node.attr_string_or("activation", "none")? {
            "none" => false,
            "silu" | "swish" => true,
            other => bail!("unknown activation '{other}' (expected none, silu or swish)"),
        };
        Ok((w[2], silu))
    }

    fn typed<T: Num>(
        x: &[T],
        shape: &[usize],
        w: &[T],
        bias: Option<&[T]>,
        past: Option<&[T]>,
        k: usize,
        silu: bool,
    ) -> (Vec<T>, Vec<T>) {
        let (rows, len) = (shape[0] * shape[1], shape[2]);
        let mut out = Vec::with_capacity(rows * len);
        let mut state = Vec::with_capacity(rows * (k - 1));
        let mut seq = Vec::with_capacity(len + k - 1);
        for r in 0..rows {
            let c = r % shape[1];
            seq.clear();
            match past {
                Some(p) => seq.extend(p[r * (k - 1)..(r + 1) * (k - 1)].iter().map(|v| v.to_f64())),
                None => seq.resize(k - 1, 0.0),
            }
            seq.extend(x[r * len..(r + 1) * len].iter().map(|v| v.to_f64()));
            let kernel = &w[c * k..(c + 1) * k];
            let b = bias.map_or(0.0, |b| b[c].to_f64());
            for t in 0..len {
                let sum = b + kernel
                    .iter()
                    .zip(&seq[t..t + k])
                    .map(|(wv, sv)| wv.to_f64() * sv)
                    .sum::<f64>();
                // The convolution is rounded to T before the activation, as the reference does.
                let v = T::from_f64(sum).to_f64();
                out.push(T::from_f64(if silu { v / (1.0 + (-v).exp()) } else { v }));
            }
            state.extend(seq[seq.len() - (k - 1)..].iter().map(|&v| T::from_f64(v)));
        }
        (out, state)
    }
}

impl Op for CausalConvWithState {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        let (Some(x), Some(w)) = (cx.shape(0)?, cx.shape(1)?) else {
            return Ok(vec![TensorType::unknown_shape(dtype); 2]);
        };
        let shape_of = |i: usize| cx.opt_input(i).and_then(|t| t.ty.shape.as_deref());
        let (k, _) = Self::check(cx.node, x, w, shape_of(2), shape_of(3))?;
        Ok(vec![
            TensorType::new(dtype, x.to_vec()),
            TensorType::new(dtype, vec![x[0], x[1], k - 1]),
        ])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, w, bias, past) = (
            arg(inputs, 0)?,
            arg(inputs, 1)?,
            opt_arg(inputs, 2),
            opt_arg(inputs, 3),
        );
        let (k, silu) = Self::check(
            cx.node,
            &x.shape,
            &w.shape,
            bias.map(|b| b.shape.as_slice()),
            past.map(|p| p.shape.as_slice()),
        )?;
        ensure!(
            x.dtype().is_float(),
            "CausalConvWithState needs a float input, got {}",
            x.dtype()
        );
        let (out, state) = dispatch_num!(
            &x.data,
            |v: T| {
                let bias = bias.map(|b| b.as_slice::<T>()).transpose()?;
                let past = past.map(|p| p.as_slice::<T>()).transpose()?;
                let (out, state) =
                    Self::typed::<T>(v, &x.shape, w.as_slice::<T>()?, bias, past, k, silu);
                (T::wrap(out), T::wrap(state))
            },
            bail!("CausalConvWithState needs a float input")
        );
        Ok(vec![
            Tensor::new(x.shape.clone(), out)?,
            Tensor::new(vec![x.shape[0], x.shape[1], k - 1], state)?,
        ])
    }
}
