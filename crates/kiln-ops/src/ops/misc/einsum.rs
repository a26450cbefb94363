//! Einsum: general Einstein summation. Supports implicit output (labels
//! used once, in ASCII order, after the broadcast `...` dims) and explicit
//! `->` output, repeated labels within an operand (diagonals), labels summed
//! away, `...` broadcasting, and size-1 broadcasting of any label. One pass
//! over the joint index space of all labels (output labels first), with
//! per-operand strides: floats accumulate in f64, integers exactly. Where
//! the equation is a contraction of one or two operands, the node opens
//! into transposes, reshapes, sums and a MatMul instead (`products`).

mod products;

use crate::ops::reduce::Exact;
use crate::registry::Registry;
use crate::util::strides;
use crate::{Builder, EvalCx, InferCx, Op};
use kiln_ir::{bail, dispatch_num, Data, Result, Tensor, TensorType, ValueId};

pub fn register(r: &mut Registry) {
    r.add("Einsum", Einsum);
}

struct Einsum;

/// One symbol of a subscript term.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Sym {
    Letter(u8),
    Ellipsis,
}

fn parse_term(t: &str) -> Result<Vec<Sym>> {
    let mut syms = Vec::new();
    let mut rest = t;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("...") {
            if syms.contains(&Sym::Ellipsis) {
                bail!("term '{t}' has more than one ellipsis");
            }
            syms.push(Sym::Ellipsis);
            rest = &rest[3..];
        } else if c.is_ascii_alphabetic() {
            syms.push(Sym::Letter(c as u8));
            rest = &rest[1..];
        } else {
            bail!("invalid character '{c}' in einsum term '{t}'");
        }
    }
    Ok(syms)
}

/// An equation's input terms and its output term (absent in implicit mode).
struct Equation {
    inputs: Vec<Vec<Sym>>,
    output: Option<Vec<Sym>>,
}

fn parse_equation(eq: &str) -> Result<Equation> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let inputs = lhs.split(',').map(parse_term).collect::<Result<Vec<_>>>()?;
    Ok(Equation {
        inputs,
        output: rhs.map(|r| parse_term(&r)).transpose()?,
    })
}

/// Labels are numbered: broadcast (`...`) dims 0..E, letters E + ASCII code.
type Label = usize;

/// The contraction: joint dims (output labels first, then summed labels),
/// each operand's stride along every joint dim, and the output shape.
#[derive(Debug)]
struct Plan {
    dims: Vec<usize>,
    strides: Vec<Vec<usize>>,
    out_shape: Vec<usize>,
}

/// Labels of each dim of an operand of rank `rank` written as `term`.
fn operand_labels(term: &[Sym], rank: usize, ell: usize) -> Result<Vec<Label>> {
    let letters = term.iter().filter(|s| matches!(s, Sym::Letter(_))).count();
    let has_ellipsis = term.contains(&Sym::Ellipsis);
    if rank < letters || (!has_ellipsis && rank != letters) {
        bail!("einsum term has {letters} labels but its operand has rank {rank}");
    }
    let e = rank - letters;
    let mut labels = Vec::with_capacity(rank);
    for s in term {
        match s {
            Sym::Letter(c) => labels.push(ell + *c as usize),
            Sym::Ellipsis => labels.extend(ell - e..ell),
        }
    }
    Ok(labels)
}

/// An equation's labels: each operand's (one per dim), the output's, and
/// every label's size (the largest of its dims; 1 where none has it).
struct Labelled {
    labels: Vec<Vec<Label>>,
    out: Vec<Label>,
    size: Vec<usize>,
}

impl Labelled {
    /// Labels some operand has that the output has not, in label order.
    fn summed(&self) -> Vec<Label> {
        (0..self.size.len())
            .filter(|l| !self.out.contains(l) && self.labels.iter().flatten().any(|x| x == l))
            .collect()
    }
}

