//! `kiln.WinogradInput` and `kiln.WinogradOutput`: the two tile transforms
//! of a Winograd F(2x2, 3x3) convolution on channels-last data (Lavin &
//! Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016,
//! §4.1, eq. 10: `Y = Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A`).
//!
//! A 3x3 stride-1 convolution over `[N, H, W, C]` becomes, per 4x4 input
//! tile `d` (tiles step 2 pixels; tile `(th, tw)` starts at pixel
//! `(2·th − top, 2·tw − left)`, reads outside the image are zero):
//! 1. `kiln.WinogradInput`: `V = Bᵀ d B` per channel, laid out
//!    `[N, TH, TW, 4, 4, C]` (each tile's 16 transformed positions
//!    together);
//! 2. a batched MatMul of the 16 positions, `[16, T, C] × [16, C, K]`
//!    (T = N·TH·TW tiles; `V` read through a transpose) against the
//!    transformed weights `U = G g Gᵀ` ([`transform_weights`], computed
//!    once from the constant weights);
//! 3. `kiln.WinogradOutput`: `Y = Aᵀ M A` per output channel, each tile's
//!    2x2 output pixels, the pixels past the image's `[Ho, Wo]` dropped.
//!
//! The matrices are [`INPUT_MATRIX`] (Bᵀ), [`WEIGHT_MATRIX`] (G) and
//! [`OUTPUT_MATRIX`] (Aᵀ). Both transforms are tensor expressions (a sum
//! over the 4x4 tile whose coefficients are looked up in the matrix by
//! index), so shape inference, the interpreter and classification come
//! from them; the CPU lowering computes the same sums factored into two
//! one-dimensional passes with the matrices' zeros skipped
//! (`kiln-loop` `winograd.rs`). The rewrite that creates these nodes is
//! `kiln-passes` `winograd.rs`.

use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, Combiner, Expr, IndexExpr, Reduction, TensorExpr, Var};
use crate::InferCx;
use kiln_ir::{bail, ensure, DType, Result, Tensor};

/// Domain of both ops.
pub const WINOGRAD_DOMAIN: &str = "kiln";
pub const WINOGRAD_INPUT_OP: &str = "WinogradInput";
pub const WINOGRAD_OUTPUT_OP: &str = "WinogradOutput";

/// Side of an input tile (α = m + r − 1 = 2 + 3 − 1).
pub const TILE: usize = 4;
/// Output pixels per tile side (m), also the step between tiles.
pub const STEP: usize = 2;
/// Side of the convolution window (r).
pub const WINDOW: usize = 3;

/// Bᵀ of F(2, 3): the input transform's rows.
pub const INPUT_MATRIX: [[f64; TILE]; TILE] = [
    [1.0, 0.0, -1.0, 0.0],
    [0.0, 1.0, 1.0, 0.0],
    [0.0, -1.0, 1.0, 0.0],
    [0.0, 1.0, 0.0, -1.0],
];
/// G of F(2, 3): the weight transform's rows.
pub const WEIGHT_MATRIX: [[f64; WINDOW]; TILE] = [
    [1.0, 0.0, 0.0],
    [0.5, 0.5, 0.5],
    [0.5, -0.5, 0.5],
    [0.0, 0.0, 1.0],
];
/// Aᵀ of F(2, 3): the output transform's rows.
pub const OUTPUT_MATRIX: [[f64; TILE]; STEP] = [[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, -1.0]];

pub fn register(r: &mut Registry) {
    r.add_in(WINOGRAD_DOMAIN, WINOGRAD_INPUT_OP, Prim(WinogradInput));
    r.add_in(WINOGRAD_DOMAIN, WINOGRAD_OUTPUT_OP, Prim(WinogradOutput));
}

/// Tiles per phase needed to cover `pixels` output pixels along a side of
/// dilation `d` (a tile covers two pixels `d` apart; phases interleave).
pub fn tiles_for(pixels: usize, d: usize) -> usize {
    pixels.div_ceil(STEP * d)
}

/// `matrix[row][col]` as an expression of two index expressions: a chain
/// of selects over the matrix's non-zero entries, zero elsewhere.
fn lookup<const C: usize>(
    matrix: &[[f64; C]],
    row: IndexExpr,
    col: IndexExpr,
    dtype: DType,
) -> Result<Expr> {
    let is = |i: &IndexExpr, v: usize| -> Result<Expr> {
        Ok(Expr::call(
            "Equal",
            vec![
                Expr::Index(i.clone()),
                Expr::constant(DType::I64, v as f64)?,
            ],
        ))
    };
    let mut table = Expr::constant(dtype, 0.0)?;
    for (r, values) in matrix.iter().enumerate().rev() {
        let mut line = Expr::constant(dtype, 0.0)?;
        for (c, &v) in values.iter().enumerate().rev().filter(|(_, v)| **v != 0.0) {
            line = Expr::call("Where", vec![is(&col, c)?, Expr::constant(dtype, v)?, line]);
        }
        table = Expr::call("Where", vec![is(&row, r)?, line, table]);
    }
    Ok(table)
}

