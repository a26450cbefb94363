//! NVRTC, CUDA's run-time C++ compiler, bound at run time.
//!
//! Needs: a `libnvrtc.so` that `find` can locate (toolkit or pip wheel).
//! Guarantees: every symbol is resolved once at load; every NVRTC status
//! is checked; a program handle is destroyed on every path; bad input
//! (interior NULs, compile errors) gives an `Err`, never a panic. `Nvrtc`
//! is `Send + Sync`: NVRTC's calls are thread-safe across programs, and
//! each `compile` uses a program of its own.

use super::{c_string, find, fn_table};
use kiln_ir::{bail, Error, Result};
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `nvrtcResult`: 0 is success.
type NvrtcResult = c_int;
/// `nvrtcProgram`: an opaque handle.
type Program = *mut c_void;

fn_table! {
    struct Api {
        fn nvrtcVersion(major: *mut c_int, minor: *mut c_int) -> NvrtcResult;
        fn nvrtcGetErrorString(result: NvrtcResult) -> *const c_char;
        fn nvrtcCreateProgram(
            prog: *mut Program,
            src: *const c_char,
            name: *const c_char,
            num_headers: c_int,
            headers: *const *const c_char,
            include_names: *const *const c_char,
        ) -> NvrtcResult;
        fn nvrtcCompileProgram(prog: Program, num_options: c_int, options: *const *const c_char) -> NvrtcResult;
        fn nvrtcGetProgramLogSize(prog: Program, size: *mut usize) -> NvrtcResult;
        fn nvrtcGetProgramLog(prog: Program, log: *mut c_char) -> NvrtcResult;
        fn nvrtcGetPTXSize(prog: Program, size: *mut usize) -> NvrtcResult;
        fn nvrtcGetPTX(prog: Program, ptx: *mut c_char) -> NvrtcResult;
        fn nvrtcGetCUBINSize(prog: Program, size: *mut usize) -> NvrtcResult;
        fn nvrtcGetCUBIN(prog: Program, cubin: *mut c_char) -> NvrtcResult;
        fn nvrtcDestroyProgram(prog: *mut Program) -> NvrtcResult;
    }
}

/// What to compile for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// A virtual architecture: the output is PTX (90 -> `compute_90`).
    Compute(u32),
    /// A real architecture: the output is a cubin (90 -> `sm_90`).
    Sm(u32),
}

impl Arch {
    /// Whether this arch yields PTX (else a cubin).
    pub fn is_ptx(&self) -> bool {
        matches!(self, Arch::Compute(_))
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arch::Compute(n) => write!(f, "compute_{n}"),
            Arch::Sm(n) => write!(f, "sm_{n}"),
        }
    }
}

/// One compiled program.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// PTX text ending in a NUL (as the driver wants it), or cubin bytes.
    pub image: Vec<u8>,
    pub is_ptx: bool,
    /// NVRTC's log (warnings), possibly empty.
    pub log: String,
}

/// A loaded NVRTC.
pub struct Nvrtc {
    api: Api,
    version: (i32, i32),
    path: PathBuf,
    // Dropped last (fields drop in order): `api` points into it.
    _lib: Library,
}

impl Nvrtc {
    /// Finds, loads and binds NVRTC.
    pub fn load() -> Result<Nvrtc> {
        let (lib, path) = find::load_nvrtc()?;
        // SAFETY: `Api`'s prototypes are NVRTC's (nvrtc.h), and `lib` is
        // stored beside the table, so it outlives every call through it.
        let api = unsafe { Api::resolve(&lib) }
            .map_err(|e| Error::new(format!("{} is not a usable NVRTC: {e}", path.display())))?;
        let mut nvrtc = Nvrtc {
            api,
            version: (0, 0),
            path,
            _lib: lib,
        };
        nvrtc.version = nvrtc.query_version()?;
        Ok(nvrtc)
    }

