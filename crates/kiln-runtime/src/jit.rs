//! JIT compiler driver: C sources -> one shared library, cached on disk by content hash,
//! loaded with `dlopen` (DESIGN.md layer 8, "JIT loader with an on-disk cache").
//!
//! Needs: complete C translation units ("pieces"; a symbol may be defined in one and used in
//! another) and a [`CompilerConfig`]. Guarantees: the pieces are compiled in parallel into one
//! shared object (see `build.rs`), or, when the same compiler, flags and sources were built
//! before, the cached object is loaded without running any process.
//!
//! Cache key: sha256 over a format version, the `$CC` string, the compiler's identity read
//! from the file system (resolved path, size, modification time of the binary; see
//! `toolchain.rs`), the flags and every source (each length-prefixed, so no two different
//! inputs hash the same text). Keying on file metadata instead of `cc --version` keeps a cache
//! hit free of process spawns (a hit costs a `$PATH` lookup, hashing, and `dlopen`), while a
//! compiler upgrade, which rewrites the binary, still invalidates the entries.
//! Layout: `<cache_dir>/<key>.so` and the sources beside it in `<cache_dir>/<key>/piece_<k>.c`.
//! A cached object that fails to load (e.g. truncated by a full disk) is rebuilt. After a
//! build, the least recently used entries are removed while the cache is over its budget
//! (`cache_limit`: `$KILN_CACHE_MAX_MB`, 4 GiB by default).

mod build;
mod toolchain;

use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln_ir::{bail, Error, Result};
use sha2::{Digest, Sha256};

pub use toolchain::compiler_version;
use toolchain::Compiler;

/// Bumped when the build recipe changes in a way that makes old cache entries wrong.
const CACHE_FORMAT: &str = "kiln-jit-1";

/// Which compiler to run, how, and where to keep what it builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompilerConfig {
    /// The compiler command: `$CC`, or `"cc"`. May carry leading arguments (`"clang -m64"`).
    pub cc: String,
    /// Flags for compiling and linking; see [`CompilerConfig::default_flags`].
    pub flags: Vec<String>,
    /// Where built libraries are cached.
    pub cache_dir: PathBuf,
}

impl CompilerConfig {
    /// `$CC` (default `cc`), the default flags for `$KILN_MARCH` (default `native`), and the
    /// cache directory `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`,
    /// else `<tmp>/kiln-cache`.
    pub fn from_env() -> Self {
        let march = env_nonempty("KILN_MARCH").unwrap_or_else(|| "native".to_string());
        CompilerConfig {
            cc: env_nonempty("CC").unwrap_or_else(|| "cc".to_string()),
            flags: Self::default_flags(&march),
            cache_dir: default_cache_dir(),
        }
    }

    /// `-O3 -march=<march> -fPIC -fopenmp -ffp-contract=fast -fno-trapping-math -fno-math-errno -std=c11`.
    ///
    /// `-fno-trapping-math`: kiln never reads floating-point exception
    /// flags, and without it GCC keeps the selects of `kiln_expf`/`erff`/
    /// `tanhf` (clamps, small-argument branches) as branches on AVX2
    /// targets, where it has no masked vector operations to if-convert
    /// them: every loop calling them stayed scalar (BERT's GELU 3.5x
    /// slower on a Zen 3 than vectorized). Results do not change.
    ///
    /// `-fno-math-errno`: kiln never reads `errno` either, and without it
    /// `sqrtf` is a library call that may set it, which GCC will neither
    /// vectorize nor move out of a loop (a LayerNorm's `1/sqrt(var + eps)`
    /// recomputed per element of the matrix product it feeds). Results do
    /// not change: the instruction is the correctly rounded square root.
    pub fn default_flags(march: &str) -> Vec<String> {
        let march = format!("-march={march}");
        [
            "-O3",
            &march,
            "-fPIC",
            "-fopenmp",
            "-ffp-contract=fast",
            "-fno-trapping-math",
            "-fno-math-errno",
            "-std=c11",
        ]
        .map(str::to_string)
        .to_vec()
    }
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = env_nonempty("KILN_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = env_nonempty("XDG_CACHE_HOME") {
        return Path::new(&xdg).join("kiln");
    }
    if let Some(home) = env_nonempty("HOME") {
        return Path::new(&home).join(".cache").join("kiln");
    }
    std::env::temp_dir().join("kiln-cache")
}

