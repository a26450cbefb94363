//! The functional emulator's C (`emulator.c`) as a translation unit for a
//! description, and its counters.
//!
//! Needs: a [`DsaDesc`]. Guarantees: [`emulator_unit`] is a complete C
//! unit implementing the DSA API (`kiln_codegen::dsa::api`) with the
//! description's clusters, cores, LB and GB sizes — DDR, every GB and
//! every LB separate memories, DMA the only way between them (counted);
//! [`DmaCounts::read`] reads (and clears) its counters from a loaded
//! library, [`release`] frees its memories.

use kiln_dsa::DsaDesc;
use kiln_ir::Result;
use kiln_runtime::jit::Library;

const EMULATOR_C: &str = include_str!("emulator.c");

/// The emulator's C unit for `desc`.
pub fn emulator_unit(desc: &DsaDesc) -> String {
    let gb = desc.global_buffer.as_ref().map_or(0, |g| g.bytes);
    format!(
        "#define KILN_DSA_CLUSTERS {}\n#define KILN_DSA_CORES {}\n#define KILN_DSA_LB_BYTES INT64_C({})\n#define KILN_DSA_GB_BYTES INT64_C({gb})\n{}{EMULATOR_C}",
        desc.clusters,
        desc.cores_per_cluster,
        desc.local_buffer.bytes,
        kiln_codegen::dsa::api::API,
    )
}

/// DMA calls, contiguous runs (swTVM's transfers) and bytes of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfers {
    pub calls: u64,
    pub runs: u64,
    pub bytes: u64,
}

/// What the emulator counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DmaCounts {
    pub ddr_to_lb: Transfers,
    pub lb_to_ddr: Transfers,
    pub ddr_to_gb: Transfers,
    pub gb_to_lb: Transfers,
    pub lb_to_gb: Transfers,
    /// Host calls of kernels, and barriers between phases.
    pub kernel_calls: u64,
    pub barriers: u64,
}

/// Slots of `kiln_dsa_counts`: five kinds × (calls, runs, bytes), calls,
/// barriers.
const SLOTS: usize = 17;

type CountsFn = unsafe extern "C" fn(*mut i64, i32);
type ReleaseFn = unsafe extern "C" fn();

/// Frees the emulator's memories in `lib` (made again by its next run).
pub fn release(lib: &Library) {
    // SAFETY: the emulator unit defines `void kiln_dsa_release(void)`,
    // which takes the device's lock.
    unsafe {
        if let Ok(f) = lib.symbol::<ReleaseFn>("kiln_dsa_release") {
            f();
        }
    }
}

impl DmaCounts {
    /// The counters of the emulator in `lib`, cleared after reading when
    /// `clear`.
    pub fn read(lib: &Library, clear: bool) -> Result<DmaCounts> {
        let mut raw = [0i64; SLOTS];
        // SAFETY: the emulator unit defines `void kiln_dsa_counts(int64_t*, int)`
        // writing SLOTS values.
        unsafe {
            let f: CountsFn = lib.symbol("kiln_dsa_counts")?;
            f(raw.as_mut_ptr(), i32::from(clear));
        }
        let kind = |k: usize| Transfers {
            calls: raw[3 * k] as u64,
            runs: raw[3 * k + 1] as u64,
            bytes: raw[3 * k + 2] as u64,
        };
        Ok(DmaCounts {
            ddr_to_lb: kind(0),
            lb_to_ddr: kind(1),
            ddr_to_gb: kind(2),
            gb_to_lb: kind(3),
            lb_to_gb: kind(4),
            kernel_calls: raw[15] as u64,
            barriers: raw[16] as u64,
        })
    }

    /// Bytes moved between DDR and the chip (either buffer).
    pub fn ddr_bytes(&self) -> u64 {
        self.ddr_to_lb.bytes + self.lb_to_ddr.bytes + self.ddr_to_gb.bytes
    }
}

impl std::fmt::Display for DmaCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds = [
            ("DDR->LB", self.ddr_to_lb),
            ("LB->DDR", self.lb_to_ddr),
            ("DDR->GB", self.ddr_to_gb),
            ("GB->LB", self.gb_to_lb),
            ("LB->GB", self.lb_to_gb),
        ];
        for (name, t) in kinds.iter().filter(|(_, t)| t.calls > 0) {
            writeln!(
                f,
                "  {name:8} {:>10} DMA calls {:>12} transfers {:>14} bytes",
                t.calls, t.runs, t.bytes
            )?;
        }
        write!(
            f,
            "  {} kernel calls, {} barriers",
            self.kernel_calls, self.barriers
        )
    }
}
