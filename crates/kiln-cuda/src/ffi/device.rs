//! One GPU: the driver, a device, its retained primary context and one
//! stream, with queries, synchronisation and event timing.
//!
//! Needs: a CUDA driver and at least one device; `Gpu::open` says clearly
//! which is missing. Guarantees: the context is made current at the top of
//! every call that uses it (a context is current per thread, and callers
//! may be on any thread); everything acquired is released on drop, also
//! after a failed `open`; buffers and modules keep the context alive, so
//! they may outlive the `Gpu` they came from.

use super::driver::{attr, cu, CUcontext, CUdevice, CUevent, CUstream, Driver, ERROR_NO_DEVICE};
use kiln_ir::{bail, Error, Result};
use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;

/// `CU_STREAM_NON_BLOCKING`: our stream does not wait on the legacy
/// default stream, which other libraries in the process may be using.
const STREAM_NON_BLOCKING: u32 = 1;

/// A retained primary context; released when the last holder drops.
pub(crate) struct Context {
    pub(crate) driver: Driver,
    device: CUdevice,
    ctx: CUcontext,
}

// SAFETY: the driver API is thread-safe, and a CUcontext is a handle that
// any thread may make current; every use goes through `set_current` first.
unsafe impl Send for Context {}
// SAFETY: as for Send; `Context` has no interior mutability of its own.
unsafe impl Sync for Context {}

impl Context {
    pub(crate) fn set_current(&self) -> Result<()> {
        // SAFETY: `ctx` is a retained primary context, live until drop.
        unsafe { cu!(self.driver, cuCtxSetCurrent(self.ctx)) }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `Gpu::open`; errors cannot be
        // reported from drop and at worst leave the context to the process.
        unsafe { (self.driver.api.cuDevicePrimaryCtxRelease_v2)(self.device) };
    }
}

/// One GPU with its own stream; see the module docs.
pub struct Gpu {
    ctx: Arc<Context>,
    stream: CUstream,
    ordinal: usize,
}

// SAFETY: the driver API is thread-safe; the stream is a handle valid in
// any thread once the context is current, which every method ensures.
unsafe impl Send for Gpu {}
// SAFETY: as for Send; work queued on the one stream from several threads
// is ordered by the driver, and `Gpu` mutates nothing of its own.
unsafe impl Sync for Gpu {}

impl Gpu {
    /// Opens device `ordinal` (0 is the first GPU).
    pub fn open(ordinal: usize) -> Result<Gpu> {
        let driver = Driver::load()?;
        // SAFETY: a plain call with flags 0.
        let rc = unsafe { (driver.api.cuInit)(0) };
        if rc == ERROR_NO_DEVICE {
            return Err(Error::unavailable(format!(
                "no CUDA device found (driver {})",
                driver.path().display()
            )));
        }
        driver.check(rc, "cuInit")?;
        let mut count: c_int = 0;
        // SAFETY: valid out-pointer.
        unsafe { cu!(driver, cuDeviceGetCount(&mut count)) }?;
        if count <= 0 {
            return Err(Error::unavailable(format!(
                "no CUDA device found (driver {})",
                driver.path().display()
            )));
        }
        let Some(index) = c_int::try_from(ordinal).ok().filter(|&i| i < count) else {
            bail!("CUDA device {ordinal} does not exist: {count} device(s) found");
        };
        let mut device: CUdevice = 0;
        // SAFETY: valid out-pointer; `index` is below the device count.
        unsafe { cu!(driver, cuDeviceGet(&mut device, index)) }?;
        let mut raw: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device; released in Context's drop.
        unsafe { cu!(driver, cuDevicePrimaryCtxRetain(&mut raw, device)) }?;
        // From here on, dropping `gpu` undoes what has been done so far.
        let ctx = Arc::new(Context {
            driver,
            device,
            ctx: raw,
        });
        let mut gpu = Gpu {
            ctx,
            stream: std::ptr::null_mut(),
            ordinal,
        };
        gpu.set_current()?;
        let mut stream: CUstream = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        unsafe {
            cu!(
                gpu.driver(),
                cuStreamCreate(&mut stream, STREAM_NON_BLOCKING)
            )
        }?;
        gpu.stream = stream;
        Ok(gpu)
    }

    /// The ordinal this was opened with.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The loaded driver.
    pub fn driver(&self) -> &Driver {
        &self.ctx.driver
    }

