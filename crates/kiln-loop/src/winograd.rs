//! Fused form *Winograd transform*: the input or output tile transform of
//! a Winograd F(2x2, 3x3) convolution (`kiln-ops` `winograd.rs`, Lavin &
//! Gray, CVPR 2016, §4.1) as one loop nest per tile, each transform
//! factored into two one-dimensional passes with the matrices' zero
//! entries skipped.
//!
//! Needs: a [`GroupExpr`] holding a `kiln.WinogradInput` node (with at
//! most element-wise producers inlined before it, as the group's only
//! output) or a `kiln.WinogradOutput` node (the group's only reduction,
//! with at most an element-wise epilogue of its shape as the one output);
//! f32.
//! Guarantees: one kernel computing exactly the group (the transforms'
//! sums, in another order than the tensor expression's, which multiplies
//! out all 16 terms): per tile (`n`, `th` parallel, `tw`) and channel
//! (vectorized),
//! - input: the 16 pixels of the tile read once (zero outside the image),
//!   `s = Bᵀ d` by columns, then the 16 results `s B` stored;
//! - output: the 16 values of the tile read once, `s = Aᵀ m`, then each of
//!   the tile's output pixels inside the image `s A`, the epilogue applied
//!   to it and stored once (a last tile row or column past an odd image
//!   is left out by a separate nest for the last tiles, not by a test per
//!   pixel).
//!
//! The tile loops' borders are peeled (`peel`), so the interior tiles of
//! the input transform read without bounds checks.

use crate::fused::{output_buffer, reductions, single_output, LoweredGroup};
use crate::group::{Env, GroupExpr, Inliner, Src};
use crate::ir::{Buffer, Extent, Idx, Kernel, Loop, LoopKind, Stmt, Val};
use crate::lower::{flatten, single_node_group};
use crate::schedule::{apply, Directive, Schedule};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_ops::ops::winograd::{
    INPUT_MATRIX, OUTPUT_MATRIX, STEP, TILE, WINOGRAD_DOMAIN, WINOGRAD_INPUT_OP, WINOGRAD_OUTPUT_OP,
};
use kiln_ops::te::{Scalar, TensorExpr, Var};

/// The group in this form when it holds a Winograd transform, `None`
/// otherwise; an error when it holds one with more than the form takes
/// (the planner's feedback splits it).
pub fn winograd_transform(
    group: &GroupExpr,
    name: &str,
    buffers: &[Buffer],
) -> Result<Option<LoweredGroup>> {
    let is = |op: &str| {
        let qualified = format!("{WINOGRAD_DOMAIN}.{op}");
        group.nodes.iter().position(|n| n.op == qualified)
    };
    let (kernel, schedule) = if let Some(n) = is(WINOGRAD_INPUT_OP) {
        input_transform(group, name, buffers, n)?
    } else if let Some(n) = is(WINOGRAD_OUTPUT_OP) {
        output_transform(group, name, buffers, n)?
    } else {
        return Ok(None);
    };
    Ok(Some(LoweredGroup {
        kernel: apply(&kernel, &schedule)?,
        form: "winograd",
        schedule,
    }))
}

/// A lone transform node (its producers and epilogue in other kernels)
/// of op type `op` in this form, as a group of one; `None` for other ops.
pub fn lower_winograd_node(
    te: &TensorExpr,
    op: &str,
    name: &str,
    input_dtypes: &[Option<DType>],
) -> Result<Option<LoweredGroup>> {
    let (mut group, buffers) = single_node_group(te, name, input_dtypes)?;
    group.nodes[0].op = op.to_string();
    winograd_transform(&group, name, &buffers)
}

const N: &str = "n";
const TH: &str = "th";
const TW: &str = "tw";
const CH: &str = "c";

/// A loop of `extent` iterations (serial; the schedule marks it).
fn serial(var: &str, extent: usize, body: Vec<Stmt>) -> Stmt {
    Stmt::Loop(Loop {
        var: var.to_string(),
        extent: Extent::Const(extent as i64),
        kind: LoopKind::Serial,
        body,
    })
}

