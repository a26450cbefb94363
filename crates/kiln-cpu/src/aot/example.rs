//! The example program (`main.c`: `NAME_main IN_0.npy … OUT_DIR`, outputs
//! written as `OUT_DIR/output_<k>.npy` exactly as `kiln run -o` writes
//! them) and the `Makefile` that builds it.

use super::weights::WeightsMode;
use super::AotOptions;
use crate::program::CpuProgram;
use std::fmt::Write;

/// NumPy file reading and writing for the example program (C order,
/// little-endian, the dtypes of the interface), and its timer.
const NPY_C: &str = r#"
static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int by_value(const void* a, const void* b)
{
    const double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}
static void die(const char* what, const char* path)
{
    fprintf(stderr, "error: %s: %s\n", path, what);
    exit(1);
}

/* The whole of `path`, in 64-byte aligned memory (`*size` bytes). */
static unsigned char* read_all(const char* path, size_t* size)
{
    FILE* f = fopen(path, "rb");
    if (!f) die("cannot open", path);
    if (fseek(f, 0, SEEK_END) != 0) die("cannot seek", path);
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) die("cannot seek", path);
    unsigned char* data = aligned_alloc(64, ((size_t)n + 64) / 64 * 64);
    if (!data) die("out of memory", path);
    if (fread(data, 1, (size_t)n, f) != (size_t)n) die("cannot read", path);
    fclose(f);
    *size = (size_t)n;
    return data;
}

/* The shape of an .npy header as kiln writes it: "(2, 3)", "(5,)", "()". */
static void shape_text(char* out, size_t cap, int rank, const long* shape)
{
    size_t used = (size_t)snprintf(out, cap, "(");
    for (int i = 0; i < rank && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, i ? ", %ld" : "%ld", shape[i]);
    if (used < cap) snprintf(out + used, cap - used, rank == 1 ? ",)" : ")");
}

/* An input: checks descr and shape against the model's, returns the data (aligned). */
static void* load_npy(const char* path, const char* descr, int rank, const long* shape, size_t bytes)
{
    size_t size;
    unsigned char* file = read_all(path, &size);
    if (size < 10 || memcmp(file, "\x93NUMPY", 6) != 0) die("not an .npy file", path);
    size_t header = file[6] == 1 ? (size_t)file[8] | (size_t)file[9] << 8
                                 : (size_t)file[8] | (size_t)file[9] << 8 | (size_t)file[10] << 16 | (size_t)file[11] << 24;
    size_t start = (file[6] == 1 ? 10 : 12) + header;
    if (start > size) die("truncated .npy header", path);
    char* text = calloc(header + 1, 1);
    memcpy(text, file + (file[6] == 1 ? 10 : 12), header);
    char want[256], shape_want[160];
    shape_text(shape_want, sizeof shape_want, rank, shape);
    snprintf(want, sizeof want, "'descr': '%s'", descr);
    if (!strstr(text, want)) die("wrong dtype (the model wants another)", path);
    if (strstr(text, "'fortran_order': True")) die("Fortran-order arrays are not supported", path);
    snprintf(want, sizeof want, "'shape': %s", shape_want);
    if (!strstr(text, want)) die("wrong shape (the model wants another)", path);
    free(text);
    if (size - start != bytes) die("wrong data size", path);
    unsigned char* data = aligned_alloc(64, (bytes + 64) / 64 * 64);
    if (!data) die("out of memory", path);
    memcpy(data, file + start, bytes);
    free(file);
    return data;
}

/* Writes `data` as kiln run -o does: version 1, header padded to 64 bytes. */
static void save_npy(const char* path, const char* descr, int rank, const long* shape, const void* data, size_t bytes)
{
    char shape_s[160], header[512];
    shape_text(shape_s, sizeof shape_s, rank, shape);
    int len = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape_s);
    int pad = (64 - (10 + len + 1) % 64) % 64;
    FILE* f = fopen(path, "wb");
    if (!f) die("cannot create", path);
    unsigned short total = (unsigned short)(len + pad + 1);
    unsigned char lead[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(total & 255), (unsigned char)(total >> 8)};
    fwrite(lead, 1, 10, f);
    fwrite(header, 1, (size_t)len, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    if (fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) die("cannot write", path);
}
"#;

