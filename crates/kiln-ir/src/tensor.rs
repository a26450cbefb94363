//! Dense tensors with typed storage: the values the reference interpreter
//! computes with and the decoded form of initializers.

use crate::{bail, DType, Result};
pub use half::{bf16, f16};
use std::sync::Arc;

/// Typed element storage. Each variant holds the elements in row-major order.
/// Storage is reference counted so copying a tensor (e.g. Identity) is cheap.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    F32(Arc<[f32]>),
    F64(Arc<[f64]>),
    F16(Arc<[f16]>),
    BF16(Arc<[bf16]>),
    I8(Arc<[i8]>),
    I16(Arc<[i16]>),
    I32(Arc<[i32]>),
    I64(Arc<[i64]>),
    U8(Arc<[u8]>),
    U16(Arc<[u16]>),
    U32(Arc<[u32]>),
    U64(Arc<[u64]>),
    Bool(Arc<[bool]>),
    Str(Arc<[String]>),
}

/// A Rust element type that a tensor can hold.
pub trait Elem: Clone + Send + Sync + std::fmt::Debug + PartialEq + 'static {
    const DTYPE: DType;
    fn wrap(v: Vec<Self>) -> Data;
    /// The data of elements already in shared storage (no copy).
    fn wrap_shared(v: Arc<[Self]>) -> Data;
    fn unwrap(d: &Data) -> Option<&[Self]>;
}

/// A numeric element type: converts to and from f64 (ONNX casting rules for
/// out-of-range values are applied by the callers that need them).
pub trait Num: Elem + Copy + PartialOrd + Default {
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn to_f32(self) -> f32 {
        self.to_f64() as f32
    }
    fn from_f32(v: f32) -> Self {
        Self::from_f64(v as f64)
    }
    fn zero() -> Self {
        Self::from_f64(0.0)
    }
    fn one() -> Self {
        Self::from_f64(1.0)
    }
}

