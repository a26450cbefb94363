//! One micro-kernel tile of a matmul into C: straight into C when C's kernel columns are
//! contiguous and the tile whole (the micro-kernel applying the epilogue after the last K
//! block), else through a local tile and a scalar copy that clips at the edges, inline or in
//! the plan's out-of-line edge function.
//!
//! Needs: the tile's `kiln_r0`, `kiln_c0`, `kiln_kc`, `kiln_bpanel`, `kiln_ldb` and the
//! kernel's A arguments in scope, and `kiln_last` for the epilogue. Guarantees: C's
//! `mr x nr` tile (clipped to the matrix) receives the block's products, added to its
//! partial sums after the first K block, the epilogue applied once after the last.

use super::{
    declared, linear_index, Axis, CWriter, FusedEpilogue, GemmSpec, KernelCall, Plan, Views,
};

/// How a plan's tiles reach C.
pub(super) enum TileForm {
    /// Every tile straight into C (C's kernel strides: batch, row).
    Direct((isize, isize)),
    /// Every tile through a local tile and a scalar copy stored as said.
    Copied(Store),
    /// Whole tiles (`whole`, a C condition) straight into C, clipped ones copied.
    Split {
        whole: String,
        strides: (isize, isize),
    },
}

/// Straight into C when C's kernel columns are contiguous and the tile is whole, else through
/// a local tile and a scalar copy that clips at the edges.
pub(super) fn tile_form(plan: &Plan, views: &Views) -> TileForm {
    let Some((batch_stride, row_stride, 1)) = views.c.kernel_strides() else {
        return TileForm::Copied(Store::Inline);
    };
    let strides = (batch_stride, row_stride);
    let mut whole = Vec::new();
    if !plan.m.is_multiple_of(plan.shape.mr) {
        whole.push(format!("kiln_s < {}", plan.m / plan.shape.mr));
    }
    if !plan.n.is_multiple_of(plan.shape.nr) {
        whole.push(format!("kiln_q < {}", plan.n / plan.shape.nr));
    }
    if whole.is_empty() {
        TileForm::Direct(strides)
    } else if plan.m < plan.shape.mr || plan.n < plan.shape.nr {
        TileForm::Copied(Store::Inline)
    } else {
        TileForm::Split {
            whole: whole.join(" && "),
            strides,
        }
    }
}

/// One MR x NR tile of one K block, as [`tile_form`] says.
pub(super) fn emit_tile(
    w: &mut CWriter,
    spec: &GemmSpec,
    plan: &Plan,
    views: &Views,
    kernel: &KernelCall,
) {
    match tile_form(plan, views) {
        TileForm::Direct(strides) => emit_direct_tile(w, spec, views, kernel, strides, plan),
        TileForm::Copied(store) => emit_copied_tile(w, spec, plan, kernel, store),
        TileForm::Split { whole, strides } => {
            w.open(format!("if ({whole})"));
            emit_direct_tile(w, spec, views, kernel, strides, plan);
            w.close();
            w.open("else");
            emit_copied_tile(w, spec, plan, kernel, Store::OutOfLine);
            w.close();
        }
    }
}

pub(super) fn emit_direct_tile(
    w: &mut CWriter,
    spec: &GemmSpec,
    views: &Views,
    kernel: &KernelCall,
    (batch_stride, row_stride): (isize, isize),
    plan: &Plan,
) {
    let Some(param) = views.c.param() else {
        return;
    };
    let offset = linear_index(&[("b", batch_stride), ("kiln_r0", row_stride), ("kiln_c0", 1)]);
    w.line(format!("float* kiln_cp = {param} + {offset};"));
    let fused = FusedEpilogue::of(spec);
    let epilogue_args = fused.as_ref().map_or(String::new(), |e| {
        format!(", kiln_last, b, kiln_r0, kiln_c0, {}", e.args)
    });
    w.line(format!(
        "{}(kiln_kc, {}, kiln_bpanel, kiln_ldb, kiln_cp, {row_stride}, kiln_k0 > 0{epilogue_args});",
        kernel.name(plan, fused.as_ref()),
        kernel.a_args
    ));
}

/// Where a copied tile's store loops are.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Store {
    /// At the tile, where every tile is copied: the compiler sees which rows and columns are
    /// stored (one row of a six-row kernel, say) and drops the kernel's work on the others.
    Inline,
    /// In the plan's edge function ([`emit_edge_function`]), where clipped tiles are the
    /// exception: inlined at each of them, the loops doubled GCC's time on the whole gemm
    /// function (BENCHMARKS.md, session 26).
    OutOfLine,
}