/// `main.c`.
pub fn main_c(program: &CpuProgram, aot: &AotOptions) -> String {
    let name = &aot.name;
    let upper = name.to_uppercase();
    let plan = &program.plan;
    let (inputs, outputs) = (plan.inputs.len(), plan.outputs.len());
    let mut s = format!(
        "/* Example program for the exported model {name}:\n   {name}_main [--runs N] IN_0.npy ... OUT_DIR\n   \
         (inputs in graph-input order; writes OUT_DIR/output_<k>.npy; with --runs, runs\n   \
         the model N more times and prints the median and fastest time to stderr). */\n\
         #define _POSIX_C_SOURCE 199309L\n\
         #include \"{name}.h\"\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <time.h>\n{NPY_C}\n"
    );
    s += &weights_loader(name, &upper, aot.weights);
    writeln!(
        s,
        "int main(int argc, char** argv)\n{{\n  \
         const char* program = argv[0];\n  int runs = 0;\n  \
         if (argc > 2 && strcmp(argv[1], \"--runs\") == 0) {{\n    runs = atoi(argv[2]);\n    argv += 2;\n    argc -= 2;\n  }}\n  \
         if (argc != {} + 2) {{\n    fprintf(stderr, \"usage: %s [--runs N]{} OUT_DIR\\n\", program);\n    return 2;\n  }}\n  \
         {name}_io io;\n  memset(&io, 0, sizeof io);\n  \
         (void)load_npy; /* unused by a model without inputs */",
        inputs,
        (0..inputs).map(|k| format!(" IN_{k}.npy")).collect::<String>()
    )
    .ok();
    for k in 0..inputs {
        let p = format!("{upper}_INPUT_{k}");
        writeln!(
            s,
            "  {{\n    static const long shape[] = {p}_SHAPE;\n    \
             io.inputs[{k}] = load_npy(argv[{}], {p}_NPY_DESCR, {p}_RANK, shape, {p}_BYTES);\n  }}",
            k + 1
        )
        .ok();
    }
    for k in 0..outputs {
        writeln!(
            s,
            "  io.outputs[{k}] = aligned_alloc(64, ({upper}_OUTPUT_{k}_BYTES + 64) / 64 * 64);"
        )
        .ok();
    }
    writeln!(
        s,
        "  const void* weights = load_weights(program);\n  \
         void* arena = aligned_alloc(64, ({upper}_ARENA_BYTES + 64) / 64 * 64);\n  \
         void* workspace = aligned_alloc(64, ({upper}_WORKSPACE_BYTES + 64) / 64 * 64);\n  \
         if (!arena || !workspace) die(\"out of memory\", \"arena\");\n  \
         int rc = {name}_run(&io, weights, arena, workspace);\n  \
         if (rc != 0) {{\n    fprintf(stderr, \"error: step %d: an index read from data is out of range\\n\", rc - 1);\n    return 1;\n  }}\n  \
         if (runs > 0) {{\n    double* times = malloc(sizeof(double) * (size_t)runs);\n    \
         for (int r = 0; r < runs; r++) {{\n      const double t0 = now_ms();\n      {name}_run(&io, weights, arena, workspace);\n      times[r] = now_ms() - t0;\n    }}\n    \
         qsort(times, (size_t)runs, sizeof(double), by_value);\n    \
         fprintf(stderr, \"{name}: median %.3f ms, min %.3f ms over %d runs\\n\", times[runs / 2], times[0], runs);\n    free(times);\n  }}\n  \
         char path[4096];"
    )
    .ok();
    for k in 0..outputs {
        let p = format!("{upper}_OUTPUT_{k}");
        writeln!(
            s,
            "  {{\n    static const long shape[] = {p}_SHAPE;\n    \
             snprintf(path, sizeof path, \"%s/output_{k}.npy\", argv[{}]);\n    \
             save_npy(path, {p}_NPY_DESCR, {p}_RANK, shape, io.outputs[{k}], {p}_BYTES);\n  }}",
            inputs + 1
        )
        .ok();
    }
    // Everything freed, so leak checkers see a clean run.
    s += &format!(
        "  for (int k = 0; k < {inputs}; k++) free((void*)io.inputs[k]);\n  \
         for (int k = 0; k < {outputs}; k++) free(io.outputs[k]);\n  \
         free(arena);\n  free(workspace);\n  free_weights(weights);\n  return 0;\n}}\n"
    );
    s
}