/// `Σ coefficient · value` over the non-zero coefficients, with ±1 as
/// additions and subtractions.
fn combination(terms: impl IntoIterator<Item = (f64, Val)>) -> Val {
    let call = |op: &str, args: Vec<Val>| Val::Call(Scalar::new(op), args);
    let mut sum: Option<Val> = None;
    for (c, v) in terms.into_iter().filter(|(c, _)| *c != 0.0) {
        let scaled = match c.abs() {
            1.0 => v,
            a => call("Mul", vec![v, Val::Const(Tensor::scalar(a as f32))]),
        };
        sum = Some(match (sum, c < 0.0) {
            (None, false) => scaled,
            (None, true) => call("Neg", vec![scaled]),
            (Some(s), false) => call("Add", vec![s, scaled]),
            (Some(s), true) => call("Sub", vec![s, scaled]),
        });
    }
    sum.unwrap_or(Val::Const(Tensor::scalar(0f32)))
}

fn local(name: &str, value: Val) -> Stmt {
    Stmt::Let {
        name: name.to_string(),
        dtype: DType::F32,
        value,
    }
}

fn var(name: &str) -> Idx {
    Idx::var(name)
}

/// The first pixel a tile covers along one side: `2·tile − pad`.
fn tile_origin(tile: &str, pad: i64) -> Idx {
    var(tile).scale(STEP as i64).plus(&Idx::constant(-pad))
}

/// The input transform's kernel and schedule (see the module doc).
fn input_transform(
    group: &GroupExpr,
    name: &str,
    buffers: &[Buffer],
    n: usize,
) -> Result<(Kernel, Schedule)> {
    let node = &group.nodes[n];
    let alone = single_output(group) == Some(n) && reductions(group) == [n];
    if !alone || node.te.dtype != DType::F32 {
        bail!(
            "{}: a Winograd input transform takes only element-wise producers into its kernel",
            node.label
        );
    }
    let te = &node.te;
    let [batch, th, tw, _, _, channels] = te.shape[..] else {
        bail!("{}: output shape {:?} is not tiles", node.label, te.shape);
    };
    let pads = leading_pads(group, n)?;
    let Some(Some(src)) = node.args.first() else {
        bail!("{}: no input", node.label);
    };
    let mut inliner = Inliner::new(group);
    for (v, e) in [(N, batch), (TH, th), (TW, tw), (CH, channels)] {
        inliner.bind(v, e as i64);
    }
    let rows = tile_origin(TH, pads[0]);
    let cols = tile_origin(TW, pads[1]);
    let mut body = Vec::new();
    for i in 0..TILE {
        for j in 0..TILE {
            let at = [
                var(N),
                rows.clone().plus(&Idx::constant(i as i64)),
                cols.clone().plus(&Idx::constant(j as i64)),
                var(CH),
            ];
            body.push(local(&format!("d{i}{j}"), padded_read(&inliner, src, &at)?));
        }
    }
    let d = |i: usize, j: usize| Val::Local(format!("d{i}{j}"));
    let s = |x: usize, j: usize| Val::Local(format!("s{x}{j}"));
    for (x, row) in INPUT_MATRIX.iter().enumerate() {
        for j in 0..TILE {
            let terms = row.iter().enumerate().map(|(i, &b)| (b, d(i, j)));
            body.push(local(&format!("s{x}{j}"), combination(terms)));
        }
    }
    for x in 0..TILE {
        for (y, row) in INPUT_MATRIX.iter().enumerate() {
            let at = [x, y].map(|p| Idx::constant(p as i64));
            let index = [&[var(N), var(TH), var(TW)][..], &at, &[var(CH)]].concat();
            let terms = row.iter().enumerate().map(|(j, &b)| (b, s(x, j)));
            body.push(Stmt::Store {
                buf: output_buffer(group, 0),
                offset: flatten(&index, &te.shape),
                value: combination(terms),
            });
        }
    }
    let nest = serial(
        N,
        batch,
        vec![serial(
            TH,
            th,
            vec![serial(TW, tw, vec![serial(CH, channels, body)])],
        )],
    );
    let schedule = Schedule(vec![
        Directive::Parallel(TH.to_string()),
        Directive::Vectorize(CH.to_string()),
        peel(TW, tw),
        peel(TH, th),
    ]);
    Ok((kernel(name, buffers, vec![nest]), schedule))
}

