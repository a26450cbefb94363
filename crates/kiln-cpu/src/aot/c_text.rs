//! Text helpers for the exported C: string literals that carry any bytes
//! safely, and element types.

use kiln_ir::{bail, DType, Result};

/// `s` as a C string literal: letters, digits, space and `_-.:/` as
/// themselves, every other byte as an octal escape (no quote, backslash,
/// trigraph, comment or line break can come through).
pub fn c_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b" _-.:/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\{b:03o}"));
        }
    }
    out.push('"');
    out
}

/// The NumPy `descr` of an element type, as `kiln run -o` writes it.
pub fn npy_descr(dtype: DType) -> Result<&'static str> {
    Ok(match dtype {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        other => bail!("{other} tensors cannot cross an exported model's interface"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_become_inert_literals() {
        let lit = c_string("a\"b\\c*/d\n??=e");
        assert_eq!(lit, "\"a\\042b\\134c\\052/d\\012\\077\\077\\075e\"");
        assert!(!lit[1..lit.len() - 1].contains(['"', '\n', '*']));
    }
}
