//! `TensorProto` → IR initializer/tensor. Raw data stays a borrowed slice of
//! the model buffer (or of a memory-mapped external data file).

use crate::proto::TensorProto;
use bytes::Bytes;
use kiln_ir::{bail, DType, Data, Error, Initializer, Result, Tensor};
use std::path::Path;

/// The tensor's shape, checked for negative dims and size overflow.
pub fn dims(t: &TensorProto) -> Result<Vec<usize>> {
    let mut total: usize = 1;
    let mut out = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        if d < 0 {
            bail!("tensor '{}' has negative dimension {d}", t.name);
        }
        total = total
            .checked_mul(d as usize)
            .ok_or_else(|| Error::new(format!("tensor '{}' is too large", t.name)))?;
        out.push(d as usize);
    }
    Ok(out)
}

pub fn dtype(t: &TensorProto) -> Result<DType> {
    DType::from_onnx_code(t.data_type).ok_or_else(|| {
        Error::new(format!(
            "tensor '{}' has element type {} ({}), which kiln does not support",
            t.name,
            DType::onnx_code_name(t.data_type),
            t.data_type
        ))
    })
}

/// Converts a tensor proto to an initializer. `base_dir` resolves external data.
pub fn to_initializer(t: &TensorProto, base_dir: Option<&Path>) -> Result<Initializer> {
    let dtype = dtype(t)?;
    let shape = dims(t)?;
    let numel: usize = shape.iter().product();
    if t.data_location == 1 {
        let bytes = external_bytes(t, base_dir)?;
        check_len(t, dtype, numel, bytes.len())?;
        return Ok(Initializer::Raw {
            dtype,
            shape,
            bytes,
        });
    }
    if !t.raw_data.is_empty() && dtype != DType::Str {
        check_len(t, dtype, numel, t.raw_data.len())?;
        return Ok(Initializer::Raw {
            dtype,
            shape,
            bytes: t.raw_data.clone(),
        });
    }
    let data = typed_data(t, dtype, numel)?;
    Ok(Initializer::Tensor(Tensor::new(shape, data)?))
}

/// Converts a tensor proto to a decoded tensor (attributes, small constants).
pub fn to_tensor(t: &TensorProto, base_dir: Option<&Path>) -> Result<Tensor> {
    to_initializer(t, base_dir)?.to_tensor()
}

fn check_len(t: &TensorProto, dtype: DType, numel: usize, len: usize) -> Result<()> {
    let want = numel
        .checked_mul(dtype.size())
        .ok_or_else(|| Error::new("tensor too large"))?;
    if len != want {
        bail!(
            "tensor '{}' of type {dtype}{:?} needs {want} bytes of data but has {len}",
            t.name,
            t.dims
        );
    }
    Ok(())
}

/// Data stored in the typed repeated fields (`float_data`, `int32_data`, ...).
fn typed_data(t: &TensorProto, dtype: DType, numel: usize) -> Result<Data> {
    let n = match dtype {
        DType::F32 => t.float_data.len(),
        DType::F64 => t.double_data.len(),
        DType::I64 => t.int64_data.len(),
        DType::U32 | DType::U64 => t.uint64_data.len(),
        DType::Str => t.string_data.len(),
        _ => t.int32_data.len(),
    };
    if n != numel {
        bail!(
            "tensor '{}' of type {dtype}{:?} needs {numel} elements but has {n}",
            t.name,
            t.dims
        );
    }
    let i32s = || t.int32_data.iter();
    Ok(match dtype {
        DType::F32 => Data::F32(t.float_data.clone().into()),
        DType::F64 => Data::F64(t.double_data.clone().into()),
        DType::I64 => Data::I64(t.int64_data.clone().into()),
        DType::U64 => Data::U64(t.uint64_data.clone().into()),
        DType::U32 => Data::U32(t.uint64_data.iter().map(|&v| v as u32).collect()),
        DType::I32 => Data::I32(t.int32_data.clone().into()),
        DType::I16 => Data::I16(i32s().map(|&v| v as i16).collect()),
        DType::I8 => Data::I8(i32s().map(|&v| v as i8).collect()),
        DType::U16 => Data::U16(i32s().map(|&v| v as u16).collect()),
        DType::U8 => Data::U8(i32s().map(|&v| v as u8).collect()),
        DType::Bool => Data::Bool(i32s().map(|&v| v != 0).collect()),
        // 16-bit floats are stored as their bit patterns in int32_data.
        DType::F16 => Data::F16(i32s().map(|&v| half::f16::from_bits(v as u16)).collect()),
        DType::BF16 => Data::BF16(i32s().map(|&v| half::bf16::from_bits(v as u16)).collect()),
        DType::Str => Data::Str(
            t.string_data
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect(),
        ),
    })
}

/// Reads external data (`location`, `offset`, `length` keys) by mapping the file.
fn external_bytes(t: &TensorProto, base_dir: Option<&Path>) -> Result<Bytes> {
    let mut location = None;
    let mut offset = 0usize;
    let mut length = None;
    for kv in &t.external_data {
        match kv.key.as_str() {
            "location" => location = Some(kv.value.clone()),
            "offset" => {
                offset = kv.value.parse().map_err(|_| {
                    Error::new(format!(
                        "tensor '{}': bad external data offset '{}'",
                        t.name, kv.value
                    ))
                })?
            }
            "length" => {
                length = Some(kv.value.parse::<usize>().map_err(|_| {
                    Error::new(format!(
                        "tensor '{}': bad external data length '{}'",
                        t.name, kv.value
                    ))
                })?)
            }
            _ => {}
        }
    }
    let Some(location) = location else {
        bail!("tensor '{}' has external data without a location", t.name)
    };
    let Some(base) = base_dir else {
        bail!(
            "tensor '{}' has external data ('{location}') but the model was not loaded from a file",
            t.name
        )
    };
    let rel = Path::new(&location);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        bail!("tensor '{}': external data location '{location}' must be a relative path inside the model's directory", t.name);
    }
    let path = base.join(rel);
    let file = std::fs::File::open(&path).map_err(|e| {
        Error::new(format!(
            "tensor '{}': cannot open external data file {}: {e}",
            t.name,
            path.display()
        ))
    })?;
    let size = file.metadata()?.len() as usize;
    let len = length.unwrap_or(size.saturating_sub(offset));
    if offset.checked_add(len).is_none_or(|end| end > size) {
        bail!(
            "tensor '{}': external data range {offset}+{len} is past the end of {} ({size} bytes)",
            t.name,
            path.display()
        );
    }
    if len == 0 {
        return Ok(Bytes::new());
    }
    let map = kiln_ir::mapped::map_file(&file)
        .map_err(|e| Error::new(format!("cannot map {}: {e}", path.display())))?;
    Ok(map.slice(offset..offset + len))
}
