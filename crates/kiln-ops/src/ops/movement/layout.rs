//! Ops that reorder the elements of one tensor: Transpose, DepthToSpace,
//! SpaceToDepth, Tile, ReverseSequence and Trilu (which zeroes a triangle).

use super::common::{
    dims_from_i64, for_each_index, gather_fill, int_values, strides_i64, take, typed,
};
use crate::registry::Registry;
use crate::util::{strides, transpose};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("Transpose", Transpose);
    r.add("DepthToSpace", BlockMove { to_space: true });
    r.add("SpaceToDepth", BlockMove { to_space: false });
    r.add("Tile", Tile);
    r.add("ReverseSequence", ReverseSequence);
    r.add("Trilu", Trilu);
}

/// Output type for ops whose output shape is a function of the first
/// input's shape only (unknown when that shape is).
fn same_rule(cx: &InferCx, rule: impl Fn(&[usize]) -> Result<Vec<usize>>) -> Result<TensorType> {
    let x = cx.input(0)?;
    Ok(typed(
        x.ty.dtype,
        x.ty.shape.as_deref().map(rule).transpose()?,
    ))
}

struct Transpose;

impl Transpose {
    /// The permutation: the `perm` attribute, else reversed axes.
    fn perm(node: &Node, rank: usize) -> Result<Vec<usize>> {
        let Some(p) = node.attr_ints("perm")? else {
            return Ok((0..rank).rev().collect());
        };
        ensure!(
            p.len() == rank,
            "perm {p:?} has {} entries but the input has rank {rank}",
            p.len()
        );
        let mut seen = vec![false; rank];
        let mut out = Vec::with_capacity(rank);
        for &a in p {
            let a = usize::try_from(a).ok().filter(|&a| a < rank && !seen[a]);
            let Some(a) = a else {
                bail!("perm {p:?} is not a permutation of 0..{rank}")
            };
            seen[a] = true;
            out.push(a);
        }
        Ok(out)
    }
}

impl Op for Transpose {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![same_rule(cx, |s| {
            Ok(Transpose::perm(cx.node, s.len())?
                .iter()
                .map(|&p| s[p])
                .collect())
        })?])
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        Ok(vec![transpose(x, &Transpose::perm(cx.node, x.rank())?)?])
    }
}

/// DepthToSpace (`to_space`) and SpaceToDepth: a reshape to 6-D, a
/// transpose and a reshape back to 4-D.
struct BlockMove {
    to_space: bool,
}

/// The plan of one block move: 6-D view, permutation, 4-D result.
struct BlockPlan {
    view: Vec<usize>,
    perm: [usize; 6],
    out: Vec<usize>,
}

impl BlockMove {
    fn plan(&self, node: &Node, shape: &[usize]) -> Result<BlockPlan> {
        let bs = node
            .attr_int("blocksize")?
            .ok_or_else(|| kiln_ir::Error::new("attribute 'blocksize' is required"))?;
        ensure!(bs > 0, "blocksize must be positive, got {bs}");
        let bs = bs as usize;
        let mode = node.attr_string_or("mode", "DCR")?;
        ensure!(
            mode == "DCR" || mode == "CRD",
            "mode must be DCR or CRD, got '{mode}'"
        );
        let &[n, c, h, w] = shape else {
            bail!("input must be 4-D, got shape {shape:?}")
        };
        let crd = mode == "CRD";
        if self.to_space {
            let area = bs * bs;
            ensure!(
                c % area == 0,
                "channels {c} are not divisible by blocksize² {area}"
            );
            let c2 = c / area;
            let (view, perm) = if crd {
                (vec![n, c2, bs, bs, h, w], [0, 1, 4, 2, 5, 3])
            } else {
                (vec![n, bs, bs, c2, h, w], [0, 3, 4, 1, 5, 2])
            };
            Ok(BlockPlan {
                view,
                perm,
                out: vec![n, c2, h * bs, w * bs],
            })
        } else {
            ensure!(
                h % bs == 0 && w % bs == 0,
                "spatial dims {h}x{w} are not divisible by blocksize {bs}"
            );
            let view = vec![n, c, h / bs, bs, w / bs, bs];
            let perm = if crd {
                [0, 1, 3, 5, 2, 4]
            } else {
                [0, 3, 5, 1, 2, 4]
            };
            Ok(BlockPlan {
                view,
                perm,
                out: vec![n, c * bs * bs, h / bs, w / bs],
            })
        }
    }
}

impl Op for BlockMove {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![same_rule(cx, |s| Ok(self.plan(cx.node, s)?.out))?])
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let plan = self.plan(cx.node, &x.shape)?;
        let moved = transpose(&x.reshaped(plan.view)?, &plan.perm)?;
        Ok(vec![moved.reshaped(plan.out)?])
    }
}

