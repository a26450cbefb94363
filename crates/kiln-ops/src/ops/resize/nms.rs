//! NonMaxSuppression (opset 10, 11): greedy per-class box selection by
//! score, suppressing boxes whose IoU with a kept box exceeds the threshold.
//! IoU is computed in the boxes' precision (f32 unless f64), as
//! onnxruntime does, so boundary cases (IoU == threshold) agree.

use crate::registry::Registry;
use crate::util::ints;
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{ensure, DType, Result, Tensor, TensorType};
use std::ops::{Add, Div, Mul, Sub};

pub fn register(r: &mut Registry) {
    r.add("NonMaxSuppression", NonMaxSuppression);
}

struct NonMaxSuppression;

/// The float arithmetic IoU needs, for f32 and f64.
trait Real:
    Copy
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    fn of(v: f64) -> Self;
}
impl Real for f32 {
    fn of(v: f64) -> Self {
        v as f32
    }
}
impl Real for f64 {
    fn of(v: f64) -> Self {
        v
    }
}

fn min_max<T: Real>(a: T, b: T) -> (T, T) {
    if a >= b {
        (b, a)
    } else {
        (a, b)
    }
}

/// (x_min, x_max, y_min, y_max) of a box in either box format.
fn corners<T: Real>(b: &[T], center_point: bool) -> (T, T, T, T) {
    if center_point {
        let two = T::of(2.0);
        let (hw, hh) = (b[2] / two, b[3] / two);
        (b[0] - hw, b[0] + hw, b[1] - hh, b[1] + hh)
    } else {
        let (x0, x1) = min_max(b[1], b[3]);
        let (y0, y1) = min_max(b[0], b[2]);
        (x0, x1, y0, y1)
    }
}

/// Whether IoU(a, b) is strictly greater than `threshold`.
fn overlaps<T: Real>(a: &[T], b: &[T], center_point: bool, threshold: T) -> bool {
    let (ax0, ax1, ay0, ay1) = corners(a, center_point);
    let (bx0, bx1, by0, by1) = corners(b, center_point);
    let max = |p: T, q: T| if p >= q { p } else { q };
    let min = |p: T, q: T| if p <= q { p } else { q };
    let (ix0, ix1, iy0, iy1) = (max(ax0, bx0), min(ax1, bx1), max(ay0, by0), min(ay1, by1));
    let zero = T::of(0.0);
    if ix1 <= ix0 || iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let area_a = (ax1 - ax0) * (ay1 - ay0);
    let area_b = (bx1 - bx0) * (by1 - by0);
    let union = area_a + area_b - inter;
    if inter <= zero || area_a <= zero || area_b <= zero || union <= zero {
        return false;
    }
    inter / union > threshold
}

/// Thresholds and limits from the optional scalar inputs.
struct Limits {
    max_per_class: usize,
    iou: f64,
    score: Option<f64>,
}

fn scalar_f64(t: Option<&Tensor>) -> Result<Option<f64>> {
    match t.filter(|t| !t.is_empty()) {
        Some(t) => {
            ensure!(
                t.dtype().is_float(),
                "thresholds must be float tensors, got {}",
                t.dtype()
            );
            Ok(Some(t.data.get_f64(0)))
        }
        None => Ok(None),
    }
}

/// Selects boxes of one (batch, class): returns kept box indices in order.
fn select<T: Real>(boxes: &[T], scores: &[T], center_point: bool, limits: &Limits) -> Vec<usize> {
    let score_min = limits.score.map(T::of);
    let mut candidates: Vec<usize> = (0..scores.len())
        .filter(|&i| score_min.is_none_or(|m| scores[i] > m))
        .collect();
    // Highest score first; ties keep the lower index first.
    candidates.sort_by(|&a, &b| {
        scores[b]
            .partial_cmp(&scores[a])
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    let iou = T::of(limits.iou);
    let mut kept: Vec<usize> = Vec::new();
    for i in candidates {
        if kept.len() >= limits.max_per_class {
            break;
        }
        let b = &boxes[i * 4..i * 4 + 4];
        if !kept
            .iter()
            .any(|&k| overlaps(b, &boxes[k * 4..k * 4 + 4], center_point, iou))
        {
            kept.push(i);
        }
    }
    kept
}

fn run<T: Real>(
    boxes: &[T],
    scores: &[T],
    dims: (usize, usize, usize),
    center_point: bool,
    limits: &Limits,
) -> Vec<i64> {
    let (batches, classes, spatial) = dims;
    let mut out = Vec::new();
    for b in 0..batches {
        let bx = &boxes[b * spatial * 4..(b + 1) * spatial * 4];
        for c in 0..classes {
            let sc = &scores[(b * classes + c) * spatial..(b * classes + c + 1) * spatial];
            for i in select(bx, sc, center_point, limits) {
                out.extend([b as i64, c as i64, i as i64]);
            }
        }
    }
    out
}

impl Op for NonMaxSuppression {
    fn infer(&self, _cx: &InferCx) -> Result<Vec<TensorType>> {
        // The number of selected boxes depends on the data.
        Ok(vec![TensorType::unknown_shape(DType::I64)])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (boxes, scores) = (arg(inputs, 0)?, arg(inputs, 1)?);
        ensure!(
            boxes.rank() == 3 && boxes.shape[2] == 4,
            "boxes must have shape [batches, boxes, 4], got {:?}",
            boxes.shape
        );
        ensure!(
            scores.rank() == 3,
            "scores must have shape [batches, classes, boxes], got {:?}",
            scores.shape
        );
        ensure!(
            scores.shape[0] == boxes.shape[0] && scores.shape[2] == boxes.shape[1],
            "scores {:?} do not match boxes {:?}",
            scores.shape,
            boxes.shape
        );
        ensure!(
            boxes.dtype().is_float() && scores.dtype().is_float(),
            "boxes and scores must be float tensors"
        );
        let max_per_class = match opt_arg(inputs, 2).filter(|t| !t.is_empty()) {
            Some(t) => ints(t)?[0].max(0) as usize,
            None => 0,
        };
        let limits = Limits {
            max_per_class,
            iou: scalar_f64(opt_arg(inputs, 3))?.unwrap_or(0.0),
            score: scalar_f64(opt_arg(inputs, 4))?,
        };
        let center_point = match cx.node.attr_int_or("center_point_box", 0)? {
            0 => false,
            1 => true,
            v => kiln_ir::bail!("center_point_box must be 0 or 1, got {v}"),
        };
        let dims = (boxes.shape[0], scores.shape[1], boxes.shape[1]);
        let (bv, sv) = (boxes.data.to_f64_vec()?, scores.data.to_f64_vec()?);
        let selected = if boxes.dtype() == DType::F64 {
            run(&bv, &sv, dims, center_point, &limits)
        } else {
            let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
            run(&f(bv), &f(sv), dims, center_point, &limits)
        };
        let n = selected.len() / 3;
        Ok(vec![Tensor::from_vec(vec![n, 3], selected)?])
    }
}
