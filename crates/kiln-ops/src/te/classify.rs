//! Classifies a primitive op from its tensor expression's index maps, never
//! from its name, in the terms of two papers:
//!
//! - APOLLO §3.3, Definitions 1–4: each input→output dataflow relation is
//!   the conjunction of per-dimension functions `f_l : I_k^l → O^l`, each
//!   bijective (equal trips), injective (input trip 1, output trip ≠ 1),
//!   surjective (output trip 1) or general. An op is element-wise when every
//!   relation is bijective, broadcast when some are injective and the rest
//!   bijective, reduction when some are surjective and the rest bijective or
//!   injective, opaque otherwise. Opaque ops carry the sub-kind (matmul,
//!   conv, transpose, reshape, …) that APOLLO's rule 6 keys on.
//! - The mapping types of the DP-search paper (§3.1.1), ordered by
//!   complexity: one-to-one < reorganize < shuffle < one-to-many <
//!   many-to-many < not-fusable; an op takes the most complex type among
//!   its inputs' mappings.
//!
//! How dimensions pair up: input dimension `j` whose index is exactly the
//! output variable `i_l` pairs with output dimension `l`; paired dimensions
//! must keep their order (else the relation permutes: a transpose). Between
//! two pairs, input dimensions indexed by a reduction variable are reduced
//! and output dimensions the input does not index are broadcast; both in
//! one gap means a reduced input dimension lands on a real output
//! dimension — the general relation of matmul. Any other index (an offset,
//! a stride, two variables as in a convolution window, floordiv/mod as in a
//! reshape, an index read from data as in gather) makes the dimension
//! general.

use super::{Expr, IndexExpr, TensorExpr, Var};
use std::fmt;

/// APOLLO's per-relation type (§3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Relation {
    Bijective,
    Injective,
    Surjective,
    General,
}

/// APOLLO's op type (Definitions 1–4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApolloType {
    ElementWise,
    Broadcast,
    Reduction,
    Opaque(OpaqueKind),
}

/// What an opaque op is, for APOLLO's rule 6 and for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpaqueKind {
    Matmul,
    Conv,
    /// A windowed reduction other than a convolution (pooling).
    Window,
    Transpose,
    Reshape,
    Gather,
    /// Offsets and strides of one input: slice, pad, concat.
    Layout,
    Other,
    /// Not a primitive: a library op with no tensor expression.
    Library,
}

/// The DP paper's mapping types, in order of complexity (§3.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MappingType {
    OneToOne,
    Reorganize,
    Shuffle,
    OneToMany,
    ManyToMany,
    NotFusable,
}

/// Both classes of one op instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classes {
    pub apollo: ApolloType,
    pub mapping: MappingType,
}

impl Classes {
    /// The classes of an op that has no tensor expression.
    pub const LIBRARY: Classes = Classes {
        apollo: ApolloType::Opaque(OpaqueKind::Library),
        mapping: MappingType::NotFusable,
    };
}

/// What one access does to each dimension.
#[derive(Debug, Default)]
struct AccessShape {
    /// Some dimension's index is neither a lone variable nor the constant 0.
    irregular: bool,
    /// Paired dimensions appear out of order.
    permuted: bool,
    /// An output dimension (extent ≠ 1) the input does not index.
    broadcast: bool,
    /// An input dimension indexed by a reduction variable alone.
    reduced: bool,
    /// A reduced dimension where a real output dimension is.
    crossed: bool,
}

impl AccessShape {
    fn of(te: &TensorExpr, k: usize) -> AccessShape {
        let index = &te.accesses[k].index;
        let in_shape = te.access_shape(k);
        let mut s = AccessShape::default();
        // Walk input dims; `next_out` is the first output dim not yet passed.
        let (mut next_out, mut last_pair) = (0usize, None::<usize>);
        let (mut gap_reduced, mut gap_broadcast) = (false, false);
        let close_gap = |s: &mut AccessShape, reduced: bool, broadcast: bool| {
            s.crossed |= reduced && broadcast;
            s.reduced |= reduced;
            s.broadcast |= broadcast;
        };
        for (j, e) in index.iter().enumerate() {
            match lone_var(e) {
                Some(Var::Out(l)) => {
                    if last_pair.is_some_and(|p| l <= p) {
                        s.permuted = true;
                        continue;
                    }
                    if in_shape.get(j).copied() != te.shape.get(l).copied() {
                        s.irregular = true;
                    }
                    gap_broadcast |= (next_out..l).any(|o| te.shape[o] != 1);
                    close_gap(&mut s, gap_reduced, gap_broadcast);
                    (gap_reduced, gap_broadcast) = (false, false);
                    next_out = l + 1;
                    last_pair = Some(l);
                }
                Some(Var::Red(_)) => gap_reduced = true,
                None if e.as_constant() == Some(0) && in_shape.get(j) == Some(&1) => {}
                None => s.irregular = true,
            }
        }
        gap_broadcast |= (next_out..te.shape.len()).any(|o| te.shape[o] != 1);
        close_gap(&mut s, gap_reduced, gap_broadcast);
        s
    }

