//! What every generated CUDA file starts with: the fixed-width integer
//! types and limits NVRTC does not provide (it has no C library headers),
//! then the same scalar helpers the C dialect uses, as device functions.

/// The CUDA prelude (see the module doc).
pub fn prelude() -> String {
    let mut s = String::from(TYPES);
    s.push_str(crate::c::INDEX_HELPERS);
    s.push_str(crate::scalar_c::PRELUDE);
    s.push_str(SHUFFLES);
    s.push_str(TENSOR_CORES);
    s
}

/// The sm_80 helpers of the gemm template (`cuda/gemm.rs`): rounding an
/// f32 to TF32 (to nearest, ties away), one warp-wide `m16n8k8`
/// multiply-add of TF32 fragments into f32 accumulators, and asynchronous
/// 4- and 16-byte copies from global to shared memory (zero-filled when
/// off),
/// committed and awaited in groups. The instructions exist from sm_80 on;
/// code for older targets never calls them.
const TENSOR_CORES: &str = r#"#if __CUDA_ARCH__ >= 800
KILN_INLINE uint32_t kiln_tf32(float x) { uint32_t r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r; }
KILN_INLINE void kiln_mma_tf32(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
KILN_INLINE void kiln_cp_async4(float* shared, const float* global, bool on) {
  uint32_t s;
  asm("{ .reg .u64 p; cvta.to.shared.u64 p, %1; cvt.u32.u64 %0, p; }" : "=r"(s) : "l"(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(s), "l"(global), "r"(on ? 4 : 0) : "memory");
}
/* 16 bytes (aligned at both ends), of which the first 4n come from global
   memory (n clamped to 0..4), the rest zero */
KILN_INLINE void kiln_cp_async16(float* shared, const float* global, int64_t n) {
  uint32_t s;
  asm("{ .reg .u64 p; cvta.to.shared.u64 p, %1; cvt.u32.u64 %0, p; }" : "=r"(s) : "l"(shared));
  const int bytes = n <= 0 ? 0 : n >= 4 ? 16 : (int)(4 * n);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(s), "l"(global), "r"(bytes) : "memory");
}
/* the copies issued since the last commit form a group */
KILN_INLINE void kiln_cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* every group but the newest N has landed (in this thread's view; a barrier
   after it makes them visible to the block) */
template <int N> KILN_INLINE void kiln_cp_wait(void) { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
#endif
"#;

/// `kiln_shfl_down(v, s)`: lane `+ s`'s value for every element type (the
/// hardware shuffles 32- and 64-bit words; narrower types go through int).
const SHUFFLES: &str = r#"#define KILN_SHFL(T) KILN_INLINE T kiln_shfl_down(T v, int s) { return __shfl_down_sync(0xffffffffu, v, s); }
#define KILN_SHFL_NARROW(T) KILN_INLINE T kiln_shfl_down(T v, int s) { return (T)__shfl_down_sync(0xffffffffu, (int)v, s); }
KILN_SHFL(float) KILN_SHFL(double) KILN_SHFL(int32_t) KILN_SHFL(uint32_t) KILN_SHFL(int64_t) KILN_SHFL(uint64_t)
KILN_SHFL_NARROW(int8_t) KILN_SHFL_NARROW(uint8_t) KILN_SHFL_NARROW(int16_t) KILN_SHFL_NARROW(uint16_t)
/* A barrier of the `n` blocks sharing a row (all resident: a cooperative
   launch). Each block's thread 0 reads the generation, then arrives; the
   last to arrive resets the count and starts the next generation, which
   the others wait for. Memory written before it is visible after it. */
KILN_INLINE void kiln_row_barrier(unsigned int* count, unsigned int* gen, unsigned int n) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned int* g = gen;
    unsigned int seen = *g;
    __threadfence();
    if (atomicAdd(count, 1u) == n - 1) {
      *count = 0;
      __threadfence();
      *g = seen + 1;
    } else {
      while (*g == seen) { }
    }
    __threadfence();
  }
  __syncthreads();
}
"#;

const TYPES: &str = r#"/* the prelude's helpers are static: most files use only some */
#pragma nv_diag_suppress 177
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define INT8_MIN (-128)
#define INT8_MAX 127
#define INT16_MIN (-32768)
#define INT16_MAX 32767
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define INT64_C(c) c##LL
#define UINT64_C(c) c##ULL
#define INT64_MAX INT64_C(9223372036854775807)
#define INT64_MIN (-INT64_MAX - 1)
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295u
#define UINT64_MAX UINT64_C(18446744073709551615)
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)
#define KILN_INLINE static __device__ __forceinline__
#define KILN_UNROLL _Pragma("unroll")
#define KILN_ROLLED
#define KILN_OMP(x)
/* each thread has its own error flag; the kernel publishes it at the end */
#define KILN_SET_ERR(e) (*(e) = 1)
"#;
