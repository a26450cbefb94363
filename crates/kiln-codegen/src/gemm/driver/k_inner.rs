//! A task's K blocks inside each tile ([`Plan::k_inner`]), for A read through row pointers
//! (an NHWC window, one tap per K block).
//!
//! Needs: a plan with `k_inner` set (B packed per task, not prepacked) and the window A reads.
//! Guarantees: the same sums as the block-by-block order, block after block in the same
//! order for every element: B's panels of every K block are packed first (block `kiln_k0`'s
//! at `kiln_k0 * panels * nr` of the packing buffer); then each tile runs the blocks in
//! order, its row pointers rebuilt for each block's tap, its partial sums kept in C (a whole
//! tile, with the epilogue applied in the last block as the block order does) or in the
//! local tile (a clipped one, stored once after the last block with the epilogue).

use super::tiles::{
    emit_clipped_store, emit_direct_tile, emit_local_tile, emit_local_tile_call, tile_form, Store,
    TileForm,
};
use super::{emit_row_pointers, open_k_block, ASource, CWriter, KBlock, KernelCall, Window};

/// The task's packing of B and its tiles (see the module doc).
pub(super) fn emit(w: &mut CWriter, block: &KBlock, window: &Window) {
    let (spec, plan) = (block.spec, block.plan);
    let nr = plan.shape.nr;
    open_k_block(w, spec, plan);
    block.emit_b_packing(w, &block_panels(nr));
    w.close();
    w.line("const long kiln_pbe = kiln_pb0;");
    w.open("for (long kiln_q = kiln_pb0; kiln_q < kiln_pb1; kiln_q++)");
    w.open("for (long kiln_s = kiln_pa0; kiln_s < kiln_pa1; kiln_s++)");
    w.line(format!(
        "const long kiln_r0 = kiln_s * {}, kiln_c0 = kiln_q * {nr};",
        plan.shape.mr
    ));
    emit_tile(w, block, window);
    w.close();
    w.close();
}

/// Where K block `kiln_k0`'s panels start in the packing buffer: after the panels of every
/// block before it, each as deep as the plan's K block.
fn block_panels(nr: usize) -> String {
    format!("kiln_bp + kiln_k0 * (kiln_pb1 - kiln_pb0) * {nr}")
}

/// One tile over every K block, reaching C as [`tile_form`] says.
fn emit_tile(w: &mut CWriter, block: &KBlock, window: &Window) {
    let (spec, plan, views) = (block.spec, block.plan, block.views);
    let kernel = KernelCall {
        source: ASource::Pointers,
        a_args: "kiln_apanel".into(),
    };
    let direct = |w: &mut CWriter, strides| {
        emit_blocks(w, block, window, &|w: &mut CWriter| {
            emit_direct_tile(w, spec, views, &kernel, strides, plan)
        })
    };
    let copied = |w: &mut CWriter, store| {
        emit_local_tile(w, plan);
        emit_blocks(w, block, window, &|w: &mut CWriter| {
            emit_local_tile_call(w, plan, &kernel, "kiln_k0 > 0")
        });
        w.line("const int kiln_last = 1;");
        emit_clipped_store(w, spec, plan, store, "0");
    };
    match tile_form(plan, views) {
        TileForm::Direct(strides) => direct(w, strides),
        TileForm::Copied(store) => copied(w, store),
        TileForm::Split { whole, strides } => {
            w.open(format!("if ({whole})"));
            direct(w, strides);
            w.close();
            w.open("else");
            copied(w, Store::OutOfLine);
            w.close();
        }
    }
}

/// The loop over K blocks around `call`, with the tile's row pointers for the block's tap
/// and the block's B panel.
fn emit_blocks(w: &mut CWriter, block: &KBlock, window: &Window, call: &dyn Fn(&mut CWriter)) {
    let (mr, nr) = (block.plan.shape.mr, block.plan.shape.nr);
    open_k_block(w, block.spec, block.plan);
    emit_row_pointers(w, window, "kiln_r0", &mr.to_string());
    w.line("const float* const* kiln_apanel = kiln_arow;");
    w.line(format!(
        "const float* kiln_bpanel = {} + (kiln_q - kiln_pbe) * kiln_kc * {nr};",
        block_panels(nr)
    ));
    w.line(format!("const long kiln_ldb = {nr};"));
    call(w);
    w.close();
}
