//! The prepacking of a matmul's factor known before the first call (a weight): its size
//! and the body of the `NAME_prepack` function, every K block's panels as the matmul's
//! tiles read them (`Plan::prepacked`).
//!
//! Needs: a plan with a prepacked side. Guarantees: panel `t` of the block at `kiln_k0`
//! at `kiln_k0 * panels * width + t * kiln_kc * width`, where `driver.rs` `panel_pointer`
//! looks for it.

use super::{emit_pack, CWriter, GemmSpec, PackJob, Plan, Side, Views};

/// Floats in the packing of the plan's prepacked factor: every K block's panels, each
/// `kc x width` (the last block as deep as it is).
pub(crate) fn prepacked_floats(spec: &GemmSpec, plan: &Plan) -> usize {
    match plan.prepacked {
        Some(Side::A) => plan.m_panels() * plan.shape.mr * spec.k,
        Some(Side::B) => plan.n_panels() * plan.shape.nr * spec.k,
        None => 0,
    }
}

/// The body of the prepacking function: every K block of the prepacked factor packed as the
/// matmul reads it (block at `kiln_k0 * panels * width`, panel `t` at `t * kiln_kc * width`).
pub(crate) fn emit_prepack_body(w: &mut CWriter, spec: &GemmSpec, plan: &Plan) {
    let views = Views::new(spec, plan.transposed);
    let (view, side, width, extent, panels) = match plan.prepacked {
        Some(Side::A) => (&views.a, Side::A, plan.shape.mr, plan.m, plan.m_panels()),
        Some(Side::B) => (&views.b, Side::B, plan.shape.nr, plan.n, plan.n_panels()),
        None => return,
    };
    let (k, kc) = (spec.k, plan.kc);
    w.line("const long b = 0;");
    w.line("(void)b;");
    w.open(format!(
        "for (long kiln_k0 = 0; kiln_k0 < {k}; kiln_k0 += {kc})"
    ));
    w.line(format!(
        "const long kiln_kc = {k} - kiln_k0 < {kc} ? {k} - kiln_k0 : {kc};"
    ));
    w.line(format!(
        "float* restrict kiln_block = kiln_out + kiln_k0 * {};",
        panels * width
    ));
    let end = panels.to_string();
    emit_pack(
        w,
        &PackJob {
            view,
            side,
            width,
            extent,
            buffer: "kiln_block",
            first: "0",
            end: &end,
            staged: false,
        },
    );
    w.close();
}
