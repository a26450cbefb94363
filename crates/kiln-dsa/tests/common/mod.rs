//! Loading the paper's example graphs (`tests/graphs/*.kiln`).
//!
//! To keep the files short, weights are written as graph inputs whose
//! names start with `w` (`%w1`, `%wb`); the loader turns them into zero
//! initializers, which is all the scheduler needs of a weight (it is not
//! part of any working set, §2.2).

#![allow(dead_code)]

use kiln_ir::{Graph, Initializer, Result, Tensor};
use std::path::{Path, PathBuf};

/// Parses `src`, makes the `%w…` inputs weights, infers types.
pub fn load(src: &str) -> Result<Graph> {
    let mut g = kiln_ir::text::parse(src)?;
    let weights: Vec<_> = g
        .inputs
        .iter()
        .copied()
        .filter(|&v| g.name(v).starts_with('w'))
        .collect();
    for v in weights {
        let ty = g.ty(v).clone();
        let shape = ty.shape.clone().unwrap_or_default();
        g.initializers
            .insert(v, Initializer::Tensor(Tensor::zeros(ty.dtype, shape)));
        g.inputs.retain(|&i| i != v);
    }
    kiln_ops::infer::infer_graph(&mut g, &|_| None)?;
    kiln_ir::verify::verify(&g)?;
    Ok(g)
}

/// The graph `tests/graphs/<name>.kiln`.
pub fn graph(name: &str) -> Graph {
    let path = dir().join(format!("{name}.kiln"));
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    load(&src).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/graphs")
}

/// Every `tests/graphs/*.kiln`, sorted.
pub fn cases() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("tests/graphs")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "kiln"))
        .collect();
    v.sort();
    v
}
