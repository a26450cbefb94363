//! A matmul's epilogue applied in registers: the gemm's own variant of the micro-kernels that
//! applies the element-wise epilogue to its vector accumulators after the last K block, so each
//! output element is stored once, already final (the fused kernels of APOLLO §4 Layer I and the
//! issue's "applied before the result is stored").
//!
//! Needs a spec with an epilogue and the plan of one vector target. Guarantees, per target:
//! - `NAME_lanes(v, b, r0, c0, params...)`: the epilogue of the vector `v` holding the kernel
//!   row `r0`, kernel columns `c0 ..= c0 + VL - 1`. It is the spec's own scalar C expression in
//!   an `omp simd` loop over the lanes, so the semantics are written once (`scalar_c`)
//!   and GCC keeps the lanes in the vector register (the copies to and from a lane array are
//!   forwarded away: no stack traffic in the generated assembly).
//! - `NAME_ukernel_MRxNR*`: the micro-kernels the plan calls, each applying `NAME_lanes` to
//!   every accumulator when its `kiln_last` argument is set (see `kernel::emit_ukernel`).
//!
//! Tiles clipped at the matrix edge still go through a local tile and the scalar epilogue
//! (`driver::emit_edge_function`).

use super::driver::kernel_sources;
use super::emit::CWriter;
use super::kernel::emit_ukernel;
use super::plan::Plan;
use super::view::View;
use super::{declared, GemmSpec};

/// What a gemm's micro-kernel variant needs to apply the epilogue: the lane function's name and
/// the gemm's parameters, passed through to it.
pub(crate) struct FusedEpilogue {
    /// The gemm function's name (prefix of its kernels' names).
    pub gemm: String,
    /// `type name, ...` of the gemm's parameters.
    pub params: String,
    /// `name, ...` of the gemm's parameters.
    pub args: String,
}

impl FusedEpilogue {
    /// The fused form of `spec`'s epilogue, when it has one.
    pub(crate) fn of(spec: &GemmSpec) -> Option<FusedEpilogue> {
        spec.epilogue.as_ref()?;
        let names: Vec<&str> = spec.params.iter().map(|p| p.name.as_str()).collect();
        Some(FusedEpilogue {
            gemm: spec.name.clone(),
            params: declared(&spec.params).join(", "),
            args: names.join(", "),
        })
    }

    /// The lane function's name.
    pub(crate) fn lanes(&self) -> String {
        format!("{}_lanes", self.gemm)
    }
}

/// The lane function and the micro-kernel variants `plan` calls, for `spec` (which must have an
/// epilogue; nothing is written otherwise).
pub(crate) fn emit_fused_kernels(w: &mut CWriter, spec: &GemmSpec, plan: &Plan, vl: usize) {
    let (Some(expr), Some(fused)) = (&spec.epilogue, FusedEpilogue::of(spec)) else {
        return;
    };
    let c = View::new(&spec.c, plan.transposed);
    w.line(format!(
        "/* {}'s epilogue on one vector of kernel row kiln_r, columns kiln_c.. (lanes kept in the register). */",
        spec.name
    ));
    w.open(format!(
        "KILN_STATIC_INLINE kiln_vf {}(kiln_vf kiln_v, long b, long kiln_r, long kiln_c, {})",
        fused.lanes(),
        fused.params
    ));
    w.line("(void)b;");
    for p in &spec.params {
        w.line(format!("(void){};", p.name));
    }
    w.line(format!("float kiln_t[{vl}];"));
    w.line("memcpy(kiln_t, &kiln_v, sizeof kiln_t);");
    w.line("KILN_OMP(omp simd)");
    w.open(format!("for (long kiln_l = 0; kiln_l < {vl}; kiln_l++)"));
    w.line(c.bind_both("kiln_r", "kiln_c + kiln_l"));
    w.line("const float acc = kiln_t[kiln_l];");
    w.line(format!("kiln_t[kiln_l] = {expr};"));
    w.close();
    w.line("memcpy(&kiln_v, kiln_t, sizeof kiln_v);");
    w.line("return kiln_v;");
    w.close();
    for source in kernel_sources(spec, plan) {
        emit_ukernel(w, plan.shape, vl, source, Some(&fused));
    }
}

#[cfg(test)]
mod tests {
    use crate::gemm::{gemm_c, strided, GemmSpec, Param};

    fn bias_relu(m: usize, n: usize) -> GemmSpec {
        GemmSpec {
            name: "fused".into(),
            params: vec![
                Param::new("const float* restrict", "A"),
                Param::new("const float* restrict", "B"),
                Param::new("const float* restrict", "bias"),
                Param::new("float* restrict", "C"),
            ],
            batch: 1,
            m,
            n,
            k: 64,
            a: strided("A", 64, 1),
            b: strided("B", n as isize, 1),
            c: strided("C", n as isize, 1),
            epilogue: Some("fmaxf(acc + bias[c], 0.0f)".into()),
            prepacked: None,
        }
    }

    #[test]
    fn whole_tiles_apply_the_epilogue_in_the_kernel_and_store_once() {
        let c = gemm_c(&bias_relu(96, 192)).expect("gemm C");
        assert!(c.contains("KILN_STATIC_INLINE kiln_vf fused_lanes("), "{c}");
        assert!(c.contains(
            "c0_0 = fused_lanes(c0_0, kiln_b, kiln_r0 + 0, kiln_c0 + 0, A, B, bias, C);"
        ));
        assert!(c.contains("kiln_k0 > 0, kiln_last, b, kiln_r0, kiln_c0, A, B, bias, C);"));
        // Whole tiles never re-read what the kernel stored.
        assert!(!c.contains("kiln_e"), "{c}");
    }

    #[test]
    fn a_matmul_without_epilogue_uses_the_shared_kernels() {
        let mut spec = bias_relu(96, 192);
        spec.epilogue = None;
        let c = gemm_c(&spec).expect("gemm C");
        assert!(
            !c.contains("fused_lanes") && !c.contains("fused_ukernel"),
            "{c}"
        );
        assert!(c.contains("kiln_gemm_ukernel_"));
    }
}
