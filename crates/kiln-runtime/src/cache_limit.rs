//! kiln's cache directory kept under a size budget: the least recently used
//! entries are removed first.
//!
//! Needs: the cache layout the stores write: every path an entry owns starts
//! with its 64-hex-digit key (`jit`: `<key>.so`, the sources in `<key>/`;
//! `kiln-cpu`'s packed weights: `<key>.packed/`), and [`mark_used`] called
//! on an entry's library (`<key>.so`) each time it is loaded. Guarantees: after [`enforce`], the
//! keyed entries take at most the budget ([`budget_bytes`]), unless the
//! entry named to keep is larger alone; an entry goes whole (all its paths),
//! the one used longest ago first; the kept entry is never removed; paths
//! that are not keyed entries (gemm tunings, `cuda/`, builds in progress
//! under `.build-…`) are neither counted nor removed. Eviction is best
//! effort: a path that vanishes or cannot be removed is skipped, and no
//! error reaches the compile that triggered it. Another process still
//! running a removed library keeps its mapping (Linux frees the file when
//! the last mapping goes); its next start misses and rebuilds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The budget when `$KILN_CACHE_MAX_MB` is unset: 4 GiB (a large model's
/// packed weights take hundreds of MB; a kernel library a few).
pub const DEFAULT_BUDGET_MB: u64 = 4096;

/// Length of an entry's key: a SHA-256 in hex.
const KEY_LEN: usize = 64;

