//! Helpers shared by the `kiln` binary's end-to-end tests.

// Each test binary uses some of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs the `kiln` binary with `args`.
pub fn kiln(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .unwrap()
}

/// The crate's test assets (the default model's input and onnxruntime's output).
pub fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets")
}

/// A fresh directory of this test process named `name`.
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
