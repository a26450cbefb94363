//! Index expressions: how a tensor expression reads an input element from
//! the loop indices (output indices `i0, i1, …` and reduction indices
//! `r0, r1, …`).
//!
//! Most maps are affine (`2*i2 + r0 - 1` for a strided, padded window). Two
//! quasi-affine forms (`floordiv` and `mod` by a positive constant) express
//! reshapes and tiling, and one data-dependent form reads an index from
//! another input (Gather). Nothing else is needed by the primitives, and
//! keeping the set this small is what lets the classifiers and the loop
//! lowering reason about every map.

use std::collections::BTreeMap;
use std::fmt;

/// A loop index of a tensor expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Var {
    /// Output dimension `l`.
    Out(usize),
    /// Reduction dimension `k`.
    Red(usize),
}

/// `Σ coeff·var + constant`, terms sorted by variable, no zero coefficients.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Affine {
    pub terms: Vec<(Var, i64)>,
    pub constant: i64,
}

/// An index into one dimension of an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexExpr {
    Affine(Affine),
    /// Floor division by a positive constant.
    Div(Box<IndexExpr>, i64),
    /// Remainder (non-negative) of division by a positive constant.
    Mod(Box<IndexExpr>, i64),
    /// The integer read from input `input` at `index`; negative values count
    /// from `extent` (the size of the dimension being indexed), as ONNX's
    /// Gather does. Out-of-range values are an evaluation error.
    Data {
        input: usize,
        index: Vec<IndexExpr>,
        extent: i64,
    },
}

impl Affine {
    pub fn from_terms(terms: impl IntoIterator<Item = (Var, i64)>, constant: i64) -> Affine {
        let mut m: BTreeMap<Var, i64> = BTreeMap::new();
        for (v, c) in terms {
            *m.entry(v).or_insert(0) += c;
        }
        Affine {
            terms: m.into_iter().filter(|(_, c)| *c != 0).collect(),
            constant,
        }
    }

    /// The single variable of `v` with coefficient 1 and no constant.
    pub fn as_var(&self) -> Option<Var> {
        match (self.terms.as_slice(), self.constant) {
            ([(v, 1)], 0) => Some(*v),
            _ => None,
        }
    }

    /// Smallest and largest value over the loop ranges (`extent(var)` > 0).
    fn range(&self, extent: &dyn Fn(Var) -> i64) -> (i64, i64) {
        let (mut lo, mut hi) = (self.constant, self.constant);
        for &(v, c) in &self.terms {
            let span = c * (extent(v) - 1);
            lo += span.min(0);
            hi += span.max(0);
        }
        (lo, hi)
    }
}

impl IndexExpr {
    pub fn var(v: Var) -> IndexExpr {
        IndexExpr::Affine(Affine::from_terms([(v, 1)], 0))
    }

    pub fn out(l: usize) -> IndexExpr {
        IndexExpr::var(Var::Out(l))
    }

    pub fn red(k: usize) -> IndexExpr {
        IndexExpr::var(Var::Red(k))
    }

    pub fn constant(c: i64) -> IndexExpr {
        IndexExpr::Affine(Affine::from_terms([], c))
    }

    /// `Σ coeff·var + constant`.
    pub fn affine(terms: impl IntoIterator<Item = (Var, i64)>, constant: i64) -> IndexExpr {
        IndexExpr::Affine(Affine::from_terms(terms, constant))
    }

    pub fn as_affine(&self) -> Option<&Affine> {
        match self {
            IndexExpr::Affine(a) => Some(a),
            _ => None,
        }
    }

    /// The constant value, when the expression is one.
    pub fn as_constant(&self) -> Option<i64> {
        match self {
            IndexExpr::Affine(a) if a.terms.is_empty() => Some(a.constant),
            _ => None,
        }
    }

    /// Every loop variable the expression depends on.
    pub fn vars(&self, out: &mut Vec<Var>) {
        match self {
            IndexExpr::Affine(a) => out.extend(a.terms.iter().map(|t| t.0)),
            IndexExpr::Div(e, _) | IndexExpr::Mod(e, _) => e.vars(out),
            IndexExpr::Data { index, .. } => index.iter().for_each(|e| e.vars(out)),
        }
    }

