//! The CUDA driver API (`libcuda`), bound at run time.
//!
//! Needs: an NVIDIA driver's `libcuda.so.1` that `find` can locate.
//! Guarantees: every symbol is resolved once at load (a driver too old to
//! have one fails the load, not a later call); `check` turns a non-zero
//! `CUresult` into `CUDA error CUDA_ERROR_X (code): <text> in <call>`.
//! The raw table is crate-private: `device`, `memory` and `module` are the
//! owning wrappers that use it.

use super::{find, fn_table};
use kiln_ir::{bail, Error, Result};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::{Path, PathBuf};

pub type CUresult = c_int;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;

/// `CUdevice_attribute` numbers (cuda.h) for `Gpu::attribute`.
pub mod attr {
    pub const MAX_THREADS_PER_BLOCK: i32 = 1;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: i32 = 8;
    pub const WARP_SIZE: i32 = 10;
    pub const MAX_REGISTERS_PER_BLOCK: i32 = 12;
    pub const CLOCK_RATE: i32 = 13;
    pub const MULTIPROCESSOR_COUNT: i32 = 16;
    pub const MEMORY_CLOCK_RATE: i32 = 36;
    pub const GLOBAL_MEMORY_BUS_WIDTH: i32 = 37;
    pub const L2_CACHE_SIZE: i32 = 38;
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    pub const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
}

/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`: needed before a
/// launch with more than 48 KiB of dynamic shared memory.
pub const FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
/// `CUDA_ERROR_NO_DEVICE`.
pub const ERROR_NO_DEVICE: CUresult = 100;

fn_table! {
    // A binding table: not every entry has a caller in this crate yet, but
    // all are resolved up front so a missing one fails at load.
    #[allow(dead_code)]
    pub(crate) struct Api {
        fn cuInit(flags: c_uint) -> CUresult;
        fn cuDriverGetVersion(version: *mut c_int) -> CUresult;
        fn cuDeviceGetCount(count: *mut c_int) -> CUresult;
        fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult;
        fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult;
        fn cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, dev: CUdevice) -> CUresult;
        fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult;
        fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> CUresult;
        fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult;
        fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult;
        fn cuCtxSynchronize() -> CUresult;
        fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CUresult;
        fn cuStreamDestroy_v2(stream: CUstream) -> CUresult;
        fn cuStreamSynchronize(stream: CUstream) -> CUresult;
        fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CUresult;
        fn cuModuleUnload(module: CUmodule) -> CUresult;
        fn cuModuleGetFunction(func: *mut CUfunction, module: CUmodule, name: *const c_char) -> CUresult;
        fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize) -> CUresult;
        fn cuMemFree_v2(ptr: CUdeviceptr) -> CUresult;
        fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream) -> CUresult;
        fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream) -> CUresult;
        fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream) -> CUresult;
        fn cuMemsetD8Async(dst: CUdeviceptr, value: u8, count: usize, stream: CUstream) -> CUresult;
        // (function, grid x/y/z, block x/y/z, shared bytes, stream, params, extra)
        fn cuLaunchKernel(func: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) -> CUresult;
        // The same without `extra`; every block resident at once, or an error.
        fn cuLaunchCooperativeKernel(func: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void) -> CUresult;
        fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CUresult;
        fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult;
        fn cuEventSynchronize(event: CUevent) -> CUresult;
        fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult;
        fn cuEventDestroy_v2(event: CUevent) -> CUresult;
        fn cuGetErrorName(error: CUresult, text: *mut *const c_char) -> CUresult;
        fn cuGetErrorString(error: CUresult, text: *mut *const c_char) -> CUresult;
        fn cuFuncSetAttribute(func: CUfunction, attrib: c_int, value: c_int) -> CUresult;
    }
}

/// Calls a driver function through `driver`'s table and checks its status:
/// `unsafe { cu!(driver, cuMemAlloc_v2(&mut ptr, n)) }?`. The caller's
/// `unsafe` block vouches for the arguments.
macro_rules! cu {
    ($driver:expr, $name:ident($($arg:expr),* $(,)?)) => {
        $driver.check(($driver.api.$name)($($arg),*), stringify!($name))
    };
}
pub(crate) use cu;

/// A loaded CUDA driver.
pub struct Driver {
    pub(crate) api: Api,
    path: PathBuf,
    // Dropped last (fields drop in order): `api` points into it.
    _lib: Library,
}

impl Driver {
    /// Finds, loads and binds the driver (does not call `cuInit`).
    pub fn load() -> Result<Driver> {
        let (lib, path) = find::load_driver()?;
        // SAFETY: `Api`'s prototypes are cuda.h's, and `lib` is stored
        // beside the table, so it outlives every call through it.
        let api = unsafe { Api::resolve(&lib) }.map_err(|e| {
            Error::new(format!(
                "{} is not a usable CUDA driver: {e}",
                path.display()
            ))
        })?;
        Ok(Driver {
            api,
            path,
            _lib: lib,
        })
    }

    /// The library file this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The CUDA version the driver supports, as 1000 * major + 10 * minor.
    pub fn version(&self) -> Result<i32> {
        let mut v = 0;
        // SAFETY: valid out-pointer.
        unsafe { cu!(self, cuDriverGetVersion(&mut v)) }?;
        Ok(v)
    }

    /// `Ok` for `CUDA_SUCCESS`, else `CUDA error NAME (code): text in call`.
    pub fn check(&self, rc: CUresult, call: &str) -> Result<()> {
        if rc == 0 {
            return Ok(());
        }
        let name = self.describe(self.api.cuGetErrorName, rc);
        let text = self.describe(self.api.cuGetErrorString, rc);
        bail!(
            "CUDA error {} ({rc}): {} in {call}",
            name.unwrap_or_else(|| "CUDA_ERROR_UNKNOWN_CODE".into()),
            text.unwrap_or_else(|| "unrecognised error code".into())
        )
    }

    fn describe(
        &self,
        f: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult,
        rc: CUresult,
    ) -> Option<String> {
        let mut ptr: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; works before cuInit.
        let status = unsafe { f(rc, &mut ptr) };
        if status != 0 || ptr.is_null() {
            return None;
        }
        // SAFETY: the driver returns a static NUL-terminated string.
        Some(
            unsafe { CStr::from_ptr(ptr) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}
