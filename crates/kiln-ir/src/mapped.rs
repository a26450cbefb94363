//! Memory-mapped files as [`Bytes`], and giving back the resident pages of
//! a range that has been read.
//!
//! A model's weights stay in its file's mapping until a backend copies or
//! packs them; once it has, the pages it touched are the same bytes twice
//! in the process's resident memory. [`release_resident`] drops the
//! mapping's pages of such a range (`madvise(MADV_DONTNEED)`): the data is
//! still the file's, and a later read faults it in again, so nothing
//! changes but the resident size.
//!
//! Needs nothing. Guarantees: [`release_resident`] touches only memory
//! that lies inside a live mapping made by [`map_file`] (it looks the
//! address up in the table of live mappings), so it can never discard
//! memory the process wrote.

use bytes::Bytes;
use std::fs::File;
use std::sync::Mutex;

/// Start and length of every live mapping made by [`map_file`].
static LIVE: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// The owner behind a mapped file's [`Bytes`]: unregisters on drop.
struct Mapping(memmap2::Mmap);

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let start = self.0.as_ptr() as usize;
        live().retain(|&(s, _)| s != start);
    }
}

fn live() -> std::sync::MutexGuard<'static, Vec<(usize, usize)>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Maps `file` read-only (an empty file gives empty bytes).
pub fn map_file(file: &File) -> std::io::Result<Bytes> {
    if file.metadata()?.len() == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the map is read-only; kiln does not modify model files while
    // they are loaded (a concurrent truncation by another process is the
    // usual mmap caveat).
    let map = unsafe { memmap2::Mmap::map(file) }?;
    live().push((map.as_ptr() as usize, map.len()));
    Ok(Bytes::from_owner(Mapping(map)))
}

/// Drops the resident pages wholly inside `range` when it lies in a live
/// mapping made by [`map_file`]; does nothing otherwise (heap memory, or a
/// platform without `madvise`).
pub fn release_resident(range: &[u8]) {
    let (start, end) = (
        range.as_ptr() as usize,
        range.as_ptr() as usize + range.len(),
    );
    let table = live();
    if !table.iter().any(|&(s, len)| s <= start && end <= s + len) {
        return;
    }
    let page = page_size();
    let first = start.div_ceil(page) * page;
    let last = end / page * page;
    if last > first {
        discard(first, last - first);
    }
}

#[cfg(unix)]
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

#[cfg(not(unix))]
fn page_size() -> usize {
    4096
}

#[cfg(unix)]
fn discard(addr: usize, len: usize) {
    // SAFETY: [addr, addr + len) is whole pages of a live read-only file
    // mapping (checked by the caller under the table's lock, which a
    // mapping's drop also takes): discarding them only drops page-table
    // entries; the next read faults the file's bytes back in.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
}

#[cfg(not(unix))]
fn discard(_addr: usize, _len: usize) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Resident kB of the mapping holding `b`, from `/proc/self/smaps`.
    fn resident_kb(b: &[u8]) -> usize {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let at = b.as_ptr() as usize;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = lo <= at && at < hi;
                        continue;
                    }
                }
            }
            if let Some(kb) = line.strip_prefix("Rss:").filter(|_| inside) {
                return kb.trim().trim_end_matches(" kB").trim().parse().unwrap();
            }
        }
        panic!("no mapping holds the bytes")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn released_pages_read_back_the_file() {
        let dir = std::env::temp_dir().join(format!("kiln-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data.bin");
        let data: Vec<u8> = (0..1 << 20).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let bytes = map_file(&File::open(&path).unwrap()).unwrap();
        let middle = bytes.slice(10_000..900_000);
        assert_eq!(&middle[..], &data[10_000..900_000]);
        let before = resident_kb(&bytes);
        release_resident(&middle);
        let after = resident_kb(&bytes);
        assert!(
            before >= 850 && after < 100,
            "resident {before} kB -> {after} kB"
        );
        assert_eq!(&middle[..], &data[10_000..900_000]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn heap_memory_is_left_alone() {
        let heap = vec![7u8; 1 << 20];
        release_resident(&heap);
        assert!(heap.iter().all(|&b| b == 7));
    }
}