/// `x · matrix[row0][r0] · matrix[row1][r1]`: one term of a two-sided
/// tile transform summed over the reduction indices `r0, r1`.
fn transform_body<const C: usize>(
    matrix: &[[f64; C]],
    x: Expr,
    rows: [IndexExpr; 2],
    dtype: DType,
) -> Result<Expr> {
    let [row0, row1] = rows;
    let first = lookup(matrix, row0, IndexExpr::red(0), dtype)?;
    let second = lookup(matrix, row1, IndexExpr::red(1), dtype)?;
    Ok(Expr::call(
        "Mul",
        vec![Expr::call("Mul", vec![x, first]), second],
    ))
}

fn tile_sum() -> Reduction {
    Reduction {
        extents: vec![TILE, TILE],
        combiner: Combiner::Sum,
        widened: true,
        arg: None,
    }
}

/// The two values of an `ints` attribute that must have exactly two.
fn pair(cx: &InferCx, name: &str) -> Result<[usize; 2]> {
    match cx.node.attr_ints(name)? {
        Some(&[a, b]) if a >= 0 && b >= 0 => Ok([a as usize, b as usize]),
        other => bail!(
            "{} needs the attribute '{name}' as two non-negative integers, got {other:?}",
            cx.node.describe()
        ),
    }
}

/// A float input of rank `rank`, its shape (`None` while unknown).
fn float_input<'a>(cx: &'a InferCx, rank: usize) -> Result<Option<(DType, &'a [usize])>> {
    let x = cx.input(0)?;
    ensure!(
        x.ty.dtype.is_float(),
        "{}: input of type {} (a Winograd transform needs floats)",
        cx.node.describe(),
        x.ty.dtype
    );
    let Some(shape) = cx.shape(0)? else {
        return Ok(None);
    };
    ensure!(
        shape.len() == rank,
        "{}: input of shape {shape:?}, expected rank {rank}",
        cx.node.describe()
    );
    Ok(Some((x.ty.dtype, shape)))
}

/// The dilation of each image side (attribute `dilations`, default 1).
fn dilations(cx: &InferCx) -> Result<[usize; 2]> {
    match cx.node.attr_ints("dilations")? {
        None => Ok([1, 1]),
        Some(_) => {
            let d = pair(cx, "dilations")?;
            ensure!(
                d.iter().all(|&x| x > 0),
                "{}: 'dilations' must be positive",
                cx.node.describe()
            );
            Ok(d)
        }
    }
}

/// `e floordiv d`, `e` itself when `d` is 1.
fn div(e: IndexExpr, d: usize) -> IndexExpr {
    match d {
        1 => e,
        _ => IndexExpr::Div(Box::new(e), d as i64),
    }
}

/// `e mod d`, zero when `d` is 1.
fn modulo(e: IndexExpr, d: usize) -> IndexExpr {
    match d {
        1 => IndexExpr::constant(0),
        _ => IndexExpr::Mod(Box::new(e), d as i64),
    }
}

/// `kiln.WinogradInput`: `[N, H, W, C]` → `[N, TH, Dh, TW, Dw, 4, 4, C]`,
/// `Bᵀ d B` per tile. A side of dilation `D` has `D` phases (its pixels
/// `≡ p mod D` make an undilated image); tile `(t, p)` starts at pixel
/// `2·D·t + p − pad` and reads every `D`-th pixel. A tile's 16 results lie
/// side by side: one store stream, where the 16 positions outermost made
/// 16 streams a multiple of 4 KiB apart on common sizes, which share the
/// L1's sets. Attributes `pads` = `[top, left]` (the convolution's leading
/// padding), `tiles` = `[TH, TW]` (per phase) and `dilations`.
struct WinogradInput;

