//! The verifier rejects graphs that break SSA, order or typing of initializers.

use kiln_ir::text::parse;
use kiln_ir::verify::verify;

fn check(src: &str) -> Result<(), String> {
    verify(&parse(src).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

#[test]
fn accepts_a_valid_graph() {
    check("graph \"g\" opsets [\"\"=17] {\n input %x: f32[2]\n node \"\" %y: f32[2] = Relu(%x)\n output %y\n}").unwrap();
}

#[test]
fn rejects_use_before_definition() {
    // The parser refuses forward references, so build the cycle by hand.
    let mut g = parse("graph \"g\" opsets [] {\n input %x: f32[2]\n node \"a\" %y: f32[2] = Relu(%x)\n node \"b\" %z: f32[2] = Relu(%y)\n output %z\n}").unwrap();
    g.nodes.swap(0, 1);
    let err = verify(&g).unwrap_err().to_string();
    assert!(err.contains("before it is defined"), "{err}");
}

#[test]
fn rejects_double_definition_and_bad_ids() {
    let mut g = parse("graph \"g\" opsets [] {\n input %x: f32[2]\n node \"a\" %y: f32[2] = Relu(%x)\n output %y\n}").unwrap();
    let mut dup = g.nodes[0].clone();
    dup.name = "b".into();
    g.nodes.push(dup);
    assert!(verify(&g)
        .unwrap_err()
        .to_string()
        .contains("defined twice"));
    g.nodes.pop();
    g.outputs.push(kiln_ir::ValueId(99));
    assert!(verify(&g).unwrap_err().to_string().contains("#99"));
}

#[test]
fn rejects_mismatched_initializer_and_missing_capture() {
    let mut g =
        parse("graph \"g\" opsets [] {\n init %w: f32[2] = [1.0, 2.0]\n output %w\n}").unwrap();
    g.values[0].ty = kiln_ir::TensorType::new(kiln_ir::DType::F32, vec![3]);
    assert!(verify(&g).unwrap_err().to_string().contains("holds f32[2]"));
    let err = check("graph \"g\" opsets [] {\n input %c: bool[]\n node \"\" %y: f32[2] = If(%c) {then_branch=graph \"t\" opsets [] {\n capture %ghost: f32[2]\n output %ghost\n }}\n output %y\n}")
        .unwrap_err();
    assert!(err.contains("ghost"), "{err}");
}