/// A loaded shared library built by [`compile`].
///
/// Dropping it does not unload the code: OpenMP's worker threads (libgomp, loaded as a
/// dependency) outlive every call into the library and would crash if `dlclose` unmapped
/// them. A model's library is loaded once per process, so keeping it mapped costs little.
pub struct Library {
    library: std::mem::ManuallyDrop<libloading::Library>,
    path: PathBuf,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("path", &self.path).finish()
    }
}

impl Library {
    fn open(path: &Path) -> Result<Self> {
        // SAFETY: the file is a library kiln built from generated C; its initialisers are the
        // compiler's and the C runtime's own.
        let library = unsafe { libloading::Library::new(path) }
            .map_err(|e| Error::new(format!("cannot load {}: {e}", path.display())))?;
        Ok(Library {
            library: std::mem::ManuallyDrop::new(library),
            path: path.to_path_buf(),
        })
    }

    /// The address of the exported symbol `name`, as a value of type `T`.
    ///
    /// # Safety
    /// `T` must be the symbol's true type (for a function, an `unsafe extern "C" fn(..)` with
    /// the C signature), and the value must not be used after this `Library` is dropped.
    pub unsafe fn symbol<T: Copy>(&self, name: &str) -> Result<T> {
        // SAFETY: forwarded to the caller as this function's contract.
        let symbol = unsafe { self.library.get::<T>(name) }.map_err(|e| {
            Error::new(format!(
                "symbol `{name}` not found in {}: {e}",
                self.path.display()
            ))
        })?;
        Ok(*symbol)
    }

    /// Where the library lies in the cache.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What [`compile`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompileReport {
    /// Loaded from the cache without running the compiler.
    pub cached: bool,
    /// Wall-clock seconds of the whole call, loading included.
    pub seconds: f64,
    /// Number of translation units.
    pub pieces: usize,
}

/// Compiles the translation units `pieces` (each a complete C source file; symbols may be
/// referenced across pieces) in parallel into one shared object, or loads it from the cache
/// when the same compiler, flags and sources were built before. `threads` bounds the number
/// of compiler processes running at once (0 counts as 1).
pub fn compile(
    config: &CompilerConfig,
    pieces: &[String],
    threads: usize,
) -> Result<(Library, CompileReport)> {
    let start = Instant::now();
    if pieces.is_empty() {
        bail!("nothing to compile: no C sources given");
    }
    let compiler = Compiler::find(&config.cc)?;
    let key = cache_key(&compiler, &config.flags, pieces);
    let cached_path = config.cache_dir.join(format!("{key}.so"));
    let report = |cached| CompileReport {
        cached,
        seconds: start.elapsed().as_secs_f64(),
        pieces: pieces.len(),
    };
    if cached_path.is_file() {
        if let Ok(library) = Library::open(&cached_path) {
            crate::cache_limit::mark_used(&cached_path);
            return Ok((library, report(true)));
        }
    }
    let path = build::build_into_cache(
        &compiler,
        &config.flags,
        pieces,
        threads,
        &config.cache_dir,
        &key,
    )?;
    crate::cache_limit::enforce(&config.cache_dir, &key);
    let library = Library::open(&path)?;
    Ok((library, report(false)))
}

fn cache_key(compiler: &Compiler, flags: &[String], pieces: &[String]) -> String {
    let mut hasher = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(CACHE_FORMAT.as_bytes());
    field(compiler.identity().as_bytes());
    field(&(flags.len() as u64).to_le_bytes());
    flags.iter().for_each(|flag| field(flag.as_bytes()));
    field(&(pieces.len() as u64).to_le_bytes());
    pieces.iter().for_each(|piece| field(piece.as_bytes()));
    hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