impl Primitive for WinogradInput {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let Some((dtype, x)) = float_input(cx, 4)? else {
            return Ok(None);
        };
        let ([top, left], [th, tw]) = (pair(cx, "pads")?, pair(cx, "tiles")?);
        let [dh, dw] = dilations(cx)?;
        ensure!(
            th > 0 && tw > 0,
            "{}: 'tiles' must be positive",
            cx.node.describe()
        );
        let tap = |tile: usize, red: usize, pad: usize, d: usize| {
            let terms = [
                (Var::Out(tile), (STEP * d) as i64),
                (Var::Out(tile + 1), 1),
                (Var::Red(red), d as i64),
            ];
            IndexExpr::affine(terms, -(pad as i64))
        };
        let index = vec![
            IndexExpr::out(0),
            tap(1, 0, top, dh),
            tap(3, 1, left, dw),
            IndexExpr::out(7),
        ];
        let padded = Expr::call(
            "Where",
            vec![
                Expr::InBounds(0),
                Expr::Load(0),
                Expr::constant(dtype, 0.0)?,
            ],
        );
        let rows = [IndexExpr::out(5), IndexExpr::out(6)];
        Ok(Some(TensorExpr {
            dtype,
            shape: vec![x[0], th, dh, tw, dw, TILE, TILE, x[3]],
            inputs: vec![Some(x.to_vec())],
            accesses: vec![Access { input: 0, index }],
            reduction: Some(tile_sum()),
            body: transform_body(&INPUT_MATRIX, padded, rows, dtype)?,
        }))
    }
}

/// `kiln.WinogradOutput`: `[4, 4, N, TH, Dh, TW, Dw, K]` → `[N, Ho, Wo,
/// K]`, `Aᵀ M A` per tile (pixel `h` of a side of dilation `D` is in tile
/// `h floordiv 2D` of phase `h mod D`, its row `(h floordiv D) mod 2`).
/// Attributes `image` = `[Ho, Wo]` (the tiles cover it, [`tiles_for`]) and
/// `dilations`.
struct WinogradOutput;

impl Primitive for WinogradOutput {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let Some((dtype, m)) = float_input(cx, 8)? else {
            return Ok(None);
        };
        let [ho, wo] = pair(cx, "image")?;
        let [dh, dw] = dilations(cx)?;
        let covers =
            |pixels: usize, tiles: usize, d: usize| pixels > 0 && tiles_for(pixels, d) == tiles;
        ensure!(
            m[..2] == [TILE, TILE] && m[4] == dh && m[6] == dw
                && covers(ho, m[3], dh) && covers(wo, m[5], dw),
            "{}: input of shape {m:?} is not [4, 4, N, TH, {dh}, TW, {dw}, K] tiles covering an image of {ho}x{wo}",
            cx.node.describe()
        );
        let tile = |l: usize, d: usize| div(IndexExpr::out(l), STEP * d);
        let phase = |l: usize, d: usize| modulo(IndexExpr::out(l), d);
        let within = |l: usize, d: usize| modulo(div(IndexExpr::out(l), d), STEP);
        let index = vec![
            IndexExpr::red(0),
            IndexExpr::red(1),
            IndexExpr::out(0),
            tile(1, dh),
            phase(1, dh),
            tile(2, dw),
            phase(2, dw),
            IndexExpr::out(3),
        ];
        Ok(Some(TensorExpr {
            dtype,
            shape: vec![m[2], ho, wo, m[7]],
            inputs: vec![Some(m.to_vec())],
            accesses: vec![Access { input: 0, index }],
            reduction: Some(tile_sum()),
            body: transform_body(
                &OUTPUT_MATRIX,
                Expr::Load(0),
                [within(1, dh), within(2, dw)],
                dtype,
            )?,
        }))
    }
}

