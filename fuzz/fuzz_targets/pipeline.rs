//! The whole compile pipeline on a model: import, the graph passes, every
//! fusion planner, lowering, scheduling and C generation (no C compiler
//! runs). Any stage may refuse the model with an error; none may panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kiln_ir::limits::set_max_memory(1 << 28);
    let Ok(model) = kiln_onnx::load_bytes(
        bytes::Bytes::copy_from_slice(data),
        None,
        &kiln_onnx::ImportOptions::default(),
    ) else {
        return;
    };
    let mut g = model.graph;
    if kiln_passes::optimize(&mut g, &Default::default()).is_err() {
        return;
    }
    let naming = kiln_cpu::program::Naming {
        prefix: "fuzz".into(),
        threads: 2,
    };
    for fusion in kiln_fuse::PlannerKind::ALL {
        let opts = kiln_cpu::CpuOptions {
            fusion,
            threads: 1,
            // A fixed target: runs do not depend on the fuzzing machine.
            target: kiln_target::CpuPreset::X86_64V4.desc(2),
            ..Default::default()
        };
        let _ = kiln_cpu::CpuProgram::build(&g, &opts, &naming);
    }
});
