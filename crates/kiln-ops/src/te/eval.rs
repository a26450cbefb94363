//! Evaluates a tensor expression on concrete inputs: the reference
//! interpreter's implementation of every primitive op.
//!
//! Needs: a [`TensorExpr`] built for these inputs' shapes.
//! Guarantees: `out[i] = combine_r body(i, r)` exactly as written, reduction
//! order r = 0, 1, … (floats accumulate in f64 and round once, bfloat16 one
//! rounded step at a time as the ONNX reference does; integers
//! wrap like their type; an arg-reduction gives the index of the extreme by
//! `ArgIndex::beats`); a data-dependent index out of range is an error.
//!
//! It works on blocks of output elements: each index map is evaluated over
//! the block into a vector of offsets, each scalar op runs once per block
//! through the element-wise op's kernel. That keeps the interpreter within
//! a small factor of hand-written loops for everything but matmul and
//! convolution, which also have direct kernels (see `primitive.rs`).

use super::{Access, ArgIndex, Combiner, Expr, IndexExpr, Reduction, Scalar, TensorExpr, Var};
use crate::ops::cast::cast_tensor;
use crate::util::{numel, strides};
use crate::{registry, EvalCx, SubgraphRunner};
use kiln_ir::{
    bail, dispatch_all, dispatch_num, with_dtype, DType, Data, Elem, Graph, Result, Tensor,
};
use std::cell::RefCell;
use std::collections::HashMap;

/// Output elements evaluated together.
const BLOCK: usize = 4096;

/// Computes the tensor `te` describes from the node's inputs.
pub fn evaluate(te: &TensorExpr, inputs: &[Option<&Tensor>]) -> Result<Tensor> {
    for (i, want) in te.inputs.iter().enumerate() {
        let got = inputs.get(i).copied().flatten().map(|t| &t.shape);
        if want.as_ref() != got {
            bail!("tensor expression expects input {i} of shape {want:?}, got {got:?}");
        }
    }
    // Which accesses read the same elements at every reduction step (and
    // so are loaded once per block): decided once, not per load.
    let invariant: Vec<bool> = te
        .accesses
        .iter()
        .map(|a| {
            let mut vars = Vec::new();
            a.index.iter().for_each(|e| e.vars(&mut vars));
            !vars.iter().any(|v| matches!(v, Var::Red(_)))
        })
        .collect();
    let n = numel(&te.shape);
    let mut parts = Vec::new();
    let mut start = 0;
    while start < n {
        let len = BLOCK.min(n - start);
        let block = Block {
            te,
            inputs,
            out: out_indices(&te.shape, start, len),
            red: Vec::new(),
            len,
            invariant: &invariant,
            cache: RefCell::new(HashMap::new()),
        };
        let v = match &te.reduction {
            None => block.eval(&te.body)?,
            Some(r) => block.reduce(r)?,
        };
        if v.dtype() != te.dtype {
            bail!(
                "tensor expression body computes {}, declared {}",
                v.dtype(),
                te.dtype
            );
        }
        parts.push(spread(&v, len));
        start += len;
    }
    Tensor::new(te.shape.clone(), concat(te.dtype, &parts)?)
}

/// The output indices of elements `start..start+len`, one vector per dimension.
fn out_indices(shape: &[usize], start: usize, len: usize) -> Vec<Vec<i64>> {
    let st = strides(shape);
    shape
        .iter()
        .zip(&st)
        .map(|(&d, &s)| (start..start + len).map(|o| ((o / s) % d) as i64).collect())
        .collect()
}

/// A 0-d value repeated `len` times, or the block's values as they are.
fn spread(v: &Tensor, len: usize) -> Data {
    if v.shape.is_empty() {
        v.data.gather(std::iter::repeat_n(0, len))
    } else {
        v.data.clone()
    }
}

fn concat(dtype: DType, parts: &[Data]) -> Result<Data> {
    with_dtype!(dtype, |T| {
        let mut all: Vec<T> = Vec::new();
        for p in parts {
            match T::unwrap(p) {
                Some(s) => all.extend_from_slice(s),
                None => bail!("block of type {} in a {dtype} result", p.dtype()),
            }
        }
        Ok(T::wrap(all))
    })
}

/// An index value over a block: the same for every element, or one each.
enum IVal {
    Uniform(i64),
    Each(Vec<i64>),
}

impl IVal {
    fn map(self, f: impl Fn(i64) -> i64) -> IVal {
        match self {
            IVal::Uniform(v) => IVal::Uniform(f(v)),
            IVal::Each(v) => IVal::Each(v.into_iter().map(f).collect()),
        }
    }

    fn get(&self, j: usize) -> i64 {
        match self {
            IVal::Uniform(v) => *v,
            IVal::Each(v) => v[j],
        }
    }
}

