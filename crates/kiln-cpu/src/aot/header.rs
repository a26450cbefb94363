//! `NAME.h`: the exported model's API and, as `#define`s, its memory
//! regions and interface.

use super::c_text::c_string;
use super::weights::{WeightImage, WeightsMode};
use super::AotOptions;
use crate::program::{CpuProgram, ALIGNMENT};
use kiln_exec::PlanValue;
use kiln_ir::npy::descr as npy_descr;

/// The header text.
pub fn header(
    program: &CpuProgram,
    aot: &AotOptions,
    threads: usize,
    image: &WeightImage,
) -> String {
    let name = &aot.name;
    let upper = name.to_uppercase();
    let plan = &program.plan;
    let mut s = format!(
        "/* {name}.h: a model exported by kiln (ahead-of-time C; see the README of kiln). */\n\
         #ifndef {upper}_H\n#define {upper}_H\n#include <stddef.h>\n#include <stdint.h>\n\n\
         /* Memory the caller provides, each region aligned to {upper}_ALIGNMENT bytes. */\n\
         #define {upper}_ALIGNMENT {ALIGNMENT}\n\
         #define {upper}_WEIGHTS_BYTES {}\n\
         #define {upper}_ARENA_BYTES {}\n\
         /* The least any arena could be: the most bytes live at one step. */\n\
         #define {upper}_ARENA_BOUND_BYTES {}\n\
         #define {upper}_WORKSPACE_BYTES {}\n\
         /* The model runs on at most this many OpenMP threads. */\n\
         #define {upper}_MAX_THREADS {threads}\n\
         /* Vector width (bytes) the weights were packed for. */\n\
         #define {upper}_VECTOR_BYTES {}\n\
         #define {upper}_NUM_INPUTS {}\n\
         #define {upper}_NUM_OUTPUTS {}\n",
        image.bytes.len(),
        plan.arena_bytes,
        plan.arena_bound,
        plan.workspace_bytes,
        aot.preset.desc(threads).vector_bytes,
        plan.inputs.len(),
        plan.outputs.len(),
    );
    for (kind, ids) in [("INPUT", &plan.inputs), ("OUTPUT", &plan.outputs)] {
        for (k, &id) in ids.iter().enumerate() {
            if let Some(v) = plan.value(id) {
                s += &interface_defines(&format!("{upper}_{kind}_{k}"), v);
            }
        }
    }
    s += &format!(
        "\n/* The model's inputs and outputs, in graph order: dense, C order, of the\n   \
         dtypes and shapes above. Outputs are written by {name}_run. */\n\
         typedef struct {{\n  const void* inputs[{upper}_NUM_INPUTS + 1];\n  void* outputs[{upper}_NUM_OUTPUTS + 1];\n}} {name}_io;\n\n\
         /* Runs the model once. `weights` holds {name}.weights.bin (or {name}_weights),\n   \
         `arena` and `workspace` the sizes above; runs on one model's arena and\n   \
         workspace must not overlap in time. Returns 0, or 1 + the step whose data\n   \
         index (a Gather's) was out of range. Allocates nothing, prints nothing. */\n\
         int {name}_run(const {name}_io* io, const void* weights, void* arena, void* workspace);\n\n\
         #ifdef {upper}_STATIC_STORAGE\n\
         /* Opt-in: the arena and workspace as static storage (one run at a time). */\n\
         int {name}_run_static(const {name}_io* io, const void* weights);\n\
         #endif\n"
    );
    if aot.weights == WeightsMode::Embed {
        s += &format!(
            "\n/* The weights, compiled in ({name}_weights.c). */\n\
             extern const unsigned char {name}_weights[];\n\
             #define {upper}_WEIGHTS_EMBEDDED 1\n"
        );
    }
    s += &format!("\n#endif /* {upper}_H */\n");
    s
}

/// `PREFIX_NAME`, `_DTYPE`, `_NPY_DESCR`, `_ELEM_BYTES`, `_RANK`, `_SHAPE`,
/// `_ELEMS`, `_BYTES` of one interface value.
fn interface_defines(prefix: &str, v: &PlanValue) -> String {
    let shape = v.shape.clone().unwrap_or_default();
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let elems: usize = shape.iter().product();
    format!(
        "#define {prefix}_NAME {}\n\
         #define {prefix}_DTYPE \"{}\"\n\
         #define {prefix}_NPY_DESCR \"{}\"\n\
         #define {prefix}_ELEM_BYTES {}\n\
         #define {prefix}_RANK {}\n\
         #define {prefix}_SHAPE {{{}}}\n\
         #define {prefix}_ELEMS {elems}\n\
         #define {prefix}_BYTES {}\n",
        c_string(&v.name),
        v.dtype,
        npy_descr(v.dtype).unwrap_or("?"),
        v.dtype.size(),
        shape.len(),
        if dims.is_empty() {
            "0".to_string()
        } else {
            dims.join(", ")
        },
        elems * v.dtype.size(),
    )
}
