//! Building one shared object from several C translation units and publishing it in the
//! cache without ever exposing a half-written file.
//!
//! Needs: a found compiler, flags, the sources, the cache directory and the entry's key.
//! Guarantees: each piece is compiled to an object file by its own compiler process (at most
//! `threads` at once), then one link with `-shared ... -lm` makes the library. Everything is
//! built in a private directory `<cache>/.build-<key>-<pid>-<n>/` and moved into place with
//! `rename`, which is atomic within one file system: `<cache>/<key>.so` appears complete or not
//! at all, so two processes building the same entry at once cannot corrupt it (the later
//! rename wins with identical content). The sources are kept as `<cache>/<key>/piece_<k>.c`,
//! also after a failed build, and errors name that path with the first 40 lines of the
//! compiler's stderr. If the compiler rejects `-fopenmp` (e.g. Apple clang without libomp),
//! the build is retried once without it and a one-time warning goes to stderr: the generated
//! code is correct without OpenMP, only single-threaded. The result is stored under the key of
//! the requested flags, since retrying with them would fail the same way.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use kiln_ir::{Error, Result};

use super::toolchain::{no_compiler_error, Compiler};

const STDERR_LINES_SHOWN: usize = 40;
const OPENMP_FLAG: &str = "-fopenmp";

/// Builds `pieces` into `<cache_dir>/<key>.so` and returns that path.
pub(crate) fn build_into_cache(
    compiler: &Compiler,
    flags: &[String],
    pieces: &[String],
    threads: usize,
    cache_dir: &Path,
    key: &str,
) -> Result<PathBuf> {
    std::fs::create_dir_all(cache_dir).map_err(|e| {
        Error::new(format!(
            "cannot create kiln cache directory {}: {e}",
            cache_dir.display()
        ))
    })?;
    let work = private_build_dir(cache_dir, key)?;
    let job = Job {
        compiler,
        work: &work,
        pieces: pieces.len(),
        threads,
    };
    let built = write_sources(&work, pieces).and_then(|()| job.build_with_openmp_fallback(flags));
    let library = cache_dir.join(format!("{key}.so"));
    let sources = cache_dir.join(key);
    let published = match built {
        Ok(()) => std::fs::rename(work.join("lib.so"), &library).map_err(|e| {
            Error::new(format!(
                "cannot move the library into the cache at {}: {e}",
                library.display()
            ))
        }),
        Err(failure) => Err(failure.into_error(compiler, &sources)),
    };
    keep_sources(&work, &sources, pieces.len());
    published.map(|()| library)
}

/// Why a build failed, before it is worded for the user.
enum Failure {
    NoCompiler,
    /// The compiler exists but could not be started (e.g. not executable).
    Spawn(std::io::Error),
    Io(Error),
    Compiler {
        /// The piece that failed to compile, or `None` for the link.
        piece: Option<usize>,
        stderr: String,
    },
}

impl Failure {
    fn mentions_openmp(&self) -> bool {
        let Failure::Compiler { stderr, .. } = self else {
            return false;
        };
        let lower = stderr.to_lowercase();
        ["openmp", "gomp", "omp.h"]
            .iter()
            .any(|word| lower.contains(word))
    }

    fn into_error(self, compiler: &Compiler, sources: &Path) -> Error {
        match self {
            Failure::NoCompiler => no_compiler_error(&compiler.spec),
            Failure::Spawn(e) => Error::new(format!(
                "cannot run C compiler `{}`: {e}; set $CC to a C11 compiler (gcc or clang)",
                compiler.spec
            )),
            Failure::Io(error) => error,
            Failure::Compiler { piece, stderr } => {
                let what = match piece {
                    Some(k) => format!(
                        "compiling {}",
                        sources.join(format!("piece_{k}.c")).display()
                    ),
                    None => format!("linking the pieces kept in {}", sources.display()),
                };
                let excerpt: Vec<&str> = stderr.lines().take(STDERR_LINES_SHOWN).collect();
                let more = stderr.lines().count().saturating_sub(STDERR_LINES_SHOWN);
                let tail = if more > 0 {
                    format!("\n... ({more} more lines)")
                } else {
                    String::new()
                };
                Error::new(format!(
                    "C compiler `{}` failed {what}:\n{}{tail}",
                    compiler.spec,
                    excerpt.join("\n")
                ))
            }
        }
    }
}

