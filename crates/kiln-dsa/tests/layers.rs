//! AlexNet- and VGG-19-like layers (`tests/nests/*.nest`) planned by
//! swTVM's Algorithms 1–3. Prints the DMA table of docs/dsa.md:
//! `cargo test -p kiln-dsa --test layers -- --nocapture`.

use kiln_dsa::{parse_nest, plan_kernel, DsaDesc, KernelPlan, Nest};
use std::path::Path;

fn layers() -> Vec<Nest> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nests");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "nest"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            parse_nest(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

fn order_names(nest: &Nest, order: &[usize]) -> String {
    let names: Vec<&str> = order.iter().map(|&v| nest.loops[v].var.as_str()).collect();
    names.join(",")
}

fn table_row(nest: &Nest, plan: &KernelPlan) -> String {
    let buffers: Vec<String> = nest
        .loops
        .iter()
        .zip(&plan.buffers.sizes)
        .map(|(l, size)| format!("{}={size}", l.var))
        .collect();
    let mb = |bytes: u64| bytes as f64 / 1e6;
    format!(
        "| {} | {} | {:.2} | {} → {} | {} | {} | {:.1} | {:.1} |",
        nest.name,
        buffers.join(" "),
        plan.buffers.usage_bytes as f64 / 1024.0,
        order_names(nest, &plan.given_order),
        order_names(nest, &plan.order),
        plan.before.transfers,
        plan.after.transfers,
        mb(plan.before.bytes),
        mb(plan.after.bytes),
    )
}

/// The invariants of a plan: tiles fit, reordering never adds transfers,
/// one DMA location per tensor.
fn check(nest: &Nest, desc: &DsaDesc, plan: &KernelPlan) {
    let name = &nest.name;
    assert!(
        plan.buffers.usage_bytes <= desc.local_buffer.bytes,
        "{name} on {}",
        desc.name
    );
    assert!(
        plan.after.transfers <= plan.before.transfers,
        "{name} on {}",
        desc.name
    );
    let tensors: Vec<usize> = plan
        .after
        .per_tensor
        .iter()
        .map(|t| t.placement.tensor)
        .collect();
    assert_eq!(
        tensors,
        (0..nest.tensors.len()).collect::<Vec<_>>(),
        "{name}"
    );
}

#[test]
fn dma_table_for_alexnet_and_vgg19_on_sunway() {
    let desc = DsaDesc::preset("sunway-cg").unwrap();
    println!("| layer | buffer per loop | LDM KB | outer loops before → after Alg. 2 | DMA before | DMA after | MB before | MB after |");
    println!("|---|---|---|---|---|---|---|---|");
    let layers = layers();
    assert_eq!(layers.len(), 8);
    for nest in &layers {
        let plan = plan_kernel(nest, &desc).unwrap();
        check(nest, &desc, &plan);
        println!("{}", table_row(nest, &plan));
    }
}

#[test]
fn every_layer_plans_on_every_preset() {
    for name in DsaDesc::preset_names() {
        let desc = DsaDesc::preset(name).unwrap();
        for nest in &layers() {
            check(nest, &desc, &plan_kernel(nest, &desc).unwrap());
        }
    }
}