macro_rules! impl_elem {
    ($t:ty, $variant:ident, $dtype:ident) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$dtype;
            fn wrap(v: Vec<Self>) -> Data {
                Data::$variant(v.into())
            }
            fn wrap_shared(v: Arc<[Self]>) -> Data {
                Data::$variant(v)
            }
            fn unwrap(d: &Data) -> Option<&[Self]> {
                match d {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

macro_rules! impl_num_prim {
    ($t:ty) => {
        impl Num for $t {
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}

impl_elem!(f32, F32, F32);
impl_elem!(f64, F64, F64);
impl_elem!(f16, F16, F16);
impl_elem!(bf16, BF16, BF16);
impl_elem!(i8, I8, I8);
impl_elem!(i16, I16, I16);
impl_elem!(i32, I32, I32);
impl_elem!(i64, I64, I64);
impl_elem!(u8, U8, U8);
impl_elem!(u16, U16, U16);
impl_elem!(u32, U32, U32);
impl_elem!(u64, U64, U64);
impl_elem!(bool, Bool, Bool);
impl_elem!(String, Str, Str);
impl_num_prim!(f32);
impl_num_prim!(f64);
impl_num_prim!(i8);
impl_num_prim!(i16);
impl_num_prim!(i32);
impl_num_prim!(i64);
impl_num_prim!(u8);
impl_num_prim!(u16);
impl_num_prim!(u32);
impl_num_prim!(u64);

impl Num for f16 {
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Num for bf16 {
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

impl Num for bool {
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}

/// Runs `$body` with `$v` bound to the typed slice of any [`Data`] variant,
/// and `$T` to its element type. Use for code generic over every dtype.
#[macro_export]
macro_rules! dispatch_all {
    ($data:expr, |$v:ident : $T:ident| $body:expr) => {
        $crate::dispatch_data!($data, |$v: $T| $body, strings => $body)
    };
}

/// Like [`dispatch_all`] but for numeric dtypes (bool counts as numeric 0/1);
/// strings run `$other`.
#[macro_export]
macro_rules! dispatch_num {
    ($data:expr, |$v:ident : $T:ident| $body:expr, $other:expr) => {
        $crate::dispatch_data!($data, |$v: $T| $body, strings => { let _ = $v; $other })
    };
}

/// The match behind [`dispatch_all`] and [`dispatch_num`]: `$body` for every
/// numeric variant, `$strings` for strings (with `$v` and `$T` bound too).
#[doc(hidden)]
#[macro_export]
macro_rules! dispatch_data {
    ($data:expr, |$v:ident : $T:ident| $body:expr, strings => $strings:expr) => {
        match $data {
            $crate::Data::F32($v) => {
                #[allow(dead_code)]
                type $T = f32;
                $body
            }
            $crate::Data::F64($v) => {
                #[allow(dead_code)]
                type $T = f64;
                $body
            }
            $crate::Data::F16($v) => {
                #[allow(dead_code)]
                type $T = $crate::tensor::f16;
                $body
            }
            $crate::Data::BF16($v) => {
                #[allow(dead_code)]
                type $T = $crate::tensor::bf16;
                $body
            }
            $crate::Data::I8($v) => {
                #[allow(dead_code)]
                type $T = i8;
                $body
            }
            $crate::Data::I16($v) => {
                #[allow(dead_code)]
                type $T = i16;
                $body
            }
            $crate::Data::I32($v) => {
                #[allow(dead_code)]
                type $T = i32;
                $body
            }
            $crate::Data::I64($v) => {
                #[allow(dead_code)]
                type $T = i64;
                $body
            }
            $crate::Data::U8($v) => {
                #[allow(dead_code)]
                type $T = u8;
                $body
            }
            $crate::Data::U16($v) => {
                #[allow(dead_code)]
                type $T = u16;
                $body
            }
            $crate::Data::U32($v) => {
                #[allow(dead_code)]
                type $T = u32;
                $body
            }
            $crate::Data::U64($v) => {
                #[allow(dead_code)]
                type $T = u64;
                $body
            }
            $crate::Data::Bool($v) => {
                #[allow(dead_code)]
                type $T = bool;
                $body
            }
            $crate::Data::Str($v) => {
                #[allow(dead_code)]
                type $T = String;
                $strings
            }
        }
    };
}

/// Runs `$body` with `$T` bound to the Rust element type of a [`DType`].
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, |$T:ident| $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                #[allow(dead_code)]
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                #[allow(dead_code)]
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                #[allow(dead_code)]
                type $T = $crate::tensor::f16;
                $body
            }
            $crate::DType::BF16 => {
                #[allow(dead_code)]
                type $T = $crate::tensor::bf16;
                $body
            }
            $crate::DType::I8 => {
                #[allow(dead_code)]
                type $T = i8;
                $body
            }
            $crate::DType::I16 => {
                #[allow(dead_code)]
                type $T = i16;
                $body
            }
            $crate::DType::I32 => {
                #[allow(dead_code)]
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                #[allow(dead_code)]
                type $T = i64;
                $body
            }
            $crate::DType::U8 => {
                #[allow(dead_code)]
                type $T = u8;
                $body
            }
            $crate::DType::U16 => {
                #[allow(dead_code)]
                type $T = u16;
                $body
            }
            $crate::DType::U32 => {
                #[allow(dead_code)]
                type $T = u32;
                $body
            }
            $crate::DType::U64 => {
                #[allow(dead_code)]
                type $T = u64;
                $body
            }
            $crate::DType::Bool => {
                #[allow(dead_code)]
                type $T = bool;
                $body
            }
            $crate::DType::Str => {
                #[allow(dead_code)]
                type $T = String;
                $body
            }
        }
    };
}

impl Data {
    pub fn dtype(&self) -> DType {
        dispatch_all!(self, |_v: T| T::DTYPE)
    }

    pub fn len(&self) -> usize {
        dispatch_all!(self, |v: T| v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` default elements (zero, false or "") of `dtype`.
    pub fn zeros(dtype: DType, n: usize) -> Data {
        with_dtype!(dtype, |T| T::wrap(vec![<T as Default>::default(); n]))
    }

    /// Numeric data of `dtype` from f64 values (rounded/truncated as `as` casts do).
    pub fn from_f64(dtype: DType, v: &[f64]) -> Result<Data> {
        fn conv<T: Num>(v: &[f64]) -> Data {
            T::wrap(v.iter().map(|&x| T::from_f64(x)).collect())
        }
        Ok(match dtype {
            DType::F32 => conv::<f32>(v),
            DType::F64 => conv::<f64>(v),
            DType::F16 => conv::<f16>(v),
            DType::BF16 => conv::<bf16>(v),
            DType::I8 => conv::<i8>(v),
            DType::I16 => conv::<i16>(v),
            DType::I32 => conv::<i32>(v),
            DType::I64 => conv::<i64>(v),
            DType::U8 => conv::<u8>(v),
            DType::U16 => conv::<u16>(v),
            DType::U32 => conv::<u32>(v),
            DType::U64 => conv::<u64>(v),
            DType::Bool => conv::<bool>(v),
            DType::Str => bail!("cannot make string data from numbers"),
        })
    }

    /// Decodes little-endian raw bytes (ONNX `raw_data`) of `dtype`.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Result<Data> {
        // Collected straight into the shared slice: `chunks_exact` knows its length, so this
        // allocates once, where a `Vec` then `.into()` wrote every element twice (for a large
        // model's weights, hundreds of megabytes of fresh pages touched at every start).
        fn chunks<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Arc<[T]> {
            b.chunks_exact(N)
                .map(|c| {
                    let mut a = [0u8; N];
                    a.copy_from_slice(c);
                    f(a)
                })
                .collect()
        }
        if dtype == DType::Str {
            bail!("string tensors cannot be stored as raw bytes");
        }
        if bytes.len() % dtype.size() != 0 {
            bail!(
                "{} raw bytes is not a whole number of {} elements",
                bytes.len(),
                dtype
            );
        }
        Ok(match dtype {
            DType::F32 => Data::F32(chunks(bytes, f32::from_le_bytes)),
            DType::F64 => Data::F64(chunks(bytes, f64::from_le_bytes)),
            DType::F16 => Data::F16(chunks(bytes, f16::from_le_bytes)),
            DType::BF16 => Data::BF16(chunks(bytes, bf16::from_le_bytes)),
            DType::I8 => Data::I8(chunks(bytes, i8::from_le_bytes)),
            DType::I16 => Data::I16(chunks(bytes, i16::from_le_bytes)),
            DType::I32 => Data::I32(chunks(bytes, i32::from_le_bytes)),
            DType::I64 => Data::I64(chunks(bytes, i64::from_le_bytes)),
            DType::U8 => Data::U8(Arc::from(bytes)),
            DType::U16 => Data::U16(chunks(bytes, u16::from_le_bytes)),
            DType::U32 => Data::U32(chunks(bytes, u32::from_le_bytes)),
            DType::U64 => Data::U64(chunks(bytes, u64::from_le_bytes)),
            DType::Bool => Data::Bool(bytes.iter().map(|&b| b != 0).collect()),
            DType::Str => unreachable!("checked above"),
        })
    }

    /// Little-endian raw bytes (the inverse of [`Data::from_le_bytes`]).
    pub fn to_le_bytes(&self) -> Result<Vec<u8>> {
        macro_rules! le {
            ($v:expr) => {
                $v.iter().flat_map(|x| x.to_le_bytes()).collect()
            };
        }
        Ok(match self {
            Data::F32(v) => le!(v),
            Data::F64(v) => le!(v),
            Data::F16(v) => le!(v),
            Data::BF16(v) => le!(v),
            Data::I8(v) => le!(v),
            Data::I16(v) => le!(v),
            Data::I32(v) => le!(v),
            Data::I64(v) => le!(v),
            Data::U8(v) => v.to_vec(),
            Data::U16(v) => le!(v),
            Data::U32(v) => le!(v),
            Data::U64(v) => le!(v),
            Data::Bool(v) => v.iter().map(|&b| b as u8).collect(),
            Data::Str(_) => bail!("string tensors have no raw byte form"),
        })
    }

    /// Element `i` as f64 (numeric dtypes; strings give NaN).
    pub fn get_f64(&self, i: usize) -> f64 {
        dispatch_num!(self, |v: T| v[i].to_f64(), f64::NAN)
    }

    /// All elements converted to f64 (numeric dtypes only).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        dispatch_num!(
            self,
            |v: T| Ok(v.iter().map(|x| x.to_f64()).collect()),
            bail!("expected a numeric tensor, got strings")
        )
    }

    /// All elements converted to i64 (integers, bools, and floats truncated).
    pub fn to_i64_vec(&self) -> Result<Vec<i64>> {
        match self {
            Data::I64(v) => Ok(v.to_vec()),
            Data::I32(v) => Ok(v.iter().map(|&x| x as i64).collect()),
            other => Ok(other.to_f64_vec()?.into_iter().map(|x| x as i64).collect()),
        }
    }

    /// Copies elements at the given flat indices into new storage.
    pub fn gather(&self, idx: impl Iterator<Item = usize>) -> Data {
        dispatch_all!(self, |v: T| T::wrap(idx.map(|i| v[i].clone()).collect()))
    }
}

/// A dense row-major tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Data,
}

impl Tensor {
    /// Builds a tensor, checking that the element count matches the shape.
    pub fn new(shape: Vec<usize>, data: Data) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            bail!(
                "shape {:?} needs {} elements but {} were given",
                shape,
                n,
                data.len()
            );
        }
        Ok(Tensor { shape, data })
    }

    pub fn from_vec<T: Elem>(shape: Vec<usize>, v: Vec<T>) -> Result<Tensor> {
        Tensor::new(shape, T::wrap(v))
    }

    pub fn scalar<T: Elem>(v: T) -> Tensor {
        Tensor {
            shape: vec![],
            data: T::wrap(vec![v]),
        }
    }

    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        Tensor {
            shape,
            data: Data::zeros(dtype, n),
        }
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements as a typed slice; errors when `T` is not the dtype.
    pub fn as_slice<T: Elem>(&self) -> Result<&[T]> {
        match T::unwrap(&self.data) {
            Some(s) => Ok(s),
            None => bail!("expected a {} tensor, got {}", T::DTYPE, self.dtype()),
        }
    }

    /// Same elements, another shape of the same size.
    pub fn reshaped(&self, shape: Vec<usize>) -> Result<Tensor> {
        Tensor::new(shape, self.data.clone())
    }

    /// The tensor's type.
    pub fn ty(&self) -> crate::TensorType {
        crate::TensorType::new(self.dtype(), self.shape.clone())
    }
}