    fn relation(&self) -> Relation {
        if self.irregular || self.permuted || self.crossed {
            Relation::General
        } else if self.reduced {
            Relation::Surjective
        } else if self.broadcast {
            Relation::Injective
        } else {
            Relation::Bijective
        }
    }

    fn mapping(&self) -> MappingType {
        if self.permuted {
            MappingType::Shuffle
        } else if self.irregular {
            MappingType::Reorganize
        } else if self.broadcast {
            MappingType::OneToMany
        } else {
            MappingType::OneToOne
        }
    }
}

/// The variable when `e` is exactly one variable.
fn lone_var(e: &IndexExpr) -> Option<Var> {
    e.as_affine().and_then(|a| a.as_var())
}

/// APOLLO's relation between access `k`'s input and the output.
pub fn relation(te: &TensorExpr, k: usize) -> Relation {
    AccessShape::of(te, k).relation()
}

/// Both classes of `te`.
pub fn classify(te: &TensorExpr) -> Classes {
    let shapes: Vec<AccessShape> = (0..te.accesses.len())
        .map(|k| AccessShape::of(te, k))
        .collect();
    let worst = shapes
        .iter()
        .map(|s| s.relation())
        .max()
        .unwrap_or(Relation::Bijective);
    let apollo = match worst {
        Relation::Bijective => ApolloType::ElementWise,
        Relation::Injective => ApolloType::Broadcast,
        Relation::Surjective => ApolloType::Reduction,
        Relation::General => ApolloType::Opaque(opaque_kind(te, &shapes)),
    };
    let reduces = te
        .reduction
        .as_ref()
        .is_some_and(|r| r.extents.iter().product::<usize>() > 1);
    let mapping = if reduces {
        MappingType::ManyToMany
    } else {
        shapes
            .iter()
            .map(|s| s.mapping())
            .max()
            .unwrap_or(MappingType::OneToOne)
    };
    Classes { apollo, mapping }
}

fn opaque_kind(te: &TensorExpr, shapes: &[AccessShape]) -> OpaqueKind {
    let indices = || te.accesses.iter().flat_map(|a| a.index.iter());
    let window = indices().any(|e| e.as_affine().is_some_and(|a| a.terms.len() > 1));
    if indices().any(|e| e.is_data_dependent()) {
        return OpaqueKind::Gather;
    }
    if indices().any(|e| e.is_quasi_affine()) {
        // A reduction other than a sum of products reading through
        // floordiv/mod is still a window over its input (a Winograd output
        // transform reads its tiles at `h floordiv 2`), not data movement.
        let window_sum = te.reduction.is_some() && !is_product_of_reads(&te.body);
        return match window_sum {
            true => OpaqueKind::Window,
            false => OpaqueKind::Reshape,
        };
    }
    if let Some(r) = &te.reduction {
        let products = is_product_of_reads(&te.body);
        return match (window, products, r.combiner) {
            (true, true, super::Combiner::Sum) => OpaqueKind::Conv,
            (true, _, _) => OpaqueKind::Window,
            (false, true, super::Combiner::Sum) => OpaqueKind::Matmul,
            _ => OpaqueKind::Other,
        };
    }
    if shapes.iter().any(|s| s.permuted) && !shapes.iter().any(|s| s.irregular) {
        return OpaqueKind::Transpose;
    }
    if shapes.iter().any(|s| s.irregular) {
        return OpaqueKind::Layout;
    }
    OpaqueKind::Other
}

/// `Mul(read, read)`, or a grouped convolution's `Where(own group,
/// Mul(read, read), 0)` (its reduction runs over every group and keeps the
/// output channel's own; `kiln_ops::ops::conv`): still a sum of products.
fn is_product_of_reads(body: &Expr) -> bool {
    match body {
        Expr::Call(s, args) if s.op == "Mul" => args.len() == 2 && args.iter().all(is_read),
        Expr::Call(s, args) if s.op == "Where" => matches!(args.as_slice(),
            [Expr::Call(eq, _), product, Expr::Const(_)]
                if eq.op == "Equal" && is_product_of_reads(product)),
        _ => false,
    }
}

