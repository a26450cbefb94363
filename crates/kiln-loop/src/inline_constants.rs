//! Inlining scalar constants into a kernel.
//!
//! Needs: a kernel and, for some of its input buffers, their (constant,
//! one-element) values.
//! Guarantees: every read of such a buffer becomes the literal value, so
//! the code generator can specialise on it (a product instead of `pow`, an
//! immediate instead of a load). The buffer stays a parameter; nothing
//! else changes.

use crate::ir::{Kernel, Val};
use kiln_ir::Tensor;

pub fn inline_constants(k: &Kernel, values: &[(usize, Tensor)]) -> Kernel {
    let body = k
        .body
        .iter()
        .map(|s| s.map_values(&mut |v, _| val(v, values)))
        .collect();
    Kernel { body, ..k.clone() }
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
