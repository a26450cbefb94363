//! Weight packings kept on disk beside the kernel library, so that a cached start maps them
//! instead of packing again.
//!
//! Packing a large model's weights writes hundreds of megabytes of fresh memory at every start
//! (BERT-base: 340 MB), and the first touch of each fresh page (allocation, zeroing, accounting
//! in the kernel) costs more than the packing's own arithmetic. Pages of a file the page cache
//! already holds are only mapped (BENCHMARKS.md, session 27, "Cached start and memory").
//!
//! Needs: the loaded library (its file name is the key of the C it was built from), each
//! packing's kernel, the byte size the library's packing function asks for, and the bytes of
//! every weight the packing reads.
//!
//! Guarantees: [`PackedCache::load`] maps only a file written whole under a key over the
//! library's key, the kernels' names and every byte of every weight they pack (xxh3-128), and
//! only when its table gives each packing exactly the size the library asks for; a missing,
//! short or foreign file or any I/O error is a miss, and the caller packs as before. A file is
//! written to a temporary name and renamed into place, never changed after, so a mapping never
//! sees a partial file. Like the kernel library's, the file is not synced to disk (that took
//! longer than the rest of the store): a crash before the data is written back can leave a file
//! shorter than its table says, which is a miss (a file system that exposed unwritten blocks as
//! zeros after a crash would need a sync here). Writing is best effort: a cache directory that
//! cannot be written costs the next start its packing, nothing else. The file belongs to the
//! library's cache entry (`<library key>.packed/`): a store keeps the cache under its budget
//! (`kiln_runtime::cache_limit`), and eviction removes it with the library.

use crate::memory::AlignedBytes;
use kiln_runtime::jit::Library;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xxhash_rust::xxh3::Xxh3;

/// Models packing fewer bytes than this pack at every start: their packing takes a few
/// milliseconds, less than a file's bookkeeping is worth.
pub const CACHED_FROM_BYTES: usize = 16 << 20;

/// First bytes of a packed-weights file; bumped when the layout below changes.
const MAGIC: &[u8; 16] = b"kiln-packed-v1\0\0";

/// Packings start at multiples of this within the file (the kernels' loads are aligned to it;
/// a mapping starts on a page).
const ALIGN: usize = 64;

/// One packed weight: packed at this start, or mapped from the cache.
pub enum Packed {
    Owned(AlignedBytes),
    Mapped {
        file: Arc<memmap2::Mmap>,
        offset: usize,
        len: usize,
    },
}

impl Packed {
    pub fn ptr(&self) -> *const u8 {
        match self {
            Packed::Owned(bytes) => bytes.ptr_const(0),
            // SAFETY: `offset + len` lies inside the mapping (checked by `PackedCache::load`).
            Packed::Mapped { file, offset, .. } => unsafe { file.as_ptr().add(*offset) },
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Packed::Owned(bytes) => bytes.len(),
            Packed::Mapped { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self, Packed::Mapped { .. })
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Packed::Owned(bytes) => bytes.bytes(),
            Packed::Mapped { file, offset, len } => &file[*offset..offset + len],
        }
    }
}

/// Where one model's packings are kept, and the sizes they must have.
pub struct PackedCache {
    path: PathBuf,
    sizes: Vec<usize>,
    /// The library's cache directory and key, under whose budget the file is kept.
    cache_dir: PathBuf,
    library_key: String,
}

impl PackedCache {
    /// The cache entry for packings of `sizes` bytes whose kernels and weights hash to
    /// `digests` (one [`packing_digest`] per packing, in order), beside `library`.
    pub fn new(library: &Library, digests: &[u128], sizes: Vec<usize>) -> PackedCache {
        let mut key = Xxh3::new();
        let library_key = library.path().file_stem().unwrap_or_default();
        key.update(library_key.as_encoded_bytes());
        let cache_dir = library
            .path()
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf();
        for digest in digests {
            key.update(&digest.to_le_bytes());
        }
        let dir = library.path().with_extension("packed");
        PackedCache {
            path: dir.join(format!("{:032x}.bin", key.digest128())),
            sizes,
            cache_dir,
            library_key: library_key.to_string_lossy().into_owned(),
        }
    }

    /// The stored packings, mapped, when the file exists and its table matches.
    pub fn load(&self) -> Option<Vec<Packed>> {
        let file = std::fs::File::open(&self.path).ok()?;
        // SAFETY: read-only; entries are renamed into place whole and never modified (see the
        // module doc), so the file does not change under the mapping.
        let map = Arc::new(unsafe { memmap2::MmapOptions::new().populate().map(&file) }.ok()?);
        let spans = layout(&self.sizes);
        let table = table_bytes(&spans);
        if map.len() < table.len() || map[..table.len()] != table[..] {
            return None;
        }
        let end = spans
            .last()
            .map_or(table.len(), |&(offset, len)| offset + len);
        if map.len() < end {
            return None;
        }
        Some(
            spans
                .into_iter()
                .map(|(offset, len)| Packed::Mapped {
                    file: Arc::clone(&map),
                    offset,
                    len,
                })
                .collect(),
        )
    }

    /// Writes `packed` (in the order of the sizes given to [`PackedCache::new`]) for later
    /// starts; gives up quietly on any error.
    pub fn store(&self, packed: &[AlignedBytes]) {
        let sizes: Vec<usize> = packed.iter().map(AlignedBytes::len).collect();
        if sizes != self.sizes {
            return;
        }
        if write_whole(&self.path, &layout(&sizes), packed).is_ok() {
            kiln_runtime::cache_limit::enforce(&self.cache_dir, &self.library_key);
        }
    }
}

