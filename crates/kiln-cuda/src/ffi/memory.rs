//! Device memory: owned buffers and copies between host and device.
//!
//! Needs: an open `Gpu`. Guarantees: a `DeviceBuffer` frees itself on drop
//! (it holds the context, so it may outlive the `Gpu`); zero-byte buffers
//! are null and never touch the driver; every copy is bounds-checked
//! against the buffer; uploads and downloads return only once the copy is
//! done, so the caller's slice may be reused or freed right away.

use super::device::{Context, Gpu};
use super::driver::{cu, CUdeviceptr};
use kiln_ir::{bail, Result};
use std::sync::Arc;

/// Device memory from `Gpu::alloc`, freed on drop.
pub struct DeviceBuffer {
    ptr: CUdeviceptr,
    bytes: usize,
    /// `None` for the null zero-byte buffer, which owns nothing.
    ctx: Option<Arc<Context>>,
}

impl DeviceBuffer {
    /// The device address (0 for a zero-byte buffer).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// `offset..offset + len` as a device address, if it lies inside.
    fn range(&self, offset: usize, len: usize, what: &str) -> Result<CUdeviceptr> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes => Ok(self.ptr + offset as u64),
            _ => bail!(
                "{what} of {len} bytes at offset {offset} does not fit a {}-byte device buffer",
                self.bytes
            ),
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let Some(ctx) = &self.ctx else { return };
        // The free needs the owning context current on this thread.
        if ctx.set_current().is_ok() {
            // SAFETY: allocated by cuMemAlloc in this context, freed once;
            // errors cannot be reported from drop.
            unsafe { (ctx.driver.api.cuMemFree_v2)(self.ptr) };
        }
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({:#x}, {} bytes)", self.ptr, self.bytes)
    }
}

impl Gpu {
    /// Allocates `bytes` of device memory (uninitialised).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        if bytes == 0 {
            return Ok(DeviceBuffer {
                ptr: 0,
                bytes: 0,
                ctx: None,
            });
        }
        self.set_current()?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: valid out-pointer.
        unsafe { cu!(self.driver(), cuMemAlloc_v2(&mut ptr, bytes)) }?;
        Ok(DeviceBuffer {
            ptr,
            bytes,
            ctx: Some(self.context().clone()),
        })
    }

    /// Copies `data` into `buf` at byte `offset`; returns once done.
    pub fn upload(&self, buf: &DeviceBuffer, offset: usize, data: &[u8]) -> Result<()> {
        let dst = buf.range(offset, data.len(), "upload")?;
        if data.is_empty() {
            return Ok(());
        }
        self.set_current()?;
        // SAFETY: `dst` has `data.len()` bytes (checked above); `data` stays
        // borrowed until the stream sync below has waited for the copy.
        unsafe {
            cu!(
                self.driver(),
                cuMemcpyHtoDAsync_v2(dst, data.as_ptr().cast(), data.len(), self.stream())
            )
        }?;
        self.synchronize()
    }

    /// Copies bytes of `buf` from `offset` into `out`; returns once done.
    pub fn download(&self, buf: &DeviceBuffer, offset: usize, out: &mut [u8]) -> Result<()> {
        let src = buf.range(offset, out.len(), "download")?;
        if out.is_empty() {
            return Ok(());
        }
        self.set_current()?;
        // SAFETY: `src` has `out.len()` bytes; `out` stays borrowed until
        // the stream sync below has waited for the copy.
        unsafe {
            cu!(
                self.driver(),
                cuMemcpyDtoHAsync_v2(out.as_mut_ptr().cast(), src, out.len(), self.stream())
            )
        }?;
        self.synchronize()
    }

    /// Queues a copy of `bytes` from `src` at `src_offset` to `dst` at
    /// `dst_offset` on the stream (device to device, asynchronous).
    pub fn copy(
        &self,
        dst: &DeviceBuffer,
        dst_offset: usize,
        src: &DeviceBuffer,
        src_offset: usize,
        bytes: usize,
    ) -> Result<()> {
        let to = dst.range(dst_offset, bytes, "copy destination")?;
        let from = src.range(src_offset, bytes, "copy source")?;
        if bytes == 0 {
            return Ok(());
        }
        self.set_current()?;
        // SAFETY: both ranges lie inside live buffers (checked above).
        unsafe {
            cu!(
                self.driver(),
                cuMemcpyDtoDAsync_v2(to, from, bytes, self.stream())
            )
        }
    }

    /// Queues zeroing of `bytes` at device address `ptr` on the stream.
    /// The address is the caller's to vouch for: the driver reports one it
    /// does not know (now or at the next sync); this crate hands out no
    /// host-mapped memory, so only device memory can be reached.
    pub fn memset_zero(&self, ptr: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.set_current()?;
        // SAFETY: the driver checks the address range against its
        // allocations; no Rust-owned memory is involved.
        unsafe { cu!(self.driver(), cuMemsetD8Async(ptr, 0, bytes, self.stream())) }
    }
}