/// Labels `equation` over operands of `shapes`; fails on an equation that
/// does not fit them.
fn labelled(equation: &str, shapes: &[&[usize]]) -> Result<Labelled> {
    let Equation {
        inputs: terms,
        output,
    } = parse_equation(equation)?;
    if terms.len() != shapes.len() {
        bail!(
            "equation '{equation}' has {} operands but {} inputs were given",
            terms.len(),
            shapes.len()
        );
    }
    // Broadcast rank: the largest number of dims any ellipsis stands for.
    let ell = terms
        .iter()
        .zip(shapes)
        .filter(|(t, _)| t.contains(&Sym::Ellipsis))
        .map(|(t, s)| s.len().saturating_sub(t.len() - 1))
        .max()
        .unwrap_or(0);
    let labels: Vec<Vec<Label>> = terms
        .iter()
        .zip(shapes)
        .map(|(t, s)| operand_labels(t, s.len(), ell))
        .collect::<Result<_>>()?;
    let mut size = vec![1usize; ell + 128];
    let mut uses = vec![0usize; ell + 128];
    for (ls, s) in labels.iter().zip(shapes) {
        for (&l, &d) in ls.iter().zip(s.iter()) {
            uses[l] += 1;
            if size[l] == 1 {
                size[l] = d;
            } else if d != 1 && d != size[l] {
                bail!("einsum label sizes {} and {d} do not match", size[l]);
            }
        }
    }
    let out: Vec<Label> = match output {
        Some(term) => explicit_output(&term, ell, &uses)?,
        None => (0..ell)
            .chain((ell..ell + 128).filter(|&l| uses[l] == 1))
            .collect(),
    };
    Ok(Labelled { labels, out, size })
}

fn plan(equation: &str, shapes: &[&[usize]]) -> Result<Plan> {
    let l = labelled(equation, shapes)?;
    let (labels, out, size) = (&l.labels, &l.out, &l.size);
    let joint: Vec<Label> = out.iter().copied().chain(l.summed()).collect();
    // The loop visits every joint index once; refuse spaces that cannot be counted.
    if joint
        .iter()
        .try_fold(1usize, |n, &l| n.checked_mul(size[l]))
        .is_none()
    {
        bail!("einsum '{equation}' iterates over more elements than can be counted");
    }
    let strides = labels
        .iter()
        .zip(shapes)
        .map(|(ls, s)| {
            let st = strides(s);
            joint
                .iter()
                .map(|&j| {
                    ls.iter()
                        .enumerate()
                        .filter(|&(i, &l)| l == j && s[i] != 1)
                        .map(|(i, _)| st[i])
                        .sum()
                })
                .collect()
        })
        .collect();
    Ok(Plan {
        dims: joint.iter().map(|&l| size[l]).collect(),
        strides,
        out_shape: out.iter().map(|&l| size[l]).collect(),
    })
}

fn explicit_output(term: &[Sym], ell: usize, uses: &[usize]) -> Result<Vec<Label>> {
    let mut out = Vec::new();
    for s in term {
        match s {
            Sym::Ellipsis => out.extend(0..ell),
            Sym::Letter(c) => {
                let l = ell + *c as usize;
                if uses[l] == 0 {
                    bail!(
                        "output label '{}' does not appear in the inputs",
                        *c as char
                    );
                }
                if out.contains(&l) {
                    bail!("output label '{}' is repeated", *c as char);
                }
                out.push(l);
            }
        }
    }
    Ok(out)
}

/// Sum over the joint space of the product of the operands, with
/// accumulator `A`.
fn contract<T, A: Copy>(
    p: &Plan,
    ops: &[&[T]],
    zero: A,
    one: A,
    load: impl Fn(&T) -> A,
    mul: impl Fn(A, A) -> A,
    add: impl Fn(A, A) -> A,
) -> Vec<A> {
    let out_len: usize = p.out_shape.iter().product();
    let total: usize = p.dims.iter().product();
    let mut out = vec![zero; out_len];
    if total == 0 {
        return out;
    }
    let inner = total / out_len;
    let rank = p.dims.len();
    let mut idx = vec![0usize; rank];
    let mut offs = vec![0usize; ops.len()];
    for flat in 0..total {
        let prod = ops
            .iter()
            .zip(&offs)
            .fold(one, |acc, (v, &o)| mul(acc, load(&v[o])));
        out[flat / inner] = add(out[flat / inner], prod);
        let mut d = rank;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            for (o, st) in offs.iter_mut().zip(&p.strides) {
                *o += st[d];
            }
            if idx[d] < p.dims[d] {
                break;
            }
            for (o, st) in offs.iter_mut().zip(&p.strides) {
                *o -= st[d] * p.dims[d];
            }
            idx[d] = 0;
        }
    }
    out
}

