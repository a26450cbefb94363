//! The whole compile pipeline on generated graphs: the first 8 bytes seed
//! kiln-conformance's structure-aware generator (valid-but-odd graphs: 50+
//! op types, several dtypes, 0- and 1-sized dimensions), the next two
//! bytes pick its node count, and the graph then goes through the graph
//! passes, every fusion planner, lowering, scheduling and C generation (no
//! C compiler runs). Any stage may refuse the graph with an error; none
//! may panic. Byte mutation of real models is the `pipeline` target.
#![no_main]
use kiln_conformance::random_graph::{generate, GenOptions};
use libfuzzer_sys::fuzz_target;

#[path = "compile_all.rs"]
mod compile_all;

fuzz_target!(|data: &[u8]| {
    kiln_ir::limits::set_max_memory(1 << 28);
    let mut seed = [0u8; 8];
    let n = data.len().min(8);
    seed[..n].copy_from_slice(&data[..n]);
    let byte = |i: usize| data.get(i).copied().unwrap_or(0) as usize;
    let min_nodes = 1 + byte(8) % 8;
    let opts = GenOptions {
        min_nodes,
        max_nodes: min_nodes + byte(9) % 16,
        ..GenOptions::default()
    };
    compile_all::compile_all(generate(u64::from_le_bytes(seed), &opts));
});