fn emit_copied_tile(
    w: &mut CWriter,
    spec: &GemmSpec,
    plan: &Plan,
    kernel: &KernelCall,
    store: Store,
) {
    emit_local_tile(w, plan);
    emit_local_tile_call(w, plan, kernel, "0");
    emit_clipped_store(w, spec, plan, store, "kiln_k0 > 0");
}

/// The local tile a clipped tile is computed in.
pub(super) fn emit_local_tile(w: &mut CWriter, plan: &Plan) {
    w.line(format!(
        "_Alignas(64) float kiln_tile[{}];",
        plan.shape.mr * plan.shape.nr
    ));
}

/// The micro-kernel into the local tile, adding to it when `accumulate` (a C condition) holds.
pub(super) fn emit_local_tile_call(
    w: &mut CWriter,
    plan: &Plan,
    kernel: &KernelCall,
    accumulate: &str,
) {
    w.line(format!(
        "{}(kiln_kc, {}, kiln_bpanel, kiln_ldb, kiln_tile, {}, {accumulate});",
        kernel.name(plan, None),
        kernel.a_args,
        plan.shape.nr
    ));
}

/// The local tile's part inside the matrix stored into C, adding C's partial sums when
/// `add_to_c` (a C condition) holds and applying the epilogue when `kiln_last` does.
pub(super) fn emit_clipped_store(
    w: &mut CWriter,
    spec: &GemmSpec,
    plan: &Plan,
    store: Store,
    add_to_c: &str,
) {
    let (mr, nr) = (plan.shape.mr, plan.shape.nr);
    w.line(format!(
        "const long kiln_h = {m} - kiln_r0 < {mr} ? {m} - kiln_r0 : {mr};",
        m = plan.m
    ));
    w.line(format!(
        "const long kiln_w = {n} - kiln_c0 < {nr} ? {n} - kiln_c0 : {nr};",
        n = plan.n
    ));
    if store == Store::Inline {
        w.line(format!("const int kiln_acc = {add_to_c};"));
        emit_store_loops(w, spec, plan);
        return;
    }
    let args: Vec<&str> = spec.params.iter().map(|p| p.name.as_str()).collect();
    w.line(format!(
        "{}(kiln_tile, kiln_h, kiln_w, b, kiln_r0, kiln_c0, {add_to_c}, kiln_last, {});",
        edge_name(spec),
        args.join(", ")
    ));
}

fn edge_name(spec: &GemmSpec) -> String {
    format!("{}_edge", spec.name)
}

/// The function storing a clipped tile ([`Store::OutOfLine`]), shared by the plan's clipped
/// tiles: the store loops of [`emit_store_loops`] over the tile's arguments.
pub(crate) fn emit_edge_function(w: &mut CWriter, spec: &GemmSpec, plan: &Plan) {
    w.open(format!(
        "KILN_NOINLINE void {}(const float* restrict kiln_tile, long kiln_h, long kiln_w, long b, long kiln_r0, long kiln_c0, int kiln_acc, int kiln_last, {})",
        edge_name(spec),
        declared(&spec.params).join(", ")
    ));
    w.line("(void)b;");
    w.line("(void)kiln_last;");
    for p in &spec.params {
        w.line(format!("(void){};", p.name));
    }
    emit_store_loops(w, spec, plan);
    w.close();
}

/// Stores the `kiln_h` x `kiln_w` part of `kiln_tile` inside the matrix at (`kiln_r0`,
/// `kiln_c0`), adding C's partial sums when `kiln_acc` is set and applying the epilogue when
/// `kiln_last` is.
fn emit_store_loops(w: &mut CWriter, spec: &GemmSpec, plan: &Plan) {
    let views = Views::new(spec, plan.transposed);
    let nr = plan.shape.nr;
    let row_loop = ("kiln_i", "kiln_h", "kiln_r0 + kiln_i", Axis::Row);
    let col_loop = ("kiln_j", "kiln_w", "kiln_c0 + kiln_j", Axis::Col);
    let (outer, inner) = if views.c.inner_axis() == Axis::Col {
        (row_loop, col_loop)
    } else {
        (col_loop, row_loop)
    };
    for (var, count, coordinate, axis) in [outer, inner] {
        w.open(format!("for (long {var} = 0; {var} < {count}; {var}++)"));
        w.line(views.c.bind(axis, coordinate));
    }
    let element = views.c.value();
    w.line(format!(
        "const float acc = kiln_tile[kiln_i * {nr} + kiln_j] + (kiln_acc ? {element} : 0.0f);"
    ));
    match &spec.epilogue {
        Some(epilogue) => w.line(format!("{element} = kiln_last ? ({epilogue}) : acc;")),
        None => w.line(format!("{element} = acc;")),
    }
    w.close();
    w.close();
}
