//! The whole compile pipeline on a model: import, the graph passes, every
//! fusion planner, lowering, scheduling and C generation (no C compiler
//! runs). Any stage may refuse the model with an error; none may panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "compile_all.rs"]
mod compile_all;

fuzz_target!(|data: &[u8]| {
    kiln_ir::limits::set_max_memory(1 << 28);
    let Ok(model) = kiln_onnx::load_bytes(
        bytes::Bytes::copy_from_slice(data),
        None,
        &kiln_onnx::ImportOptions::default(),
    ) else {
        return;
    };
    compile_all::compile_all(model.graph);
});
