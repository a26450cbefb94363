//! A kernel's output written in place as one part of a larger tensor: the
//! producers of a concatenation store straight into its buffer, and the
//! concatenation copies nothing.
//!
//! Needs: a kernel, one of its output parameters `buf` (shape `S`), and
//! the whole tensor's shape `W` that agrees with `S` on every axis but
//! `axis`, where the part starts at `offset` (`offset + S[axis] <= W[axis]`).
//!
//! Guarantees: [`write_as_part`] returns the kernel with `buf` declared as
//! `W` and every access to it (stores, loads, a product's output, its
//! epilogue's reads) moved to the part's element of the whole: flat index
//! `o·B + i` (`B = S[axis]·inner`, `inner` the elements after `axis`,
//! `0 <= i < B`) becomes `o·B' + offset·inner + i` with `B' =
//! W[axis]·inner`. Terms whose coefficient is a multiple of `B` are the
//! `o` part; the other terms and the constant's remainder must stay in
//! `[0, B)` over the ranges of the loop variables around the access
//! (`Idx::range`), or the kernel is refused (`None`): then it keeps a
//! buffer of its own and the concatenation copies it. Nothing else
//! changes, so the schedule and every other buffer stay as they were, and
//! the kernel touches no element of the whole outside its part.

use crate::ir::{
    ArgStep, Atom, Combine, Gemm, GemmInput, GemmOperand, Idx, Kernel, Loop, Stmt, Val,
};
use std::collections::HashMap;

/// Where a part lies in the whole tensor it is written into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The whole tensor's shape.
    pub whole: Vec<usize>,
    /// The axis the parts are concatenated along.
    pub axis: usize,
    /// The part's first index along `axis`.
    pub offset: usize,
}

/// `k` with output `buf` written as `part` of the whole, or `None` when an
/// access to it cannot be shown to stay inside one block of the part (see
/// the module doc).
pub fn write_as_part(k: &Kernel, buf: usize, part: &Part) -> Option<Kernel> {
    let shape = &k.buffers.get(buf)?.shape;
    let map = PartMap::new(shape, part)?;
    let rewrite = Rewrite { buf, map };
    let mut ranges = HashMap::new();
    let body = rewrite.stmts(&k.body, &mut ranges)?;
    let mut out = k.clone();
    out.body = body;
    out.buffers[buf].shape = part.whole.clone();
    Some(out)
}

/// The flat-index map of a part into its whole.
#[derive(Debug, Clone, Copy)]
struct PartMap {
    /// Elements of one block of the part (its axis and everything after).
    block: i64,
    /// Elements of one block of the whole.
    whole_block: i64,
    /// Elements before the part inside a block of the whole.
    shift: i64,
}

impl PartMap {
    fn new(shape: &[usize], part: &Part) -> Option<PartMap> {
        let axis = part.axis;
        let agrees = shape.len() == part.whole.len()
            && axis < shape.len()
            && (0..shape.len()).all(|d| d == axis || shape[d] == part.whole[d])
            && part.offset + shape[axis] <= part.whole[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        (agrees && shape[axis] > 0 && inner > 0).then(|| PartMap {
            block: (shape[axis] * inner) as i64,
            whole_block: (part.whole[axis] * inner) as i64,
            shift: (part.offset * inner) as i64,
        })
    }

    /// `idx` (into the part) as an index into the whole, when its terms
    /// outside whole blocks stay inside one block.
    fn apply(&self, idx: &Idx, ranges: &HashMap<String, (i64, i64)>) -> Option<Idx> {
        let (blocks, rest) = (self.block, self.whole_block);
        let mut outer = Idx::constant(idx.constant.div_euclid(blocks) * rest);
        let mut within = Idx::constant(idx.constant.rem_euclid(blocks));
        for (atom, coeff) in &idx.terms {
            match coeff % blocks {
                0 => outer.terms.push((atom.clone(), coeff / blocks * rest)),
                _ => within.terms.push((atom.clone(), *coeff)),
            }
        }
        // A variable of no enclosing loop has no range: refuse.
        const UNKNOWN: (i64, i64) = (-(1 << 32), 1 << 32);
        let (lo, hi) = within.range(&|v| ranges.get(v).copied().unwrap_or(UNKNOWN));
        (lo >= 0 && hi < blocks).then(|| {
            within.constant += self.shift;
            outer.plus(&within)
        })
    }
}

/// The rewrite of every access to one buffer.
struct Rewrite {
    buf: usize,
    map: PartMap,
}

type Ranges = HashMap<String, (i64, i64)>;

impl Rewrite {
    fn stmts(&self, body: &[Stmt], ranges: &mut Ranges) -> Option<Vec<Stmt>> {
        body.iter().map(|s| self.stmt(s, ranges)).collect()
    }