/// A load, or a load guarded by its own bounds (a zero-padded read).
fn is_read(e: &Expr) -> bool {
    match e {
        Expr::Load(_) => true,
        Expr::Call(s, args) if s.op == "Where" => matches!(args.as_slice(),
            [Expr::InBounds(k), Expr::Load(j), Expr::Const(_)] if k == j),
        _ => false,
    }
}

/// Whether `te` computes a transcendental function per element (a scalar
/// rule whose op says so, [`crate::Op::transcendental`]): where one is
/// computed matters to planners (once per element of a small tensor, not
/// once per element of the large one it is broadcast to).
pub fn calls_transcendental(te: &TensorExpr) -> bool {
    let mut found = false;
    te.body.visit(&mut |e| {
        if let Expr::Call(s, _) = e {
            found |= crate::registry::lookup("", &s.op)
                .and_then(|op| op.scalar_kernel())
                .is_some_and(|rule| rule.transcendental());
        }
    });
    found
}

/// Whether `te` selects between sources by bounds checks (a
/// concatenation's or a padding's `Where(inbounds(..), ..)`): a loop nest
/// peels such a select away at the sources' borders, but an operand packed
/// element by element would pay it per element.
pub fn selects_by_bounds(te: &TensorExpr) -> bool {
    let mut found = false;
    te.body
        .visit(&mut |e| found |= matches!(e, Expr::InBounds(_)));
    found
}

impl ApolloType {
    /// A matmul or convolution (compute-bound; fused ops can only follow it).
    pub fn is_contraction(self) -> bool {
        matches!(
            self,
            ApolloType::Opaque(OpaqueKind::Matmul | OpaqueKind::Conv)
        )
    }
}

impl fmt::Display for ApolloType {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            ApolloType::ElementWise => write!(f, "element-wise"),
            ApolloType::Broadcast => write!(f, "broadcast"),
            ApolloType::Reduction => write!(f, "reduction"),
            ApolloType::Opaque(k) => write!(f, "opaque({k})"),
        }
    }
}

impl fmt::Display for OpaqueKind {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            OpaqueKind::Matmul => "matmul",
            OpaqueKind::Conv => "conv",
            OpaqueKind::Window => "window",
            OpaqueKind::Transpose => "transpose",
            OpaqueKind::Reshape => "reshape",
            OpaqueKind::Gather => "gather",
            OpaqueKind::Layout => "layout",
            OpaqueKind::Other => "other",
            OpaqueKind::Library => "library",
        })
    }
}

impl fmt::Display for MappingType {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            MappingType::OneToOne => "one-to-one",
            MappingType::Reorganize => "reorganize",
            MappingType::Shuffle => "shuffle",
            MappingType::OneToMany => "one-to-many",
            MappingType::ManyToMany => "many-to-many",
            MappingType::NotFusable => "not-fusable",
        })
    }
}

/// Whether `te` reads its one input in row-major order as another shape
/// (a reshape): the output is the input's bytes, so backends may alias the
/// two instead of copying.
pub fn is_view(te: &TensorExpr) -> bool {
    let [access] = te.accesses.as_slice() else {
        return false;
    };
    let input = te.access_shape(0);
    if te.reduction.is_some()
        || te.body != Expr::Load(0)
        || input.iter().product::<usize>() != te.shape.iter().product::<usize>()
    {
        return false;
    }
    let mut canonical = te.clone();
    canonical.accesses[0].index = crate::ops::shape::reshape_index(input, &te.shape);
    let canonical = canonical.simplified();
    access.index == canonical.accesses[0].index
}

/// The classes of `node`, a node of `g`: from its tensor expression when
/// its op is primitive and the expression can be built (static shapes,
/// constant shape inputs); a library op otherwise.
pub fn classify_node(g: &kiln_ir::Graph, node: &kiln_ir::Node) -> kiln_ir::Result<Classes> {
    Ok(match node_expr(g, node)? {
        Some(te) => classify(&te),
        None => Classes::LIBRARY,
    })
}

/// The tensor expression of `node` in `g`, when its op is primitive and
/// the expression can be built.
pub fn node_expr(g: &kiln_ir::Graph, node: &kiln_ir::Node) -> kiln_ir::Result<Option<TensorExpr>> {
    let Some(p) = crate::registry::lookup(&node.domain, &node.op).and_then(|op| op.primitive())
    else {
        return Ok(None);
    };
    // An op with a second, non-primitive definition for some nodes (Conv
    // with a bias before compounds are opened) has no expression for them.
    Ok(crate::infer::with_node_cx(g, node, |cx| p.define(cx)).unwrap_or(None))
}
