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
//! out all 16 terms): per tile (`n`, `th`, its phase `ph`, `tw`, its
//! phase `pw`; a dilated side's phases are interleaved undilated images;
//! `th` parallel, or the first of `ph`, `n`, `tw`, `pw` with several
//! iterations where `th` has one) and channel (vectorized),
//! - input: the 16 pixels of the tile read once (zero outside the image),
//!   `s = Bᵀ d` by columns, then the 16 results `s B` stored;
//! - output: the 16 values of the tile read once, `s = Aᵀ m`, then each of
//!   the tile's output pixels inside the image `s A`, the epilogue applied
//!   to it and stored once (pixels of the last tile row or column past
//!   the image are left out by separate nests for those tiles, per side
//!   the phases with both pixels inside and those with one, not by a test
//!   per pixel).
//!
//! The tile loops' borders are peeled (`peel`), so the interior tiles of
//! the input transform read without bounds checks.

use crate::fused::{output_buffer, reductions, single_output, LoweredGroup};
use crate::group::{Env, GroupExpr, Inliner, Src};
use crate::ir::{find_loop, Buffer, Extent, Idx, Kernel, Loop, LoopKind, Stmt, Val};
use crate::lower::{flatten, single_node_group};
use crate::schedule::{apply, Directive, Schedule};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_ops::ops::winograd::{
    INPUT_MATRIX, OUTPUT_MATRIX, STEP, TILE, WINOGRAD_DOMAIN, WINOGRAD_INPUT_OP, WINOGRAD_OUTPUT_OP,
};
use kiln_ops::te::{Scalar, TensorExpr, Var};
use std::ops::Range;

