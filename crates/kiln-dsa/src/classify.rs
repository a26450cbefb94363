//! swTVM §5.4, Algorithm 5: classify the loop variables for Algorithm 1.
//!
//! Each tensor has a *current buffered dimension* (`curBufDim`): counting
//! from the lowest (contiguous) dimension, the first one whose index still
//! uses a variable whose buffer does not cover its whole loop (the
//! variables of `varSet`). A variable of `varSet` is
//! - a *sizevar* when it appears in some tensor's current buffered
//!   dimension only: it sets how long each transfer is;
//! - a *numvar* when it appears only in higher dimensions: it sets how
//!   many transfers there are;
//! - a *compvar* when it does both (in the same or different tensors).
//!
//! `UPDATE` keeps `curBufDim` current when a variable leaves `varSet`
//! (`Up`: its buffer now covers its loop, so dimensions that only it
//! indexed are whole and the buffered dimension moves up) or comes back
//! (`Down`: the buffered dimension moves down to the lowest dimension it
//! indexes).
//!
//! Needs a valid nest. Guarantees, by induction over `update` calls:
//! `curBufDim` of every tensor is the lowest dimension using a variable of
//! `varSet` (or the tensor's rank when none does), so every variable of
//! `varSet` gets a class (the paper's `RaiseError` branch cannot happen).

use crate::nest::{Access, Affine, Nest};
use kiln_ir::{bail, Result};
use std::collections::BTreeSet;

/// The class of a loop variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarKind {
    Size,
    Num,
    Comp,
}

/// Loop positions by class, each in loop order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Classes {
    pub sizevars: Vec<usize>,
    pub numvars: Vec<usize>,
    pub compvars: Vec<usize>,
}

/// Which way [`ClassifyState::update`] moves a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The variable's buffer now covers its whole loop.
    Up,
    /// It no longer does.
    Down,
}

/// `varSet` and every tensor's `curBufDim`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifyState {
    /// Loops whose buffer is smaller than their extent.
    pub var_set: BTreeSet<usize>,
    /// Per tensor, the current buffered dimension counted from the lowest.
    pub cur_buf_dim: Vec<usize>,
}

/// The index of dimension `level` of `access`, counted from the lowest.
fn index_at(access: &Access, level: usize) -> Option<&Affine> {
    let rank = access.dims.len();
    (level < rank).then(|| &access.dims[rank - 1 - level])
}

impl ClassifyState {
    /// Every variable in `varSet` (all buffers start at one element), every
    /// tensor's buffered dimension its lowest one that uses a variable.
    pub fn new(nest: &Nest) -> ClassifyState {
        let mut state = ClassifyState {
            var_set: (0..nest.loops.len()).collect(),
            cur_buf_dim: vec![0; nest.tensors.len()],
        };
        state.raise_buffered_dims(nest);
        state
    }

    /// `VARTYPE(var, tensorSet)` (lines 2–20); `None` for a variable no
    /// tensor indexes at or above its buffered dimension.
    pub fn var_kind(&self, nest: &Nest, var: usize) -> Option<VarKind> {
        let mut size = false;
        let mut num = false;
        for (tensor, &cur) in nest.tensors.iter().zip(&self.cur_buf_dim) {
            size |= index_at(tensor, cur).is_some_and(|index| index.uses(var));
            num |= (cur + 1..tensor.dims.len())
                .any(|level| index_at(tensor, level).is_some_and(|index| index.uses(var)));
        }
        match (size, num) {
            (true, true) => Some(VarKind::Comp),
            (true, false) => Some(VarKind::Size),
            (false, true) => Some(VarKind::Num),
            (false, false) => None,
        }
    }

