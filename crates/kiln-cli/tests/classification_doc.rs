//! docs/classification.md is generated from the code (`kiln ops --markdown`);
//! this test fails when it is out of date. `KILN_BLESS=1` rewrites it.

use std::path::Path;

#[test]
fn classification_doc_is_up_to_date() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/classification.md");
    let want = kiln_cli::classes_doc::markdown();
    if std::env::var_os("KILN_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write docs/classification.md");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/classification.md is out of date: run `KILN_BLESS=1 cargo test -p kiln-cli --test classification_doc`"
    );
}
