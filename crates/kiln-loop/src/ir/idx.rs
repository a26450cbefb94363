//! Index algebra of the loop IR: building, combining, substituting and
//! simplifying [`Idx`] values (affine sums of loop variables, `floordiv`/
//! `mod` by constants, data-dependent indices), and the questions
//! schedules ask of them (which variables, which strides).
//!
//! Needs: nothing beyond the types of `ir.rs`. Guarantees: every rewrite
//! keeps the index's value for every assignment of its variables.

use super::*;

impl Idx {
    pub fn constant(c: i64) -> Idx {
        Idx {
            terms: Vec::new(),
            constant: c,
        }
    }

    pub fn var(name: &str) -> Idx {
        Idx::atom(Atom::Var(name.to_string()))
    }

    pub fn atom(a: Atom) -> Idx {
        Idx {
            terms: vec![(a, 1)],
            constant: 0,
        }
    }

    pub fn as_constant(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.constant)
    }

    /// `self + other`, like terms merged.
    pub fn plus(mut self, other: &Idx) -> Idx {
        for (a, c) in &other.terms {
            self.add_term(a.clone(), *c);
        }
        self.constant += other.constant;
        self
    }

    pub fn scale(mut self, k: i64) -> Idx {
        if k == 0 {
            return Idx::constant(0);
        }
        for t in &mut self.terms {
            t.1 *= k;
        }
        self.constant *= k;
        self
    }

    fn add_term(&mut self, a: Atom, c: i64) {
        match self.terms.iter().position(|(b, _)| *b == a) {
            Some(p) => {
                self.terms[p].1 += c;
                if self.terms[p].1 == 0 {
                    self.terms.remove(p);
                }
            }
            None if c != 0 => self.terms.push((a, c)),
            None => {}
        }
    }

    /// `floor(self / d)`, folded when exact.
    /// Whether every term is a plain variable (no division, remainder or
    /// data-dependent index).
    pub fn is_affine(&self) -> bool {
        self.terms.iter().all(|(a, _)| matches!(a, Atom::Var(_)))
    }

    pub fn floordiv(self, d: i64) -> Idx {
        if d == 1 {
            return self;
        }
        if let Some(c) = self.as_constant() {
            return Idx::constant(c.div_euclid(d));
        }
        Idx::atom(Atom::Div(Box::new(self), d))
    }

    /// `self mod d`, folded when constant.
    pub fn modulo(self, d: i64) -> Idx {
        if d == 1 {
            return Idx::constant(0);
        }
        if let Some(c) = self.as_constant() {
            return Idx::constant(c.rem_euclid(d));
        }
        Idx::atom(Atom::Mod(Box::new(self), d))
    }

    /// Replaces variable `name` by `with` everywhere, then simplifies.
    pub fn substitute(&self, name: &str, with: &Idx) -> Idx {
        let mut out = Idx::constant(self.constant);
        for (a, c) in &self.terms {
            let replaced = match a {
                Atom::Var(v) if v == name => with.clone(),
                Atom::Var(_) => Idx::atom(a.clone()),
                Atom::Div(e, d) => e.substitute(name, with).floordiv(*d),
                Atom::Mod(e, d) => e.substitute(name, with).modulo(*d),
                Atom::Data { value, extent } => Idx::atom(Atom::Data {
                    value: Box::new(value.substitute(name, with)),
                    extent: *extent,
                }),
            };
            out = out.plus(&replaced.scale(*c));
        }
        out.merge_div_mod()
    }

    /// Folds the digit identities of mixed-radix indices, for any `x` and
    /// positive `d`, `e`:
    /// - `c·d·(x floordiv d) + c·(x mod d)` is `c·x`;
    /// - `c·d·((x floordiv d) mod e) + c·(x mod d)` is `c·(x mod d·e)`.
    ///
    /// Together they collapse a flattened multi-digit index back to its
    /// variable, which makes coalesced loops and flattened reduction axes
    /// read contiguous buffers with plain affine offsets.
    pub fn merge_div_mod(mut self) -> Idx {
        while let Some((i, j, merged)) = self.digit_pair() {
            let (hi, lo) = (i.max(j), i.min(j));
            self.terms.remove(hi);
            self.terms.remove(lo);
            self = self.plus(&merged);
        }
        self
    }

    /// Two terms one of the identities of [`Idx::merge_div_mod`] merges,
    /// and what they merge into.
    fn digit_pair(&self) -> Option<(usize, usize, Idx)> {
        self.terms.iter().enumerate().find_map(|(i, (a, c))| {
            let Atom::Mod(x, d) = a else { return None };
            self.terms.iter().enumerate().find_map(|(j, (b, k))| {
                if *k != c * d {
                    return None;
                }
                match b {
                    Atom::Div(y, e) if y == x && e == d => Some((i, j, (**x).clone().scale(*c))),
                    Atom::Mod(inner, e) => match &inner.terms[..] {
                        [(Atom::Div(y, f), 1)] if inner.constant == 0 && y == x && f == d => {
                            Some((i, j, (**x).clone().modulo(d * e).scale(*c)))
                        }
                        _ => None,
                    },
                    _ => None,
                }
            })
        })
    }

    /// Smallest and largest value given each loop variable's range.
    pub fn range(&self, var_range: &dyn Fn(&str) -> (i64, i64)) -> (i64, i64) {
        let (mut lo, mut hi) = (self.constant, self.constant);
        for (a, c) in &self.terms {
            let (alo, ahi) = match a {
                Atom::Var(v) => var_range(v),
                // A division by 0 comes from an empty dimension, in a
                // loop that never runs: any range will do.
                Atom::Div(_, 0) => (0, 0),
                Atom::Div(e, d) => {
                    let (l, h) = e.range(var_range);
                    (l.div_euclid(*d), h.div_euclid(*d))
                }
                Atom::Mod(e, d) => {
                    let (l, h) = e.range(var_range);
                    if l >= 0 && h < *d {
                        (l, h)
                    } else {
                        (0, d - 1)
                    }
                }
                Atom::Data { extent, .. } => (0, extent - 1),
            };
            let (x, y) = (alo * c, ahi * c);
            lo += x.min(y);
            hi += x.max(y);
        }
        (lo, hi)
    }

    /// Variables the index reads (with repeats).
    pub fn vars(&self, out: &mut Vec<String>) {
        for (a, _) in &self.terms {
            match a {
                Atom::Var(v) => out.push(v.clone()),
                Atom::Div(e, _) | Atom::Mod(e, _) => e.vars(out),
                Atom::Data { value, .. } => value.vars(out),
            }
        }
    }

    /// The coefficient of variable `name` when it appears only as a plain
    /// term (0 when absent); `None` when it appears in a division,
    /// remainder or data-dependent index.
    pub fn coefficient(&self, name: &str) -> Option<i64> {
        let mut c = 0;
        for (atom, coeff) in &self.terms {
            match atom {
                Atom::Var(v) if v == name => c = *coeff,
                _ if Idx::atom(atom.clone()).uses(name) => return None,
                _ => {}
            }
        }
        Some(c)
    }

    pub fn uses(&self, name: &str) -> bool {
        let mut v = Vec::new();
        self.vars(&mut v);
        v.iter().any(|x| x == name)
    }

    /// Whether the index is `var + rest`, `rest` independent of `var` and
    /// a multiple of `width`: then `width` consecutive values of `var`
    /// from a multiple of `width` address `width` consecutive elements,
    /// the first a multiple of `width` (a vector of them, aligned).
    pub fn unit_stride_aligned(&self, var: &str, width: i64) -> bool {
        let mut unit = false;
        for (atom, coeff) in &self.terms {
            match atom {
                Atom::Var(v) if v == var => unit = *coeff == 1,
                _ if Idx::atom(atom.clone()).uses(var) || coeff % width != 0 => return false,
                _ => {}
            }
        }
        unit && self.constant % width == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(a: Atom, c: i64) -> Idx {
        Idx::atom(a).scale(c)
    }

    #[test]
    fn unit_stride_aligned_needs_unit_c_and_aligned_rest() {
        let row_major = term(Atom::Var("r".into()), 3072).plus(&Idx::var("c"));
        assert!(row_major.unit_stride_aligned("c", 4));
        // A row length that is not a multiple of four misaligns rows.
        let odd_rows = term(Atom::Var("r".into()), 30).plus(&Idx::var("c"));
        assert!(!odd_rows.unit_stride_aligned("c", 4));
        // Strided along c, or c absent: not consecutive.
        assert!(!term(Atom::Var("c".into()), 2).unit_stride_aligned("c", 4));
        assert!(!term(Atom::Var("r".into()), 4).unit_stride_aligned("c", 4));
        // c inside a division (a window's channel split) is not a unit stride.
        let window = Idx::var("c").plus(&term(Atom::Div(Box::new(Idx::var("c")), 64), 4));
        assert!(!window.unit_stride_aligned("c", 4));
        let shifted = row_major.clone().plus(&Idx::constant(2));
        assert!(!shifted.unit_stride_aligned("c", 4));
        assert!(row_major
            .plus(&Idx::constant(8))
            .unit_stride_aligned("c", 4));
    }
}
