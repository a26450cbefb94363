//! Sliding-window geometry, written once for Conv, ConvTranspose, Col2Im,
//! DeformConv and the pools: reading `auto_pad`/`strides`/`dilations`/
//! `pads`/`ceil_mode`, the output size and the padding actually used, and
//! the im2col / col2im traversals over that geometry, and the index of a
//! window tap in tensor expressions.

use crate::te::{IndexExpr, Var};
use crate::util::{numel, strides as row_strides};
use kiln_ir::{bail, ensure, Node, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// A node's window attributes for `rank` spatial dimensions.
#[derive(Debug, Clone)]
pub struct WindowAttrs {
    pub auto_pad: AutoPad,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Explicit pads: all begins, then all ends.
    pub pads: Vec<usize>,
    pub ceil_mode: bool,
}

/// A positive-int list attribute of length `rank`, defaulting to ones.
fn positive_ints(node: &Node, name: &str, rank: usize) -> Result<Vec<usize>> {
    match node.attr_ints(name)? {
        None => Ok(vec![1; rank]),
        Some(v) => {
            ensure!(
                v.len() == rank,
                "attribute '{name}' has {} values, expected {rank}",
                v.len()
            );
            ensure!(
                v.iter().all(|&x| x >= 1),
                "attribute '{name}' must be positive, got {v:?}"
            );
            Ok(v.iter().map(|&x| x as usize).collect())
        }
    }
}

impl WindowAttrs {
    pub fn from_node(node: &Node, rank: usize) -> Result<WindowAttrs> {
        let auto_pad = match node.attr_string_or("auto_pad", "NOTSET")? {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => bail!("unknown auto_pad '{other}'"),
        };
        let pads = match node.attr_ints("pads")? {
            None => vec![0; 2 * rank],
            Some(p) => {
                ensure!(
                    p.len() == 2 * rank,
                    "attribute 'pads' has {} values, expected {}",
                    p.len(),
                    2 * rank
                );
                ensure!(
                    p.iter().all(|&x| x >= 0),
                    "attribute 'pads' must not be negative, got {p:?}"
                );
                p.iter().map(|&x| x as usize).collect()
            }
        };
        Ok(WindowAttrs {
            auto_pad,
            strides: positive_ints(node, "strides", rank)?,
            dilations: positive_ints(node, "dilations", rank)?,
            pads,
            ceil_mode: node.attr_int_or("ceil_mode", 0)? != 0,
        })
    }

    fn rank(&self) -> usize {
        self.strides.len()
    }
}

/// The kernel's spatial shape: the `kernel_shape` attribute, checked
/// against (or, when absent, taken from) the weights' spatial dims.
pub fn kernel_shape(node: &Node, from_weights: Option<&[usize]>) -> Result<Vec<usize>> {
    let attr: Option<Vec<usize>> = match node.attr_ints("kernel_shape")? {
        Some(k) => {
            ensure!(
                k.iter().all(|&x| x >= 1),
                "kernel_shape must be positive, got {k:?}"
            );
            Some(k.iter().map(|&x| x as usize).collect())
        }
        None => None,
    };
    match (attr, from_weights) {
        (Some(a), Some(w)) => {
            ensure!(
                a == w,
                "kernel_shape {a:?} differs from the weights' spatial shape {w:?}"
            );
            Ok(a)
        }
        (Some(a), None) => Ok(a),
        (None, Some(w)) => Ok(w.to_vec()),
        (None, None) => bail!("attribute 'kernel_shape' is required"),
    }
}

/// Splits a total padding between begin and end as `auto_pad` asks: the
/// odd unit goes to the end for SAME_UPPER and to the beginning otherwise.
fn split_padding(total: i128, auto_pad: AutoPad) -> (i128, i128) {
    let half = total.div_euclid(2);
    if auto_pad == AutoPad::SameUpper {
        (half, total - half)
    } else {
        (total - half, half)
    }
}

/// Sizes widened so that geometry arithmetic on attribute values cannot overflow.
fn wide(x: usize) -> i128 {
    x as i128
}

/// Product of `dims`, or an error when it overflows or is over the memory
/// budget (`kiln_ir::limits`).
pub fn checked_numel(dims: &[usize]) -> Result<usize> {
    let n = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| kiln_ir::Error::new(format!("shape {dims:?} has too many elements")))?;
    // At least a byte per element: a size computed from data meets the budget too.
    kiln_ir::limits::check_bytes(&format!("a tensor of shape {dims:?}"), n as u128)?;
    Ok(n)
}