/// The group in this form when it holds a Winograd transform, `None`
/// otherwise; an error when it holds one with more than the form takes
/// (the planner's feedback splits it).
pub fn winograd_transform(
    group: &GroupExpr,
    name: &str,
    buffers: &[Buffer],
) -> Result<Option<LoweredGroup>> {
    let is = |op: &str| {
        group
            .nodes
            .iter()
            .position(|n| n.is_op(WINOGRAD_DOMAIN, op))
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
const PH: &str = "ph";
const TW: &str = "tw";
const PW: &str = "pw";
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

fn constant(c: usize) -> Idx {
    Idx::constant(c as i64)
}

/// One image side of a transform: its leading padding (input transform)
/// and dilation.
#[derive(Clone, Copy)]
struct Geometry {
    pad: i64,
    dilation: usize,
}

/// The first pixel tile `(tile, phase)` reads along a side: `2·D·tile +
/// phase − pad`.
fn tile_origin(tile: Idx, phase: Idx, side: Geometry) -> Idx {
    let step = (STEP * side.dilation) as i64;
    tile.scale(step)
        .plus(&phase)
        .plus(&Idx::constant(-side.pad))
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
    let [batch, th, dh, tw, dw, _, _, channels] = te.shape[..] else {
        bail!("{}: output shape {:?} is not tiles", node.label, te.shape);
    };
    let sides = input_sides(group, n)?;
    let Some(Some(src)) = node.args.first() else {
        bail!("{}: no input", node.label);
    };
    let loops = [
        (N, batch),
        (TH, th),
        (PH, dh),
        (TW, tw),
        (PW, dw),
        (CH, channels),
    ];
    let mut inliner = Inliner::new(group);
    for (v, e) in loops {
        inliner.bind(v, e as i64);
    }
    let out = (output_buffer(group, 0), &te.shape[..]);
    let body = input_tile(&inliner, src, sides, out)?;
    let mut nest = serial(CH, channels, body);
    for (v, e) in [(PW, dw), (TW, tw), (PH, dh), (TH, th), (N, batch)] {
        nest = serial(v, e, vec![nest]);
    }
    let nests = vec![nest];
    let mut directives: Vec<Directive> = parallel_loop(&nests).into_iter().collect();
    directives.extend([
        Directive::Vectorize(CH.to_string()),
        peel(TW, tw),
        peel(TH, th),
    ]);
    Ok((kernel(name, buffers, nests), Schedule(directives)))
}

/// One tile's input transform at the loops' tile and channel: the 16
/// pixels (zero outside the image), `s = Bᵀ d`, the 16 results `s B`
/// stored into `out` (buffer, shape).
fn input_tile(
    inliner: &Inliner,
    src: &Src,
    sides: [Geometry; 2],
    (buf, shape): (usize, &[usize]),
) -> Result<Vec<Stmt>> {
    let rows = tile_origin(var(TH), var(PH), sides[0]);
    let cols = tile_origin(var(TW), var(PW), sides[1]);
    let mut body = Vec::new();
    for i in 0..TILE {
        for j in 0..TILE {
            let at = [
                var(N),
                rows.clone().plus(&constant(i * sides[0].dilation)),
                cols.clone().plus(&constant(j * sides[1].dilation)),
                var(CH),
            ];
            body.push(local(&format!("d{i}{j}"), padded_read(inliner, src, &at)?));
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
    let tile = [var(N), var(TH), var(PH), var(TW), var(PW)];
    for x in 0..TILE {
        for (y, row) in INPUT_MATRIX.iter().enumerate() {
            let index = [&tile[..], &[constant(x), constant(y), var(CH)]].concat();
            let terms = row.iter().enumerate().map(|(j, &b)| (b, s(x, j)));
            body.push(Stmt::Store {
                buf,
                offset: flatten(&index, shape),
                value: combination(terms),
            });
        }
    }
    Ok(body)
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

/// The padding and dilation of input transform `n`'s sides, read off its
/// expression's access (`2·D·th + ph + D·r0 − top`, the same across).
fn input_sides(group: &GroupExpr, n: usize) -> Result<[Geometry; 2]> {
    let node = &group.nodes[n];
    let side = |dim: usize, tile: usize| -> Option<Geometry> {
        let a = node.te.accesses.first()?.index.get(dim)?.as_affine()?;
        let d = a.terms.iter().find(|(v, _)| *v == Var::Red(dim - 1))?.1;
        let expected = [
            (Var::Out(tile), STEP as i64 * d),
            (Var::Out(tile + 1), 1),
            (Var::Red(dim - 1), d),
        ];
        (d > 0 && a.terms == expected).then_some(Geometry {
            pad: -a.constant,
            dilation: d as usize,
        })
    };
    match (side(1, 1), side(2, 3)) {
        (Some(rows), Some(cols)) => Ok([rows, cols]),
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
    let mut nests = Vec::new();
    // The tiles whose 2x2 pixels all lie in the image, then those of the
    // last tile row and column that cover fewer.
    for rows in tiles.sides[0].parts() {
        for cols in tiles.sides[1].parts() {
            let at = [&rows, &cols];
            let body = output_tile(group, (r, v.unwrap_or(r)), src, &tiles, at)?;
            nests.push(tile_loops(&tiles, at, body));
        }
    }
    let mut directives: Vec<Directive> = parallel_loop(&nests).into_iter().collect();
    directives.push(Directive::Vectorize(CH.to_string()));
    Ok((kernel(name, buffers, nests), Schedule(directives)))
}

/// Runs a transform's nests across threads: over tile rows, or where no
/// nest has a loop of several (an image of at most one tile's dilated
/// span: the output transform's nests then have no tile row loop), over
/// the first loop of several some nest has of the row phases, the batch,
/// the tile columns and their phases.
fn parallel_loop(nests: &[Stmt]) -> Option<Directive> {
    [TH, PH, N, TW, PW]
        .into_iter()
        .find(|v| find_loop(nests, v).is_some_and(|l| l.extent.max() > 1))
        .map(|v| Directive::Parallel(v.to_string()))
}

/// Some tiles along a side: every tile of a loop of `tiles` iterations or
/// the one tile `at`; the phases `phases` of each; `pixels` (1 or 2) of
/// each tile's pixels in the image.
#[derive(Clone)]
struct Part {
    tiles: Option<usize>,
    at: usize,
    phases: Range<usize>,
    pixels: usize,
}

impl Part {
    /// The tile and phase indices: loop variables, or constants where the
    /// part has one tile or one phase.
    fn indices(&self, tile: &str, phase: &str) -> [Idx; 2] {
        let t = match self.tiles {
            Some(_) => var(tile),
            None => constant(self.at),
        };
        let p = match self.phases.len() {
            1 => constant(self.phases.start),
            _ => var(phase).plus(&constant(self.phases.start)),
        };
        [t, p]
    }
}

/// One output side: its pixels and dilation.
struct Side {
    pixels: usize,
    dilation: usize,
}

impl Side {
    /// The parts covering the side: the tiles whose two pixels (`D` apart)
    /// are both inside, in every phase; then of the last tile, the phases
    /// with both pixels inside and those with only the first.
    fn parts(&self) -> Vec<Part> {
        let d = self.dilation;
        let span = STEP * d;
        let (full, rest) = (self.pixels / span, self.pixels % span);
        let both = rest.saturating_sub(d).min(d);
        let first = rest.min(d);
        let last = |phases: Range<usize>, pixels| Part {
            tiles: None,
            at: full,
            phases,
            pixels,
        };
        let whole = Part {
            tiles: Some(full),
            at: 0,
            phases: 0..d,
            pixels: STEP,
        };
        [whole, last(0..both, STEP), last(both..first, 1)]
            .into_iter()
            .filter(|p| !p.phases.is_empty() && p.tiles != Some(0))
            .collect()
    }
}

/// The output transform's geometry.
struct Tiles {
    batch: usize,
    channels: usize,
    sides: [Side; 2],
}

impl Tiles {
    fn of(group: &GroupExpr, node: &crate::group::GroupNode, src: &Src) -> Result<Tiles> {
        let input = Inliner::new(group).shape_of(src).to_vec();
        let (&[batch, ho, wo, channels], &[_, _, _, _, dh, _, dw, _]) =
            (&node.te.shape[..], &input[..])
        else {
            bail!(
                "{}: shapes {input:?} → {:?} are not tiles and an image",
                node.label,
                node.te.shape
            );
        };
        let side = |pixels, dilation| Side { pixels, dilation };
        Ok(Tiles {
            batch,
            channels,
            sides: [side(ho, dh), side(wo, dw)],
        })
    }
}

/// The loops around one part's statements: batch, tile row and its
/// phases, tile column and its phases where they are loops, channels.
fn tile_loops(tiles: &Tiles, parts: [&Part; 2], body: Vec<Stmt>) -> Stmt {
    let mut nest = serial(CH, tiles.channels, body);
    let [rows, cols] = parts;
    for (part, tile, phase) in [(cols, TW, PW), (rows, TH, PH)] {
        if part.phases.len() > 1 {
            nest = serial(phase, part.phases.len(), vec![nest]);
        }
        if let Some(e) = part.tiles {
            nest = serial(tile, e, vec![nest]);
        }
    }
    serial(N, tiles.batch, vec![nest])
}

/// One tile's output transform (`parts`: which tiles, how many of their
/// pixels lie in the image): the 16 inputs, `s = Aᵀ m`, each pixel `s A`
/// through the epilogue (`out` = (transform node, output node)) into the
/// output.
fn output_tile(
    group: &GroupExpr,
    (r, out): (usize, usize),
    src: &Src,
    tiles: &Tiles,
    parts: [&Part; 2],
) -> Result<Vec<Stmt>> {
    let mut inliner = Inliner::new(group);
    inliner.bind(N, tiles.batch as i64);
    for (part, tile, phase) in [(parts[0], TH, PH), (parts[1], TW, PW)] {
        inliner.bind(tile, part.tiles.unwrap_or(1) as i64);
        inliner.bind(phase, part.phases.len() as i64);
    }
    inliner.bind(CH, tiles.channels as i64);
    let [th, ph] = parts[0].indices(TH, PH);
    let [tw, pw] = parts[1].indices(TW, PW);
    let mut body = Vec::new();
    let tile = [
        var(N),
        th.clone(),
        ph.clone(),
        tw.clone(),
        pw.clone(),
        var(CH),
    ];
    for x in 0..TILE {
        for y in 0..TILE {
            let index = [&[constant(x), constant(y)][..], &tile].concat();
            body.push(local(&format!("m{x}{y}"), inliner.read(src, &index)?));
        }
    }
    let m = |x: usize, y: usize| Val::Local(format!("m{x}{y}"));
    for (a, row) in OUTPUT_MATRIX.iter().enumerate().take(parts[0].pixels) {
        for y in 0..TILE {
            let terms = row.iter().enumerate().map(|(x, &c)| (c, m(x, y)));
            body.push(local(&format!("s{a}{y}"), combination(terms)));
        }
    }
    let [dh, dw] = [0, 1].map(|k| tiles.sides[k].dilation);
    let rows = tile_origin(
        th,
        ph,
        Geometry {
            pad: 0,
            dilation: dh,
        },
    );
    let cols = tile_origin(
        tw,
        pw,
        Geometry {
            pad: 0,
            dilation: dw,
        },
    );
    for a in 0..parts[0].pixels {
        for (b, row) in OUTPUT_MATRIX.iter().enumerate().take(parts[1].pixels) {
            let terms = row
                .iter()
                .enumerate()
                .map(|(y, &c)| (c, Val::Local(format!("s{a}{y}"))));
            let name = format!("y{a}{b}");
            body.push(local(&name, combination(terms)));
            let at = vec![
                var(N),
                rows.clone().plus(&constant(a * dh)),
                cols.clone().plus(&constant(b * dw)),
                var(CH),
            ];
            body.push(epilogue_store(group, &mut inliner, (r, out), &name, at)?);
        }
    }
    Ok(body)
}

/// The store of output pixel `at`: transform `r`'s value there is local
/// `name`; the output node `out` applies the epilogue to it.
fn epilogue_store(
    group: &GroupExpr,
    inliner: &mut Inliner,
    (r, out): (usize, usize),
    name: &str,
    at: Vec<Idx>,
) -> Result<Stmt> {
    inliner
        .computed
        .insert(r, (Val::Local(name.to_string()), at.clone()));
    let value = match out == r {
        true => Val::Local(name.to_string()),
        false => inliner.body(
            out,
            &Env {
                out: at.clone(),
                red: Vec::new(),
            },
        )?,
    };
    Ok(Stmt::Store {
        buf: output_buffer(group, 0),
        offset: flatten(&at, &group.nodes[out].te.shape),
        value,
    })
}
