//! CUDA bound at run time: NVRTC (`nvrtc`) and the driver API (`driver`),
//! found by `find` and loaded with `dlopen`, so kiln builds and runs on
//! machines without CUDA and reports a clear error only when a CUDA path
//! is actually used. `device`, `memory` and `module` wrap the driver in
//! owning types that free what they hold on drop.
//!
//! Needs: nothing at link time. Guarantees: every foreign call's status
//! is checked and turned into a `kiln_ir::Error`; no call panics on bad
//! input.

pub mod device;
pub mod driver;
pub mod find;
pub mod image;
pub mod memory;
pub mod module;
pub mod nvrtc;

pub use device::Gpu;
pub use driver::Driver;
pub use memory::DeviceBuffer;
pub use module::{Function, Module};
pub use nvrtc::{Arch, Compiled, Nvrtc};

use kiln_ir::{Error, Result};
use std::ffi::CString;

/// Declares a table of foreign functions: one `unsafe extern "C" fn`
/// field per symbol, named exactly as the C symbol so the name looked up
/// and the name called can never drift apart, plus `resolve`, which looks
/// every symbol up once (a missing one fails the load, not a later call).
macro_rules! fn_table {
    ($(#[$meta:meta])* $vis:vis struct $table:ident {
        $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*
    }) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        $vis struct $table {
            $(pub(crate) $name: unsafe extern "C" fn($($arg: $ty),*) -> $ret,)*
        }

        impl $table {
            /// # Safety
            /// `lib` must export each symbol with the prototype declared
            /// here, and must outlive the returned table.
            pub(crate) unsafe fn resolve(lib: &libloading::Library) -> kiln_ir::Result<Self> {
                Ok($table {
                    $($name: $crate::ffi::symbol(lib, stringify!($name))?,)*
                })
            }
        }
    };
}
pub(crate) use fn_table;

/// Looks up one function pointer in `lib`.
///
/// # Safety
/// `T` must be the function-pointer type of the symbol's C prototype, and
/// the pointer must not be called after `lib` is dropped.
pub(crate) unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T> {
    // SAFETY: the caller vouches for `T`; copying the pointer out of the
    // `Symbol` is sound as long as `lib` outlives its use (caller's duty).
    match unsafe { lib.get::<T>(name) } {
        Ok(sym) => Ok(*sym),
        Err(e) => Err(Error::new(format!("symbol {name} not found: {e}"))),
    }
}

/// A C string for a foreign call; an interior NUL is an error, not a panic.
pub(crate) fn c_string(text: &str, what: &str) -> Result<CString> {
    CString::new(text).map_err(|e| {
        Error::new(format!(
            "{what} contains a NUL byte at offset {}",
            e.nul_position()
        ))
    })
}