/// The hash of one packing's inputs: its kernel's name and, in argument order, the bytes of
/// each weight it reads (`None` for arguments that are not weights).
pub fn packing_digest<'a>(kernel: &str, weights: impl Iterator<Item = Option<&'a [u8]>>) -> u128 {
    let mut hash = Xxh3::new();
    hash.update(&(kernel.len() as u64).to_le_bytes());
    hash.update(kernel.as_bytes());
    for bytes in weights {
        match bytes {
            None => hash.update(&u64::MAX.to_le_bytes()),
            Some(bytes) => {
                hash.update(&(bytes.len() as u64).to_le_bytes());
                hash.update(bytes);
            }
        }
    }
    hash.digest128()
}

/// Offset and length of each packing in the file, after the table.
fn layout(sizes: &[usize]) -> Vec<(usize, usize)> {
    let mut offset = (MAGIC.len() + 8 + 16 * sizes.len()).next_multiple_of(ALIGN);
    sizes
        .iter()
        .map(|&len| {
            let span = (offset, len);
            offset = (offset + len).next_multiple_of(ALIGN);
            span
        })
        .collect()
}

/// The file's head: the magic, the count, then each packing's offset and length.
fn table_bytes(spans: &[(usize, usize)]) -> Vec<u8> {
    let mut table = MAGIC.to_vec();
    table.extend((spans.len() as u64).to_le_bytes());
    for &(offset, len) in spans {
        table.extend((offset as u64).to_le_bytes());
        table.extend((len as u64).to_le_bytes());
    }
    table
}

/// Writes the table and the packings to a temporary file beside `path`, then renames it there.
fn write_whole(
    path: &Path,
    spans: &[(usize, usize)],
    packed: &[AlignedBytes],
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    let written = (|| {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&temporary)?);
        let table = table_bytes(spans);
        out.write_all(&table)?;
        let mut at = table.len();
        for (&(offset, _), bytes) in spans.iter().zip(packed) {
            out.write_all(&vec![0; offset - at])?;
            out.write_all(bytes.bytes())?;
            at = offset + bytes.len();
        }
        out.flush()
    })();
    match written {
        Ok(()) => std::fs::rename(&temporary, path),
        Err(e) => {
            let _ = std::fs::remove_file(&temporary);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packings of `sizes` bytes, each filled with its own byte pattern.
    fn packings(sizes: &[usize]) -> Vec<AlignedBytes> {
        sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                let mut bytes = AlignedBytes::new(n);
                for i in 0..bytes.len() {
                    // SAFETY: `i` is inside the buffer.
                    unsafe { *bytes.ptr(i) = (i * 31 + k * 7) as u8 };
                }
                bytes
            })
            .collect()
    }

    fn entry(dir: &Path, sizes: &[usize]) -> PackedCache {
        PackedCache {
            path: dir.join("entry.bin"),
            sizes: sizes.to_vec(),
            cache_dir: dir.to_path_buf(),
            library_key: "test".to_string(),
        }
    }

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-{name}-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        dir
    }

    #[test]
    fn stored_packings_load_back_byte_for_byte_and_aligned() {
        let dir = scratch_dir("packed-round-trip");
        let sizes = [64, 4096, 192];
        let stored = packings(&sizes);
        let cache = entry(&dir, &sizes);
        assert!(cache.load().is_none(), "nothing stored yet");
        cache.store(&stored);
        let loaded = cache.load().expect("a hit after storing");
        for (got, want) in loaded.iter().zip(&stored) {
            assert!(got.is_mapped());
            assert_eq!(got.bytes(), want.bytes());
            assert_eq!(got.ptr() as usize % ALIGN, 0);
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn other_sizes_and_short_files_are_misses() {
        let dir = scratch_dir("packed-misses");
        let cache = entry(&dir, &[64, 128]);
        cache.store(&packings(&[64, 128]));
        assert!(entry(&dir, &[64, 192]).load().is_none(), "another table");
        assert!(entry(&dir, &[64]).load().is_none(), "another count");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&cache.path)
            .unwrap();
        let full = file.metadata().unwrap().len();
        file.set_len(full - 1).unwrap();
        assert!(cache.load().is_none(), "a truncated file");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn packings_of_other_sizes_than_the_entrys_are_not_stored() {
        let dir = scratch_dir("packed-not-stored");
        let cache = entry(&dir, &[64]);
        cache.store(&packings(&[128]));
        assert!(!cache.path.exists());
    }

    #[test]
    fn the_digest_tells_every_byte_and_argument_place_apart() {
        let (a, b) = ([1u8, 2, 3], [1u8, 2, 4]);
        let digest =
            |kernel, slots: &[Option<&[u8]>]| packing_digest(kernel, slots.iter().copied());
        let base = digest("k1", &[None, Some(&a)]);
        assert_eq!(base, digest("k1", &[None, Some(&a)]));
        assert_ne!(base, digest("k1", &[None, Some(&b)]), "a changed byte");
        assert_ne!(base, digest("k2", &[None, Some(&a)]), "another kernel");
        assert_ne!(base, digest("k1", &[Some(&a), None]), "another argument");
        assert_ne!(
            digest("k1", &[None]),
            digest("k1", &[Some(&[])]),
            "empty is not absent"
        );
    }
}
