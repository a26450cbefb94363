//! The DSA C dialect's interface: what device and host code may call.
//!
//! Device code (one function per core and phase) sees a core as an opaque
//! pointer, DDR and GB buffers as `kiln_mem` handles (two ids in a
//! struct: it cannot be indexed or dereferenced, so the only way to
//! reach the data is a DMA call), and its local buffer through
//! `kiln_lb`. Host code (the management core) wraps the kernel's DDR
//! addresses into handles, stages buffers in GB, calls the device
//! functions per core and waits at barriers. The functional emulator
//! (`kiln-dsa-emu`) implements it; real hardware would too.

/// The declarations every DSA C unit starts with (guarded: a unit may
/// hold several kernels).
pub const API: &str = r#"
#ifndef KILN_DSA_API
#define KILN_DSA_API
#include <stdint.h>
/* A handle of a buffer in DDR or in a cluster's GB: not a pointer. */
typedef struct kiln_mem { uint32_t level; uint32_t id; } kiln_mem;
/* One core (device side) and the device (host side): opaque. */
typedef struct kiln_core kiln_core;
typedef struct kiln_dsa kiln_dsa;
/* Device side: the core's local buffer at a byte offset, and DMA between a
   box of a DDR/GB buffer (dimensions `shape`, first index `lo`, extent `ext`,
   clipped to the buffer) and a dense LB array of extents `ext`. */
unsigned char* kiln_lb(kiln_core* core, int64_t offset);
void kiln_dma_get(kiln_core* core, void* lb, kiln_mem src, int nd, const int64_t* shape,
                  const int64_t* lo, const int64_t* ext, int elem);
void kiln_dma_put(kiln_core* core, kiln_mem dst, const void* lb, int nd, const int64_t* shape,
                  const int64_t* lo, const int64_t* ext, int elem);
/* Host side. */
kiln_dsa* kiln_dsa_begin(void);
kiln_mem kiln_dsa_ddr(kiln_dsa* dev, void* data, int64_t bytes);
kiln_mem kiln_dsa_stage(kiln_dsa* dev, int64_t cluster, kiln_mem src, int64_t gb_offset, int64_t bytes);
kiln_core* kiln_dsa_core(kiln_dsa* dev, int64_t core);
void kiln_dsa_barrier(kiln_dsa* dev);
int kiln_dsa_end(kiln_dsa* dev);
#endif
"#;