fn private_build_dir(cache_dir: &Path, key: &str) -> Result<PathBuf> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = cache_dir.join(format!(".build-{key}-{}-{n}", std::process::id()));
    // A directory left by a crashed process with our pid and counter holds nothing we need.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

fn write_sources(work: &Path, pieces: &[String]) -> Result<(), Failure> {
    for (k, source) in pieces.iter().enumerate() {
        let path = work.join(format!("piece_{k}.c"));
        std::fs::write(&path, source).map_err(|e| {
            Failure::Io(Error::new(format!("cannot write {}: {e}", path.display())))
        })?;
    }
    Ok(())
}

/// Leaves the sources at `<cache>/<key>/` for people to read and removes the build directory.
/// Best effort: another process may have kept the identical sources already.
fn keep_sources(work: &Path, sources: &Path, pieces: usize) {
    let kept = sibling_with_suffix(work, ".src");
    let moved = std::fs::create_dir_all(&kept).is_ok()
        && (0..pieces).all(|k| {
            let name = format!("piece_{k}.c");
            std::fs::rename(work.join(&name), kept.join(&name)).is_ok()
        });
    if moved && !sources.exists() && std::fs::rename(&kept, sources).is_ok() {
        let _ = std::fs::remove_dir_all(work);
        return;
    }
    let _ = std::fs::remove_dir_all(&kept);
    let _ = std::fs::remove_dir_all(work);
}

/// `<dir>/<name><suffix>` for `path = <dir>/<name>`: unique when `path` is.
fn sibling_with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// One build in its private directory: which compiler, how many pieces, how many at once.
struct Job<'a> {
    compiler: &'a Compiler,
    work: &'a Path,
    pieces: usize,
    threads: usize,
}

impl Job<'_> {
    fn build_with_openmp_fallback(&self, flags: &[String]) -> Result<(), Failure> {
        let first = self.build_library(flags);
        let uses_openmp = flags.iter().any(|f| f == OPENMP_FLAG);
        match first {
            Err(failure) if uses_openmp && failure.mentions_openmp() => {
                warn_once_without_openmp(&self.compiler.spec);
                let serial: Vec<String> = flags
                    .iter()
                    .filter(|f| *f != OPENMP_FLAG)
                    .cloned()
                    .collect();
                self.build_library(&serial)
            }
            other => other,
        }
    }

    fn build_library(&self, flags: &[String]) -> Result<(), Failure> {
        self.compile_objects(flags)?;
        let mut link = self.compiler.command();
        link.args(flags).args(["-shared", "-o", "lib.so"]);
        link.args((0..self.pieces).map(|k| format!("piece_{k}.o")));
        link.arg("-lm");
        run(link, self.work, None)
    }

    /// Compiles every piece to an object file, `threads` compiler processes at a time; stops
    /// starting new ones after the first failure and reports the lowest-numbered failed piece.
    fn compile_objects(&self, flags: &[String]) -> Result<(), Failure> {
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let failures: Mutex<Vec<(usize, Failure)>> = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..self.threads.clamp(1, self.pieces.max(1)) {
                scope.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= self.pieces || failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let mut command = self.compiler.command();
                    command.args(flags).arg("-c").arg(format!("piece_{k}.c"));
                    command.arg("-o").arg(format!("piece_{k}.o"));
                    if let Err(failure) = run(command, self.work, Some(k)) {
                        failed.store(true, Ordering::Relaxed);
                        if let Ok(mut list) = failures.lock() {
                            list.push((k, failure));
                        }
                    }
                });
            }
        });
        let mut failures = failures
            .into_inner()
            .unwrap_or_else(|poison| poison.into_inner());
        failures.sort_by_key(|(k, _)| *k);
        match failures.into_iter().next() {
            Some((_, failure)) => Err(failure),
            None => Ok(()),
        }
    }
}

fn warn_once_without_openmp(cc: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "kiln: warning: C compiler `{cc}` does not support -fopenmp; \
             building without it, so kernels run on one thread"
        );
    }
}

fn run(
    mut command: std::process::Command,
    work: &Path,
    piece: Option<usize>,
) -> Result<(), Failure> {
    let output = command
        .current_dir(work)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Failure::NoCompiler,
            _ => Failure::Spawn(e),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let mut stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if stderr.trim().is_empty() {
        stderr = format!("(no message; exit status {})", output.status);
    }
    Err(Failure::Compiler { piece, stderr })
}