/// Peels the first and the last iteration of a tile loop: the tiles that
/// may reach past the image.
fn peel(v: &str, extent: usize) -> Directive {
    let at = match extent {
        0..=2 => vec![],
        e => vec![1, e as i64 - 1],
    };
    Directive::Peel {
        var: v.to_string(),
        at,
    }
}

fn kernel(name: &str, buffers: &[Buffer], body: Vec<Stmt>) -> Kernel {
    Kernel {
        name: name.to_string(),
        buffers: buffers.to_vec(),
        body,
    }
}

/// `src` at `at`, zero outside its shape: a kernel input reads it through
/// its load's guard, an inlined producer under an explicit select.
fn padded_read(inliner: &Inliner, src: &Src, at: &[Idx]) -> Result<Val> {
    let value = inliner.read(src, at)?;
    if matches!(src, Src::Input(_)) {
        return Ok(value);
    }
    let guard = inliner.guard(at, inliner.shape_of(src));
    if guard.is_empty() {
        return Ok(value);
    }
    let zero = Val::Const(Tensor::scalar(0f32));
    Ok(Val::Call(
        Scalar::new("Where"),
        vec![Val::InBounds(guard), value, zero],
    ))
}

/// The top and left padding of input transform `n`, read off its
/// expression's access (`2·th + r0 − top`, `2·tw + r1 − left`).
fn leading_pads(group: &GroupExpr, n: usize) -> Result<[i64; 2]> {
    let node = &group.nodes[n];
    let pad = |dim: usize, tile: usize| -> Option<i64> {
        let a = node.te.accesses.first()?.index.get(dim)?.as_affine()?;
        let expected = [(Var::Out(tile), STEP as i64), (Var::Red(dim - 1), 1)];
        (a.terms == expected).then_some(-a.constant)
    };
    match (pad(1, 1), pad(2, 2)) {
        (Some(top), Some(left)) => Ok([top, left]),
        _ => bail!(
            "{}: the input transform's reads are not 4x4 tiles",
            node.label
        ),
    }
}

/// The output transform's kernel and schedule (see the module doc).
fn output_transform(
    group: &GroupExpr,
    name: &str,
    buffers: &[Buffer],
    r: usize,
) -> Result<(Kernel, Schedule)> {
    let node = &group.nodes[r];
    let v = single_output(group);
    let fits = v.is_some_and(|v| group.nodes[v].te.shape == node.te.shape);
    if reductions(group) != [r] || !fits || node.te.dtype != DType::F32 {
        bail!(
            "{}: a Winograd output transform takes one element-wise epilogue of its shape into its kernel",
            node.label
        );
    }
    let Some(Some(src)) = node.args.first() else {
        bail!("{}: no input", node.label);
    };
    let tiles = Tiles::of(group, node, src)?;
    let full = tiles.full();
    let mut nests = Vec::new();
    // The tiles whose 2x2 pixels all lie in the image, then the last row
    // and column of tiles of an odd image, which have fewer.
    for (th, rows) in [(Part::Loop(full[0]), STEP), (Part::At(full[0]), 1)] {
        for (tw, cols) in [(Part::Loop(full[1]), STEP), (Part::At(full[1]), 1)] {
            if !th.exists(tiles.image[0]) || !tw.exists(tiles.image[1]) {
                continue;
            }
            let pixels = [rows, cols];
            let body = output_tile(group, (r, v.unwrap_or(r)), src, &tiles, pixels, [&th, &tw])?;
            nests.push(tile_loops(&tiles, [th, tw], body));
        }
    }
    let schedule = Schedule(vec![
        Directive::Parallel(TH.to_string()),
        Directive::Vectorize(CH.to_string()),
    ]);
    Ok((kernel(name, buffers, nests), schedule))
}

/// A tile coordinate: every tile of a loop of this extent, or one tile.
#[derive(Clone, Copy)]
enum Part {
    Loop(usize),
    At(usize),
}

impl Part {
    /// Whether the part has tiles in an image side of `pixels`: the
    /// loop when it has iterations, the one tile when it starts inside.
    fn exists(&self, pixels: usize) -> bool {
        match self {
            Part::Loop(e) => *e > 0,
            Part::At(t) => t * STEP < pixels,
        }
    }

