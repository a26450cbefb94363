//! The loop nest swTVM's LDM algorithms read (§5): loops with constant
//! extents and the tensors the body reads and writes, each dimension
//! indexed by an affine sum of loop variables. The algorithms' results
//! (buffer sizes, loop orders, DMA placements) are plain data over it.
//!
//! Needs nothing. Guarantees, once [`Nest::validate`] passes: names are
//! unique identifiers, extents and element sizes are positive, every
//! index term names a loop of the nest once with a positive coefficient,
//! and every loop variable indexes some tensor (Algorithm 5 has no type
//! for a variable that indexes nothing).

use kiln_ir::{ensure, Result};

/// One loop: `for var in 0..extent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loop {
    pub var: String,
    pub extent: u64,
}

/// `coeff * var`, the variable given by its position in [`Nest::loops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    pub loop_index: usize,
    pub coeff: u64,
}

/// The index of one tensor dimension: `Σ coeff·var + constant`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Affine {
    pub terms: Vec<Term>,
    pub constant: u64,
}

/// A tensor the body accesses, dimensions outermost first (row-major: the
/// last dimension is contiguous in memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub name: String,
    pub dims: Vec<Affine>,
    pub elem_bytes: u64,
    /// Written by the body (its DMA puts data back), else only read.
    pub is_output: bool,
}

/// A perfect loop nest, loops outermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nest {
    pub name: String,
    pub loops: Vec<Loop>,
    pub tensors: Vec<Access>,
}

impl Affine {
    /// Whether the loop at `loop_index` appears in this index.
    pub fn uses(&self, loop_index: usize) -> bool {
        self.terms.iter().any(|t| t.loop_index == loop_index)
    }

    /// How many consecutive positions the index covers while each loop `i`
    /// runs over `sizes[i]` values (the buffer of §5.3: the index with
    /// every variable at its largest value minus the index at zero, plus
    /// one). Saturates instead of overflowing.
    pub fn span(&self, sizes: &[u64]) -> u64 {
        self.terms.iter().fold(1u64, |acc, t| {
            let reach = t
                .coeff
                .saturating_mul(sizes[t.loop_index].saturating_sub(1));
            acc.saturating_add(reach)
        })
    }
}

impl Access {
    /// The tensor's extent in each dimension: what its index reaches over
    /// the whole nest (a convolution's input is its padded image).
    pub fn shape(&self, nest: &Nest) -> Vec<u64> {
        let extents = nest.extents();
        self.dims
            .iter()
            .map(|d| d.span(&extents).saturating_add(d.constant))
            .collect()
    }
}

impl Nest {
    /// The loops' extents, in loop order.
    pub fn extents(&self) -> Vec<u64> {
        self.loops.iter().map(|l| l.extent).collect()
    }

    /// The position of the loop called `var`.
    pub fn loop_index(&self, var: &str) -> Option<usize> {
        self.loops.iter().position(|l| l.var == var)
    }

    /// Checks the invariants in the module doc; errors name the loop or
    /// tensor.
    pub fn validate(&self) -> Result<()> {
        ensure!(!self.loops.is_empty(), "nest '{}' has no loop", self.name);
        ensure!(
            !self.tensors.is_empty(),
            "nest '{}' accesses no tensor",
            self.name
        );
        for (i, l) in self.loops.iter().enumerate() {
            ensure!(
                is_identifier(&l.var),
                "loop variable '{}' is not an identifier",
                l.var
            );
            ensure!(l.extent > 0, "loop '{}' has extent 0", l.var);
            ensure!(
                self.loop_index(&l.var) == Some(i),
                "loop variable '{}' is repeated",
                l.var
            );
        }
        for (i, t) in self.tensors.iter().enumerate() {
            let first = self.tensors.iter().position(|o| o.name == t.name);
            ensure!(first == Some(i), "tensor '{}' is repeated", t.name);
            self.validate_access(t)?;
        }
        for (i, l) in self.loops.iter().enumerate() {
            let used = self
                .tensors
                .iter()
                .any(|t| t.dims.iter().any(|d| d.uses(i)));
            ensure!(used, "loop variable '{}' indexes no tensor", l.var);
        }
        Ok(())
    }

    fn validate_access(&self, t: &Access) -> Result<()> {
        ensure!(
            is_identifier(&t.name),
            "tensor name '{}' is not an identifier",
            t.name
        );
        ensure!(!t.dims.is_empty(), "tensor '{}' has no dimension", t.name);
        ensure!(t.elem_bytes > 0, "tensor '{}' has 0-byte elements", t.name);
        for dim in &t.dims {
            for (k, term) in dim.terms.iter().enumerate() {
                ensure!(
                    term.loop_index < self.loops.len(),
                    "tensor '{}' indexes loop {} of {}",
                    t.name,
                    term.loop_index,
                    self.loops.len()
                );
                ensure!(term.coeff > 0, "tensor '{}' has a zero coefficient", t.name);
                let again = dim.terms[..k]
                    .iter()
                    .any(|o| o.loop_index == term.loop_index);
                let var = &self.loops[term.loop_index].var;
                ensure!(
                    !again,
                    "tensor '{}' repeats '{var}' in one dimension",
                    t.name
                );
            }
        }
        Ok(())
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`: names the text form can read back.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
