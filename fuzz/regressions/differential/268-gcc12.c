/* Differential finding 268 (fuzz/regressions/differential/268.kiln) reduced to C:
   GCC 12.2 -O3 -march=x86-64-v3 (or v4, or native on Zen 3-5) prints "mismatches: 43";
   -O2, -march=x86-64-v2, -fno-tree-loop-if-convert, -fno-tree-loop-vectorize, clang: 0.
   No sanitizer (ASan, UBSan, gcc or clang) reports anything at -O1.
   What goes wrong: if-conversion turns the guarded read into a .MASK_LOAD; the i3 loop is
   unrolled, so its three reads form an interleaved group, and vectorizing the i2 loop
   (4 lanes) loads the group as three vectors with vmaskmovps, all three with the FIRST
   vector's mask (-fdump-tree-vect: the masks for vectors 2 and 3 are computed and used
   only by the later selects). Lanes whose guard holds read 0.0 instead of the input.
   kiln_maxf is not the cause: it only tips GCC's cost model into vectorizing the loop.
   Every NaN-propagating formulation tried fails on some window: the integer-mask select
   here (this file), ((b >= a) | (b != b)) ? b : a (3-tap window [3,4,7,3], with kiln's
   -fno-trapping-math), b != b ? b : (b >= a ? b : a) (the same window without it).
   The fix (kiln-codegen c.rs Printer::conditional_read): outside an omp simd loop that
   reads the buffer at unit stride or with a guard independent of it, a guarded read is
   unconditional, at offset & -g, with branch-free integer-mask selects (kiln_keep_f32,
   kiln_select_f32); a branch on the guard anywhere around the read lets jump threading or
   the ?: arm move it back under the guard, where it is a masked load again. With
   -DVARIANT="float v = in0[IDX & -(int64_t)(c)]; acc = maxf(acc, c ? v : -INFINITY);"
   (IDX the offset below) GCC prints 0.
   gcc -O3 -march=x86-64-v3 -std=c11 "-DVARIANT=acc = maxf(acc, c ? in0[45*i0 + 15*i1 + 3*i2 + 3*r0 + i3 - 3] : -INFINITY);" 268-gcc12.c -lm */
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
static inline float nan_or(float a, float m) { uint32_t ia, im; memcpy(&ia, &a, 4); memcpy(&im, &m, 4); uint32_t k = 0u - (uint32_t)(a != a); uint32_t r = (ia & k) | (im & ~k); float f; memcpy(&f, &r, 4); return f; }
static inline float maxf(float a, float b) { return nan_or(b, b >= a ? b : a); }
__attribute__((noinline)) void k0(const float* restrict in0, float* restrict out0) {
  for (int64_t i0 = 0; i0 < 3; ++i0)
    for (int64_t i1 = 0; i1 < 3; ++i1)
      for (int64_t i2 = 0; i2 < 6; ++i2)
        for (int64_t i3 = 0; i3 < 3; ++i3) {
          float acc = -INFINITY;
          for (int64_t r0 = 0; r0 < 2; ++r0) {
            int c = (i2 + r0 - 1) >= 0 && (i2 + r0 - 1) < 5;
            VARIANT
          }
          out0[54*i0 + 18*i1 + 3*i2 + i3] = acc;
        }
}
int main(void) {
  static float in[135], out[162], ref[162];
  for (int i = 0; i < 135; i++) in[i] = (float)((i * 37) % 23) - 11.0f;
  k0(in, out);
  for (int i0 = 0; i0 < 3; i0++) for (int i1 = 0; i1 < 3; i1++) for (int i2 = 0; i2 < 6; i2++) for (int i3 = 0; i3 < 3; i3++) {
    float m = -INFINITY;
    for (int r = 0; r < 2; r++) { int h = i2 + r - 1; if (h >= 0 && h < 5) { float v = in[45*i0 + 15*i1 + 3*h + i3]; if (v > m) m = v; } }
    ref[54*i0 + 18*i1 + 3*i2 + i3] = m;
  }
  int bad = 0; for (int i = 0; i < 162; i++) if (out[i] != ref[i]) bad++;
  printf("mismatches: %d\n", bad);
}
