//! `kiln.ChannelsLast`: a convolution or pooling op computed on
//! channels-last data. Attribute `op` names the wrapped op of the default
//! domain (`Conv`, `MaxPool`, …); every other attribute is the wrapped
//! op's. Input 0 and the output are `[N, spatial…, C]`; other inputs of
//! the same rank (a convolution's weights) are `[k…, C/group, M]` (HWIO),
//! the rest as the wrapped op reads them. With `channels_last_input=0`
//! input 0 is read channels-first, as the wrapped op reads it (a first
//! convolution over a channels-first model input).
//!
//! The op is defined by the wrapped op's tensor expression made
//! channels-last ([`crate::te::layout::channels_last`]), so shape
//! inference, classification and lowering come from that one definition.
//! The interpreter's kernel transposes input 0 to channels-first, runs the
//! wrapped op and transposes the result back (tests check it equals the
//! expression). The layout pass (`kiln-passes`, `channels_last`) creates
//! these nodes.

use crate::registry::{self, Registry};
use crate::te::layout::{channels_last, channels_last_perm, inverse, permuted, stored_perm};
use crate::te::primitive::{Prim, Primitive};
use crate::te::{TensorExpr, SCALAR_OPSET};
use crate::util::transpose;
use crate::{arg, EvalCx, InferCx, InputInfo, Op};
use kiln_ir::{bail, DType, Node, Result, Tensor, TensorType};

/// Domain and op type of a channels-last node.
pub const CHANNELS_LAST_DOMAIN: &str = "kiln";
pub const CHANNELS_LAST_OP: &str = "ChannelsLast";

pub fn register(r: &mut Registry) {
    r.add_in(CHANNELS_LAST_DOMAIN, CHANNELS_LAST_OP, Prim(ChannelsLast));
}

struct ChannelsLast;

/// The wrapped op and a node for it: `node` without the `op` attribute,
/// in the default domain.
fn wrapped(node: &Node) -> Result<(&'static dyn Op, Node)> {
    let Some(name) = node.attr_string("op")? else {
        bail!("{} needs the attribute 'op'", node.describe());
    };
    let Some(op) = registry::lookup("", name) else {
        bail!("{}: unknown wrapped op '{name}'", node.describe());
    };
    let mut inner = node.clone();
    inner.op = name.to_string();
    inner.domain = String::new();
    inner.attrs.remove("op");
    inner.attrs.remove("channels_last_input");
    Ok((op, inner))
}

/// Whether input 0 and the weights are channels-last too (attribute
/// `channels_last_input`, default 1).
fn inputs_channels_last(node: &Node) -> Result<bool> {
    Ok(node.attr_int_or("channels_last_input", 1)? != 0)
}

/// The permutation taking stored input `k` (of rank `r`) back to the
/// wrapped op's layout, `None` when it is stored as the op reads it.
fn wrapped_perm(node: &Node, k: usize, r: usize, rank: usize) -> Result<Option<Vec<usize>>> {
    let inputs = inputs_channels_last(node)?;
    Ok(stored_perm(k, r, rank, inputs).map(|p| inverse(&p)))
}

/// Input `k`'s type as the wrapped op sees it.
fn wrapped_input<'a>(
    node: &Node,
    k: usize,
    i: &InputInfo<'a>,
    rank: usize,
) -> Result<InputInfo<'a>> {
    let Some(s) = &i.ty.shape else {
        return Ok(i.clone());
    };
    Ok(match wrapped_perm(node, k, s.len(), rank)? {
        Some(p) => InputInfo {
            ty: TensorType::new(i.ty.dtype, permuted(s, &p)),
            value: None,
        },
        None => i.clone(),
    })
}

