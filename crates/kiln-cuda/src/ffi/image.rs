//! Checks that a module image is one the driver can read without running
//! past its end. `cuModuleLoadData` takes a pointer and no length: PTX is
//! read up to its NUL, and a cubin is read where its ELF headers point.
//!
//! Needs: nothing. Guarantees: `check` accepts NUL-terminated text (PTX)
//! and 64-bit little-endian ELF whose header, program headers, section
//! headers and section contents all lie inside the slice; anything else is
//! an `Err` (never a panic), so truncated or foreign bytes never reach the
//! driver.

use kiln_ir::{bail, Result};

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const ELF_HEADER: usize = 64;
const SHT_NOBITS: u32 = 8;

/// `Ok` when `image` is safe to hand to `cuModuleLoadData`.
pub fn check(image: &[u8]) -> Result<()> {
    if image.starts_with(ELF_MAGIC) {
        return check_elf(image);
    }
    if image.contains(&0) {
        return Ok(()); // PTX: the driver stops at the first NUL.
    }
    bail!(
        "module image of {} bytes is neither NUL-terminated PTX nor a cubin (ELF)",
        image.len()
    )
}

fn check_elf(elf: &[u8]) -> Result<()> {
    if elf.len() < ELF_HEADER || elf[4] != 2 || elf[5] != 1 {
        bail!("cubin is not a complete 64-bit little-endian ELF header");
    }
    let phoff = read_u64(elf, 0x20)?;
    let shoff = read_u64(elf, 0x28)?;
    let (phentsize, phnum) = (read_u16(elf, 0x36)?, read_u16(elf, 0x38)?);
    let (shentsize, shnum) = (read_u16(elf, 0x3a)?, read_u16(elf, 0x3c)?);
    let phs = table(elf, phoff, phentsize, phnum, 56, "program header")?;
    for ph in phs {
        within(elf, read_u64(ph, 0x08)?, read_u64(ph, 0x20)?, "segment")?;
    }
    let shs = table(elf, shoff, shentsize, shnum, 64, "section header")?;
    for sh in shs {
        if read_u32(sh, 0x04)? != SHT_NOBITS {
            within(elf, read_u64(sh, 0x18)?, read_u64(sh, 0x20)?, "section")?;
        }
    }
    Ok(())
}

/// The entries of a header table, each checked to lie inside `elf`.
fn table<'a>(
    elf: &'a [u8],
    offset: u64,
    entsize: u16,
    count: u16,
    min_entsize: usize,
    what: &str,
) -> Result<Vec<&'a [u8]>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let entsize = entsize as usize;
    if entsize < min_entsize {
        bail!("cubin {what} entries are {entsize} bytes, expected at least {min_entsize}");
    }
    let start = within(elf, offset, entsize as u64 * count as u64, what)?;
    Ok((0..count as usize)
        .map(|i| &elf[start + i * entsize..start + (i + 1) * entsize])
        .collect())
}

/// `offset..offset + len` as a start index, if it lies inside `elf`.
fn within(elf: &[u8], offset: u64, len: u64, what: &str) -> Result<usize> {
    match offset.checked_add(len) {
        Some(end) if end <= elf.len() as u64 => Ok(offset as usize),
        _ => bail!(
            "cubin {what} at {offset} ({len} bytes) runs past the image's {} bytes",
            elf.len()
        ),
    }
}

fn read_u16(b: &[u8], at: usize) -> Result<u16> {
    Ok(u16::from_le_bytes(field(b, at)?))
}

fn read_u32(b: &[u8], at: usize) -> Result<u32> {
    Ok(u32::from_le_bytes(field(b, at)?))
}

fn read_u64(b: &[u8], at: usize) -> Result<u64> {
    Ok(u64::from_le_bytes(field(b, at)?))
}

fn field<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N]> {
    match b.get(at..at + N).and_then(|s| s.try_into().ok()) {
        Some(bytes) => Ok(bytes),
        None => bail!("cubin field at {at} runs past a {}-byte header", b.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ptx_and_rejects_unterminated_text() {
        assert!(check(b".version 8.0\n\0").is_ok());
        assert!(check(b".version 8.0\n").is_err());
        assert!(check(b"").is_err());
    }

    #[test]
    fn rejects_truncated_and_lying_elf() {
        assert!(check(b"\x7fELF\x02\x01").is_err());
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(ELF_MAGIC);
        elf[4] = 2;
        elf[5] = 1;
        assert!(check(&elf).is_ok()); // no tables at all
                                      // A section table claimed past the end.
        elf[0x28..0x30].copy_from_slice(&1000u64.to_le_bytes());
        elf[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        assert!(check(&elf).is_err());
        // Offsets that overflow.
        elf[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check(&elf).is_err());
    }
}