struct Tile;

impl Tile {
    fn out_shape(shape: &[usize], repeats: &Tensor) -> Result<Vec<usize>> {
        let reps = dims_from_i64(&int_values(repeats)?, "repeats")?;
        ensure!(
            repeats.rank() == 1,
            "repeats must be 1-D, got shape {:?}",
            repeats.shape
        );
        ensure!(
            reps.len() == shape.len(),
            "repeats has {} entries but the input has rank {}",
            reps.len(),
            shape.len()
        );
        let out: Vec<usize> = shape
            .iter()
            .zip(&reps)
            .map(|(d, r)| d.saturating_mul(*r))
            .collect();
        super::common::checked_numel(&out)?;
        Ok(out)
    }
}

impl Op for Tile {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        Ok(vec![match (cx.shape(0)?, cx.value(1)) {
            (Some(s), Some(r)) => TensorType::new(dtype, Tile::out_shape(s, r)?),
            _ => TensorType::unknown_shape(dtype),
        }])
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let out = Tile::out_shape(&x.shape, arg(inputs, 1)?)?;
        let st = strides(&x.shape);
        let mut idx = Vec::with_capacity(out.iter().product());
        for_each_index(&out, |o| {
            idx.push(
                o.iter()
                    .zip(&x.shape)
                    .zip(&st)
                    .map(|((&i, &d), &s)| (i % d) * s)
                    .sum(),
            )
        });
        Ok(vec![take(x, out, idx)?])
    }
}

struct ReverseSequence;

impl ReverseSequence {
    /// (time axis, batch axis), which must be 0 and 1 in some order.
    fn axes(node: &Node, rank: usize) -> Result<(usize, usize)> {
        let t = node.attr_int_or("time_axis", 0)?;
        let b = node.attr_int_or("batch_axis", 1)?;
        ensure!(rank >= 2, "input must have rank >= 2, got {rank}");
        ensure!(
            (t, b) == (0, 1) || (t, b) == (1, 0),
            "time_axis and batch_axis must be 0 and 1, got {t} and {b}"
        );
        Ok((t as usize, b as usize))
    }
}

impl Op for ReverseSequence {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![same_rule(cx, |s| {
            ReverseSequence::axes(cx.node, s.len())?;
            Ok(s.to_vec())
        })?])
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let (ta, ba) = ReverseSequence::axes(cx.node, x.rank())?;
        let lens = int_values(arg(inputs, 1)?)?;
        let (max_time, batch) = (x.shape[ta], x.shape[ba]);
        ensure!(
            lens.len() == batch,
            "sequence_lens has {} entries but the batch size is {batch}",
            lens.len()
        );
        if let Some(l) = lens.iter().find(|&&l| l < 0 || l as usize > max_time) {
            bail!("sequence length {l} is outside [0, {max_time}]");
        }
        let st = strides_i64(&x.shape);
        let mut idx = Vec::with_capacity(x.len());
        for_each_index(&x.shape, |o| {
            let (t, len) = (o[ta], lens[o[ba]] as usize);
            let src_t = if t < len { len - 1 - t } else { t };
            let off: i64 = o
                .iter()
                .zip(&st)
                .enumerate()
                .map(|(d, (&i, &s))| {
                    if d == ta {
                        src_t as i64 * s
                    } else {
                        i as i64 * s
                    }
                })
                .sum();
            idx.push(off as usize);
        });
        Ok(vec![take(x, x.shape.clone(), idx)?])
    }
}

struct Trilu;

impl Op for Trilu {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![same_rule(cx, |s| {
            ensure!(s.len() >= 2, "input must have rank >= 2, got {}", s.len());
            Ok(s.to_vec())
        })?])
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        ensure!(x.rank() >= 2, "input must have rank >= 2, got {}", x.rank());
        let k = match opt_arg(inputs, 1) {
            Some(t) => {
                let v = int_values(t)?;
                ensure!(v.len() == 1, "k must have one element, got {}", v.len());
                v[0]
            }
            None => 0,
        };
        let upper = cx.node.attr_int_or("upper", 1)? != 0;
        let (rows, cols) = (x.shape[x.rank() - 2], x.shape[x.rank() - 1]);
        // Element (i, j) is kept on the upper side of diagonal k when j - i >= k.
        let keep = |i: usize, j: usize| {
            let diff = j as i64 - i as i64;
            if upper {
                diff >= k
            } else {
                diff <= k
            }
        };
        let idx: Vec<Option<usize>> = (0..x.len())
            .map(|o| {
                let (i, j) = ((o / cols) % rows, o % cols);
                keep(i, j).then_some(o)
            })
            .collect();
        Ok(vec![Tensor::new(
            x.shape.clone(),
            gather_fill(&x.data, &idx, None)?,
        )?])
    }
}
