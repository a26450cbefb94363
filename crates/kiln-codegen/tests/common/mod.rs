//! Helpers shared by the tests that compile generated C.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// Compiles `source` into `exe` (linking libm), failing the test with the compiler's messages.
pub fn compile<S: AsRef<OsStr> + std::fmt::Debug>(
    cc: &str,
    flags: &[S],
    source: &Path,
    exe: &Path,
) {
    let out = Command::new(cc)
        .args(flags)
        .arg(source)
        .arg("-o")
        .arg(exe)
        .arg("-lm")
        .output()
        .expect("run C compiler");
    assert!(
        out.status.success(),
        "{cc} {flags:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
