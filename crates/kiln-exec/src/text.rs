//! The execution plan's text form (`kiln compile --emit plan`), one fact a
//! line; `parse.rs` reads it back (`parse_plan(&p.to_string()) == p`).
//!
//! ```text
//! kiln.plan v1
//! alignment 64 threads 2 boxed 0
//! arena 4096 bound 4096 total 8192
//! workspace 1024
//! value %0 "x" f32[1,8] input 0
//! value %1 "w" f32[8,8] weight 0
//! value %2 "y" f32[1,8] arena 0
//! output %2
//! packing kiln_k0 %1 bytes 2048
//! step 0 kernel kiln_k0 (%0 %1 %2) packing 0 workspace 0+1024
//! step 1 alias %3 = %2
//! step 2 interp "TopK has no tensor expression here"
//! exec 0
//! exec kiln_block3 (3 4)
//! ```

use crate::plan::{Exec, ExecPlan, Loc, PlanValue, Step};
use std::fmt::{self, Display, Formatter};

pub(crate) const HEADER: &str = "kiln.plan v1";

impl Display for ExecPlan {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        writeln!(f, "{HEADER}")?;
        writeln!(
            f,
            "alignment {} threads {} boxed {}",
            self.alignment, self.threads, self.boxed
        )?;
        writeln!(
            f,
            "arena {} bound {} total {}",
            self.arena_bytes, self.arena_bound, self.arena_total
        )?;
        writeln!(f, "workspace {}", self.workspace_bytes)?;
        for v in &self.values {
            writeln!(f, "{v}")?;
        }
        for o in &self.outputs {
            writeln!(f, "output %{o}")?;
        }
        for p in &self.packings {
            writeln!(f, "packing {} %{} bytes {}", p.kernel, p.weight, p.bytes)?;
        }
        for (i, s) in self.steps.iter().enumerate() {
            writeln!(f, "step {i} {s}")?;
        }
        for e in &self.exec {
            match e {
                Exec::Step(s) => writeln!(f, "exec {s}")?,
                Exec::Concurrent { func, steps } => writeln!(
                    f,
                    "exec {func} ({})",
                    join(steps.iter().map(|s| s.to_string()))
                )?,
            }
        }
        Ok(())
    }
}

impl Display for PlanValue {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "value %{} {:?} {}", self.id, self.name, self.dtype)?;
        match &self.shape {
            Some(s) => {
                let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
                write!(f, "[{}]", dims.join(","))?
            }
            None => write!(f, "?")?,
        }
        match self.loc {
            Loc::Input(i) => write!(f, " input {i}"),
            Loc::Weight(i) => write!(f, " weight {i}"),
            Loc::Arena(o) => write!(f, " arena {o}"),
            Loc::Boxed(i) => write!(f, " boxed {i}"),
        }
    }
}

impl Display for Step {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Step::Kernel {
                node,
                kernel,
                args,
                packing,
                workspace,
            } => {
                write!(
                    f,
                    "node {node} kernel {kernel} ({})",
                    join(args.iter().map(|a| format!("%{a}")))
                )?;
                if let Some(p) = packing {
                    write!(f, " packing {p}")?;
                }
                if let Some(w) = workspace {
                    write!(f, " workspace {}+{}", w.offset, w.bytes)?;
                }
                Ok(())
            }
            Step::Alias { node, value, of } => write!(f, "node {node} alias %{value} = %{of}"),
            Step::Assembled { node, value } => write!(f, "node {node} assembled %{value}"),
            Step::Interp { node, reason } => write!(f, "node {node} interp {reason:?}"),
        }
    }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(" ")
}
