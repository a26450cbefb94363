//! Compiled CUDA modules cached on disk.
//!
//! Needs: NVRTC (loaded at run time) for a miss. Guarantees: the image
//! NVRTC makes of `source` for `arch`, read from
//! `<cache>/cuda/<key>.ptx` when a previous compile stored it, where the
//! key is a SHA-256 over a format version, NVRTC's version, the
//! architecture and the source (so a new NVRTC or GPU never reuses a stale
//! image). The cache directory is kiln's (`$KILN_CACHE_DIR`, …, see
//! `kiln_runtime::jit`); a cache that cannot be written only costs the
//! next start a compile.

use crate::ffi::nvrtc::{Arch, Nvrtc};
use kiln_ir::Result;
use sha2::{Digest, Sha256};
use std::path::Path;

/// Bumped when the way images are made changes (options, prelude rules).
const FORMAT: &str = "kiln-cuda-1";

/// A compiled module image.
pub struct Image {
    pub bytes: Vec<u8>,
    /// Read from the cache rather than compiled.
    pub cached: bool,
}

/// The PTX of `source` for `arch` from `cache_dir`, compiling on a miss.
pub fn compile_cached(source: &str, arch: Arch, cache_dir: &Path) -> Result<Image> {
    let nvrtc = Nvrtc::global()?;
    let path = cache_dir
        .join("cuda")
        .join(format!("{}.ptx", key(source, arch, nvrtc.version())));
    if let Ok(bytes) = std::fs::read(&path) {
        if bytes.last() == Some(&0) {
            return Ok(Image {
                bytes,
                cached: true,
            });
        }
    }
    let compiled = nvrtc.compile(source, "kiln_model.cu", &arch, &[])?;
    store(&path, &compiled.image);
    Ok(Image {
        bytes: compiled.image,
        cached: false,
    })
}

fn key(source: &str, arch: Arch, version: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(FORMAT.as_bytes());
    h.update(format!("{version:?} {arch}\n").as_bytes());
    h.update(source.as_bytes());
    h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

/// Writes `bytes` to `path` through a temporary file (a concurrent reader
/// never sees half an image); failures are ignored (see the module doc).
fn store(path: &Path, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
