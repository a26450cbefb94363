//! Reading and writing NumPy `.npy` files (format versions 1-3, C order,
//! little-endian numeric and bool dtypes).

use crate::{bail, DType, Data, Error, Result, Tensor};
use std::path::Path;

const MAGIC: &[u8] = b"\x93NUMPY";

/// The NumPy `descr` kiln writes for `dtype` (bf16 as its bits, `<u2`).
pub fn descr(dtype: DType) -> Result<&'static str> {
    Ok(match dtype {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        // numpy has no bfloat16; store its bits so nothing is lost
        DType::BF16 => "<u2",
        DType::Str => bail!("string tensors cannot be written as .npy"),
    })
}

fn dtype_of(descr: &str) -> Result<DType> {
    let d = descr.trim_start_matches(['<', '|', '=']);
    if descr.starts_with('>') {
        bail!("big-endian .npy data ('{descr}') is not supported");
    }
    Ok(match d {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        _ => bail!("unsupported .npy dtype '{descr}'"),
    })
}

pub fn write(path: &Path, t: &Tensor) -> Result<()> {
    let data = match &t.data {
        Data::BF16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        d => d.to_le_bytes()?,
    };
    let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
    let shape = if shape.len() == 1 {
        format!("({},)", shape[0])
    } else {
        format!("({})", shape.join(", "))
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr(t.dtype())?
    );
    // pad so that magic(6) + version(2) + len(2) + header ends on a 64-byte boundary
    let unpadded = MAGIC.len() + 4 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    std::fs::write(path, out)
        .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))
}

pub fn read(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?;
    parse(&bytes).map_err(|e| e.context(format!("{}", path.display())))
}

fn parse(bytes: &[u8]) -> Result<Tensor> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        bail!("not a .npy file");
    }
    let (hlen, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => bail!("unsupported .npy version {v}"),
    };
    let end = start
        .checked_add(hlen)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| Error::new("truncated .npy header"))?;
    let header =
        std::str::from_utf8(&bytes[start..end]).map_err(|_| Error::new("bad .npy header"))?;
    let field = |key: &str| -> Result<&str> {
        let k = header
            .find(&format!("'{key}'"))
            .ok_or_else(|| Error::new(format!(".npy header has no '{key}'")))?;
        Ok(header[k + key.len() + 2..]
            .trim_start()
            .trim_start_matches(':')
            .trim_start())
    };
    let d = field("descr")?;
    let descr = d.trim_start_matches('\'').split('\'').next().unwrap_or("");
    if field("fortran_order")?.starts_with("True") {
        bail!("Fortran-order .npy arrays are not supported");
    }
    let s = field("shape")?;
    let inner = s.trim_start_matches('(').split(')').next().unwrap_or("");
    let shape: Vec<usize> = inner
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse::<usize>()
                .map_err(|_| Error::new(format!("bad .npy shape '{s}'")))
        })
        .collect::<Result<_>>()?;
    let dtype = dtype_of(descr)?;
    let numel = shape
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(|| Error::new(".npy shape too large"))?;
    let body = &bytes[end..];
    if body.len() != numel * dtype.size() {
        bail!(
            ".npy data has {} bytes, shape {:?} of {dtype} needs {}",
            body.len(),
            shape,
            numel * dtype.size()
        );
    }
    Tensor::new(shape, Data::from_le_bytes(dtype, body)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let dir = std::env::temp_dir().join(format!("kiln-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            Tensor::from_vec(vec![2, 3], vec![1.5f32, -2.0, 3.25, 0.0, f32::MAX, 7.0]).unwrap(),
            Tensor::from_vec(vec![3], vec![1i64, -5, 1 << 40]).unwrap(),
            Tensor::from_vec(vec![], vec![true]).unwrap(),
            Tensor::from_vec(vec![0, 4], Vec::<u8>::new()).unwrap(),
        ];
        for (k, t) in cases.iter().enumerate() {
            let p = dir.join(format!("{k}.npy"));
            write(&p, t).unwrap();
            let bytes = std::fs::read(&p).unwrap();
            let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + hlen) % 64, 0, "header must be 64-byte aligned");
            assert_eq!(&read(&p).unwrap(), t);
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse(b"hello").is_err());
        assert!(parse(b"\x93NUMPY\x01\x00\xff\xff{").is_err());
    }
}