/// Bytes the cache may hold: `$KILN_CACHE_MAX_MB` (MiB; an unparsable value
/// counts as unset), else [`DEFAULT_BUDGET_MB`].
pub fn budget_bytes() -> u64 {
    let mb = std::env::var("KILN_CACHE_MAX_MB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_BUDGET_MB);
    mb.saturating_mul(1 << 20)
}

/// Records that the entry at `path` (one of its files) was used now, so that
/// it is evicted after entries used before it.
pub fn mark_used(path: &Path) {
    if let Ok(file) = std::fs::OpenOptions::new().append(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Removes least recently used entries of `cache_dir` until the cache fits
/// [`budget_bytes`], never the entry `keep` (a key).
pub fn enforce(cache_dir: &Path, keep: &str) {
    enforce_budget(cache_dir, keep, budget_bytes());
}

/// [`enforce`] with an explicit budget.
pub fn enforce_budget(cache_dir: &Path, keep: &str, budget: u64) {
    let mut by_age: Vec<(String, Entry)> = entries(cache_dir).into_iter().collect();
    let mut total: u64 = by_age.iter().map(|(_, e)| e.bytes).sum();
    if total <= budget {
        return;
    }
    by_age.sort_by_key(|(_, e)| e.last_used());
    for (key, entry) in by_age {
        if total <= budget {
            break;
        }
        if key != keep {
            entry.paths.iter().for_each(|p| remove(p));
            total = total.saturating_sub(entry.bytes);
        }
    }
}

/// What one key owns.
#[derive(Default)]
struct Entry {
    paths: Vec<PathBuf>,
    bytes: u64,
    /// Modification time (seconds since the epoch) of its library, which
    /// [`mark_used`] sets at each load.
    library_time: Option<u64>,
    /// The newest modification time among its paths.
    newest: u64,
}

impl Entry {
    /// When it was last used: its library's time, else its newest path's.
    fn last_used(&self) -> u64 {
        self.library_time.unwrap_or(self.newest)
    }
}

/// The keyed entries of `cache_dir` (empty when it cannot be read).
fn entries(cache_dir: &Path) -> BTreeMap<String, Entry> {
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    let Ok(listing) = std::fs::read_dir(cache_dir) else {
        return entries;
    };
    for item in listing.flatten() {
        let name = item.file_name();
        let Some(key) = name.to_str().and_then(entry_key) else {
            continue;
        };
        let Ok(meta) = item.metadata() else {
            continue;
        };
        let entry = entries.entry(key.to_string()).or_default();
        let path = item.path();
        entry.bytes += size_of(&path, &meta);
        entry.newest = entry.newest.max(seconds(&meta));
        if path.extension().is_some_and(|e| e == "so") {
            entry.library_time = Some(seconds(&meta));
        }
        entry.paths.push(path);
    }
    entries
}

/// The key a cache path belongs to: its first 64 characters when they are
/// lowercase hex digits and nothing or `.` follows.
fn entry_key(name: &str) -> Option<&str> {
    let key = name.get(..KEY_LEN)?;
    let hex = key
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let rest = &name[KEY_LEN..];
    (hex && (rest.is_empty() || rest.starts_with('.'))).then_some(key)
}

/// Bytes under `path` (a file, or a directory's files at any depth).
fn size_of(path: &Path, meta: &std::fs::Metadata) -> u64 {
    if !meta.is_dir() {
        return meta.len();
    }
    let Ok(listing) = std::fs::read_dir(path) else {
        return 0;
    };
    listing
        .flatten()
        .filter_map(|item| Some((item.path(), item.metadata().ok()?)))
        .map(|(p, m)| size_of(&p, &m))
        .sum()
}

fn seconds(meta: &std::fs::Metadata) -> u64 {
    let modified = meta.modified().unwrap_or(UNIX_EPOCH);
    modified
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn remove(path: &Path) {
    let _ = match path.is_dir() {
        true => std::fs::remove_dir_all(path),
        false => std::fs::remove_file(path),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(n: u8) -> String {
        format!("{n:02x}").repeat(KEY_LEN / 2)
    }

    /// `<key>.so` of `bytes` bytes, last modified `age` seconds before
    /// 2026-01-01, with a sources directory of one 10-byte file.
    fn entry(dir: &Path, n: u8, bytes: usize, age: u64) {
        let so = dir.join(format!("{}.so", key(n)));
        std::fs::write(&so, vec![0u8; bytes]).unwrap();
        let sources = dir.join(key(n));
        std::fs::create_dir_all(&sources).unwrap();
        std::fs::write(sources.join("piece_0.c"), [b'x'; 10]).unwrap();
        let when = UNIX_EPOCH + Duration::from_secs(1_767_225_600 - age);
        let file = std::fs::OpenOptions::new().append(true).open(&so).unwrap();
        file.set_modified(when).unwrap();
    }

    fn present(dir: &Path, n: u8) -> bool {
        let (so, sources) = (dir.join(format!("{}.so", key(n))), dir.join(key(n)));
        assert_eq!(so.exists(), sources.exists(), "entry {n} removed in part");
        so.exists()
    }

    #[test]
    fn least_recently_used_entries_go_first_and_the_kept_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Oldest first: 3 (kept), 1, 2, 4; 110 bytes each with its sources.
        for (n, age) in [(1, 300), (2, 200), (3, 400), (4, 100)] {
            entry(d, n, 100, age);
        }
        std::fs::write(d.join("tunings.toml"), vec![0u8; 1000]).unwrap();
        std::fs::create_dir_all(d.join(format!(".build-{}-1-0", key(5)))).unwrap();
        enforce_budget(d, &key(3), 330);
        assert_eq!(
            [1, 2, 3, 4].map(|n| present(d, n)),
            [false, true, true, true]
        );
        enforce_budget(d, &key(3), 150);
        assert_eq!(
            [1, 2, 3, 4].map(|n| present(d, n)),
            [false, false, true, false]
        );
        assert!(
            d.join("tunings.toml").exists(),
            "not an entry: never removed"
        );
        assert!(d.join(format!(".build-{}-1-0", key(5))).exists());
    }

    #[test]
    fn a_cache_within_its_budget_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        for n in 1..=3 {
            entry(dir.path(), n, 100, u64::from(n));
        }
        enforce_budget(dir.path(), &key(1), 330);
        assert!((1..=3).all(|n| present(dir.path(), n)));
        enforce_budget(&dir.path().join("missing"), &key(1), 0);
    }

    #[test]
    fn marking_an_entry_used_moves_it_behind_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        entry(d, 1, 100, 200);
        entry(d, 2, 100, 100);
        mark_used(&d.join(format!("{}.so", key(1))));
        enforce_budget(d, &key(3), 150);
        assert_eq!([1, 2].map(|n| present(d, n)), [true, false]);
    }

    #[test]
    fn only_hex_keys_followed_by_nothing_or_a_dot_are_entries() {
        let k = key(0xab);
        assert_eq!(entry_key(&k), Some(k.as_str()));
        assert_eq!(entry_key(&format!("{k}.packed")), Some(k.as_str()));
        assert_eq!(entry_key(&format!("{k}x")), None);
        assert_eq!(entry_key(&k.to_uppercase()), None);
        assert_eq!(entry_key("tunings.toml"), None);
        assert_eq!(entry_key("cuda"), None);
    }
}