impl Primitive for ChannelsLast {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (op, inner) = wrapped(cx.node)?;
        let Some(p) = op.primitive() else {
            bail!(
                "{}: the wrapped op '{}' has no tensor expression",
                cx.node.describe(),
                inner.op
            );
        };
        let x = cx.input(0)?;
        let Some(shape) = &x.ty.shape else {
            return Ok(None);
        };
        if shape.len() < 3 {
            bail!(
                "{}: input 0 has rank {}, a channels-last op needs at least 3",
                cx.node.describe(),
                shape.len()
            );
        }
        let rank = shape.len();
        let inputs = cx
            .inputs
            .iter()
            .enumerate()
            .map(|(k, input)| {
                let wrapped = input.as_ref().map(|i| wrapped_input(cx.node, k, i, rank));
                wrapped.transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let icx = InferCx {
            node: &inner,
            opset: SCALAR_OPSET,
            inputs,
            scope: cx.scope,
        };
        match p.define(&icx)? {
            Some(te) => channels_last(te, inputs_channels_last(cx.node)?).map(Some),
            None => Ok(None),
        }
    }

    fn dtype(&self, cx: &InferCx) -> Result<DType> {
        Ok(cx.input(0)?.ty.dtype)
    }

    /// Transposes to channels-first, runs the wrapped op, transposes back.
    fn kernel(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Option<Result<Tensor>> {
        Some(run_wrapped(cx, inputs))
    }
}

fn run_wrapped(cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Tensor> {
    let (op, inner) = wrapped(cx.node)?;
    let rank = arg(inputs, 0)?.rank();
    if rank < 3 {
        bail!(
            "{}: input 0 has rank {rank}, a channels-last op needs at least 3",
            cx.node.describe()
        );
    }
    let firsts = inputs
        .iter()
        .enumerate()
        .map(|(k, t)| match t {
            Some(t) => match wrapped_perm(cx.node, k, t.rank(), rank)? {
                Some(p) => transpose(t, &p).map(Some),
                None => Ok(None),
            },
            None => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    let ins: Vec<Option<&Tensor>> = inputs
        .iter()
        .zip(&firsts)
        .map(|(t, first)| first.as_ref().or(*t))
        .collect();
    let icx = EvalCx {
        node: &inner,
        opset: SCALAR_OPSET,
        subgraphs: cx.subgraphs,
    };
    let Some(y) = op.eval(&icx, &ins)?.into_iter().next() else {
        bail!("{}: the wrapped op gave no output", cx.node.describe());
    };
    transpose(&y, &channels_last_perm(y.rank()))
}

#[cfg(test)]
mod tests {
    use crate::ops::linalg::kernel_check::{assert_close, both_in, classes_in, random};
    use kiln_ir::Attr;

    fn ints(v: &[i64]) -> Attr {
        Attr::Ints(v.to_vec())
    }

    fn op(name: &str) -> (&'static str, Attr) {
        ("op", Attr::String(name.into()))
    }

    /// The expression (the wrapped op's, made channels-last) computes what
    /// transposing around the wrapped op computes: plain, strided and
    /// padded, depthwise and grouped convolutions, max pooling.
    #[test]
    fn expression_matches_the_transposed_op() {
        type Case<'a> = (&'a [usize], Option<&'a [usize]>, Vec<(&'a str, Attr)>);
        let cases: Vec<Case> = vec![
            (
                &[1, 7, 6, 3],
                Some(&[3, 3, 3, 4]),
                vec![
                    op("Conv"),
                    ("pads", ints(&[1, 1, 1, 1])),
                    ("strides", ints(&[2, 1])),
                ],
            ),
            (
                &[2, 5, 5, 4],
                Some(&[3, 3, 1, 4]),
                vec![
                    op("Conv"),
                    ("group", Attr::Int(4)),
                    ("pads", ints(&[1, 1, 1, 1])),
                ],
            ),
            (
                &[1, 5, 5, 6],
                Some(&[2, 2, 3, 4]),
                vec![op("Conv"), ("group", Attr::Int(2))],
            ),
            (&[1, 4, 4, 5], Some(&[1, 1, 5, 3]), vec![op("Conv")]),
            (
                &[1, 3, 7, 6],
                Some(&[3, 3, 3, 4]),
                vec![
                    op("Conv"),
                    ("channels_last_input", Attr::Int(0)),
                    ("pads", ints(&[1, 1, 1, 1])),
                    ("strides", ints(&[2, 2])),
                ],
            ),
            (
                &[1, 6, 7, 3],
                None,
                vec![
                    op("MaxPool"),
                    ("kernel_shape", ints(&[3, 3])),
                    ("pads", ints(&[1, 1, 1, 1])),
                    ("strides", ints(&[2, 2])),
                ],
            ),
        ];
        let mut seed = 29;
        for (xs, ws, attrs) in &cases {
            let x = random(xs, &mut seed);
            let w = ws.map(|ws| random(ws, &mut seed));
            let mut ins = vec![&x];
            ins.extend(w.as_ref());
            let (got, want) = both_in("kiln", "ChannelsLast", attrs, &ins);
            assert_close(&got, &want, 1e-5, &format!("{attrs:?} on {xs:?}"));
        }
    }

    /// Classification reads the channels-last expression as what it is.
    #[test]
    fn channels_last_convolution_is_a_convolution() {
        let mut seed = 3;
        let (x, w) = (
            random(&[1, 6, 6, 4], &mut seed),
            random(&[3, 3, 4, 8], &mut seed),
        );
        let attrs = [op("Conv"), ("pads", ints(&[1, 1, 1, 1]))];
        assert_eq!(
            classes_in("kiln", "ChannelsLast", &attrs, &[&x, &w]),
            "opaque(conv) / many-to-many"
        );
    }
}
