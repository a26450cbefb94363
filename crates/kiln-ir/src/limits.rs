//! The memory budget every size derived from a model is checked against
//! before anything of that size is allocated (a model file is untrusted
//! input: a declared shape of 2^50 elements must be an error, not an
//! abort).
//!
//! Needs nothing. Guarantees: [`check_bytes`] and [`check_tensor`] fail,
//! naming what and how many bytes, when a size is over the budget or does
//! not fit in 128 bits; sizes are computed without overflow. The budget is
//! process-wide: the machine's memory (Linux `MemTotal`, else unlimited)
//! until [`set_max_memory`] changes it (`kiln --max-memory`).

use crate::{DType, Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// 0: not set (the machine's memory).
static MAX_MEMORY: AtomicU64 = AtomicU64::new(0);

/// Sets the budget in bytes (0 restores the default).
pub fn set_max_memory(bytes: u64) {
    MAX_MEMORY.store(bytes, Ordering::Relaxed);
}

/// The budget in bytes.
pub fn max_memory() -> u64 {
    match MAX_MEMORY.load(Ordering::Relaxed) {
        0 => machine_memory().unwrap_or(u64::MAX),
        set => set,
    }
}

/// `MemTotal` of /proc/meminfo in bytes.
fn machine_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Fails when `bytes` (of `what`) exceed the budget.
pub fn check_bytes(what: &dyn std::fmt::Display, bytes: u128) -> Result<()> {
    let max = max_memory();
    if bytes > u128::from(max) {
        return Err(Error::new(format!(
            "{what} needs {bytes} bytes, more than the memory budget of {max} bytes (--max-memory)"
        )));
    }
    Ok(())
}

/// The bytes of a `dtype` tensor of `shape`, without overflow.
pub fn tensor_bytes(dtype: DType, shape: &[usize]) -> u128 {
    shape
        .iter()
        .try_fold(dtype.size() as u128, |acc, &d| acc.checked_mul(d as u128))
        .unwrap_or(u128::MAX)
}

/// Fails when a `dtype` tensor of `shape` (of `what`) exceeds the budget.
pub fn check_tensor(what: &dyn std::fmt::Display, dtype: DType, shape: &[usize]) -> Result<()> {
    check_bytes(what, tensor_bytes(dtype, shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_never_overflow_and_name_what_is_too_big() {
        assert_eq!(tensor_bytes(DType::F32, &[2, 3]), 24);
        assert_eq!(tensor_bytes(DType::F32, &[]), 4);
        let huge = [1 << 20, 1 << 20, 1 << 10];
        assert_eq!(tensor_bytes(DType::F32, &huge), 1u128 << 52);
        assert_eq!(
            tensor_bytes(DType::F64, &[usize::MAX, usize::MAX, 4]),
            u128::MAX
        );
        let err = check_tensor(&"input 'x'", DType::F32, &huge)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("input 'x'") && err.contains("4503599627370496 bytes"),
            "{err}"
        );
        assert!(check_tensor(&"small", DType::F32, &[1024]).is_ok());
        assert!(max_memory() > 0);
    }
}