/// One block of output elements at one point of the reduction loop.
struct Block<'a> {
    te: &'a TensorExpr,
    inputs: &'a [Option<&'a Tensor>],
    out: Vec<Vec<i64>>,
    red: Vec<i64>,
    len: usize,
    /// Loads that do not depend on the reduction indices, read once per block.
    cache: RefCell<HashMap<usize, Tensor>>,
    /// Per access: reads no reduction index.
    invariant: &'a [bool],
}

impl Block<'_> {
    fn reduce(mut self, red: &Reduction) -> Result<Tensor> {
        if let Some(arg) = red.arg {
            return self.arg_reduce(red, arg);
        }
        let (extents, combiner) = (&red.extents, red.combiner);
        let acc_type = red.accumulator_type(self.te.dtype);
        let identity = Data::from_f64(acc_type, &[combiner.identity()])?;
        let mut acc = Tensor::new(vec![], identity)?;
        let combine = combiner.scalar();
        for r in 0..numel(extents) {
            self.red = position(extents, r);
            let v = cast_tensor(&self.eval(&self.te.body)?, acc_type)?;
            acc = apply_scalar(&combine, &[&acc, &v])?;
        }
        cast_tensor(&acc, self.te.dtype)
    }

    /// An arg-reduction: per element the extreme so far and its index, replaced in
    /// reduction order wherever a value beats it ([`ArgIndex::beats`]).
    fn arg_reduce(mut self, red: &Reduction, arg: ArgIndex) -> Result<Tensor> {
        if numel(&red.extents) == 0 {
            bail!("an arg-reduction over no elements has no index");
        }
        let mut index = vec![0i64; self.len];
        self.red = position(&red.extents, 0);
        let mut best = spread(&self.eval(&self.te.body)?, self.len);
        if best.dtype() != arg.value {
            bail!(
                "arg-reduction body computes {}, declared {}",
                best.dtype(),
                arg.value
            );
        }
        for r in 1..numel(&red.extents) {
            self.red = position(&red.extents, r);
            let v = spread(&self.eval(&self.te.body)?, self.len);
            best = arg_step(arg, red.combiner, &best, &v, r as i64, &mut index)?;
        }
        Ok(block_tensor(index))
    }

    fn eval(&self, e: &Expr) -> Result<Tensor> {
        match e {
            Expr::Load(k) => self.load(*k),
            Expr::InBounds(k) => {
                let (_, inside) = self.offsets(&self.te.accesses[*k])?;
                Ok(block_tensor(inside))
            }
            Expr::Const(t) => Ok(t.clone()),
            Expr::Index(i) => Ok(match self.index(i)? {
                IVal::Uniform(v) => Tensor::scalar(v),
                IVal::Each(v) => block_tensor(v),
            }),
            Expr::Call(s, args) => {
                let vals = args
                    .iter()
                    .map(|a| self.eval(a))
                    .collect::<Result<Vec<_>>>()?;
                apply_scalar(s, &vals.iter().collect::<Vec<_>>())
            }
        }
    }

    fn load(&self, k: usize) -> Result<Tensor> {
        let access = &self.te.accesses[k];
        let invariant = self.invariant[k];
        if invariant {
            if let Some(t) = self.cache.borrow().get(&k) {
                return Ok(t.clone());
            }
        }
        let (offsets, inside) = self.offsets(access)?;
        let src = self.input(access.input)?;
        let data = dispatch_all!(&src.data, |v: T| T::wrap(
            offsets
                .iter()
                .zip(&inside)
                .map(|(&o, &ok)| if ok { v[o].clone() } else { T::default() })
                .collect()
        ));
        let t = Tensor::new(vec![self.len], data)?;
        if invariant {
            self.cache.borrow_mut().insert(k, t.clone());
        }
        Ok(t)
    }

    fn input(&self, i: usize) -> Result<&Tensor> {
        match self.inputs.get(i).copied().flatten() {
            Some(t) => Ok(t),
            None => bail!("tensor expression reads missing input {i}"),
        }
    }

    /// Flat offsets of an access for every element of the block, and
    /// whether each lies inside the input (outside ones read offset 0).
    fn offsets(&self, access: &Access) -> Result<(Vec<usize>, Vec<bool>)> {
        let shape = &self.input(access.input)?.shape;
        if shape.len() != access.index.len() {
            bail!(
                "access to input {} has {} indices for rank {}",
                access.input,
                access.index.len(),
                shape.len()
            );
        }
        let mut offsets = vec![0usize; self.len];
        let mut inside = vec![true; self.len];
        for ((e, &dim), stride) in access.index.iter().zip(shape).zip(strides(shape)) {
            let idx = self.index(e)?;
            for j in 0..self.len {
                let i = idx.get(j);
                if i < 0 || i >= dim as i64 {
                    inside[j] = false;
                } else {
                    offsets[j] += i as usize * stride;
                }
            }
        }
        for (o, ok) in offsets.iter_mut().zip(&inside) {
            if !ok {
                *o = 0;
            }
        }
        Ok((offsets, inside))
    }

    fn index(&self, e: &IndexExpr) -> Result<IVal> {
        Ok(match e {
            IndexExpr::Affine(a) => {
                let mut uniform = a.constant;
                let mut each: Option<Vec<i64>> = None;
                for &(v, c) in &a.terms {
                    match v {
                        Var::Red(k) => uniform += c * self.red.get(k).copied().unwrap_or(0),
                        Var::Out(l) => {
                            let acc = each.get_or_insert_with(|| vec![0; self.len]);
                            for (x, o) in acc.iter_mut().zip(&self.out[l]) {
                                *x += c * o;
                            }
                        }
                    }
                }
                match each {
                    None => IVal::Uniform(uniform),
                    Some(v) => IVal::Each(v.into_iter().map(|x| x + uniform).collect()),
                }
            }
            IndexExpr::Div(e, d) => self.index(e)?.map(|x| x.div_euclid(*d)),
            IndexExpr::Mod(e, d) => self.index(e)?.map(|x| x.rem_euclid(*d)),
            IndexExpr::Data {
                input,
                index,
                extent,
            } => self.data_index(*input, index, *extent)?,
        })
    }

    /// Gather-style indices read from input `input`.
    fn data_index(&self, input: usize, index: &[IndexExpr], extent: i64) -> Result<IVal> {
        let access = Access {
            input,
            index: index.to_vec(),
        };
        let (offsets, inside) = self.offsets(&access)?;
        let src = self.input(input)?;
        let values: Vec<i64> = match &src.data {
            Data::I64(v) => offsets.iter().map(|&o| v[o]).collect(),
            Data::I32(v) => offsets.iter().map(|&o| v[o] as i64).collect(),
            other => bail!("indices must be int32 or int64, got {}", other.dtype()),
        };
        let mut out = Vec::with_capacity(values.len());
        for (v, ok) in values.into_iter().zip(inside) {
            let w = if v < 0 { v + extent } else { v };
            if ok && !(0..extent).contains(&w) {
                bail!("index {v} is out of range for an axis of size {extent}");
            }
            out.push(w);
        }
        Ok(IVal::Each(out))
    }
}

