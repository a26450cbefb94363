//! Loaded GPU code: modules (from PTX or cubin), their kernels, and
//! kernel launches.
//!
//! Needs: an open `Gpu` and an image from NVRTC. Guarantees: the image is
//! checked by `image::check` before the driver sees it (the driver takes no
//! length); a `Module` unloads on drop, after the last `Function` taken
//! from it is gone (each `Function` holds its module).

use super::device::{Context, Gpu};
use super::driver::{cu, CUfunction, CUmodule, FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES};
use super::{c_string, image};
use kiln_ir::{bail, Error, Result};
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// Dynamic shared memory above this needs the function's opt-in attribute.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// A loaded module, unloaded when it and its functions are dropped.
#[derive(Clone)]
pub struct Module {
    inner: Arc<LoadedModule>,
}

/// A kernel in a module; keeps the module loaded while it lives.
#[derive(Clone)]
pub struct Function {
    raw: CUfunction,
    name: String,
    _module: Arc<LoadedModule>,
}

// SAFETY: a CUfunction is an immutable handle into its module, usable from
// any thread once the module's context is current (launch ensures that);
// the module it points into is kept alive by `_module`.
unsafe impl Send for Function {}
// SAFETY: as for Send; `Function` is immutable after creation.
unsafe impl Sync for Function {}

struct LoadedModule {
    raw: CUmodule,
    ctx: Arc<Context>,
}

// SAFETY: module calls are thread-safe in the driver; the context is made
// current before each (`function`, drop).
unsafe impl Send for LoadedModule {}
// SAFETY: as for Send; `LoadedModule` is immutable after creation.
unsafe impl Sync for LoadedModule {}

impl Gpu {
    /// Loads PTX (NUL-terminated text) or a cubin into this GPU's context.
    pub fn load_module(&self, image: &[u8]) -> Result<Module> {
        image::check(image)?;
        self.set_current()?;
        let mut raw: CUmodule = std::ptr::null_mut();
        // SAFETY: `image` was checked to end (PTX) or describe itself
        // (ELF) within the slice, so the driver reads no further.
        unsafe {
            cu!(
                self.driver(),
                cuModuleLoadData(&mut raw, image.as_ptr().cast())
            )
        }?;
        let inner = Arc::new(LoadedModule {
            raw,
            ctx: self.context().clone(),
        });
        Ok(Module { inner })
    }

    /// Launches `func` on this GPU's stream (asynchronously). More than
    /// 48 KiB of dynamic shared memory is opted into first. A
    /// `cooperative` launch guarantees every block is resident at once
    /// (blocks may wait for each other) or fails.
    ///
    /// # Safety
    /// `args` must hold one pointer per kernel parameter, in order, each to
    /// a live value of that parameter's exact type and size (the driver
    /// reads as many as the kernel declares), and device pointers among
    /// them must be valid for what the kernel accesses.
    pub unsafe fn launch(
        &self,
        func: &Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        cooperative: bool,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        self.set_current()?;
        if shared_bytes > DEFAULT_SHARED_LIMIT {
            let Ok(bytes) = c_int::try_from(shared_bytes) else {
                bail!("{shared_bytes} bytes of shared memory is more than any GPU has");
            };
            let attribute = FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            // SAFETY: a live function handle; the driver checks the value.
            unsafe {
                cu!(
                    self.driver(),
                    cuFuncSetAttribute(func.raw(), attribute, bytes)
                )
            }?;
        }
        let [gx, gy, gz] = grid;
        let [bx, by, bz] = block;
        let params = if args.is_empty() {
            std::ptr::null_mut()
        } else {
            args.as_mut_ptr()
        };
        let (f, stream, api) = (func.raw(), self.stream(), &self.driver().api);
        // Both launch calls take the same leading arguments.
        macro_rules! launch {
            ($call:ident $(, $extra:expr)?) => {
                (api.$call)(f, gx, gy, gz, bx, by, bz, shared_bytes, stream, params $(, $extra)?)
            };
        }
        // SAFETY: the caller vouches for `args`; handles are live.
        let rc = unsafe {
            if cooperative {
                launch!(cuLaunchCooperativeKernel)
            } else {
                launch!(cuLaunchKernel, std::ptr::null_mut())
            }
        };
        let call = if cooperative {
            "cuLaunchCooperativeKernel"
        } else {
            "cuLaunchKernel"
        };
        self.driver().check(rc, call)
    }
}

impl Module {
    /// The kernel named `name` (its `extern "C"` or mangled name).
    pub fn function(&self, name: &str) -> Result<Function> {
        let cname = c_string(name, "kernel name")?;
        let ctx = &self.inner.ctx;
        ctx.set_current()?;
        let mut raw: CUfunction = std::ptr::null_mut();
        // SAFETY: live module, valid out-pointer and C string.
        unsafe {
            cu!(
                ctx.driver,
                cuModuleGetFunction(&mut raw, self.inner.raw, cname.as_ptr())
            )
        }
        .map_err(|e| Error::new(format!("kernel {name}: {e}")))?;
        Ok(Function {
            raw,
            name: name.to_string(),
            _module: self.inner.clone(),
        })
    }
}

impl Function {
    /// The name it was looked up by.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn raw(&self) -> CUfunction {
        self.raw
    }
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Function({})", self.name)
    }
}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        if self.ctx.set_current().is_ok() {
            // SAFETY: loaded by us, unloaded once, no Function left (each
            // holds this); errors cannot be reported from drop.
            unsafe { (self.ctx.driver.api.cuModuleUnload)(self.raw) };
        }
    }
}
