//! `NAME.c`: the run function, the execution plan printed as C: one call
//! per kernel step with its arguments' addresses, concurrent blocks
//! through their section functions (defined with the kernels), outputs
//! copied out of the arena.

use super::weights::{unplaced, weight_expr, WeightImage};
use super::AotOptions;
use crate::program::CpuProgram;
use kiln_exec::{Exec, ExecPlan, Loc, Step};
use kiln_ir::Result;
use std::fmt::Write;

/// The source text.
pub fn run_c(
    program: &CpuProgram,
    aot: &AotOptions,
    defines: &str,
    image: &WeightImage,
) -> Result<String> {
    let name = &aot.name;
    let upper = name.to_uppercase();
    let plan = &program.plan;
    let mut s = format!("{defines}#include \"{name}.h\"\n#include <string.h>\n");
    for e in &plan.exec {
        match e {
            Exec::Step(i) => {
                if let Step::Kernel { kernel, .. } = &plan.steps[*i] {
                    writeln!(s, "int {kernel}(void* const* restrict args);").ok();
                }
            }
            Exec::Concurrent { func, .. } => {
                writeln!(s, "int {func}(void* const* const* args);").ok();
            }
        }
    }
    writeln!(
        s,
        "\nint {name}_run(const {name}_io* io, const void* weights, void* arena, void* workspace)\n{{\n  \
         const unsigned char* const W = (const unsigned char*)weights;\n  \
         unsigned char* const A = (unsigned char*)arena;\n  \
         unsigned char* const S = (unsigned char*)workspace;\n  \
         (void)W;\n  (void)A;\n  (void)S;"
    )
    .ok();
    for e in &plan.exec {
        s += &exec_c(plan, image, e)?;
    }
    for (k, &o) in plan.outputs.iter().enumerate() {
        let v = plan.value(o).ok_or_else(|| unplaced(o))?;
        writeln!(
            s,
            "  memcpy(io->outputs[{k}], {}, {});",
            address(plan, image, o)?,
            v.bytes()
        )
        .ok();
    }
    s += "  return 0;\n}\n";
    writeln!(
        s,
        "\n#ifdef {upper}_STATIC_STORAGE\nint {name}_run_static(const {name}_io* io, const void* weights)\n{{\n  \
         static _Alignas(64) unsigned char arena[{upper}_ARENA_BYTES + 1];\n  \
         static _Alignas(64) unsigned char workspace[{upper}_WORKSPACE_BYTES + 1];\n  \
         return {name}_run(io, weights, arena, workspace);\n}}\n#endif"
    )
    .ok();
    Ok(s)
}

/// One entry of the execution order.
fn exec_c(plan: &ExecPlan, image: &WeightImage, e: &Exec) -> Result<String> {
    let mut s = String::new();
    match e {
        Exec::Step(i) => {
            if let Some(args) = kernel_args(plan, image, &plan.steps[*i])? {
                let Step::Kernel { kernel, .. } = &plan.steps[*i] else {
                    unreachable!("kernel_args answers kernel steps only")
                };
                writeln!(
                    s,
                    "  {{\n    void* const args[] = {{{args}}};\n    if ({kernel}(args)) return {};\n  }}",
                    i + 1
                )
                .ok();
            }
        }
        Exec::Concurrent { func, steps } => {
            s += "  {\n";
            for (j, &i) in steps.iter().enumerate() {
                let args = kernel_args(plan, image, &plan.steps[i])?.unwrap_or_default();
                writeln!(s, "    void* const a{j}[] = {{{args}}};").ok();
            }
            let heads: Vec<String> = (0..steps.len()).map(|j| format!("a{j}")).collect();
            writeln!(
                s,
                "    void* const* const all[] = {{{}}};\n    if ({func}(all)) return {};\n  }}",
                heads.join(", "),
                steps[0] + 1
            )
            .ok();
        }
    }
    Ok(s)
}

/// The argument list of a kernel step (`None` for other steps).
fn kernel_args(plan: &ExecPlan, image: &WeightImage, step: &Step) -> Result<Option<String>> {
    let Step::Kernel {
        args,
        packing,
        workspace,
        ..
    } = step
    else {
        return Ok(None);
    };
    let mut list = args
        .iter()
        .map(|&a| address(plan, image, a))
        .collect::<Result<Vec<_>>>()?;
    if let Some(p) = packing {
        list.push(format!("(void*)(W + {})", image.packings[*p]));
    }
    if let Some(w) = workspace {
        list.push(format!("(void*)(S + {})", w.offset));
    }
    Ok(Some(list.join(", ")))
}

/// The C address of value `id`.
fn address(plan: &ExecPlan, image: &WeightImage, id: usize) -> Result<String> {
    let v = plan.value(id).ok_or_else(|| unplaced(id))?;
    Ok(match v.loc {
        Loc::Input(i) => format!("(void*)io->inputs[{i}]"),
        Loc::Weight(w) => weight_expr(image, w),
        Loc::Arena(off) => format!("(void*)(A + {off})"),
        Loc::Boxed(_) => return Err(unplaced(id)),
    })
}
