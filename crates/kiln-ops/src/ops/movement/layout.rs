//! Ops that reorder the elements of one tensor. Transpose (a permutation
//! of the index), Tile (indices mod the input's dims) and Trilu (a select on
//! the row and column indices) are primitives; DepthToSpace and
//! SpaceToDepth open into Reshape → Transpose → Reshape; ReverseSequence,
//! whose source index depends on data through a comparison, stays a
//! library op.

use super::common::{
    dims_from_i64, for_each_index, input_shapes, int_values, moved, strides_i64, take, typed,
};
use crate::compound::{Comp, Compound};
use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, Expr, IndexExpr, TensorExpr, Var};
use crate::util::transpose;
use crate::{arg, inputs_id, Builder, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, Attr, DType, Node, Result, Tensor, TensorType, ValueId};

pub fn register(r: &mut Registry) {
    r.add("Transpose", Prim(Transpose));
    r.add("DepthToSpace", Comp(BlockMove { to_space: true }));
    r.add("SpaceToDepth", Comp(BlockMove { to_space: false }));
    r.add("Tile", Prim(Tile));
    r.add("ReverseSequence", ReverseSequence);
    r.add("Trilu", Prim(Trilu));
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

/// `out[i0, …] = in0[…]` with output dim `l` reading input dim `perm[l]`.
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

impl Primitive for Transpose {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (Some(inputs), Some(shape)) = (input_shapes(cx), cx.shape(0)?) else {
            return Ok(None);
        };
        let perm = Transpose::perm(cx.node, shape.len())?;
        let mut index = vec![IndexExpr::constant(0); shape.len()];
        for (l, &p) in perm.iter().enumerate() {
            index[p] = IndexExpr::out(l);
        }
        let out = perm.iter().map(|&p| shape[p]).collect();
        Ok(Some(moved(cx.input(0)?.ty.dtype, out, inputs, index)))
    }

    /// A strided copy (the interpreter runs models' many transposes).
    fn kernel(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Option<Result<Tensor>> {
        let run = || {
            let x = arg(inputs, 0)?;
            transpose(x, &Transpose::perm(cx.node, x.rank())?)
        };
        Some(run())
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

/// `dims` as a constant shape input.
fn shape_input(b: &mut Builder, dims: &[usize]) -> ValueId {
    let v: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    b.ints(&v)
}

impl Compound for BlockMove {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let x = inputs_id(inputs, 0)?;
        let plan = self.plan(cx.node, &b.shape(x)?)?;
        let view = shape_input(b, &plan.view);
        let viewed = b.op("Reshape", &[x, view], &[])?;
        let perm = Attr::Ints(plan.perm.iter().map(|&p| p as i64).collect());
        let moved = b.op("Transpose", &[viewed], &[("perm", perm)])?;
        let out = shape_input(b, &plan.out);
        Ok(vec![Some(b.op("Reshape", &[moved, out], &[])?)])
    }
}

/// `out[i] = in0[i mod shape]`, the output `repeats` times the input.
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

impl Primitive for Tile {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (Some(inputs), Some(shape), Some(repeats)) =
            (input_shapes(cx), cx.shape(0)?, cx.value(1))
        else {
            return Ok(None);
        };
        let out = Tile::out_shape(shape, repeats)?;
        let index = shape
            .iter()
            .enumerate()
            .map(|(l, &d)| match d {
                // An empty input dim gives an empty output: nothing is read.
                0 => IndexExpr::constant(0),
                d => IndexExpr::Mod(Box::new(IndexExpr::out(l)), d as i64),
            })
            .collect();
        Ok(Some(moved(cx.input(0)?.ty.dtype, out, inputs, index)))
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

/// Trilu: `out[…, i, j] = in0[…, i, j]` where `j - i >= k` (upper) or
/// `j - i <= k` (lower), else 0; `k` is read from input 1 (default 0).
struct Trilu;

impl Primitive for Trilu {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (Some(inputs), Some(shape)) = (input_shapes(cx), cx.shape(0)?) else {
            return Ok(None);
        };
        let (dtype, shape) = (cx.input(0)?.ty.dtype, shape.to_vec());
        let r = shape.len();
        ensure!(r >= 2, "input must have rank >= 2, got {r}");
        let mut accesses = vec![Access {
            input: 0,
            index: (0..r).map(IndexExpr::out).collect(),
        }];
        let k = match &inputs.get(1) {
            Some(Some(ks)) => {
                ensure!(
                    ks.iter().product::<usize>() == 1,
                    "k must have one element, got shape {ks:?}"
                );
                ensure!(
                    cx.input(1)?.ty.dtype == DType::I64,
                    "k must be int64, got {}",
                    cx.input(1)?.ty.dtype
                );
                accesses.push(Access {
                    input: 1,
                    index: vec![IndexExpr::constant(0); ks.len()],
                });
                Expr::Load(1)
            }
            _ => Expr::constant(DType::I64, 0.0)?,
        };
        let diagonal = Expr::Index(IndexExpr::affine(
            [(Var::Out(r - 1), 1), (Var::Out(r - 2), -1)],
            0,
        ));
        let side = if cx.node.attr_int_or("upper", 1)? != 0 {
            "GreaterOrEqual"
        } else {
            "LessOrEqual"
        };
        let keep = Expr::call(side, vec![diagonal, k]);
        let zero = Expr::constant(dtype, 0.0)?;
        let body = Expr::call("Where", vec![keep, Expr::Load(0), zero]);
        Ok(Some(
            TensorExpr {
                dtype,
                shape,
                inputs,
                accesses,
                reduction: None,
                body,
            }
            .simplified(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::linalg::kernel_check::{both, random};
    use kiln_ir::Attr;

    /// Transpose's strided-copy kernel reads what its expression says.
    #[test]
    fn transpose_kernel_matches_its_expression() {
        let mut seed = 9;
        for (shape, perm) in [
            (&[2, 3, 4][..], Some(&[2, 0, 1][..])),
            (&[3, 1, 2, 2], None),
        ] {
            let x = random(shape, &mut seed);
            let attrs: Vec<(&str, Attr)> = perm
                .map(|p| vec![("perm", Attr::Ints(p.to_vec()))])
                .unwrap_or_default();
            let (got, want) = both("Transpose", &attrs, &[&x]);
            assert_eq!(got, want, "{shape:?} {perm:?}");
        }
    }
}