/// One spatial dimension of a geometry, checked so that every tap
/// coordinate (and the image and window counts) fits the types used later.
fn checked_dim(
    image: i128,
    windows: i128,
    stride: i128,
    extent: i128,
    pb: i128,
    pe: i128,
) -> Result<(usize, usize, i64, i64)> {
    let reach = (windows - 1).max(0) * stride + extent + pb.abs() + pe.abs() + image;
    ensure!(
        image >= 0 && windows >= 0,
        "negative spatial size (image {image}, windows {windows})"
    );
    ensure!(reach < i64::MAX as i128 / 2, "window geometry is too large (image {image}, stride {stride}, kernel extent {extent}, pads {pb}/{pe})");
    Ok((image as usize, windows as usize, pb as i64, pe as i64))
}

/// Where windows sit on an image. The image is the input of Conv, Col2Im
/// and the pools and the output of ConvTranspose; `windows` is the grid of
/// window positions (their output, its input). Tap `k` of window `o` along
/// dimension `d` reads image coordinate `o*stride - pad_begin + k*dilation`.
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    pub image: Vec<usize>,
    pub windows: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads_begin: Vec<i64>,
    pub pads_end: Vec<i64>,
}

impl Geometry {
    fn check_rank(attrs: &WindowAttrs, dims: &[usize], kernel: &[usize]) -> Result<()> {
        ensure!(!dims.is_empty(), "expected at least one spatial dimension");
        ensure!(
            dims.len() == attrs.rank() && kernel.len() == attrs.rank(),
            "spatial rank {} does not match kernel {:?} and the window attributes",
            dims.len(),
            kernel
        );
        ensure!(
            kernel.iter().all(|&k| k >= 1),
            "kernel dimensions must be positive, got {kernel:?}"
        );
        Ok(())
    }

    /// Extent of the dilated kernel along `d`.
    fn effective_kernel(kernel: usize, dilation: usize) -> i128 {
        (wide(kernel) - 1) * wide(dilation) + 1
    }

