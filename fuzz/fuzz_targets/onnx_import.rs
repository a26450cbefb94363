//! ONNX import of arbitrary bytes: an error or a verified graph, never a
//! panic, an abort or an allocation past the memory budget.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kiln_ir::limits::set_max_memory(1 << 28);
    let _ = kiln_onnx::load_bytes(
        bytes::Bytes::copy_from_slice(data),
        None,
        &kiln_onnx::ImportOptions::default(),
    );
});
