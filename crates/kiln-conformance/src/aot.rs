//! The ahead-of-time exporter as a backend under test: each model is
//! exported (`kiln_cpu::aot`), its example program built by `make` with
//! the given compiler and flags, and run (optionally through an emulator
//! such as qemu) on the inputs written as `.npy`; its `.npy` outputs are
//! the results.

use crate::{import, Backend};
use kiln_cpu::aot::{self, AotOptions, WeightsMode};
use kiln_ir::{npy, Error, Result, Tensor};
use kiln_target::CpuPreset;
use std::path::Path;
use std::process::Command;

/// How to export, build and run.
pub struct Aot {
    pub preset: CpuPreset,
    pub openmp: bool,
    pub weights: WeightsMode,
    /// The C compiler `make` uses.
    pub cc: String,
    /// `CFLAGS` for `make` (warnings are errors in the tests).
    pub cflags: String,
    pub ldflags: String,
    /// Runs the program: e.g. `["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]`.
    pub runner: Vec<String>,
}

impl Aot {
    /// The host's compiler (`$CC`, else `cc`) and preset, with OpenMP,
    /// `-Wall -Wextra -Werror`.
    pub fn host() -> Aot {
        let preset = aot::host_preset();
        Aot {
            preset,
            openmp: true,
            weights: WeightsMode::File,
            cc: std::env::var("CC").unwrap_or_else(|_| "cc".into()),
            cflags: format!(
                "-O1 {} -std=c11 -Wall -Wextra -Werror",
                preset.desc(1).cflags.join(" ")
            ),
            ldflags: String::new(),
            runner: Vec::new(),
        }
    }

    /// Exports `g` into `dir` and builds its example program; returns the
    /// export's name.
    pub fn export_and_build(&self, g: &kiln_ir::Graph, dir: &Path) -> Result<String> {
        let options = AotOptions {
            name: "model".into(),
            preset: self.preset,
            threads: 2,
            openmp: self.openmp,
            weights: self.weights,
        };
        let cpu = kiln_cpu::CpuOptions {
            threads: 1,
            ..Default::default()
        };
        aot::export(g, &cpu, &options, dir)?;
        let openmp = if self.openmp { "-fopenmp" } else { "" };
        let out = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(dir)
            .arg(format!("CC={}", self.cc))
            .arg(format!("CFLAGS={}", self.cflags))
            .arg(format!("LDFLAGS={}", self.ldflags))
            .arg(format!("OPENMP={openmp}"))
            .output()
            .map_err(|e| Error::new(format!("cannot run make: {e}")))?;
        if !out.status.success() {
            return Err(Error::new(format!(
                "building the export in {} failed:\n{}{}",
                dir.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(options.name)
    }

    /// Runs the built example program of export `name` in `dir`.
    pub fn run_built(
        &self,
        dir: &Path,
        name: &str,
        inputs: &[Tensor],
        outputs: usize,
    ) -> Result<Vec<Tensor>> {
        let mut args = Vec::new();
        for (k, t) in inputs.iter().enumerate() {
            let path = dir.join(format!("input_{k}.npy"));
            npy::write(&path, t)?;
            args.push(path);
        }
        let out_dir = dir.join("out");
        std::fs::create_dir_all(&out_dir).map_err(|e| Error::new(e.to_string()))?;
        let program = dir.join(format!("{name}_main"));
        let mut cmd = match self.runner.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&program);
                c
            }
            None => Command::new(&program),
        };
        let out = cmd
            .args(&args)
            .arg(&out_dir)
            .env("OMP_NUM_THREADS", "1")
            .output()
            .map_err(|e| Error::new(format!("cannot run {}: {e}", program.display())))?;
        if !out.status.success() {
            return Err(Error::new(format!(
                "{} failed: {}",
                program.display(),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        (0..outputs)
            .map(|k| npy::read(&out_dir.join(format!("output_{k}.npy"))))
            .collect()
    }
}

impl Backend for Aot {
    fn name(&self) -> &str {
        "aot"
    }

    fn run(&self, model: &Path, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut g = import(model, inputs)?;
        kiln_passes::optimize(&mut g, &kiln_passes::Options::default())?;
        let dir = tempfile::tempdir().map_err(|e| Error::new(e.to_string()))?;
        let name = self.export_and_build(&g, dir.path())?;
        self.run_built(dir.path(), &name, inputs, g.outputs.len())
    }
}
