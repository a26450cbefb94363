//! The matrix-product kernel shared by MatMul and the convolutions:
//! strided matrix views, `C = A·B` for every element type that ONNX
//! multiplies (f32/f64 through `matrixmultiply`, integers exactly with
//! wrapping arithmetic), and the batched, broadcasting MatMul of numpy.
//! Also Gemm, a compound: Transpose (transA/transB), MatMul, then Mul by
//! alpha and Add of beta * C where they are not 1 and 0.

use crate::compound::{Comp, Compound};
use crate::ops::compose::cast;
use crate::ops::conv::window::checked_numel;
use crate::registry::Registry;
use crate::util::{broadcast_shapes, broadcast_strides, for_each_offset, numel};
use crate::{inputs_id, Builder, InferCx};
use kiln_ir::tensor::{bf16, f16};
use kiln_ir::{bail, ensure, Attr, DType, Data, Num, Result, Tensor, ValueId};

pub fn register(r: &mut Registry) {
    r.add("Gemm", Comp(Gemm));
}

/// Gemm(A, B, C) = alpha * A' · B' + beta * C, where A' and B' are A and B
/// transposed when `transA`/`transB` is set, and C (optional) broadcasts to
/// the [M, N] result.
struct Gemm;

impl Compound for Gemm {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let node = cx.node;
        let (a, bm) = (inputs_id(inputs, 0)?, inputs_id(inputs, 1)?);
        let c = inputs.get(2).copied().flatten();
        let trans_a = node.attr_int_or("transA", 0)? != 0;
        let trans_b = node.attr_int_or("transB", 0)? != 0;
        let c_shape = c.map(|c| b.shape(c)).transpose()?;
        check_gemm_shapes(cx, &b.shape(a)?, &b.shape(bm)?, c_shape.as_deref())?;
        let a = transposed(b, a, trans_a)?;
        let bm = transposed(b, bm, trans_b)?;
        let product = b.op("MatMul", &[a, bm], &[])?;
        let mut y = scaled(b, product, node.attr_float_or("alpha", 1.0)?)?;
        let beta = node.attr_float_or("beta", 1.0)?;
        if let (Some(c), true) = (c, beta != 0.0) {
            let c = scaled(b, c, beta)?;
            y = b.op("Add", &[y, c], &[])?;
        }
        Ok(vec![Some(y)])
    }
}

/// Checks Gemm's operand shapes: 2-D A and B whose inner dimensions agree
/// (after the transposes), C broadcasting to [M, N].
fn check_gemm_shapes(cx: &InferCx, a: &[usize], b: &[usize], c: Option<&[usize]>) -> Result<()> {
    let node = cx.node;
    let trans_a = node.attr_int_or("transA", 0)? != 0;
    let trans_b = node.attr_int_or("transB", 0)? != 0;
    ensure!(
        a.len() == 2 && b.len() == 2,
        "Gemm needs 2-D A and B, got shapes {a:?} and {b:?}"
    );
    let (m, k) = if trans_a { (a[1], a[0]) } else { (a[0], a[1]) };
    let (k2, n) = if trans_b { (b[1], b[0]) } else { (b[0], b[1]) };
    ensure!(
        k == k2,
        "Gemm inner dimensions differ: A {a:?} (transA={trans_a}), B {b:?} (transB={trans_b})"
    );
    if let Some(c) = c {
        // Before opset 7, C broadcasts only when the `broadcast` attribute says so.
        let exact = cx.opset < 7 && node.attr_int_or("broadcast", 0)? == 0;
        let ok = if exact {
            c == [m, n]
        } else {
            c.len() <= 2 && broadcast_shapes(&[&[m, n], c]).is_ok_and(|s| s == [m, n])
        };
        ensure!(ok, "Gemm C of shape {c:?} does not broadcast to [{m}, {n}]");
    }
    checked_numel(&[m, n])?;
    Ok(())
}