    /// `CLASSIFY(varSet, tensorSet)` (lines 21–34).
    pub fn classify(&self, nest: &Nest) -> Result<Classes> {
        let mut classes = Classes::default();
        for &var in &self.var_set {
            match self.var_kind(nest, var) {
                Some(VarKind::Size) => classes.sizevars.push(var),
                Some(VarKind::Num) => classes.numvars.push(var),
                Some(VarKind::Comp) => classes.compvars.push(var),
                None => bail!(
                    "loop variable '{}' indexes no tensor dimension still to buffer",
                    nest.loops[var].var
                ),
            }
        }
        Ok(classes)
    }

    /// `UPDATE(varSet, tensorSet, var, direction)` (lines 35–54).
    pub fn update(&mut self, nest: &Nest, var: usize, direction: Direction) {
        match direction {
            Direction::Up => {
                self.var_set.remove(&var);
                self.raise_buffered_dims(nest);
            }
            Direction::Down => {
                self.var_set.insert(var);
                for (tensor, cur) in nest.tensors.iter().zip(&mut self.cur_buf_dim) {
                    let lowest_use = (0..*cur)
                        .find(|&level| index_at(tensor, level).is_some_and(|i| i.uses(var)));
                    if let Some(level) = lowest_use {
                        *cur = level;
                    }
                }
            }
        }
    }

    /// Lines 39–48: moves each tensor's buffered dimension up past the
    /// dimensions that use no variable of `varSet`.
    fn raise_buffered_dims(&mut self, nest: &Nest) {
        for (tensor, cur) in nest.tensors.iter().zip(&mut self.cur_buf_dim) {
            while let Some(index) = index_at(tensor, *cur) {
                if index
                    .terms
                    .iter()
                    .any(|t| self.var_set.contains(&t.loop_index))
                {
                    break;
                }
                *cur += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse_nest;

    fn names(nest: &Nest, vars: &[usize]) -> Vec<String> {
        vars.iter().map(|&v| nest.loops[v].var.clone()).collect()
    }

    #[test]
    fn matmul_has_x_num_y_size_k_comp() {
        // The paper's §5.2 example.
        let nest = parse_nest(
            "nest mm\nloop x 1024\nloop y 1024\nloop k 1024\n\
             in A[x][k] elem 4\nin B[k][y] elem 4\nout C[x][y] elem 4\n",
        )
        .unwrap();
        let classes = ClassifyState::new(&nest).classify(&nest).unwrap();
        assert_eq!(names(&nest, &classes.numvars), ["x"]);
        assert_eq!(names(&nest, &classes.sizevars), ["y"]);
        assert_eq!(names(&nest, &classes.compvars), ["k"]);
    }

    #[test]
    fn whole_inner_dimensions_move_the_buffered_dimension_up_and_back() {
        let nest = parse_nest(
            "nest c\nloop co 8\nloop oh 6\nloop ow 6\nloop ci 4\nloop kw 3\n\
             in I[ci][oh][ow + kw] elem 4\nin W[co][ci][kw] elem 4\nout O[co][oh][ow] elem 4\n",
        )
        .unwrap();
        let mut state = ClassifyState::new(&nest);
        let classes = state.classify(&nest).unwrap();
        assert_eq!(names(&nest, &classes.sizevars), ["ow", "kw"]);
        assert_eq!(names(&nest, &classes.numvars), ["co", "oh", "ci"]);
        for var in [2, 4] {
            state.update(&nest, var, Direction::Up);
        }
        assert_eq!(state.cur_buf_dim, [1, 1, 1]);
        let classes = state.classify(&nest).unwrap();
        assert_eq!(names(&nest, &classes.sizevars), ["oh"]);
        assert_eq!(names(&nest, &classes.numvars), ["co"]);
        assert_eq!(names(&nest, &classes.compvars), ["ci"]);
        state.update(&nest, 4, Direction::Down);
        assert_eq!(state.cur_buf_dim, [0, 0, 1]);
        assert_eq!(state, {
            let mut fresh = ClassifyState::new(&nest);
            fresh.update(&nest, 2, Direction::Up);
            fresh
        });
    }
}
