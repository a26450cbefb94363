//! Gemm tunings measured on this machine (`kiln tune`), kept in the cache
//! directory per CPU model and read by every later compile.
//!
//! A tuning is filed under a key: the hash of the kernel's default C with
//! its own name replaced (`shared_kernels::canonical`), the target's name
//! and vector width. The same kernel in another model, or under another
//! name, finds it; a change in kiln's code generation changes the key, so
//! a stale tuning is never applied to different code.
//!
//! Needs: the cache directory. Guarantees: [`GemmTunings::load`] never
//! fails a compile: a missing file is an empty table, and a line it cannot
//! read is skipped with a warning naming the file and line.

use crate::shared_kernels::canonical;
use kiln_codegen::gemm::Tuning;
use kiln_ir::{Error, Result};
use kiln_target::TargetDesc;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Tunings by kernel key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GemmTunings {
    by_key: BTreeMap<String, Tuning>,
}

impl GemmTunings {
    /// The tunings filed for this CPU under `cache_dir` (empty if none).
    pub fn load(cache_dir: &Path, target: &TargetDesc) -> GemmTunings {
        let path = file(cache_dir, target);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return GemmTunings::default();
        };
        let mut by_key = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let parsed = line
                .split_once(' ')
                .ok_or_else(|| Error::new("expected KEY TUNING"))
                .and_then(|(key, t)| Ok((key.to_string(), Tuning::parse(t)?)));
            match parsed {
                Ok((key, t)) => {
                    by_key.insert(key, t);
                }
                Err(e) => eprintln!("warning: {}:{}: skipped: {e}", path.display(), n + 1),
            }
        }
        GemmTunings { by_key }
    }

    /// Writes the table to this CPU's file under `cache_dir`; returns it.
    pub fn save(&self, cache_dir: &Path, target: &TargetDesc) -> Result<PathBuf> {
        let path = file(cache_dir, target);
        let mut text = format!(
            "# kiln gemm tunings (kiln tune) for {}, {}-byte vectors: KEY TUNING\n",
            kiln_target::host_model(),
            target.vector_bytes
        );
        for (key, t) in &self.by_key {
            text += &format!("{key} {}\n", t.to_text());
        }
        let dir = path.parent().unwrap_or(cache_dir);
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
        Ok(path)
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn get(&self, key: &str) -> Option<&Tuning> {
        self.by_key.get(key)
    }

    pub fn insert(&mut self, key: String, tuning: Tuning) {
        self.by_key.insert(key, tuning);
    }
}

/// The key of kernel `name` whose default C is `c`, on `target`.
pub fn kernel_key(c: &str, name: &str, target: &TargetDesc) -> String {
    let mut h = Sha256::new();
    h.update(canonical(c, name).as_bytes());
    h.update(
        format!(
            "\n{} {} {:?}",
            target.name, target.vector_bytes, target.cflags
        )
        .as_bytes(),
    );
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `<cache>/tuning/<CPU model>-<vector bytes>.txt`, the model made a file name.
fn file(cache_dir: &Path, target: &TargetDesc) -> PathBuf {
    let model: String = kiln_target::host_model()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let model = model
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    cache_dir
        .join("tuning")
        .join(format!("{model}-v{}.txt", target.vector_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_codegen::gemm::KernelShape;

    #[test]
    fn a_saved_table_loads_back_and_bad_lines_are_skipped() {
        let dir = std::env::temp_dir().join(format!("kiln-tuning-{}", std::process::id()));
        let target = kiln_target::host();
        let mut t = GemmTunings::default();
        let tuning = Tuning {
            shape: Some(KernelShape { mr: 6, nr: 16 }),
            kc: Some(128),
            ..Tuning::default()
        };
        t.insert("abc".into(), tuning.clone());
        let path = t.save(&dir, &target).unwrap();
        assert_eq!(GemmTunings::load(&dir, &target), t);
        let text = std::fs::read_to_string(&path).unwrap() + "broken\nxyz kc=lots\n";
        std::fs::write(&path, text).unwrap();
        assert_eq!(GemmTunings::load(&dir, &target).get("abc"), Some(&tuning));
        assert_eq!(GemmTunings::load(&dir, &target).len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(GemmTunings::load(&dir, &target).is_empty());
    }

    #[test]
    fn keys_ignore_the_kernels_name_but_not_its_code() {
        let target = kiln_target::host();
        let a = kernel_key("int k1(void) { return 1; }", "k1", &target);
        assert_eq!(a, kernel_key("int k9(void) { return 1; }", "k9", &target));
        assert_ne!(a, kernel_key("int k9(void) { return 2; }", "k9", &target));
    }
}
