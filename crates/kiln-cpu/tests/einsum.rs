//! Einsum opened into matrix products (`kiln-ops` `einsum/products.rs`):
//! contractions of one and two operands (attention's two products as
//! MaxViT writes them, a batched product over `...`, a contraction over
//! two labels with a label summed alone, an outer product, a transpose
//! with a sum) run as generated kernels on the CPU backend, under every
//! planner, with the interpreter's results on the original graph (its
//! Einsum kernel, f64 sums); a diagonal stays on the interpreter.

mod common;

use common::check_planners;
use kiln_ir::Result;

/// How many nodes [`common::check_planners`] leaves to the interpreter.
fn check(src: &str, name: &str) -> Result<usize> {
    Ok(check_planners(src, name)?.1.len())
}

/// One Einsum node of `equation` over inputs of `shapes`, its output of
/// `out`.
fn einsum(equation: &str, shapes: &[&str], out: &str) -> String {
    let inputs: String = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| format!("  input %x{k}: f32[{s}]\n"))
        .collect();
    let args: Vec<String> = (0..shapes.len()).map(|k| format!("%x{k}")).collect();
    format!(
        "graph \"g\" opsets [\"\"=17] {{\n{inputs}  node \"e\" %y: f32[{out}] = Einsum({}) {{equation=\"{equation}\"}}\n  output %y\n}}",
        args.join(", ")
    )
}

#[test]
fn contractions_become_generated_products() -> Result<()> {
    let cases = [
        (
            "B G H I D, B G H J D -> B G H I J",
            &["2,3,2,5,4", "2,3,2,6,4"][..],
            "2,3,2,5,6",
        ),
        (
            "BGHIJ,BGHJD->BGHID",
            &["2,3,2,5,6", "2,3,2,6,4"][..],
            "2,3,2,5,4",
        ),
        ("...ij,...jk->...ik", &["3,4,5", "3,5,2"][..], "3,4,2"),
        ("abcd,cdeq->bea", &["2,3,4,5", "4,5,6,7"][..], "3,6,2"),
        ("i,j->ij", &["5", "7"][..], "5,7"),
        ("nchw->nwh", &["2,3,4,5"][..], "2,5,4"),
    ];
    for (equation, shapes, out) in cases {
        let src = einsum(equation, shapes, out);
        assert_eq!(
            check(&src, equation)?,
            0,
            "{equation}: a node left to the interpreter"
        );
    }
    Ok(())
}

#[test]
fn a_diagonal_stays_with_the_interpreter() -> Result<()> {
    let src = einsum("ii->i", &["4,4"], "4");
    assert_eq!(check(&src, "ii->i")?, 1);
    Ok(())
}