/// `load_weights(argv0)`: the compiled-in array, or the weights file
/// (`$NAME_WEIGHTS`, else `NAME.weights.bin` beside the program); and
/// `free_weights`.
fn weights_loader(name: &str, upper: &str, mode: WeightsMode) -> String {
    match mode {
        WeightsMode::Embed => format!(
            "static const void* load_weights(const char* argv0)\n{{\n  (void)argv0;\n  return {name}_weights;\n}}\n\n\
             static void free_weights(const void* w)\n{{\n  (void)w;\n}}\n\n"
        ),
        WeightsMode::File => format!(
            "static const void* load_weights(const char* argv0)\n{{\n  \
             char path[4096];\n  const char* env = getenv(\"{upper}_WEIGHTS\");\n  \
             if (env) snprintf(path, sizeof path, \"%s\", env);\n  \
             else {{\n    const char* slash = strrchr(argv0, '/');\n    \
             int dir = slash ? (int)(slash - argv0) + 1 : 0;\n    \
             snprintf(path, sizeof path, \"%.*s{name}.weights.bin\", dir, argv0);\n  }}\n  \
             size_t size;\n  unsigned char* w = read_all(path, &size);\n  \
             if (size != {upper}_WEIGHTS_BYTES) die(\"weights file of the wrong size\", path);\n  \
             return w;\n}}\n\n\
             static void free_weights(const void* w)\n{{\n  free((void*)w);\n}}\n\n"
        ),
    }
}

/// The `Makefile`: `make` builds `NAME_main`; `CC=… make` cross-compiles;
/// `CFLAGS`/`OPENMP` override the flags.
pub fn makefile(aot: &AotOptions, sources: &[String]) -> String {
    let name = &aot.name;
    let march = aot.preset.desc(1).cflags.join(" ");
    let openmp = if aot.openmp { "-fopenmp" } else { "" };
    let objects: Vec<String> = sources.iter().map(|s| s.replace(".c", ".o")).collect();
    format!(
        "# Builds the example program {name}_main for the exported model {name}.\n\
         # Cross-compile with CC=..., e.g. CC=aarch64-linux-gnu-gcc (export with --cpu aarch64-neon).\n\
         CC ?= cc\n\
         OPENMP ?= {openmp}\n\
         CFLAGS ?= -O3 {march} -std=c11 -ffp-contract=fast -fno-trapping-math -fno-math-errno\n\
         LDLIBS ?= -lm\n\
         OBJECTS = {objs}\n\n\
         {name}_main: main.o $(OBJECTS)\n\t$(CC) $(CFLAGS) $(OPENMP) $(LDFLAGS) -o $@ main.o $(OBJECTS) $(LDLIBS)\n\n\
         lib{name}.a: $(OBJECTS)\n\t$(AR) rcs $@ $(OBJECTS)\n\n\
         %.o: %.c {name}.h\n\t$(CC) $(CFLAGS) $(OPENMP) -c -o $@ $<\n\n\
         clean:\n\trm -f {name}_main lib{name}.a main.o $(OBJECTS)\n\n\
         .PHONY: clean\n",
        objs = objects.join(" ")
    )
}
