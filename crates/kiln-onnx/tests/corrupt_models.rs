//! Property test: corrupted model bytes (flipped bytes, truncation, random
//! overwrites) make the importer return an error or a valid graph, never
//! panic. Seeds are a hand-built model and, when the ONNX node tests are
//! present, a few real models from them.

use bytes::Bytes;
use kiln_onnx::{load_bytes, ImportOptions};
use proptest::prelude::*;
use std::path::Path;

fn seed_models() -> Vec<Vec<u8>> {
    let dir = std::env::var("KILN_ONNX_NODE_TESTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/onnx-node-tests")
        });
    let mut v: Vec<Vec<u8>> = [
        "test_conv_with_strides_padding",
        "test_lstm_defaults",
        "test_if",
        "test_loop11",
        "test_reshape_extended_dims",
        "test_resize_upsample_scales_linear",
        "test_layer_normalization_2d_axis0",
        "test_gather_0",
    ]
    .iter()
    .filter_map(|c| std::fs::read(dir.join(c).join("model.onnx")).ok())
    .collect();
    v.push(
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-cli/assets/default.onnx"),
        )
        .unwrap(),
    );
    v
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Overwrite(usize, Vec<u8>),
}

fn apply(bytes: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for m in muts {
        if b.is_empty() {
            break;
        }
        match m {
            Mutation::Flip(i, x) => {
                let i = i % b.len();
                b[i] ^= x | 1;
            }
            Mutation::Truncate(n) => b.truncate(n % b.len()),
            Mutation::Overwrite(i, data) => {
                let i = i % b.len();
                for (k, d) in data.iter().enumerate() {
                    if let Some(x) = b.get_mut(i + k) {
                        *x = *d;
                    }
                }
            }
        }
    }
    b
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, d)| Mutation::Overwrite(i, d)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn corrupted_models_never_panic(which in any::<usize>(), muts in prop::collection::vec(mutation(), 1..4)) {
        let seeds = seed_models();
        let bytes = apply(&seeds[which % seeds.len()], &muts);
        // Must return (Ok or Err) without panicking; the error must say something.
        if let Err(e) = load_bytes(Bytes::from(bytes), None, &ImportOptions::default()) {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}