    fn index(&self, v: &str) -> Idx {
        match self {
            Part::Loop(_) => var(v),
            Part::At(t) => Idx::constant(*t as i64),
        }
    }
}

/// The output transform's geometry.
struct Tiles {
    batch: usize,
    channels: usize,
    /// Output pixels `[Ho, Wo]`.
    image: [usize; 2],
    /// The input's `[4, 4, N, TH, TW, K]`.
    input: Vec<usize>,
}

impl Tiles {
    fn of(group: &GroupExpr, node: &crate::group::GroupNode, src: &Src) -> Result<Tiles> {
        let input = Inliner::new(group).shape_of(src).to_vec();
        let [batch, ho, wo, channels] = node.te.shape[..] else {
            bail!(
                "{}: output shape {:?} is not an image",
                node.label,
                node.te.shape
            );
        };
        Ok(Tiles {
            batch,
            channels,
            image: [ho, wo],
            input,
        })
    }

    /// Tiles whose 2x2 pixels all lie in the image, per side.
    fn full(&self) -> [usize; 2] {
        self.image.map(|p| p / STEP)
    }
}

/// The loops around one tile's statements: batch, then the tile row and
/// column where they are loops, then the channels.
fn tile_loops(tiles: &Tiles, parts: [Part; 2], body: Vec<Stmt>) -> Stmt {
    let mut nest = serial(CH, tiles.channels, body);
    for (v, p) in [(TW, &parts[1]), (TH, &parts[0])] {
        if let Part::Loop(e) = p {
            nest = serial(v, *e, vec![nest]);
        }
    }
    serial(N, tiles.batch, vec![nest])
}

/// One tile's output transform with `pixels` rows and columns of output
/// in the image: the 16 inputs, `s = Aᵀ m`, each pixel `s A` through the
/// epilogue (`out` = (transform node, output node)) into the output.
fn output_tile(
    group: &GroupExpr,
    (r, out): (usize, usize),
    src: &Src,
    tiles: &Tiles,
    pixels: [usize; 2],
    parts: [&Part; 2],
) -> Result<Vec<Stmt>> {
    let mut inliner = Inliner::new(group);
    inliner.bind(N, tiles.batch as i64);
    inliner.bind(TH, tiles.input[3] as i64);
    inliner.bind(TW, tiles.input[4] as i64);
    inliner.bind(CH, tiles.channels as i64);
    let (th, tw) = (parts[0].index(TH), parts[1].index(TW));
    let mut body = Vec::new();
    for x in 0..TILE {
        for y in 0..TILE {
            let at = [x, y].map(|p| Idx::constant(p as i64));
            let index = [&at[..], &[var(N), th.clone(), tw.clone(), var(CH)]].concat();
            body.push(local(&format!("m{x}{y}"), inliner.read(src, &index)?));
        }
    }
    let m = |x: usize, y: usize| Val::Local(format!("m{x}{y}"));
    for (a, row) in OUTPUT_MATRIX.iter().enumerate().take(pixels[0]) {
        for y in 0..TILE {
            let terms = row.iter().enumerate().map(|(x, &c)| (c, m(x, y)));
            body.push(local(&format!("s{a}{y}"), combination(terms)));
        }
    }
    for a in 0..pixels[0] {
        for (b, row) in OUTPUT_MATRIX.iter().enumerate().take(pixels[1]) {
            let terms = row
                .iter()
                .enumerate()
                .map(|(y, &c)| (c, Val::Local(format!("s{a}{y}"))));
            let name = format!("y{a}{b}");
            body.push(local(&name, combination(terms)));
            let at = vec![
                var(N),
                th.clone().scale(STEP as i64).plus(&Idx::constant(a as i64)),
                tw.clone().scale(STEP as i64).plus(&Idx::constant(b as i64)),
                var(CH),
            ];
            inliner
                .computed
                .insert(r, (Val::Local(name.clone()), at.clone()));
            let value = match out == r {
                true => Val::Local(name),
                false => inliner.body(
                    out,
                    &Env {
                        out: at.clone(),
                        red: Vec::new(),
                    },
                )?,
            };
            let shape = &group.nodes[out].te.shape;
            body.push(Stmt::Store {
                buf: output_buffer(group, 0),
                offset: flatten(&at, shape),
                value,
            });
        }
    }
    Ok(body)
}