    /// The windows over an image (Conv, pools, Col2Im). With explicit pads
    /// the count is floor((in + pads - extent) / stride) + 1, or ceil with
    /// `ceil_mode`, dropping a last window that would start in the end
    /// padding; SAME_* gives ceil(in / stride) windows padded as needed;
    /// VALID pads nothing.
    pub fn forward(attrs: &WindowAttrs, image: &[usize], kernel: &[usize]) -> Result<Geometry> {
        Self::check_rank(attrs, image, kernel)?;
        let n = image.len();
        let (mut windows, mut begin, mut end) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for d in 0..n {
            let (size, stride) = (wide(image[d]), wide(attrs.strides[d]));
            let extent = Self::effective_kernel(kernel[d], attrs.dilations[d]);
            let (count, pb, pe) = match attrs.auto_pad {
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let count = (size + stride - 1) / stride;
                    let total = ((count - 1) * stride + extent - size).max(0);
                    let (pb, pe) = split_padding(total, attrs.auto_pad);
                    (count, pb, pe)
                }
                AutoPad::Valid | AutoPad::NotSet => {
                    let (pb, pe) = if attrs.auto_pad == AutoPad::Valid {
                        (0, 0)
                    } else {
                        (wide(attrs.pads[d]), wide(attrs.pads[n + d]))
                    };
                    let room = size + pb + pe - extent;
                    ensure!(room >= 0, "kernel extent {extent} exceeds the padded input size {} along spatial dim {d}", size + pb + pe);
                    let mut count = room / stride + 1;
                    if attrs.ceil_mode && attrs.auto_pad == AutoPad::NotSet {
                        count = (room + stride - 1) / stride + 1;
                        if (count - 1) * stride >= size + pb {
                            count -= 1;
                        }
                    }
                    (count, pb, pe)
                }
            };
            let (_, count, pb, pe) = checked_dim(size, count, stride, extent, pb, pe)?;
            windows.push(count);
            begin.push(pb);
            end.push(pe);
        }
        checked_numel(&windows)?;
        Ok(Geometry {
            image: image.to_vec(),
            windows,
            kernel: kernel.to_vec(),
            strides: attrs.strides.clone(),
            dilations: attrs.dilations.clone(),
            pads_begin: begin,
            pads_end: end,
        })
    }

    /// The image that windows at `windows` positions cover (ConvTranspose,
    /// MaxUnpool): `stride*(in-1) + output_padding + extent - pads`, or the
    /// requested `output_shape` with the padding derived from it; SAME_*
    /// gives `in*stride`.
    pub fn transposed(
        attrs: &WindowAttrs,
        windows: &[usize],
        kernel: &[usize],
        output_padding: &[usize],
        output_shape: Option<&[usize]>,
    ) -> Result<Geometry> {
        Self::check_rank(attrs, windows, kernel)?;
        let n = windows.len();
        ensure!(
            output_padding.len() == n,
            "output_padding has {} values, expected {n}",
            output_padding.len()
        );
        if let Some(s) = output_shape {
            ensure!(
                s.len() == n,
                "output_shape has {} values, expected {n}",
                s.len()
            );
        }
        let (mut image, mut begin, mut end) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let same = matches!(attrs.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
        for d in 0..n {
            let (count, stride) = (wide(windows[d]), wide(attrs.strides[d]));
            ensure!(
                count >= 1,
                "transposed windows need a non-empty input, got {windows:?}"
            );
            let extent = Self::effective_kernel(kernel[d], attrs.dilations[d]);
            let natural = stride * (count - 1) + wide(output_padding[d]) + extent;
            let (explicit_b, explicit_e) = if attrs.auto_pad == AutoPad::NotSet {
                (wide(attrs.pads[d]), wide(attrs.pads[n + d]))
            } else {
                (0, 0)
            };
            let (size, pb, pe) = match (output_shape.map(|s| wide(s[d])), same) {
                (Some(size), true) => {
                    let (pb, pe) = split_padding(natural - size, attrs.auto_pad);
                    (size, pb, pe)
                }
                (Some(size), false) => (size, explicit_b, natural - size - explicit_b),
                (None, true) => {
                    let size = count * stride;
                    let (pb, pe) = split_padding(natural - size, attrs.auto_pad);
                    (size, pb, pe)
                }
                (None, false) => (natural - explicit_b - explicit_e, explicit_b, explicit_e),
            };
            ensure!(
                size >= 0,
                "output size {size} along spatial dim {d} is negative"
            );
            let (size, _, pb, pe) = checked_dim(size, count, stride, extent, pb, pe)?;
            image.push(size);
            begin.push(pb);
            end.push(pe);
        }
        checked_numel(&image)?;
        Ok(Geometry {
            image,
            windows: windows.to_vec(),
            kernel: kernel.to_vec(),
            strides: attrs.strides.clone(),
            dilations: attrs.dilations.clone(),
            pads_begin: begin,
            pads_end: end,
        })
    }

    /// Image coordinate of tap `k` of window `o` along `d` (may be outside).
    pub fn coord(&self, d: usize, o: usize, k: usize) -> i64 {
        o as i64 * self.strides[d] as i64 - self.pads_begin[d] + (k * self.dilations[d]) as i64
    }

    /// The tensor-expression form of [`Geometry::coord`] along `d`: window
    /// position `Out(out + d)`, kernel tap `Red(red + d)`.
    pub fn tap_index(&self, d: usize, out: usize, red: usize) -> IndexExpr {
        IndexExpr::affine(
            [
                (Var::Out(out + d), self.strides[d] as i64),
                (Var::Red(red + d), self.dilations[d] as i64),
            ],
            -self.pads_begin[d],
        )
    }

    /// Whether some tap of some window falls outside the image (padding,
    /// or the room `ceil_mode` adds at the end).
    pub fn reads_outside(&self) -> bool {
        (0..self.image.len()).any(|d| {
            let (w, k) = (self.windows[d], self.kernel[d]);
            let last = w.saturating_sub(1) as i64 * self.strides[d] as i64
                + k.saturating_sub(1) as i64 * self.dilations[d] as i64
                - self.pads_begin[d];
            w > 0 && (self.pads_begin[d] > 0 || last >= self.image[d] as i64)
        })
    }

    pub fn kernel_size(&self) -> usize {
        numel(&self.kernel)
    }

    pub fn window_count(&self) -> usize {
        numel(&self.windows)
    }

    pub fn image_size(&self) -> usize {
        numel(&self.image)
    }

    /// True when every tap of every window is the image element at the
    /// window's own position (1x1 kernel, unit stride, no padding), so
    /// im2col would only copy.
    pub fn is_pointwise(&self) -> bool {
        self.image == self.windows
            && self.kernel.iter().all(|&k| k == 1)
            && self.pads_begin.iter().all(|&p| p == 0)
    }
}