/// The reduction indices of row-major position `r` over `extents`.
fn position(extents: &[usize], r: usize) -> Vec<i64> {
    strides(extents)
        .iter()
        .zip(extents)
        .map(|(&s, &e)| ((r / s) % e) as i64)
        .collect()
}

/// One step of an arg-reduction over a block: where `v` beats `best`, its value
/// and the index `r` take their places.
fn arg_step(
    arg: ArgIndex,
    combiner: Combiner,
    best: &Data,
    v: &Data,
    r: i64,
    index: &mut [i64],
) -> Result<Data> {
    dispatch_num!(
        best,
        |b: T| {
            let Some(v) = T::unwrap(v) else {
                bail!(
                    "arg-reduction values change type from {} to {}",
                    best.dtype(),
                    v.dtype()
                );
            };
            let mut b = b.to_vec();
            for (j, (b, &v)) in b.iter_mut().zip(v).enumerate() {
                if arg.beats(combiner, v, *b) {
                    *b = v;
                    index[j] = r;
                }
            }
            Ok(T::wrap(b))
        },
        bail!("an arg-reduction compares numbers, got strings")
    )
}

fn block_tensor<T: Elem>(v: Vec<T>) -> Tensor {
    Tensor {
        shape: vec![v.len()],
        data: T::wrap(v),
    }
}

/// Applies an element-wise op's scalar rule to same-length (or 0-d) blocks.
pub fn apply_scalar(s: &Scalar, args: &[&Tensor]) -> Result<Tensor> {
    let Some(kernel) = registry::lookup("", &s.op).and_then(|op| op.scalar_kernel()) else {
        bail!("'{}' is not an element-wise op with a scalar rule", s.op);
    };
    let node = s.node();
    let cx = EvalCx {
        node: &node,
        opset: super::SCALAR_OPSET,
        subgraphs: &NoSubgraphs,
    };
    let ins: Vec<Option<&Tensor>> = args.iter().map(|t| Some(*t)).collect();
    let mut out = kernel.eval(&cx, &ins)?;
    match out.len() {
        1 => Ok(out.remove(0)),
        n => bail!("scalar rule '{}' produced {n} values", s.op),
    }
}

struct NoSubgraphs;
impl SubgraphRunner for NoSubgraphs {
    fn run(&self, _g: &Graph, _inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        bail!("scalar rules have no subgraphs")
    }
}
