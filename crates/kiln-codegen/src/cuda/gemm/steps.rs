//! The pieces of one staging step of the CUDA gemm template: how each
//! factor's elements reach shared memory, and the multiply-adds of a
//! staged step on CUDA cores or on TF32 tensor cores.
//!
//! Needs: the template's names — `kiln_as`/`kiln_bs` (two buffers of
//! `depth` rows each), `kiln_a`/`kiln_b` (the current buffer), the
//! thread's place (`tx`, `ty`, or `kiln_g`, `kiln_t`, `wm`, `wn`) and its
//! accumulators `kiln_acc`. Guarantees: a staged element is the factor's
//! value inside the matrix and the step's depth, zero outside; a step adds
//! `A·B` over the staged depth into every accumulator of the thread.

use crate::c::gemm_kernel::with_gemm_ranges;
use crate::c::Printer;
use kiln_ir::{bail, DType, Result};
use kiln_loop::{GemmInput, Kernel, Val};

/// How one factor's elements reach shared memory.
pub(super) enum Factor {
    /// An f32 element `buf[idx]`, read where `guard` holds: copied
    /// without passing through registers (`cp.async`, zero-filled outside)
    /// where the GPU has asynchronous copies.
    Copy {
        buf: String,
        idx: String,
        guard: Option<String>,
        /// Unguarded, and consecutive along `c` in aligned fours
        /// ([`kiln_loop::Idx::unit_stride_aligned`]): copied 16 bytes at a
        /// time where the template stages `c` in fours.
        vector: bool,
    },
    /// Any other value (a computed prologue): loaded, computed and stored
    /// by the thread.
    Value(String),
}

impl Factor {
    /// The factor `f`, whose element at `(b, r, c)` lies below `extents`.
    pub(super) fn of(k: &Kernel, f: &GemmInput, extents: [i64; 3]) -> Result<Factor> {
        let p = with_gemm_ranges(Printer::for_gpu(k), extents);
        let value = match f {
            GemmInput::Read(o) if k.buffers[o.buf].dtype == DType::F32 => {
                let guard = if o.guard.is_empty() {
                    None
                } else {
                    Some(p.guard(&o.guard)?)
                };
                return Ok(Factor::Copy {
                    buf: k.buffers[o.buf].name.clone(),
                    idx: p.idx(&o.offset)?,
                    vector: guard.is_none() && o.offset.unit_stride_aligned("c", 4),
                    guard,
                });
            }
            GemmInput::Read(o) => Val::Load {
                buf: o.buf,
                offset: o.offset.clone(),
                guard: o.guard.clone(),
            },
            GemmInput::Computed(v) => v.clone(),
        };
        let (text, dtype) = p.val(&value)?;
        if dtype != DType::F32 {
            bail!("{}: a gemm factor of {dtype} (the product is f32)", k.name);
        }
        Ok(Factor::Value(text))
    }

    /// The statement staging the element at `(b, r, c)` into `dst` where
    /// `inside` (the matrix and the step's depth) holds, else zero.
    pub(super) fn stage(&self, dst: &str, inside: &str, asynchronous: bool) -> String {
        let (buf, idx, guard) = match self {
            Factor::Value(v) => return format!("{dst} = ({inside}) ? (float)({v}) : 0.0f;"),
            Factor::Copy {
                buf, idx, guard, ..
            } => (buf, idx, guard),
        };
        let on = match guard {
            Some(g) => format!("({inside}) && ({g})"),
            None => format!("({inside})"),
        };
        if asynchronous {
            format!("{{ const bool kiln_on = {on}; kiln_cp_async4(&{dst}, kiln_on ? &{buf}[{idx}] : {buf}, kiln_on); }}")
        } else {
            format!("{dst} = {on} ? {buf}[{idx}] : 0.0f;")
        }
    }
}

impl Factor {
    /// The asynchronous copy of the four elements at `(b, r, c..c + 4)`
    /// into `dst` (16 bytes, aligned), `count` of them inside (the rest,
    /// and all four when `count <= 0`, zero-filled); `None` unless the
    /// factor is a [`Factor::Copy`] with `vector`.
    pub(super) fn stage_vector(&self, dst: &str, count: &str) -> Option<String> {
        let Factor::Copy {
            buf,
            idx,
            vector: true,
            ..
        } = self
        else {
            return None;
        };
        Some(format!("{{ const int64_t kiln_n = {count}; kiln_cp_async16(&{dst}, kiln_n > 0 ? &{buf}[{idx}] : {buf}, kiln_n); }}"))
    }
}

/// One staged step on CUDA cores: each thread's `micro`×`micro` sub-tile,
/// rows `ty + 16i` and columns `tx + 16j`.
pub(super) fn simt_step(micro: i64, depth: i64) -> String {
    format!(
        r#"#pragma unroll
      for (int kk = 0; kk < {depth}; ++kk) {{
        float av[{micro}], bv[{micro}];
#pragma unroll
        for (int i = 0; i < {micro}; ++i) {{ av[i] = kiln_a[kk][ty + 16 * i]; bv[i] = kiln_b[kk][tx + 16 * i]; }}
#pragma unroll
        for (int i = 0; i < {micro}; ++i)
#pragma unroll
          for (int j = 0; j < {micro}; ++j) kiln_acc[i][j] = fmaf(av[i], bv[j], kiln_acc[i][j]);
      }}
"#
    )
}

/// One staged step on tensor cores (A staged row by row: `kiln_a[row][depth]`):
/// per 8 deep, each warp loads its A fragments (16 rows: `a0` row g depth t, `a1` row g+8, `a2`/`a3` depth
/// t+4) and B fragments (8 columns: `b0` depth t column g, `b1` depth t+4),
/// rounding them to TF32, and multiply-adds every pair (PTX ISA, "Matrix
/// Fragments for mma.m16n8k8", `.tf32`).
pub(super) fn tf32_step((fm, fn_): (i64, i64), depth: i64) -> String {
    format!(
        r#"#pragma unroll
      for (int ks = 0; ks < {depth}; ks += 8) {{
        uint32_t af[{fm}][4], bf[{fn_}][2];
#pragma unroll
        for (int i = 0; i < {fm}; ++i) {{
          const int rr = wm + 16 * i + kiln_g;
          af[i][0] = kiln_tf32(kiln_a[rr][ks + kiln_t]); af[i][1] = kiln_tf32(kiln_a[rr + 8][ks + kiln_t]);
          af[i][2] = kiln_tf32(kiln_a[rr][ks + kiln_t + 4]); af[i][3] = kiln_tf32(kiln_a[rr + 8][ks + kiln_t + 4]);
        }}
#pragma unroll
        for (int j = 0; j < {fn_}; ++j) {{
          const int cc = wn + 8 * j + kiln_g;
          bf[j][0] = kiln_tf32(kiln_b[ks + kiln_t][cc]); bf[j][1] = kiln_tf32(kiln_b[ks + kiln_t + 4][cc]);
        }}
#pragma unroll
        for (int i = 0; i < {fm}; ++i)
#pragma unroll
          for (int j = 0; j < {fn_}; ++j) kiln_mma_tf32(kiln_acc[i][j], af[i], bf[j]);
      }}
"#
    )
}
