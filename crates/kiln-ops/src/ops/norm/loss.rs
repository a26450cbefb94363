//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (which is NLL of
//! the log-softmax over the class axis, optionally returning the log
//! probabilities). Inputs are (N, C, d1..dk) scores and (N, d1..dk) integer
//! targets; optional per-class weights and `ignore_index`; `reduction`
//! none/sum/mean (mean divides by the total weight of counted elements).

use super::softmax::{log_softmax_line, Stages};
use super::{float_input_type, float_tensor, float_values, Lines};
use crate::registry::Registry;
use crate::util::ints;
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("NegativeLogLikelihoodLoss", Loss { softmax: false });
    r.add("SoftmaxCrossEntropyLoss", Loss { softmax: true });
}

struct Loss {
    softmax: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

fn reduction(node: &Node) -> Result<Reduction> {
    Ok(match node.attr_string_or("reduction", "mean")? {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        other => bail!("reduction must be none, sum or mean, got '{other}'"),
    })
}

/// Output shape of the loss: the target's shape, or a scalar when reduced.
fn loss_shape(node: &Node, target: &[usize]) -> Result<Vec<usize>> {
    Ok(if reduction(node)? == Reduction::None {
        target.to_vec()
    } else {
        vec![]
    })
}

impl Op for Loss {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = float_input_type(cx, 0)?;
        let loss = match cx.shape(1)? {
            Some(t) => TensorType::new(x.dtype, loss_shape(cx.node, t)?),
            None if reduction(cx.node)? != Reduction::None => TensorType::new(x.dtype, vec![]),
            None => TensorType::unknown_shape(x.dtype),
        };
        let mut out = vec![loss];
        if self.softmax {
            out.push(x);
        }
        Ok(out)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, target) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let mut scores = float_values(x)?;
        if x.rank() < 2 {
            bail!("input must have shape (N, C, ...), got {:?}", x.shape);
        }
        let lines = Lines::along(&x.shape, 1);
        if self.softmax && !scores.is_empty() {
            let stages = Stages::of(x.dtype());
            lines.for_each(&mut scores, |line| log_softmax_line(line, stages));
        }
        let mut expected_target = vec![x.shape[0]];
        expected_target.extend_from_slice(&x.shape[2..]);
        if target.shape != expected_target {
            bail!(
                "target shape {:?} does not match input shape {:?}",
                target.shape,
                x.shape
            );
        }
        let weights = opt_arg(inputs, 2).map(float_values).transpose()?;
        if weights.as_ref().is_some_and(|w| w.len() != x.shape[1]) {
            bail!("weights must have one value per class ({})", x.shape[1]);
        }
        let ignore = cx.node.attr_int("ignore_index")?;
        let (losses, total_weight) =
            nll(&scores, lines, &ints(target)?, weights.as_deref(), ignore)?;
        let value = match reduction(cx.node)? {
            Reduction::None => losses,
            Reduction::Sum => vec![losses.iter().sum()],
            Reduction::Mean => vec![losses.iter().sum::<f64>() / total_weight],
        };
        let mut out = vec![float_tensor(
            x.dtype(),
            loss_shape(cx.node, &target.shape)?,
            &value,
        )?];
        if self.softmax {
            out.push(float_tensor(x.dtype(), x.shape.clone(), &scores)?);
        }
        Ok(out)
    }
}

/// Weighted negative log-likelihood of each target element, and the sum of
/// the weights of the elements that count (ignored ones weigh 0).
fn nll(
    log_prob: &[f64],
    lines: Lines,
    target: &[i64],
    weights: Option<&[f64]>,
    ignore: Option<i64>,
) -> Result<(Vec<f64>, f64)> {
    let (classes, spatial) = (lines.len, lines.inner);
    debug_assert_eq!(target.len(), lines.outer * spatial);
    let mut losses = Vec::with_capacity(target.len());
    let mut total = 0.0;
    for (k, &t) in target.iter().enumerate() {
        if Some(t) == ignore {
            losses.push(0.0);
            continue;
        }
        if t < 0 || t as usize >= classes {
            bail!("target {t} is out of range for {classes} classes");
        }
        let (n, d) = (k / spatial.max(1), k % spatial.max(1));
        let w = weights.map_or(1.0, |w| w[t as usize]);
        losses.push(-log_prob[(n * classes + t as usize) * spatial + d] * w);
        total += w;
    }
    Ok((losses, total))
}