/// The transformed weights `U = G g Gᵀ` of 3x3 weights `w` stored HWIO
/// (`[3, 3, C, K]`, f32), as the `[16, C, K]` right operand of the
/// batched MatMul (position `4·ξ + ν` first), computed in f64.
pub fn transform_weights(w: &Tensor) -> Result<Tensor> {
    let [kh, kw, c, k] = w.shape[..] else {
        bail!(
            "Winograd weights of shape {:?}, expected [3, 3, C, K]",
            w.shape
        );
    };
    ensure!(
        kh == WINDOW && kw == WINDOW && w.dtype() == DType::F32,
        "Winograd weights must be f32 [3, 3, C, K], got {} {:?}",
        w.dtype(),
        w.shape
    );
    let g = w.as_slice::<f32>()?;
    let plane = c * k;
    let mut u = vec![0f32; TILE * TILE * plane];
    for e in 0..plane {
        // `G g` (4x3) first, then `(G g) Gᵀ`: the two one-dimensional
        // passes of the window, per input and output channel.
        let tap = |i: usize, j: usize| f64::from(g[(i * WINDOW + j) * plane + e]);
        let rows: [[f64; WINDOW]; TILE] = WEIGHT_MATRIX
            .map(|gx| std::array::from_fn(|j| (0..WINDOW).map(|i| gx[i] * tap(i, j)).sum()));
        for (x, row) in rows.iter().enumerate() {
            for (y, gy) in WEIGHT_MATRIX.iter().enumerate() {
                let value: f64 = row.iter().zip(gy).map(|(r, b)| r * b).sum();
                u[(x * TILE + y) * plane + e] = value as f32;
            }
        }
    }
    Tensor::new(vec![TILE * TILE, c, k], kiln_ir::Data::F32(u.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::linalg::kernel_check::{assert_close, random, run_in};
    use crate::util::transpose;
    use kiln_ir::Attr;

    fn ints(v: &[usize]) -> Attr {
        Attr::Ints(v.iter().map(|&x| x as i64).collect())
    }

    /// `[16, T, C] × [16, C, K]`, summed in f64.
    fn batched_matmul(v: &Tensor, u: &Tensor) -> Tensor {
        let (b, t, c, k) = (v.shape[0], v.shape[1], v.shape[2], u.shape[2]);
        let (a, w) = (v.data.to_f64_vec().unwrap(), u.data.to_f64_vec().unwrap());
        let mut out = vec![0f32; b * t * k];
        for p in 0..b {
            for i in 0..t {
                for j in 0..k {
                    let s: f64 = (0..c)
                        .map(|q| a[(p * t + i) * c + q] * w[(p * c + q) * k + j])
                        .sum();
                    out[(p * t + i) * k + j] = s as f32;
                }
            }
        }
        Tensor::from_vec(vec![b, t, k], out).unwrap()
    }

    fn reshaped(t: Tensor, shape: Vec<usize>) -> Tensor {
        Tensor::new(shape, t.data).unwrap()
    }

    /// Input transform, batched product with the transformed weights and
    /// output transform compute the 3x3 stride-1 convolution (the
    /// channels-last Conv as the oracle): even and odd images, symmetric,
    /// one-sided and no padding, several images, dilations 2 and 3 (odd
    /// images whose last tiles cover one or two phases).
    #[test]
    fn the_three_steps_compute_the_convolution() {
        type Case = ([usize; 5], [usize; 4], [usize; 2]);
        let cases: [Case; 8] = [
            ([1, 6, 6, 3, 4], [1, 1, 1, 1], [1, 1]),
            ([2, 7, 5, 5, 2], [1, 1, 1, 1], [1, 1]),
            ([1, 8, 9, 4, 3], [0, 0, 0, 0], [1, 1]),
            ([1, 5, 6, 2, 3], [1, 0, 0, 1], [1, 1]),
            ([3, 4, 4, 8, 8], [2, 1, 0, 2], [1, 1]),
            ([1, 11, 9, 3, 2], [2, 2, 2, 2], [2, 2]),
            ([2, 13, 10, 2, 3], [3, 1, 3, 2], [3, 2]),
            ([1, 9, 8, 2, 2], [0, 2, 1, 2], [2, 1]),
        ];
        let mut seed = 7;
        for ([n, h, w, c, k], pads, [dh, dw]) in cases {
            let x = random(&[n, h, w, c], &mut seed);
            let g = random(&[WINDOW, WINDOW, c, k], &mut seed);
            let conv = run_in(
                "kiln",
                "ChannelsLast",
                &[
                    ("op", Attr::String("Conv".into())),
                    ("pads", ints(&pads)),
                    ("dilations", ints(&[dh, dw])),
                    ("kernel_shape", ints(&[3, 3])),
                ],
                &[&x, &g],
            );
            let (ho, wo) = (conv.shape[1], conv.shape[2]);
            let (th, tw) = (tiles_for(ho, dh), tiles_for(wo, dw));
            let v = run_in(
                WINOGRAD_DOMAIN,
                WINOGRAD_INPUT_OP,
                &[
                    ("pads", ints(&pads[..2])),
                    ("tiles", ints(&[th, tw])),
                    ("dilations", ints(&[dh, dw])),
                ],
                &[&x],
            );
            assert_eq!(v.shape, [n, th, dh, tw, dw, TILE, TILE, c]);
            let t = n * th * dh * tw * dw;
            let u = transform_weights(&g).unwrap();
            let rows = transpose(&reshaped(v, vec![t, TILE * TILE, c]), &[1, 0, 2]).unwrap();
            let m = batched_matmul(&rows, &u);
            let m = reshaped(m, vec![TILE, TILE, n, th, dh, tw, dw, k]);
            let y = run_in(
                WINOGRAD_DOMAIN,
                WINOGRAD_OUTPUT_OP,
                &[("image", ints(&[ho, wo])), ("dilations", ints(&[dh, dw]))],
                &[&m],
            );
            let what = format!("{n}x{h}x{w}x{c}->{k} pads {pads:?} dilations {dh}x{dw}");
            assert_close(&y, &conv, 1e-5, &what);
        }
    }
}
