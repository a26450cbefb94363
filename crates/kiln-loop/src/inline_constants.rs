//! Inlining scalar constants into a kernel.
//!
//! Needs: a kernel and, for some of its input buffers, their (constant,
//! one-element) values.
//! Guarantees: every read of such a buffer becomes the literal value, so
//! the code generator can specialise on it (a product instead of `pow`, an
//! immediate instead of a load). The buffer stays a parameter; nothing
//! else changes.

use crate::ir::{Kernel, Loop, Stmt, Val};
use kiln_ir::Tensor;

pub fn inline_constants(k: &Kernel, values: &[(usize, Tensor)]) -> Kernel {
    let body = k.body.iter().map(|s| stmt(s, values)).collect();
    Kernel { body, ..k.clone() }
}

fn stmt(s: &Stmt, values: &[(usize, Tensor)]) -> Stmt {
    match s {
        Stmt::Loop(l) => Stmt::Loop(Loop {
            body: l.body.iter().map(|s| stmt(s, values)).collect(),
            ..l.clone()
        }),
        Stmt::Store { buf, offset, value } => Stmt::Store {
            buf: *buf,
            offset: offset.clone(),
            value: val(value, values),
        },
        Stmt::Let { name, dtype, value } => Stmt::Let {
            name: name.clone(),
            dtype: *dtype,
            value: val(value, values),
        },
        Stmt::Update {
            name,
            combiner,
            value,
        } => Stmt::Update {
            name: name.clone(),
            combiner: *combiner,
            value: val(value, values),
        },
        Stmt::Gemm(g) => Stmt::Gemm(g.clone()),
    }
}

fn val(v: &Val, values: &[(usize, Tensor)]) -> Val {
    match v {
        Val::Load { buf, guard, .. } if guard.is_empty() => {
            match values.iter().find(|(b, _)| b == buf) {
                Some((_, t)) => Val::Const(t.clone()),
                None => v.clone(),
            }
        }
        Val::Call(s, args) => Val::Call(s.clone(), args.iter().map(|a| val(a, values)).collect()),
        _ => v.clone(),
    }
}