/// The matrix `x`, transposed when `t`.
fn transposed(b: &mut Builder, x: ValueId, t: bool) -> Result<ValueId> {
    match t {
        true => b.op("Transpose", &[x], &[("perm", Attr::Ints(vec![1, 0]))]),
        false => Ok(x),
    }
}

/// `v * s` (no node for s = 1). Integers multiply in f64 and convert back
/// like Cast.
fn scaled(b: &mut Builder, v: ValueId, s: f32) -> Result<ValueId> {
    if s == 1.0 {
        return Ok(v);
    }
    let dtype = b.ty(v).dtype;
    let vf = match dtype.is_float() {
        true => v,
        false => cast(b, v, DType::F64)?,
    };
    let k = b.scalar(b.ty(vf).dtype, s as f64)?;
    let y = b.op("Mul", &[vf, k], &[])?;
    cast(b, y, dtype)
}

/// A read-only strided view of a `rows × cols` matrix inside a slice.
/// Construction checks that every element lies inside the slice, so the
/// kernels may index without further checks.
#[derive(Clone, Copy)]
pub struct MatView<'a, T> {
    data: &'a [T],
    offset: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a, T> MatView<'a, T> {
    pub fn new(
        data: &'a [T],
        offset: usize,
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Result<Self> {
        if rows > 0 && cols > 0 {
            let last = (rows - 1)
                .checked_mul(row_stride)
                .and_then(|r| {
                    (cols - 1)
                        .checked_mul(col_stride)
                        .and_then(|c| r.checked_add(c))
                })
                .and_then(|x| x.checked_add(offset));
            match last {
                Some(l) if l < data.len() => {}
                _ => bail!(
                    "a {rows}x{cols} matrix at offset {offset} does not fit in {} elements",
                    data.len()
                ),
            }
        }
        Ok(MatView {
            data,
            offset,
            rows,
            cols,
            row_stride,
            col_stride,
        })
    }

    /// A contiguous row-major matrix starting at `offset`.
    pub fn row_major(data: &'a [T], offset: usize, rows: usize, cols: usize) -> Result<Self> {
        Self::new(data, offset, rows, cols, cols, 1)
    }

    /// The transposed matrix (same storage, strides swapped).
    pub fn t(self) -> Self {
        MatView {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    fn at(&self, r: usize, c: usize) -> &T {
        &self.data[self.offset + r * self.row_stride + c * self.col_stride]
    }
}

/// Element types with a matrix product.
pub trait GemmElem: Num {
    /// `c = a · b`, where `c` is a contiguous row-major `a.rows × b.cols`
    /// matrix (overwritten), `a.cols > 0` and `c` is not empty. Called only
    /// through [`gemm`], which checks the shapes.
    fn gemm_raw(a: MatView<Self>, b: MatView<Self>, c: &mut [Self]);

    /// `self + other`, wrapping for integers (bias and accumulation).
    fn add(self, other: Self) -> Self;
}

/// `c = a · b` after checking that the shapes agree.
pub fn gemm<T: GemmElem>(a: MatView<T>, b: MatView<T>, c: &mut [T]) -> Result<()> {
    ensure!(
        a.cols == b.rows,
        "matrix product of {}x{} and {}x{}",
        a.rows,
        a.cols,
        b.rows,
        b.cols
    );
    ensure!(
        c.len() == a.rows * b.cols,
        "matrix product output has {} elements, expected {}",
        c.len(),
        a.rows * b.cols
    );
    if a.cols == 0 {
        c.fill(T::zero());
        return Ok(());
    }
    if c.is_empty() {
        return Ok(());
    }
    T::gemm_raw(a, b, c);
    Ok(())
}

macro_rules! blas_gemm {
    ($t:ty, $kernel:path) => {
        impl GemmElem for $t {
            fn gemm_raw(a: MatView<Self>, b: MatView<Self>, c: &mut [Self]) {
                // `gemm` has checked this; repeated because the raw call relies on it.
                assert!(
                    a.cols == b.rows && c.len() == a.rows * b.cols,
                    "gemm_raw called with mismatched shapes"
                );
                // SAFETY: MatView::new checked that every element of `a` and
                // `b` is inside its slice; `gemm` checked that `c` holds
                // a.rows × b.cols contiguous row-major elements.
                unsafe {
                    $kernel(
                        a.rows,
                        a.cols,
                        b.cols,
                        1.0,
                        a.data.as_ptr().add(a.offset),
                        a.row_stride as isize,
                        a.col_stride as isize,
                        b.data.as_ptr().add(b.offset),
                        b.row_stride as isize,
                        b.col_stride as isize,
                        0.0,
                        c.as_mut_ptr(),
                        b.cols as isize,
                        1,
                    )
                }
            }
            fn add(self, other: Self) -> Self {
                self + other
            }
        }
    };
}

blas_gemm!(f32, matrixmultiply::sgemm);
blas_gemm!(f64, matrixmultiply::dgemm);

macro_rules! int_gemm {
    ($($t:ty),*) => {$(
        impl GemmElem for $t {
            fn gemm_raw(a: MatView<Self>, b: MatView<Self>, c: &mut [Self]) {
                let n = b.cols;
                c.fill(0);
                for (i, row) in c.chunks_exact_mut(n).enumerate() {
                    for p in 0..a.cols {
                        let x = *a.at(i, p);
                        if x == 0 {
                            continue;
                        }
                        for (j, out) in row.iter_mut().enumerate() {
                            *out = out.wrapping_add(x.wrapping_mul(*b.at(p, j)));
                        }
                    }
                }
            }
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
        }
    )*};
}

int_gemm!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Shapes of a numpy-style matmul: 1-D operands are promoted (a row vector
/// on the left, a column vector on the right) and the promoted dimension is
/// removed from the result; leading batch dimensions broadcast.
#[derive(Debug, Clone)]
pub struct MatMulShape {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a_batch: Vec<usize>,
    pub b_batch: Vec<usize>,
    pub batch: Vec<usize>,
    pub out: Vec<usize>,
}

impl MatMulShape {
    pub fn new(a: &[usize], b: &[usize]) -> Result<MatMulShape> {
        ensure!(
            !a.is_empty() && !b.is_empty(),
            "MatMul operands must have rank >= 1, got shapes {a:?} and {b:?}"
        );
        let a2: Vec<usize> = if a.len() == 1 {
            vec![1, a[0]]
        } else {
            a.to_vec()
        };
        let b2: Vec<usize> = if b.len() == 1 {
            vec![b[0], 1]
        } else {
            b.to_vec()
        };
        let (ra, rb) = (a2.len(), b2.len());
        let (m, k, k2, n) = (a2[ra - 2], a2[ra - 1], b2[rb - 2], b2[rb - 1]);
        if k != k2 {
            bail!("MatMul inner dimensions differ: shapes {a:?} and {b:?}");
        }
        let a_batch = a2[..ra - 2].to_vec();
        let b_batch = b2[..rb - 2].to_vec();
        let batch = broadcast_shapes(&[&a_batch, &b_batch])?;
        let mut out = batch.clone();
        if a.len() > 1 {
            out.push(m);
        }
        if b.len() > 1 {
            out.push(n);
        }
        checked_numel(&[checked_numel(&batch)?, m, n])?;
        Ok(MatMulShape {
            m,
            k,
            n,
            a_batch,
            b_batch,
            batch,
            out,
        })
    }
}

/// Batched matmul of row-major `a` and `b` with shapes `sh` describes;
/// returns the row-major output of shape `sh.out`.
pub fn batched_matmul<T: GemmElem>(sh: &MatMulShape, a: &[T], b: &[T]) -> Result<Vec<T>> {
    let (m, k, n) = (sh.m, sh.k, sh.n);
    ensure!(
        a.len() == numel(&sh.a_batch) * m * k && b.len() == numel(&sh.b_batch) * k * n,
        "MatMul operand sizes do not match their shapes"
    );
    let batches = numel(&sh.batch);
    let mut out = vec![T::zero(); batches * m * n];
    if out.is_empty() {
        return Ok(out);
    }
    // A shared right operand with an unbroadcast left one: the batch folds
    // into the rows of one large product (the common `x @ W` of a model).
    if numel(&sh.b_batch) == 1 && sh.a_batch == sh.batch {
        let av = MatView::row_major(a, 0, batches * m, k)?;
        gemm(av, MatView::row_major(b, 0, k, n)?, &mut out)?;
        return Ok(out);
    }
    let sa = broadcast_strides(&sh.a_batch, &sh.batch);
    let sb = broadcast_strides(&sh.b_batch, &sh.batch);
    let mut result = Ok(());
    let mut chunks = out.chunks_exact_mut(m * n);
    for_each_offset(&sh.batch, [&sa, &sb], |_, [ia, ib]| {
        let Some(c) = chunks.next() else { return };
        if result.is_ok() {
            result = MatView::row_major(a, ia * m * k, m, k).and_then(|av| {
                MatView::row_major(b, ib * k * n, k, n).and_then(|bv| gemm(av, bv, c))
            });
        }
    });
    result?;
    Ok(out)
}

/// A computation written once for every [`GemmElem`] type.
pub trait TypedKernel {
    fn run<T: GemmElem>(&self, inputs: &[&[T]]) -> Result<Vec<T>>;
}

/// Which element types a kernel accepts.
#[derive(Clone, Copy, PartialEq)]
pub enum Accepts {
    Floats,
    Numbers,
}

/// Runs `k` on tensors of one dtype in their computation type: f16 and
/// bf16 widen to f32 and the result is rounded back; the output has the
/// inputs' dtype.
pub fn run_typed(k: &impl TypedKernel, inputs: &[&Tensor], accepts: Accepts) -> Result<Data> {
    let Some(first) = inputs.first() else {
        bail!("no inputs")
    };
    let dtype = first.dtype();
    for t in inputs {
        ensure!(
            t.dtype() == dtype,
            "inputs must share one type, got {} and {}",
            dtype,
            t.dtype()
        );
    }
    ensure!(
        accepts == Accepts::Numbers || dtype.is_float(),
        "unsupported type {dtype} (expected a float type)"
    );
    fn direct<T: GemmElem>(k: &impl TypedKernel, inputs: &[&Tensor]) -> Result<Data> {
        let slices = inputs
            .iter()
            .map(|t| t.as_slice::<T>())
            .collect::<Result<Vec<_>>>()?;
        Ok(T::wrap(k.run::<T>(&slices)?))
    }
    fn widened<T: Num>(k: &impl TypedKernel, inputs: &[&Tensor]) -> Result<Data> {
        let wide = inputs
            .iter()
            .map(|t| {
                Ok(t.as_slice::<T>()?
                    .iter()
                    .map(|x| x.to_f32())
                    .collect::<Vec<f32>>())
            })
            .collect::<Result<Vec<_>>>()?;
        let slices: Vec<&[f32]> = wide.iter().map(|v| v.as_slice()).collect();
        Ok(T::wrap(
            k.run::<f32>(&slices)?
                .into_iter()
                .map(T::from_f32)
                .collect(),
        ))
    }
    match dtype {
        DType::F32 => direct::<f32>(k, inputs),
        DType::F64 => direct::<f64>(k, inputs),
        DType::F16 => widened::<f16>(k, inputs),
        DType::BF16 => widened::<bf16>(k, inputs),
        DType::I8 => direct::<i8>(k, inputs),
        DType::I16 => direct::<i16>(k, inputs),
        DType::I32 => direct::<i32>(k, inputs),
        DType::I64 => direct::<i64>(k, inputs),
        DType::U8 => direct::<u8>(k, inputs),
        DType::U16 => direct::<u16>(k, inputs),
        DType::U32 => direct::<u32>(k, inputs),
        DType::U64 => direct::<u64>(k, inputs),
        DType::Bool | DType::Str => bail!("unsupported type {dtype}"),
    }
}
