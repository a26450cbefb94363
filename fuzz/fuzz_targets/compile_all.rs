//! The compile pipeline after import, shared by the `pipeline` and
//! `generated` targets: the graph passes, then every fusion planner,
//! lowering, scheduling and C generation for a fixed target (no C
//! compiler runs). Errors are allowed; a panic is the finding.

pub fn compile_all(mut g: kiln_ir::Graph) {
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
}
