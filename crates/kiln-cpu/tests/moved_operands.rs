//! Slices and gathers read by the group that consumes them
//! (`kiln-fuse` `planners/apollo/slices.rs`): an LSTM-like step's gate
//! slices of one product, gathers by small constant index tables (which a
//! fused body must keep as inputs to load them, `kiln-fuse` `apply.rs`)
//! and a gather by indices the graph is given, as generated kernels on the
//! CPU backend under every planner, with the interpreter's results on the
//! graph as written.

mod common;

use common::{check_planners, values};
use kiln_ir::{Graph, Result};

/// Checks `src` under every planner; then asserts that under `apollo`
/// no `Slice` or `Gather` is left a kernel of its own except `alone`.
fn check_moved_in_place(src: &str, name: &str, alone: &[&str]) -> Result<()> {
    let (g, interpreted) = check_planners(src, name)?;
    assert!(interpreted.is_empty(), "{interpreted:?}");
    let opts = kiln_cpu::CpuOptions {
        fusion: kiln_fuse::PlannerKind::Apollo,
        ..Default::default()
    };
    let model = kiln_cpu::CompiledModel::compile(&g, &opts)?;
    assert_eq!(lone_movement(model.graph()), alone, "{name}");
    Ok(())
}

fn lone_movement(g: &Graph) -> Vec<&str> {
    g.nodes
        .iter()
        .filter(|n| n.op == "Slice" || n.op == "Gather")
        .map(|n| n.name.as_str())
        .collect()
}

#[test]
fn gate_slices_are_read_through_the_gate_kernel() -> Result<()> {
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %h: f32[2,8]
  init %w: f32[8,32] = [{}]
  init %starts: i64[1] = [0]
  init %mid: i64[1] = [16]
  init %ends: i64[1] = [32]
  init %axis: i64[1] = [1]
  init %two: i64[1] = [2]
  node "mm" %z: f32[2,32] = MatMul(%h, %w)
  node "first" %a: f32[2,16] = Slice(%z, %starts, %mid, %axis)
  node "evens" %b: f32[2,8] = Slice(%z, %mid, %ends, %axis, %two)
  node "sig" %s: f32[2,16] = Sigmoid(%a)
  node "left" %sl: f32[2,8] = Slice(%s, %starts, %mid, %axis, %two)
  node "tanh" %t: f32[2,8] = Tanh(%b)
  node "gate" %y: f32[2,8] = Mul(%sl, %t)
  output %y
}}"#,
        values(8 * 32, 1)
    );
    check_moved_in_place(&src, "gate slices", &[])
}

#[test]
fn gathers_by_constant_and_given_indices_are_read_in_place() -> Result<()> {
    let src = r#"graph "g" opsets [""=17] {
  input %x: f32[2,5]
  input %pick: i64[3]
  init %lo: i64[10] = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
  init %hi: i64[10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, -1]
  init %wl: f32[10] = [1, 0.75, 0.25, 0.75, 0.25, 0.75, 0.25, 0.75, 0.25, 1]
  init %wh: f32[10] = [0, 0.25, 0.75, 0.25, 0.75, 0.25, 0.75, 0.25, 0.75, 0]
  init %bias: f32[3] = [0.5, -0.5, 0.25]
  node "relu" %r: f32[2,5] = Relu(%x)
  node "take_lo" %a: f32[2,10] = Gather(%r, %lo) {axis=1}
  node "take_hi" %b: f32[2,10] = Gather(%r, %hi) {axis=1}
  node "scale_lo" %sa: f32[2,10] = Mul(%a, %wl)
  node "scale_hi" %sb: f32[2,10] = Mul(%b, %wh)
  node "sum" %y: f32[2,10] = Add(%sa, %sb)
  init %row: i64[] = [1]
  node "chosen" %c: f32[2,3] = Gather(%x, %pick) {axis=1}
  node "shift" %z: f32[2,3] = Add(%c, %bias)
  node "rows" %p: f32[3,5] = Gather(%x, %pick) {axis=0}
  node "one" %o: f32[5] = Gather(%x, %row) {axis=0}
  node "sq" %q: f32[5] = Mul(%o, %o)
  output %y, %z, %p, %q
}"#;
    check_moved_in_place(src, "gathers", &["rows"])
}

/// A gather by given indices feeding a matrix product stays a kernel of
/// its own: the product's packing cannot load through an index it reads
/// (no error flag for one out of range), so the backend refuses the pair.
#[test]
fn a_gather_by_given_indices_before_a_product_is_its_own_kernel() -> Result<()> {
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[48,64]
  input %pick: i64[40]
  init %w: f32[64,64] = [{}]
  node "rows" %r: f32[40,64] = Gather(%x, %pick) {{axis=0}}
  node "mm" %y: f32[40,64] = MatMul(%r, %w)
  output %y
}}"#,
        values(64 * 64, 5)
    );
    check_moved_in_place(&src, "gather before a product", &["rows"])
}