fn einsum_typed<T: Exact>(p: &Plan, inputs: &[&Tensor]) -> Result<Data> {
    let ops: Vec<&[T]> = inputs
        .iter()
        .map(|t| t.as_slice::<T>())
        .collect::<Result<_>>()?;
    Ok(T::wrap(if T::DTYPE.is_float() {
        contract(
            p,
            &ops,
            0.0,
            1.0,
            |x: &T| x.to_f64(),
            |a, b| a * b,
            |a, b| a + b,
        )
        .into_iter()
        .map(T::from_f64)
        .collect()
    } else {
        contract(
            p,
            &ops,
            0i128,
            1i128,
            |x: &T| x.to_i128(),
            i128::wrapping_mul,
            i128::wrapping_add,
        )
        .into_iter()
        .map(T::from_i128)
        .collect()
    }))
}

fn equation(node: &kiln_ir::Node) -> Result<&str> {
    match node.attr_string("equation")? {
        Some(e) => Ok(e),
        None => bail!("attribute 'equation' is required"),
    }
}

impl Op for Einsum {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        let mut shapes = Vec::new();
        for i in 0..cx.inputs.len() {
            if cx.input(i)?.ty.dtype != dtype {
                bail!("all Einsum inputs must have the same type");
            }
            match cx.shape(i)? {
                Some(s) => shapes.push(s),
                None => return Ok(vec![TensorType::unknown_shape(dtype)]),
            }
        }
        Ok(vec![TensorType::new(
            dtype,
            plan(equation(cx.node)?, &shapes)?.out_shape,
        )])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let ts: Vec<&Tensor> = (0..inputs.len())
            .map(|i| crate::arg(inputs, i))
            .collect::<Result<_>>()?;
        let Some(first) = ts.first() else {
            bail!("Einsum needs at least one input")
        };
        let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape.as_slice()).collect();
        let p = plan(equation(cx.node)?, &shapes)?;
        let data = dispatch_num!(
            &first.data,
            |_v: T| einsum_typed::<T>(&p, &ts)?,
            bail!("Einsum needs numeric inputs")
        );
        Ok(vec![Tensor::new(p.out_shape.clone(), data)?])
    }

    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        products::decompose(b, equation(cx.node)?, inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(eq: &str, inputs: &[Tensor]) -> Tensor {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
        let p = plan(eq, &shapes).unwrap();
        Tensor::new(p.out_shape.clone(), einsum_typed::<f64>(&p, &refs).unwrap()).unwrap()
    }

    #[test]
    fn trace_diagonal_and_implicit_order() {
        let m = Tensor::from_vec(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(run("ii", &[m.clone()]).as_slice::<f64>().unwrap(), &[5.0]);
        assert_eq!(
            run("ii->i", &[m.clone()]).as_slice::<f64>().unwrap(),
            &[1.0, 4.0]
        );
        // Implicit output sorts labels: "ba" gives the transpose.
        assert_eq!(
            run("ba", &[m]).as_slice::<f64>().unwrap(),
            &[1.0, 3.0, 2.0, 4.0]
        );
    }

    #[test]
    fn ellipsis_broadcasts() {
        let a = Tensor::from_vec(vec![2, 1, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let b = Tensor::from_vec(vec![3, 2], vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0]).unwrap();
        let y = run("...j,...j->...", &[a, b]);
        assert_eq!(y.shape, vec![2, 3]);
        assert_eq!(
            y.as_slice::<f64>().unwrap(),
            &[1.0, 2.0, 3.0, 3.0, 4.0, 7.0]
        );
    }
}
