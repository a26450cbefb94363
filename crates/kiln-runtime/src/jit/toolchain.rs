//! Finding the C compiler named by `$CC` and telling compilers apart without running them.
//!
//! Needs: a `$CC`-style string: a program (a path, or a name looked up on `$PATH`) optionally
//! followed by arguments (`"clang --target=aarch64-linux-gnu"`), split at whitespace.
//! Guarantees: `Compiler::find` fails with the "no C compiler found" message when the program
//! does not exist; `identity` describes the compiler from the file system alone (resolved
//! path, size, modification time), so a cache lookup never spawns a process. Upgrading the
//! compiler changes its file and therefore the identity. A wrapper such as ccache is identified
//! by the wrapper's own file, not by the compiler behind it.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use kiln_ir::{Error, Result};

/// A C compiler command resolved to a file.
#[derive(Debug, Clone)]
pub(crate) struct Compiler {
    /// The `$CC` string as given, for messages.
    pub spec: String,
    pub leading_args: Vec<String>,
    pub resolved: PathBuf,
}

impl Compiler {
    pub fn find(cc: &str) -> Result<Self> {
        let mut words = cc.split_whitespace().map(str::to_string);
        let program = words.next().ok_or_else(|| no_compiler_error(cc))?;
        let resolved = resolve_program(&program).ok_or_else(|| no_compiler_error(cc))?;
        Ok(Compiler {
            spec: cc.to_string(),
            leading_args: words.collect(),
            resolved,
        })
    }

    /// What makes this compiler's output differ from another's, read from the file system.
    pub fn identity(&self) -> String {
        let canonical = std::fs::canonicalize(&self.resolved).unwrap_or(self.resolved.clone());
        let meta = std::fs::metadata(&canonical).ok();
        let size = meta.as_ref().map_or(0, |m| m.len());
        let mtime_ns = meta
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        format!(
            "cc={} path={} size={size} mtime_ns={mtime_ns}",
            self.spec,
            canonical.display()
        )
    }

    /// A command running this compiler with its leading arguments.
    pub fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.resolved);
        command.args(&self.leading_args);
        command
    }
}

pub(crate) fn no_compiler_error(cc: &str) -> Error {
    let tried = if cc.trim().is_empty() { "cc" } else { cc };
    Error::new(format!(
        "no C compiler found: tried `{tried}`; set $CC to a C11 compiler (gcc or clang)"
    ))
}

/// A program containing a slash names a file; any other name is looked up on `$PATH` like a
/// shell does (first executable match).
fn resolve_program(program: &str) -> Option<PathBuf> {
    if program.contains(std::path::MAIN_SEPARATOR) {
        let path = PathBuf::from(program);
        return path.is_file().then_some(path);
    }
    let search = std::env::var_os("PATH")?;
    std::env::split_paths(&search)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable_file(candidate))
}

#[cfg(unix)]
fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable_file(path: &Path) -> bool {
    path.is_file()
}

/// First line of `cc --version` (e.g. "gcc (Debian 12.2.0-14) 12.2.0"), for reports.
/// Runs the compiler once per `$CC` string per process.
pub fn compiler_version(cc: &str) -> Result<String> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static SEEN: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(version) = seen.lock().ok().and_then(|m| m.get(cc).cloned()) {
        return Ok(version);
    }
    let compiler = Compiler::find(cc)?;
    let output = compiler
        .command()
        .arg("--version")
        .output()
        .map_err(|e| Error::new(format!("cannot run C compiler `{cc}`: {e}")))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text.lines().next().unwrap_or("").trim().to_string();
    if let Ok(mut map) = seen.lock() {
        map.insert(cc.to_string(), version.clone());
    }
    Ok(version)
}
