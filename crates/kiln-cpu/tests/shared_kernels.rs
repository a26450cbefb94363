//! Kernels whose C repeats another's but for the name compile once
//! (`shared_kernels.rs`): two identical blocks on different weights give
//! one gemm in the C, the second block's entry points forwarding to the
//! first's, and both blocks still compute with their own weights.

mod common;

use common::{assert_close, inputs, load, values};
use kiln_cpu::program::Naming;
use kiln_cpu::{CompiledModel, CpuOptions, CpuProgram};
use kiln_fuse::PlannerKind;
use kiln_ir::Result;

fn two_blocks() -> String {
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[1,24,40]
  init %w1: f32[40,40] = [{}]
  init %b1: f32[40] = [{}]
  init %w2: f32[40,40] = [{}]
  init %b2: f32[40] = [{}]
  node "mm1" %y1: f32[1,24,40] = MatMul(%x, %w1)
  node "add1" %z1: f32[1,24,40] = Add(%y1, %b1)
  node "relu1" %r1: f32[1,24,40] = Relu(%z1)
  node "mm2" %y2: f32[1,24,40] = MatMul(%r1, %w2)
  node "add2" %z2: f32[1,24,40] = Add(%y2, %b2)
  node "relu2" %r2: f32[1,24,40] = Relu(%z2)
  output %r2
}}"#,
        values(1600, 1),
        values(40, 2),
        values(1600, 3),
        values(40, 4)
    )
}

#[test]
fn repeated_blocks_compile_once_and_keep_their_own_weights() -> Result<()> {
    let g = load(&two_blocks())?;
    let ins = inputs(&g)?;
    let want = kiln_interp::run(&g, &ins)?;
    for fusion in [PlannerKind::None, PlannerKind::Apollo, PlannerKind::Tvm] {
        let opts = CpuOptions {
            threads: 2,
            fusion,
            ..Default::default()
        };
        let naming = Naming {
            prefix: "t".into(),
            threads: 2,
        };
        let program = CpuProgram::build(&g, &opts, &naming)?;
        let c = program.c_units(2, "", "").concat();
        let gemms = c.matches("_gemm(const float* restrict").count();
        assert_eq!(
            gemms, 1,
            "{fusion:?}: one gemm definition for the two blocks"
        );
        assert!(
            c.contains("(args); }"),
            "{fusion:?}: the second block forwards"
        );
        let model = CompiledModel::compile(&g, &opts)?;
        assert_close(&model.run(&ins)?, &want, &format!("{fusion:?}"))?;
    }
    Ok(())
}