    fn stmt(&self, s: &Stmt, ranges: &mut Ranges) -> Option<Stmt> {
        Some(match s {
            Stmt::Loop(l) => {
                let range = (0, l.extent.max().max(1) - 1);
                let shadowed = ranges.insert(l.var.clone(), range);
                let body = self.stmts(&l.body, ranges);
                match shadowed {
                    Some(r) => ranges.insert(l.var.clone(), r),
                    None => ranges.remove(&l.var),
                };
                Stmt::Loop(Loop {
                    body: body?,
                    ..l.clone()
                })
            }
            Stmt::Store { buf, offset, value } => Stmt::Store {
                buf: *buf,
                offset: self.access(*buf, offset, ranges)?,
                value: self.val(value, ranges)?,
            },
            Stmt::Let { name, dtype, value } => Stmt::Let {
                name: name.clone(),
                dtype: *dtype,
                value: self.val(value, ranges)?,
            },
            Stmt::Update {
                name,
                combiner,
                value,
            } => Stmt::Update {
                name: name.clone(),
                combiner: *combiner,
                value: self.val(value, ranges)?,
            },
            Stmt::ArgUpdate(a) => Stmt::ArgUpdate(Box::new(ArgStep {
                value: self.val(&a.value, ranges)?,
                index: self.idx(&a.index, ranges)?,
                ..(**a).clone()
            })),
            Stmt::Combine(c) => Stmt::Combine(Box::new(Combine {
                value: self.val(&c.value, ranges)?,
                ..(**c).clone()
            })),
            Stmt::Gemm(g) => Stmt::Gemm(Box::new(self.gemm(g, ranges)?)),
            Stmt::Alloc(b) => Stmt::Alloc(*b),
        })
    }

    /// A product: its output moved, over the ranges of its `b`, `r`, `c`.
    /// A product reading the buffer (as a factor or in its epilogue) is
    /// refused: the code generator calls the product on the part's first
    /// element, so an epilogue's reads of it would move twice.
    fn gemm(&self, g: &Gemm, outer: &Ranges) -> Option<Gemm> {
        let factor_reads = |i: &GemmInput| match i {
            GemmInput::Read(o) => o.buf == self.buf,
            GemmInput::Computed(v) => v.reads(self.buf),
        };
        let epilogue_reads = g.epilogue.as_ref().is_some_and(|e| e.reads(self.buf));
        if factor_reads(&g.a) || factor_reads(&g.b) || epilogue_reads {
            return None;
        }
        let mut ranges = outer.clone();
        for (v, extent) in [("b", g.batch), ("r", g.m), ("c", g.n)] {
            ranges.insert(v.into(), (0, extent.max(1) - 1));
        }
        Some(Gemm {
            c: GemmOperand {
                buf: g.c.buf,
                offset: self.access(g.c.buf, &g.c.offset, &ranges)?,
                guard: g.c.guard.clone(),
            },
            ..g.clone()
        })
    }

    /// The offset of an access to `buf`: moved into the whole when `buf`
    /// is the part.
    fn access(&self, buf: usize, offset: &Idx, ranges: &Ranges) -> Option<Idx> {
        let offset = self.idx(offset, ranges)?;
        match buf == self.buf {
            true => self.map.apply(&offset, ranges),
            false => Some(offset),
        }
    }

    fn val(&self, v: &Val, ranges: &Ranges) -> Option<Val> {
        Some(match v {
            Val::Load { buf, offset, guard } => Val::Load {
                buf: *buf,
                offset: self.access(*buf, offset, ranges)?,
                guard: self.guard(guard, ranges)?,
            },
            Val::InBounds(g) => Val::InBounds(self.guard(g, ranges)?),
            Val::Index(i) => Val::Index(self.idx(i, ranges)?),
            Val::Call(s, args) => Val::Call(
                s.clone(),
                args.iter()
                    .map(|a| self.val(a, ranges))
                    .collect::<Option<_>>()?,
            ),
            Val::Const(_) | Val::Local(_) => v.clone(),
        })
    }

    fn guard(&self, g: &[(Idx, i64)], ranges: &Ranges) -> Option<Vec<(Idx, i64)>> {
        g.iter()
            .map(|(i, e)| Some((self.idx(i, ranges)?, *e)))
            .collect()
    }

    /// An index whose data atoms may read the buffer (a gathered index).
    fn idx(&self, i: &Idx, ranges: &Ranges) -> Option<Idx> {
        let terms = i
            .terms
            .iter()
            .map(|(a, c)| {
                let atom = match a {
                    Atom::Var(_) => a.clone(),
                    Atom::Div(e, d) => Atom::Div(Box::new(self.idx(e, ranges)?), *d),
                    Atom::Mod(e, d) => Atom::Mod(Box::new(self.idx(e, ranges)?), *d),
                    Atom::Data { value, extent } => Atom::Data {
                        value: Box::new(self.val(value, ranges)?),
                        extent: *extent,
                    },
                };
                Some((atom, *c))
            })
            .collect::<Option<_>>()?;
        Some(Idx {
            terms,
            constant: i.constant,
        })
    }
}