    /// The process-wide NVRTC, loaded on first use. A failed load is
    /// remembered too (as its message), so it is not retried per call.
    pub fn global() -> Result<&'static Nvrtc> {
        static GLOBAL: OnceLock<std::result::Result<Nvrtc, String>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| Nvrtc::load().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::new(e.clone()))
    }

    /// NVRTC's (major, minor) version, e.g. (12, 8).
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The library file this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Compiles CUDA C++ `source` (named `name` in diagnostics) for `arch`
    /// with `-std=c++17` and `extra_options`. A compile error is an `Err`
    /// reading `NVRTC failed to compile <name> for <arch>: <log>`.
    pub fn compile(
        &self,
        source: &str,
        name: &str,
        arch: &Arch,
        extra_options: &[&str],
    ) -> Result<Compiled> {
        let src = c_string(source, "kernel source")?;
        let cname = c_string(name, "program name")?;
        let mut options = vec![
            c_string(&format!("--gpu-architecture={arch}"), "option")?,
            c_string("-std=c++17", "option")?,
        ];
        for opt in extra_options {
            options.push(c_string(opt, "NVRTC option")?);
        }
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let Ok(num_options) = c_int::try_from(option_ptrs.len()) else {
            bail!("too many NVRTC options ({})", option_ptrs.len());
        };

        let prog = self.create_program(&src, &cname)?;
        // SAFETY: `prog` is live; the option strings outlive the call.
        let rc =
            unsafe { (self.api.nvrtcCompileProgram)(prog.0, num_options, option_ptrs.as_ptr()) };
        let log = self.log(&prog)?;
        if rc != 0 {
            let detail = if log.trim().is_empty() {
                self.error_string(rc)
            } else {
                log
            };
            bail!("NVRTC failed to compile {name} for {arch}: {detail}");
        }
        let image = if arch.is_ptx() {
            self.ptx(&prog)?
        } else {
            self.cubin(&prog)?
        };
        Ok(Compiled {
            image,
            is_ptx: arch.is_ptx(),
            log,
        })
    }

    fn query_version(&self) -> Result<(i32, i32)> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        let rc = unsafe { (self.api.nvrtcVersion)(&mut major, &mut minor) };
        self.check(rc, "nvrtcVersion")?;
        Ok((major, minor))
    }

    fn create_program<'a>(&'a self, src: &CStr, name: &CStr) -> Result<ProgramGuard<'a>> {
        let mut handle: Program = std::ptr::null_mut();
        // SAFETY: valid out-pointer and C strings; no headers (null lists
        // with a count of 0 are allowed).
        let rc = unsafe {
            (self.api.nvrtcCreateProgram)(
                &mut handle,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        self.check(rc, "nvrtcCreateProgram")?;
        Ok(ProgramGuard(handle, self))
    }

    fn log(&self, prog: &ProgramGuard) -> Result<String> {
        let bytes = self.read_sized(
            prog,
            self.api.nvrtcGetProgramLogSize,
            self.api.nvrtcGetProgramLog,
            "program log",
        )?;
        let text = String::from_utf8_lossy(&bytes);
        Ok(text.trim_end_matches('\0').to_string())
    }

    fn ptx(&self, prog: &ProgramGuard) -> Result<Vec<u8>> {
        let mut ptx =
            self.read_sized(prog, self.api.nvrtcGetPTXSize, self.api.nvrtcGetPTX, "PTX")?;
        // The driver reads PTX up to a NUL; NVRTC includes one, but make sure.
        if ptx.last() != Some(&0) {
            ptx.push(0);
        }
        Ok(ptx)
    }

    fn cubin(&self, prog: &ProgramGuard) -> Result<Vec<u8>> {
        self.read_sized(
            prog,
            self.api.nvrtcGetCUBINSize,
            self.api.nvrtcGetCUBIN,
            "CUBIN",
        )
    }

    /// Reads one of NVRTC's size-then-fill outputs.
    fn read_sized(
        &self,
        prog: &ProgramGuard,
        size_fn: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
        fill_fn: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
        what: &str,
    ) -> Result<Vec<u8>> {
        let mut size = 0usize;
        // SAFETY: live program, valid out-pointer.
        let rc = unsafe { size_fn(prog.0, &mut size) };
        self.check(rc, &format!("nvrtcGet{what}Size"))?;
        let mut buf = vec![0u8; size];
        if size > 0 {
            // SAFETY: NVRTC writes exactly `size` bytes, which `buf` holds.
            let rc = unsafe { fill_fn(prog.0, buf.as_mut_ptr().cast()) };
            self.check(rc, &format!("nvrtcGet{what}"))?;
        }
        Ok(buf)
    }

    fn check(&self, rc: NvrtcResult, call: &str) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        bail!("NVRTC error {} ({rc}) in {call}", self.error_string(rc))
    }

    fn error_string(&self, rc: NvrtcResult) -> String {
        // SAFETY: returns a static string (or null for unknown codes).
        let ptr = unsafe { (self.api.nvrtcGetErrorString)(rc) };
        if ptr.is_null() {
            return format!("NVRTC_ERROR_{rc}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Destroys its program when dropped, on success and error paths alike.
struct ProgramGuard<'a>(Program, &'a Nvrtc);

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from nvrtcCreateProgram and is destroyed
        // once; a failure here cannot be reported from drop and leaks at most.
        unsafe { (self.1.api.nvrtcDestroyProgram)(&mut self.0) };
    }
}