    pub(crate) fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub(crate) fn stream(&self) -> CUstream {
        self.stream
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn set_current(&self) -> Result<()> {
        self.ctx.set_current()
    }

    /// The device's marketing name, e.g. "NVIDIA H100 80GB HBM3".
    pub fn name(&self) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the driver writes at most `len` bytes, NUL included.
        unsafe {
            cu!(
                self.driver(),
                cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, self.ctx.device)
            )
        }?;
        // Force a terminator in case a driver ever fills the whole buffer.
        buf[buf.len() - 1] = 0;
        // SAFETY: NUL-terminated within `buf`.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// One `CUdevice_attribute` (see `driver::attr`).
    pub fn attribute(&self, attribute: i32) -> Result<i32> {
        let mut value: c_int = 0;
        // SAFETY: valid out-pointer; a bad attribute number is an error code.
        unsafe {
            cu!(
                self.driver(),
                cuDeviceGetAttribute(&mut value, attribute, self.ctx.device)
            )
        }?;
        Ok(value)
    }

    /// (major, minor), e.g. (9, 0) for Hopper.
    pub fn compute_capability(&self) -> Result<(i32, i32)> {
        Ok((
            self.attribute(attr::COMPUTE_CAPABILITY_MAJOR)?,
            self.attribute(attr::COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// Streaming multiprocessors.
    pub fn sm_count(&self) -> Result<i32> {
        self.attribute(attr::MULTIPROCESSOR_COUNT)
    }

    /// Device memory in bytes.
    pub fn total_memory(&self) -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: valid out-pointer.
        unsafe {
            cu!(
                self.driver(),
                cuDeviceTotalMem_v2(&mut bytes, self.ctx.device)
            )
        }?;
        Ok(bytes)
    }

    /// Waits until all work queued on this GPU's stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.set_current()?;
        // SAFETY: live stream.
        unsafe { cu!(self.driver(), cuStreamSynchronize(self.stream)) }
    }

    /// GPU time in milliseconds of each of `n` pieces of work, `f(i)`
    /// queueing the `i`-th on this stream: an event before the first and
    /// one after each, read once all have run.
    pub fn elapsed_each_ms<F: FnMut(usize) -> Result<()>>(
        &self,
        n: usize,
        mut f: F,
    ) -> Result<Vec<f32>> {
        self.set_current()?;
        let events = (0..=n)
            .map(|_| Event::new(self))
            .collect::<Result<Vec<_>>>()?;
        events[0].record()?;
        for (i, after) in events[1..].iter().enumerate() {
            f(i)?;
            self.set_current()?; // `f` may have switched contexts.
            after.record()?;
        }
        // SAFETY: live event.
        unsafe { cu!(self.driver(), cuEventSynchronize(events[n].raw)) }?;
        events
            .windows(2)
            .map(|w| {
                let mut ms = 0f32;
                // SAFETY: live, recorded events; valid out-pointer.
                unsafe {
                    cu!(
                        self.driver(),
                        cuEventElapsedTime(&mut ms, w[0].raw, w[1].raw)
                    )
                }?;
                Ok(ms)
            })
            .collect()
    }

    /// GPU time in milliseconds of the work `f` queues on this stream,
    /// measured with a pair of events around it.
    pub fn elapsed_ms<F: FnMut() -> Result<()>>(&self, mut f: F) -> Result<f32> {
        self.set_current()?;
        let start = Event::new(self)?;
        let stop = Event::new(self)?;
        start.record()?;
        f()?;
        self.set_current()?; // `f` may have switched contexts.
        stop.record()?;
        let mut ms = 0f32;
        // SAFETY: live events, valid out-pointer.
        unsafe { cu!(self.driver(), cuEventSynchronize(stop.raw)) }?;
        // SAFETY: live events, valid out-pointer.
        unsafe {
            cu!(
                self.driver(),
                cuEventElapsedTime(&mut ms, start.raw, stop.raw)
            )
        }?;
        Ok(ms)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if self.stream.is_null() || self.set_current().is_err() {
            return;
        }
        // SAFETY: the stream is ours; destroying it lets queued work finish
        // first. Errors cannot be reported from drop.
        unsafe { (self.driver().api.cuStreamDestroy_v2)(self.stream) };
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({})", self.ordinal)
    }
}

/// A CUDA event, destroyed on drop.
struct Event<'g> {
    raw: CUevent,
    gpu: &'g Gpu,
}

impl<'g> Event<'g> {
    fn new(gpu: &'g Gpu) -> Result<Event<'g>> {
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0 = CU_EVENT_DEFAULT (timed).
        unsafe { cu!(gpu.driver(), cuEventCreate(&mut raw, 0)) }
            .map_err(|e| Error::new(format!("{e} (timing events)")))?;
        Ok(Event { raw, gpu })
    }

    fn record(&self) -> Result<()> {
        // SAFETY: live event and stream.
        unsafe { cu!(self.gpu.driver(), cuEventRecord(self.raw, self.gpu.stream)) }
    }
}

impl Drop for Event<'_> {
    fn drop(&mut self) {
        // SAFETY: ours, destroyed once; errors cannot be reported from drop.
        unsafe { (self.gpu.driver().api.cuEventDestroy_v2)(self.raw) };
    }
}
