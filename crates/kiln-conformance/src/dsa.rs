//! The DSA backend in the conformance harness: node tests compiled to DSA
//! C and run by the functional emulator (`kiln-dsa-emu`), counting the
//! nodes compiled and interpreted (with why) and the DMA traffic.

use crate::cuda::optimized;
use crate::Backend;
use kiln_dsa::DsaDesc;
use kiln_dsa_emu::{DsaModel, DsaOptions};
use kiln_ir::{Result, Tensor};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Node tests on a DSA preset through the emulator.
pub struct Dsa {
    pub desc: DsaDesc,
    pub name: String,
    /// Primitive nodes run by DSA kernels (fused or not).
    pub compiled: AtomicUsize,
    pub interpreted: Mutex<Vec<(String, String)>>,
    /// Bytes moved between DDR and the chip, over all runs.
    pub ddr_bytes: AtomicU64,
}

impl Dsa {
    pub fn new(desc: DsaDesc) -> Dsa {
        Dsa {
            name: format!("dsa:{}", desc.name),
            desc,
            compiled: AtomicUsize::new(0),
            interpreted: Mutex::new(Vec::new()),
            ddr_bytes: AtomicU64::new(0),
        }
    }
}

impl Backend for Dsa {
    fn name(&self) -> &str {
        &self.name
    }
    fn run(&self, model: &Path, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let g = optimized(model, inputs)?;
        let opts = DsaOptions {
            threads: 1,
            ..DsaOptions::default()
        };
        let m = DsaModel::compile(&g, &self.desc, &opts)?;
        let report = &m.model.report;
        self.compiled
            .fetch_add(report.compiled_nodes, Ordering::Relaxed);
        if let Ok(mut v) = self.interpreted.lock() {
            v.extend(report.interpreted.iter().cloned());
        }
        let (out, counts) = m.run(inputs)?;
        self.ddr_bytes
            .fetch_add(counts.ddr_bytes(), Ordering::Relaxed);
        Ok(out)
    }
}
