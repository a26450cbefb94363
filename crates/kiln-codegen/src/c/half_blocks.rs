//! f16 reads and writes of a vector loop converted by the target's
//! conversion instructions (`TargetDesc::half_conversions`: x86's F16C), a
//! block at a time.
//!
//! Needs: a vectorized loop of the kernel being printed, on a target whose
//! vector instructions convert between f16 and f32.
//! Guarantees: each unguarded read of an f16 buffer the loop does not store
//! to, at unit stride in the loop's variable (`buf[v + rest]`, `rest`
//! independent of `v`), is widened before the loop — the loop's whole range
//! at once, into a float array on the stack — and the loop reads the array
//! instead ([`widened_reads`]); each store to an f16 buffer the loop does
//! not read, at unit stride, of anything but an f16 element (whose bits a
//! copy keeps), goes to a float array the
//! loop's range narrows into the buffer after it ([`narrowed_stores`]). The
//! prelude's `kiln_f16_f32_n` and `kiln_f32_f16_n` ([`HALF_BLOCKS`]) give the
//! values of the per-lane conversions `kiln_f16_f32` and `kiln_f32_f16`
//! (rounding to nearest even), which GCC vectorizes as a dozen integer
//! operations per vector where the instruction is one (GCC 12 vectorizes
//! neither `_Float16` nor the scalar conversion intrinsics). Loops with loops
//! inside or longer than [`MAX_BLOCK`] keep the per-lane conversions. bf16
//! widens by a shift, which vectorizes as it is.

use kiln_ir::DType;
use kiln_loop::{Idx, Kernel, Loop, Stmt, Val};

/// Elements of the longest loop converted ahead or after: its array (16 KiB
/// of floats) stays in the L1 cache between the conversion and the loop.
pub(super) const MAX_BLOCK: i64 = 4096;

/// One f16 access a loop makes through a float array instead.
pub(super) struct BlockAccess {
    pub buf: usize,
    pub offset: Idx,
    /// The float array, indexed by the loop variable.
    pub array: String,
    pub var: String,
}

/// The reads of loop `l` of `k` to widen ahead (see the module doc), their
/// arrays named `kiln_w{first}_0`, `kiln_w{first}_1`, ….
pub(super) fn widened_reads(k: &Kernel, l: &Loop, first: usize) -> Vec<BlockAccess> {
    let stored: Vec<usize> = stores(l).map(|(buf, _, _)| buf).collect();
    let mut reads: Vec<BlockAccess> = Vec::new();
    if !convertible(l) {
        return reads;
    }
    kiln_loop::ir::for_each_load(&l.body, &mut |buf, offset, guard| {
        if guard.is_empty() && !stored.contains(&buf) {
            add_access(k, &mut reads, (buf, offset), l, &format!("kiln_w{first}_"));
        }
    });
    reads
}

/// The stores of loop `l` of `k` to narrow after it (see the module doc), their arrays
/// named `kiln_n{first}_0`, ….
pub(super) fn narrowed_stores(k: &Kernel, l: &Loop, first: usize) -> Vec<BlockAccess> {
    let mut read = Vec::new();
    kiln_loop::ir::for_each_load(&l.body, &mut |buf, _, _| read.push(buf));
    let mut out: Vec<BlockAccess> = Vec::new();
    if !convertible(l) {
        return out;
    }
    for (buf, offset, value) in stores(l) {
        let copy =
            matches!(value, Val::Load { buf: src, .. } if k.buffers[*src].dtype == DType::F16);
        if !read.contains(&buf) && !copy {
            add_access(k, &mut out, (buf, offset), l, &format!("kiln_n{first}_"));
        }
    }
    out
}

/// Adds `buf[offset]` to `accesses`, its array named `prefix` and its position, when it is
/// an f16 access at unit stride in `l`'s variable that `accesses` does not hold yet.
fn add_access(
    k: &Kernel,
    accesses: &mut Vec<BlockAccess>,
    (buf, offset): (usize, &Idx),
    l: &Loop,
    prefix: &str,
) {
    let new = k.buffers[buf].dtype == DType::F16
        && offset.unit_stride_aligned(&l.var, 1)
        && !accesses.iter().any(|a| a.buf == buf && a.offset == *offset);
    if new {
        accesses.push(BlockAccess {
            buf,
            offset: offset.clone(),
            array: format!("{prefix}{}", accesses.len()),
            var: l.var.clone(),
        });
    }
}

/// Whether loop `l` is short enough and flat, so its accesses convert a block at a time.
fn convertible(l: &Loop) -> bool {
    l.extent.max() <= MAX_BLOCK && l.body.iter().all(|s| !matches!(s, Stmt::Loop(_)))
}

/// The stores directly in loop `l`'s body.
fn stores(l: &Loop) -> impl Iterator<Item = (usize, &Idx, &Val)> {
    l.body.iter().filter_map(|s| match s {
        Stmt::Store { buf, offset, value } => Some((*buf, offset, value)),
        _ => None,
    })
}

/// The access among `accesses` at `buf[offset]`, if any.
pub(super) fn find<'a>(
    accesses: &'a [BlockAccess],
    buf: usize,
    offset: &Idx,
) -> Option<&'a BlockAccess> {
    accesses
        .iter()
        .find(|a| a.buf == buf && a.offset == *offset)
}

/// The block conversions' names, as kernels call them.
pub(super) const WIDEN_BLOCK: &str = "kiln_f16_f32_n";
pub(super) const NARROW_BLOCK: &str = "kiln_f32_f16_n";

/// Whether the C `source` calls a block conversion (and so needs
/// [`HALF_BLOCKS`] in its prelude).
pub(super) fn called_in(source: &str) -> bool {
    [WIDEN_BLOCK, NARROW_BLOCK]
        .iter()
        .any(|name| source.contains(&format!("{name}(")))
}

/// The prelude's block conversions: `kiln_f16_f32_n(dst, src, n)` widens
/// `n` f16 values, `kiln_f32_f16_n(dst, src, n)` narrows `n` floats
/// rounding to nearest even; with the F16C instructions where the C
/// compiler targets them (16 lanes with AVX-512, else 8), else with the
/// per-value conversions, which give the same values.
pub(super) const HALF_BLOCKS: &str = r#"
#if defined(__F16C__)
#include <immintrin.h>
KILN_INLINE void kiln_f16_f32_n(float* restrict dst, const uint16_t* restrict src, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(src + i))));
#endif
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}
#define KILN_F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
KILN_INLINE void kiln_f32_f16_n(uint16_t* restrict dst, const float* restrict src, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i*)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), KILN_F16_RNE));
#endif
  for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), KILN_F16_RNE));
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], KILN_F16_RNE);
}
#else
KILN_INLINE void kiln_f16_f32_n(float* restrict dst, const uint16_t* restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = kiln_f16_f32(src[i]);
}
KILN_INLINE void kiln_f32_f16_n(uint16_t* restrict dst, const float* restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = kiln_f32_f16(src[i]);
}
#endif
"#;