/// Marks a tap that falls into padding.
const PAD: usize = usize::MAX;

/// Per dimension, kernel index and window position: the tap's offset into
/// a row-major image plane, or [`PAD`].
pub struct Taps {
    offsets: Vec<Vec<Vec<usize>>>,
}

impl Taps {
    pub fn new(g: &Geometry) -> Taps {
        let img_strides = row_strides(&g.image);
        let offsets = (0..g.image.len())
            .map(|d| {
                (0..g.kernel[d])
                    .map(|k| {
                        (0..g.windows[d])
                            .map(|o| {
                                let c = g.coord(d, o, k);
                                if c >= 0 && (c as usize) < g.image[d] {
                                    c as usize * img_strides[d]
                                } else {
                                    PAD
                                }
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Taps { offsets }
    }

    /// Calls `f(window_index, image_offset)` for kernel tap `kc` (one
    /// index per dimension) at every window position in row-major order;
    /// the offset is `None` where the tap falls into padding.
    pub fn for_each(&self, kc: &[usize], mut f: impl FnMut(usize, Option<usize>)) {
        let n = kc.len();
        let per_dim: Vec<&[usize]> = (0..n).map(|d| self.offsets[d][kc[d]].as_slice()).collect();
        let inner = per_dim[n - 1];
        let outer_dims: Vec<usize> = per_dim[..n - 1].iter().map(|v| v.len()).collect();
        if inner.is_empty() || outer_dims.contains(&0) {
            return;
        }
        let mut idx = vec![0usize; n - 1];
        let mut col = 0;
        loop {
            let base =
                idx.iter()
                    .enumerate()
                    .try_fold(0usize, |acc, (d, &o)| match per_dim[d][o] {
                        PAD => None,
                        off => Some(acc + off),
                    });
            for &off in inner {
                f(
                    col,
                    base.and_then(|b| if off == PAD { None } else { Some(b + off) }),
                );
                col += 1;
            }
            // Advance the odometer over the outer window dimensions.
            let mut d = n - 1;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < outer_dims[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
}

/// Calls `f(tap_index, kernel_coords)` for every kernel tap in row-major order.
pub fn for_each_kernel_tap(kernel: &[usize], mut f: impl FnMut(usize, &[usize])) {
    let total = numel(kernel);
    let mut kc = vec![0usize; kernel.len()];
    for t in 0..total {
        f(t, &kc);
        for d in (0..kernel.len()).rev() {
            kc[d] += 1;
            if kc[d] < kernel[d] {
                break;
            }
            kc[d] = 0;
        }
    }
}

/// Writes the im2col matrix of `channels` image planes: row
/// `(c, tap)` holds, for every window, the image value under that tap
/// (zero in padding).
pub fn im2col<T: Copy + Default>(
    img: &[T],
    channels: usize,
    g: &Geometry,
    taps: &Taps,
    cols: &mut [T],
) {
    let (plane, kt, wins) = (g.image_size(), g.kernel_size(), g.window_count());
    for c in 0..channels {
        let src = &img[c * plane..(c + 1) * plane];
        for_each_kernel_tap(&g.kernel, |t, kc| {
            let row = &mut cols[(c * kt + t) * wins..(c * kt + t + 1) * wins];
            taps.for_each(kc, |w, off| row[w] = off.map_or(T::default(), |o| src[o]));
        });
    }
}

/// The inverse scatter of [`im2col`]: adds every column entry into the
/// image element under its tap (entries over padding are dropped).
pub fn col2im<T: Copy>(
    cols: &[T],
    channels: usize,
    g: &Geometry,
    taps: &Taps,
    img: &mut [T],
    add: impl Fn(T, T) -> T,
) {
    let (plane, kt, wins) = (g.image_size(), g.kernel_size(), g.window_count());
    for c in 0..channels {
        let dst = &mut img[c * plane..(c + 1) * plane];
        for_each_kernel_tap(&g.kernel, |t, kc| {
            let row = &cols[(c * kt + t) * wins..(c * kt + t + 1) * wins];
            taps.for_each(kc, |w, off| {
                if let Some(o) = off {
                    dst[o] = add(dst[o], row[w]);
                }
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(
        auto_pad: AutoPad,
        strides: Vec<usize>,
        pads: Vec<usize>,
        ceil_mode: bool,
    ) -> WindowAttrs {
        let rank = strides.len();
        WindowAttrs {
            auto_pad,
            strides,
            dilations: vec![1; rank],
            pads,
            ceil_mode,
        }
    }

    #[test]
    fn same_padding_puts_the_odd_unit_where_auto_pad_says() {
        let upper = Geometry::forward(
            &attrs(AutoPad::SameUpper, vec![2], vec![0, 0], false),
            &[6],
            &[3],
        )
        .unwrap();
        assert_eq!(
            (
                upper.windows.clone(),
                upper.pads_begin.clone(),
                upper.pads_end.clone()
            ),
            (vec![3], vec![0], vec![1])
        );
        let lower = Geometry::forward(
            &attrs(AutoPad::SameLower, vec![2], vec![0, 0], false),
            &[6],
            &[3],
        )
        .unwrap();
        assert_eq!((lower.pads_begin, lower.pads_end), (vec![1], vec![0]));
    }

    #[test]
    fn ceil_mode_drops_a_window_starting_in_the_end_padding() {
        // in 2, kernel 3, stride 3, pads 1/1: ceil gives 2 windows, the second starts at 3 >= 2 + 1.
        let g = Geometry::forward(
            &attrs(AutoPad::NotSet, vec![3], vec![1, 1], true),
            &[2],
            &[3],
        )
        .unwrap();
        assert_eq!(g.windows, vec![1]);
    }

    #[test]
    fn transposed_output_shape_larger_than_natural_pads_the_end_negatively() {
        let g = Geometry::transposed(
            &attrs(AutoPad::NotSet, vec![3], vec![0, 0], false),
            &[3],
            &[3],
            &[0],
            Some(&[10]),
        )
        .unwrap();
        assert_eq!(
            (g.image, g.pads_begin, g.pads_end),
            (vec![10], vec![0], vec![-1])
        );
    }

    #[test]
    fn absurd_attributes_are_errors_not_panics() {
        let huge = (i64::MAX / 2) as usize;
        assert!(Geometry::forward(
            &attrs(AutoPad::NotSet, vec![1], vec![huge, huge], false),
            &[4],
            &[2]
        )
        .is_err());
        assert!(Geometry::forward(
            &attrs(AutoPad::NotSet, vec![huge], vec![0, 0], false),
            &[4],
            &[2]
        )
        .is_ok());
        assert!(Geometry::transposed(
            &attrs(AutoPad::NotSet, vec![huge], vec![0, 0], false),
            &[4],
            &[2],
            &[0],
            None
        )
        .is_err());
        assert!(Geometry::forward(
            &attrs(AutoPad::NotSet, vec![1], vec![0, 0], false),
            &[2],
            &[5]
        )
        .is_err());
    }
}