    /// The same expression over variables renamed by `f`.
    pub fn renamed(&self, f: &dyn Fn(Var) -> Var) -> IndexExpr {
        match self {
            IndexExpr::Affine(a) => IndexExpr::Affine(Affine::from_terms(
                a.terms.iter().map(|&(v, c)| (f(v), c)),
                a.constant,
            )),
            IndexExpr::Div(e, d) => IndexExpr::Div(Box::new(e.renamed(f)), *d),
            IndexExpr::Mod(e, d) => IndexExpr::Mod(Box::new(e.renamed(f)), *d),
            IndexExpr::Data {
                input,
                index,
                extent,
            } => IndexExpr::Data {
                input: *input,
                index: index.iter().map(|e| e.renamed(f)).collect(),
                extent: *extent,
            },
        }
    }

    /// True for the floordiv/mod forms (anywhere inside).
    pub fn is_quasi_affine(&self) -> bool {
        match self {
            IndexExpr::Affine(_) => false,
            IndexExpr::Div(..) | IndexExpr::Mod(..) => true,
            IndexExpr::Data { index, .. } => index.iter().any(|e| e.is_quasi_affine()),
        }
    }

    /// Whether the index reads input `input` as data.
    pub fn reads_input(&self, input: usize) -> bool {
        match self {
            IndexExpr::Affine(_) => false,
            IndexExpr::Div(e, _) | IndexExpr::Mod(e, _) => e.reads_input(input),
            IndexExpr::Data {
                input: read, index, ..
            } => *read == input || index.iter().any(|i| i.reads_input(input)),
        }
    }

    pub fn is_data_dependent(&self) -> bool {
        match self {
            IndexExpr::Affine(_) => false,
            IndexExpr::Div(e, _) | IndexExpr::Mod(e, _) => e.is_data_dependent(),
            IndexExpr::Data { .. } => true,
        }
    }

    /// Rewrites the expression into the simplest equal form given the loop
    /// ranges: variables of extent 1 are 0, and `floordiv`/`mod` of an
    /// affine sum whose low part stays inside `[0, d)` split exactly
    /// (`(4*i0 + i1) floordiv 4 = i0` when `0 ≤ i1 < 4`).
    pub fn simplified(&self, extent: &dyn Fn(Var) -> i64) -> IndexExpr {
        match self {
            IndexExpr::Affine(a) => IndexExpr::Affine(Affine::from_terms(
                a.terms.iter().copied().filter(|&(v, _)| extent(v) != 1),
                a.constant,
            )),
            IndexExpr::Div(e, d) => match e.simplified(extent) {
                IndexExpr::Affine(a) => split_div(&a, *d, extent),
                e => IndexExpr::Div(Box::new(e), *d),
            },
            IndexExpr::Mod(e, d) => match e.simplified(extent) {
                IndexExpr::Affine(a) => split_mod(&a, *d, extent),
                e => IndexExpr::Mod(Box::new(e), *d),
            },
            IndexExpr::Data {
                input,
                index,
                extent: n,
            } => IndexExpr::Data {
                input: *input,
                index: index.iter().map(|e| e.simplified(extent)).collect(),
                extent: *n,
            },
        }
    }
}

/// Splits `a` into the terms whose coefficients `d` divides (`high`, already
/// divided) and the rest (`low`, with the constant).
fn split_by(a: &Affine, d: i64) -> (Affine, Affine) {
    let (hi, lo): (Vec<_>, Vec<_>) = a.terms.iter().partition(|(_, c)| c % d == 0);
    let high = Affine::from_terms(hi.into_iter().map(|(v, c)| (v, c / d)), 0);
    let low = Affine::from_terms(lo, a.constant);
    (high, low)
}

