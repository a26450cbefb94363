//! Where CUDA's shared libraries and tools are looked for.
//!
//! Needs: nothing; reads environment variables and lists directories.
//! Guarantees: candidate lists are ordered (explicit override first, then
//! what the dynamic loader finds by soname, then fixed install places, then
//! pip wheels), hold no duplicates, and never panic on unreadable dirs; a
//! failed load names every path tried, the last loader error, and how to
//! point kiln at the library.

use kiln_ir::{Error, Result};
use libloading::Library;
use std::env;
use std::path::{Path, PathBuf};

/// Where NVRTC may be, most specific first.
pub fn nvrtc_candidates() -> Vec<PathBuf> {
    let mut out = env_path("KILN_NVRTC");
    // Plain sonames let the dynamic loader apply LD_LIBRARY_PATH and ldconfig.
    out.extend(["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"].map(PathBuf::from));
    for dir in cuda_lib_dirs() {
        out.extend(["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"].map(|n| dir.join(n)));
    }
    for site in site_packages() {
        out.push(site.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12"));
        out.push(site.join("nvidia/cu13/lib/libnvrtc.so.13"));
        out.push(site.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.13"));
    }
    dedup(out)
}

/// Where the CUDA driver (`libcuda`) may be, most specific first. The
/// driver comes with the kernel module, never with pip.
pub fn driver_candidates() -> Vec<PathBuf> {
    let mut out = env_path("KILN_CUDA_DRIVER");
    out.extend(
        [
            "libcuda.so.1",
            "libcuda.so",
            "/usr/local/nvidia/lib64/libcuda.so.1",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        ]
        .map(PathBuf::from),
    );
    dedup(out)
}

/// The `ptxas` assembler, if one is installed: `$KILN_PTXAS`, then `PATH`,
/// then the toolkit, then a pip `nvidia-cuda-nvcc` wheel.
pub fn ptxas_path() -> Option<PathBuf> {
    let mut candidates = env_path("KILN_PTXAS");
    if let Some(path) = env::var_os("PATH") {
        candidates.extend(env::split_paths(&path).map(|dir| dir.join("ptxas")));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/bin/ptxas"));
    candidates.extend(site_packages().map(|s| s.join("nvidia/cuda_nvcc/bin/ptxas")));
    candidates.into_iter().find(|p| p.is_file())
}

/// Loads NVRTC from the first candidate that opens.
pub fn load_nvrtc() -> Result<(Library, PathBuf)> {
    load_first("NVRTC (libnvrtc.so)", &nvrtc_candidates()).map_err(|e| {
        Error::unavailable(format!(
            "{e}; set KILN_NVRTC=/path/to/libnvrtc.so to point kiln at it \
             (`pip install nvidia-cuda-nvrtc-cu12` provides one)"
        ))
    })
}

/// Loads the CUDA driver from the first candidate that opens.
pub fn load_driver() -> Result<(Library, PathBuf)> {
    load_first("CUDA driver (libcuda.so.1)", &driver_candidates()).map_err(|e| {
        Error::unavailable(format!(
            "{e}; set KILN_CUDA_DRIVER=/path/to/libcuda.so.1 to point kiln at it"
        ))
    })
}

/// Opens the first candidate that loads. The error reads
/// `no <what> found: tried <each path (why)>; last loader error: <e>`.
pub fn load_first(what: &str, candidates: &[PathBuf]) -> Result<(Library, PathBuf)> {
    let mut tried = Vec::new();
    let mut last_error = String::from("no candidates");
    for path in candidates {
        // A path with a directory that is not there is skipped without
        // asking the loader, whose message would only say the same.
        if path.components().count() > 1 && !path.exists() {
            tried.push(format!("{} (not present)", path.display()));
            continue;
        }
        // SAFETY: loading runs the library's initialisers; these are
        // CUDA's own libraries, found in the places CUDA installs them.
        match unsafe { Library::new(path.as_os_str()) } {
            Ok(lib) => return Ok((lib, path.clone())),
            Err(e) => {
                tried.push(format!("{} (failed)", path.display()));
                last_error = error_chain(&e);
            }
        }
    }
    Err(Error::unavailable(format!(
        "no {what} found: tried {}; last loader error: {last_error}",
        tried.join(", ")
    )))
}

/// An error with its sources: libloading's own message is just "dlopen
/// failed", and the reason (dlerror's text) is its source.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        text = format!("{text}: {inner}");
        source = inner.source();
    }
    text
}

/// `$var` as a one-element list when set and non-empty.
fn env_path(var: &str) -> Vec<PathBuf> {
    env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .into_iter()
        .collect()
}

/// CUDA toolkit library directories: `$CUDA_HOME`, `$CUDA_PATH`, then the
/// default install prefix.
fn cuda_lib_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .flat_map(|v| env_path(v))
        .map(|root| root.join("lib64"))
        .collect();
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    dirs
}

/// Python package directories pip may have put NVIDIA wheels in.
fn site_packages() -> impl Iterator<Item = PathBuf> {
    let mut dirs = Vec::new();
    if let Some(venv) = env_path("VIRTUAL_ENV").pop() {
        dirs.extend(python_dirs(&venv.join("lib"), "site-packages"));
    }
    dirs.extend(python_dirs(
        Path::new("/opt/torch/.venv/lib"),
        "site-packages",
    ));
    dirs.extend(python_dirs(Path::new("/usr/local/lib"), "dist-packages"));
    dirs.push(PathBuf::from("/usr/lib/python3/dist-packages"));
    dirs.into_iter().filter(|d| d.is_dir())
}

/// `<base>/python3*/<leaf>`, sorted so the search order is stable.
fn python_dirs(base: &Path, leaf: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join(leaf))
        .collect();
    dirs.sort();
    dirs
}

/// Drops repeats (e.g. `$CUDA_HOME` = /usr/local/cuda), keeping the first.
fn dedup(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::with_capacity(paths.len());
    for p in paths {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_start_with_sonames_and_have_no_repeats() {
        for list in [nvrtc_candidates(), driver_candidates()] {
            assert!(!list.is_empty());
            let mut sorted = list.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), list.len());
        }
        assert!(driver_candidates().contains(&PathBuf::from("libcuda.so.1")));
        assert!(nvrtc_candidates().contains(&PathBuf::from("libnvrtc.so.12")));
    }

    #[test]
    fn ptxas_lookup_does_not_panic() {
        if let Some(p) = ptxas_path() {
            assert!(p.is_file());
        }
    }

    #[test]
    fn failed_load_lists_every_path() {
        let paths = [
            PathBuf::from("/nonexistent/dir/libx.so"),
            PathBuf::from("libkiln-no-such-library.so.7"),
        ];
        let Err(e) = load_first("test library", &paths) else {
            panic!("a missing library loaded");
        };
        let msg = e.to_string();
        assert_eq!(e.kind(), kiln_ir::ErrorKind::Unavailable);
        assert!(msg.starts_with("no test library found"), "{msg}");
        assert!(
            msg.contains("/nonexistent/dir/libx.so (not present)"),
            "{msg}"
        );
        assert!(
            msg.contains("libkiln-no-such-library.so.7 (failed)"),
            "{msg}"
        );
        assert!(msg.contains("last loader error"), "{msg}");
    }
}
