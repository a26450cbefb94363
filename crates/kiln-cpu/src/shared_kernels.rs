//! One compiled copy of kernels whose C is the same but for their names.
//!
//! Repeated blocks of a model (a transformer's layers, a ResNet stage's
//! bottlenecks) give kernels that differ only in the name the program gave
//! them. Compiling each copy costs compile time and code size and buys
//! nothing.
//!
//! Needs: kernels printed by kiln-codegen, whose C names the kernel only
//! through its own name (the entry points and the `NAME_…` helpers).
//! Guarantees: every kernel's entry points exist; a kernel whose C, with its
//! own name replaced by a placeholder, equals an earlier kernel's is
//! printed as entry points calling the earlier one
//! (`kiln_codegen::c::forwarding_kernel_c`): the same code, so the same
//! results.

use crate::select::NodeKernel;
use std::borrow::Cow;
use std::collections::HashMap;

/// The C to compile for `kernels`, in order: each kernel's own C, or its
/// forwarders to the first kernel with the same C.
pub fn shared_sources<'k>(kernels: impl IntoIterator<Item = &'k NodeKernel>) -> Vec<Cow<'k, str>> {
    let mut first: HashMap<String, &str> = HashMap::new();
    kernels
        .into_iter()
        .map(|k| {
            let name = k.kernel.name.as_str();
            match first.entry(canonical(&k.c, name)) {
                std::collections::hash_map::Entry::Occupied(e) => Cow::Owned(
                    kiln_codegen::c::forwarding_kernel_c(name, e.get(), k.packs.is_some()),
                ),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(name);
                    Cow::Borrowed(k.c.as_str())
                }
            }
        })
        .collect()
}

/// `c` with every whole occurrence of `name` (not inside a longer
/// identifier, though `name_…` helpers count) replaced by a placeholder.
pub(crate) fn canonical(c: &str, name: &str) -> String {
    let mut out = String::with_capacity(c.len());
    let mut rest = c;
    while let Some(at) = rest.find(name) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + name.len()..].chars().next();
        let whole =
            !before.is_some_and(is_ident) && !after.is_some_and(|c| c.is_ascii_alphanumeric());
        out.push_str(&rest[..at]);
        out.push_str(if whole { "\u{0}KERNEL\u{0}" } else { name });
        rest = &rest[at + name.len()..];
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn only_the_kernels_own_name_is_replaced() {
        let a = canonical(
            "int kiln_k1(x) { kiln_k1_gemm(kiln_k12); xkiln_k1; }",
            "kiln_k1",
        );
        let b = canonical(
            "int kiln_k7(x) { kiln_k7_gemm(kiln_k12); xkiln_k1; }",
            "kiln_k7",
        );
        assert_eq!(a, b);
        assert!(a.contains("kiln_k12") && a.contains("xkiln_k1"));
        assert_ne!(
            a,
            canonical(
                "int kiln_k7(x) { kiln_k7_gemm(kiln_k13); xkiln_k1; }",
                "kiln_k7"
            )
        );
    }
}
