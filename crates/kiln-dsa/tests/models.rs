//! Table 3 in kind on ONNX models (ignored: needs `models/`, which is not
//! in git; `KILN_MODELS=DIR` points elsewhere). At batch 1, where the
//! tensors fit, the per-layer baseline keeps every kernel output in DDR
//! and GraphTurbo only the graph's outputs (a graph output split into
//! instances counts once per instance).
//!
//! `cargo test -p kiln-dsa --test models -- --ignored --nocapture`

use kiln_dsa::scope::Scope;
use kiln_dsa::{graphturbo, per_layer, DsaDesc};
use std::path::PathBuf;

fn models_dir() -> PathBuf {
    std::env::var("KILN_MODELS").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models"),
        PathBuf::from,
    )
}

#[test]
#[ignore = "needs the ONNX models in models/"]
fn table3_in_kind_at_batch_one() {
    let desc = DsaDesc::preset("stcp920").unwrap();
    for name in ["resnet50", "mobilenet_v2", "bert", "vit", "densenet121"] {
        let path = models_dir().join(name).join("model.onnx");
        if !path.exists() {
            eprintln!("skipped: {} not present", path.display());
            continue;
        }
        let mut g = kiln_onnx::load(&path, &Default::default()).unwrap().graph;
        kiln_passes::optimize(&mut g, &Default::default()).unwrap();
        let (base, turbo) = (
            per_layer(&g, &desc).unwrap(),
            graphturbo(&g, &desc).unwrap(),
        );
        let (b, t) = (base.output_counts(), turbo.output_counts());
        println!("{name}: per-layer {b:?}, graphturbo {t:?}");
        assert_eq!(b.ddr, base.instances.len());
        let outputs: Vec<&str> = g.outputs.iter().map(|&v| g.name(v)).collect();
        let off_chip = turbo.instances.iter().filter(|i| i.scope == Scope::Ddr);
        assert!(
            off_chip.clone().count() == t.ddr
                && off_chip
                    .clone()
                    .all(|i| outputs.contains(&i.output.as_str())),
            "{name}: only graph outputs in DDR"
        );
    }
}