fn split_div(a: &Affine, d: i64, extent: &dyn Fn(Var) -> i64) -> IndexExpr {
    if d == 1 {
        return IndexExpr::Affine(a.clone());
    }
    let (high, low) = split_by(a, d);
    let (lo, hi) = low.range(extent);
    if lo >= 0 && hi < d {
        IndexExpr::Affine(high)
    } else if low.terms.is_empty() {
        // A constant low part divides exactly too: floor((d·h + c)/d) = h + floor(c/d).
        IndexExpr::Affine(Affine::from_terms(high.terms, low.constant.div_euclid(d)))
    } else {
        IndexExpr::Div(Box::new(IndexExpr::Affine(a.clone())), d)
    }
}

fn split_mod(a: &Affine, d: i64, extent: &dyn Fn(Var) -> i64) -> IndexExpr {
    if d == 1 {
        return IndexExpr::constant(0);
    }
    let (_, low) = split_by(a, d);
    let low = Affine::from_terms(low.terms, low.constant.rem_euclid(d));
    let (lo, hi) = low.range(extent);
    if lo >= 0 && hi < d {
        IndexExpr::Affine(low)
    } else {
        IndexExpr::Mod(Box::new(IndexExpr::Affine(low)), d)
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Var::Out(l) => write!(f, "i{l}"),
            Var::Red(k) => write!(f, "r{k}"),
        }
    }
}

impl fmt::Display for Affine {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut first = true;
        for &(v, c) in &self.terms {
            let sign = if c < 0 { "-" } else { "+" };
            if !first {
                write!(f, " {sign} ")?;
            } else if c < 0 {
                write!(f, "-")?;
            }
            match c.abs() {
                1 => write!(f, "{v}")?,
                a => write!(f, "{a}*{v}")?,
            }
            first = false;
        }
        match (first, self.constant) {
            (true, c) => write!(f, "{c}"),
            (false, 0) => Ok(()),
            (false, c) if c < 0 => write!(f, " - {}", -c),
            (false, c) => write!(f, " + {c}"),
        }
    }
}

impl fmt::Display for IndexExpr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            IndexExpr::Affine(a) => write!(f, "{a}"),
            IndexExpr::Div(e, d) => write!(f, "({e}) floordiv {d}"),
            IndexExpr::Mod(e, d) => write!(f, "({e}) mod {d}"),
            IndexExpr::Data { input, index, .. } => {
                write!(f, "in{input}[")?;
                write_list(f, index)?;
                write!(f, "]")
            }
        }
    }
}

/// Writes `a, b, c`.
pub(crate) fn write_list<T: fmt::Display>(f: &mut fmt::Formatter, items: &[T]) -> fmt::Result {
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            write!(f, ", ")?;
        }
        write!(f, "{x}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(v: Var) -> i64 {
        match v {
            Var::Out(0) => 3,
            Var::Out(1) => 4,
            Var::Out(2) => 1,
            _ => 5,
        }
    }

    #[test]
    fn reshape_maps_split_exactly() {
        // [3,4] flattened: linear = 4*i0 + i1.
        let lin = IndexExpr::affine([(Var::Out(0), 4), (Var::Out(1), 1)], 0);
        let row = IndexExpr::Div(Box::new(lin.clone()), 4).simplified(&ext);
        let col = IndexExpr::Mod(Box::new(lin.clone()), 4).simplified(&ext);
        assert_eq!(row, IndexExpr::out(0));
        assert_eq!(col, IndexExpr::out(1));
        // Not a multiple: stays quasi-affine.
        let odd = IndexExpr::Div(Box::new(lin), 6).simplified(&ext);
        assert!(odd.is_quasi_affine());
        assert_eq!(odd.to_string(), "(4*i0 + i1) floordiv 6");
    }

    #[test]
    fn unit_extent_vars_vanish() {
        let e = IndexExpr::affine([(Var::Out(2), 7), (Var::Out(1), 1)], 0).simplified(&ext);
        assert_eq!(e, IndexExpr::out(1));
    }

    #[test]
    fn affine_prints_readably() {
        let e = IndexExpr::affine([(Var::Out(2), 2), (Var::Red(0), 1)], -1);
        assert_eq!(e.to_string(), "2*i2 + r0 - 1");
        let e = IndexExpr::affine([(Var::Out(0), -1)], 4);
        assert_eq!(e.to_string(), "-i0 + 4");
    }
}
