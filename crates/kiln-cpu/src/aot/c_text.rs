//! String literals for the exported C that carry any bytes safely.

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
