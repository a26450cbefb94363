//! Tunings from the cache (`kiln tune`, `kiln_cpu::tuning`) reach the
//! generated gemm: a kernel whose key holds a tuning is printed with the
//! tuning's register tile, and still gives the interpreter's results.

mod common;

use common::{assert_close, inputs, load, values};
use kiln_codegen::gemm::{KernelShape, Tuning};
use kiln_cpu::program::Naming;
use kiln_cpu::tuning::{kernel_key, GemmTunings};
use kiln_cpu::{CompiledModel, CpuOptions, CpuProgram};
use kiln_ir::Result;
use std::sync::Arc;

#[test]
fn a_filed_tuning_changes_the_gemm_and_keeps_the_results() -> Result<()> {
    let src = format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,50,64]
  init %w: f32[64,96] = [{}]
  node "mm" %y: f32[1,50,96] = MatMul(%x, %w)
  output %y
}}"#,
        values(64 * 96, 7)
    );
    let g = load(&src)?;
    let ins = inputs(&g)?;
    let want = kiln_interp::run(&g, &ins)?;
    let untuned = CpuOptions {
        threads: 2,
        tunings: Arc::new(GemmTunings::default()),
        ..Default::default()
    };
    let naming = Naming {
        prefix: "t".into(),
        threads: 2,
    };
    let program = CpuProgram::build(&g, &untuned, &naming)?;
    let k = program.kernels.iter().flatten().next().expect("one kernel");
    let key = kernel_key(&k.c, &k.kernel.name, &untuned.target);
    // Two tiles of every vector width: whichever the default picks, the
    // other is forced.
    for (mr, nr) in [(6, 64), (14, 32), (6, 16), (4, 24), (6, 8), (4, 12)] {
        let marker = format!("ukernel_{mr}x{nr}");
        let mut table = GemmTunings::default();
        let shape = Some(KernelShape { mr, nr });
        table.insert(
            key.clone(),
            Tuning {
                shape,
                ..Tuning::default()
            },
        );
        let tuned = CpuOptions {
            tunings: Arc::new(table),
            ..untuned.clone()
        };
        let c = CpuProgram::build(&g, &tuned, &naming)?
            .c_units(1, "", "")
            .concat();
        assert!(c.contains(&marker), "the tuned C uses the {mr}x{nr} tile");
        let model = CompiledModel::compile(&g, &tuned)?;
        assert_close(&model.run(&ins)?, &want, &marker)?;
    }
    Ok(())
}
