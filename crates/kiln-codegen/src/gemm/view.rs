//! Operands seen in kernel orientation. The driver may compute `C^T = B^T A^T` instead of
//! `C = A B` (when that wastes less padding or stores C contiguously); a view maps the kernel's
//! (row, column) of an operand back to the operand's own coordinates `r`, `c`.
//!
//! Needs an operand and whether the problem is transposed; guarantees that code it emits binds
//! exactly the C variables `r` and `c` (type `long`) that `Operand::Expr` and epilogues are
//! written against, and evaluates strided elements as `param[b*batch + r*row + c*col]`.

use super::window::{element_expr, Window, WindowLayout};
use super::Operand;

/// A kernel-orientation axis of a matrix operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Axis {
    Row,
    Col,
}

impl Axis {
    pub(crate) fn other(self) -> Axis {
        match self {
            Axis::Row => Axis::Col,
            Axis::Col => Axis::Row,
        }
    }
}

pub(crate) struct View<'a> {
    operand: &'a Operand,
    transposed: bool,
}

impl<'a> View<'a> {
    pub(crate) fn new(operand: &'a Operand, transposed: bool) -> View<'a> {
        View {
            operand,
            transposed,
        }
    }

    /// The operand's own coordinate name (`r` or `c`) for a kernel axis.
    fn name_of(&self, axis: Axis) -> &'static str {
        match (axis, self.transposed) {
            (Axis::Row, false) | (Axis::Col, true) => "r",
            (Axis::Col, false) | (Axis::Row, true) => "c",
        }
    }

    /// `const long r = <expr>;` (or `c`) for the kernel axis; marked used, since an operand or
    /// epilogue may ignore it (and generated code should compile cleanly under `-Wall`).
    pub(crate) fn bind(&self, axis: Axis, expr: &str) -> String {
        let name = self.name_of(axis);
        format!("const long {name} = {expr}; (void){name};")
    }

    /// Binds both coordinates from kernel row and column expressions.
    pub(crate) fn bind_both(&self, row: &str, col: &str) -> String {
        format!(
            "{} {}",
            self.bind(Axis::Row, row),
            self.bind(Axis::Col, col)
        )
    }

    /// The element at (b, r, c), once `r` and `c` are bound.
    pub(crate) fn value(&self) -> String {
        match self.operand {
            Operand::Strided {
                param,
                batch,
                row,
                col,
            } => format!("{param}[{}]", strided_index(*batch, *row, *col)),
            Operand::Expr(expr) => format!("({expr})"),
            Operand::Window(window) => element_expr(window),
        }
    }

    /// Element strides (batch, kernel row, kernel column) of a strided operand.
    pub(crate) fn kernel_strides(&self) -> Option<(isize, isize, isize)> {
        match self.operand {
            Operand::Strided {
                batch, row, col, ..
            } if self.transposed => Some((*batch, *col, *row)),
            Operand::Strided {
                batch, row, col, ..
            } => Some((*batch, *row, *col)),
            Operand::Expr(_) | Operand::Window(_) => None,
        }
    }

    /// The channels-first convolution window, when the operand is one and `axis` runs along
    /// its output pixels (its own columns `c`), the layout the window packers handle.
    pub(crate) fn window_along(&self, axis: Axis) -> Option<&'a Window> {
        match self.operand {
            Operand::Window(window)
                if window.layout == WindowLayout::Columns && self.name_of(axis) == "c" =>
            {
                Some(window)
            }
            _ => None,
        }
    }

    /// The convolution window whose rows (output pixels) are kernel rows, when the operand is
    /// one: A, read by the micro-kernel through a pointer per row (into an NHWC image, or into
    /// the staged copy of an NCHW one with a per-K offset table).
    pub(crate) fn pixel_rows_window(&self) -> Option<&'a Window> {
        match self.operand {
            Operand::Window(window) if window.pixel_rows() && !self.transposed => Some(window),
            _ => None,
        }
    }

    /// [`View::pixel_rows_window`] over an NHWC image (K blocks within one tap).
    pub(crate) fn rows_window(&self) -> Option<&'a Window> {
        self.pixel_rows_window()
            .filter(|window| window.layout == WindowLayout::ChannelsLast)
    }

    /// [`View::pixel_rows_window`] over an NCHW image (read from its staged copy).
    pub(crate) fn offsets_window(&self) -> Option<&'a Window> {
        self.pixel_rows_window()
            .filter(|window| window.layout == WindowLayout::Rows)
    }

    /// The base pointer parameter of a strided operand.
    pub(crate) fn param(&self) -> Option<&str> {
        match self.operand {
            Operand::Strided { param, .. } => Some(param),
            Operand::Expr(_) | Operand::Window(_) => None,
        }
    }

    /// Which kernel axis a loop nest over this operand should run innermost: the one with the
    /// smaller stride for strided operands (contiguous reads); for expressions the operand's own
    /// column `c`, so that work depending only on `r` (e.g. the div/mod splitting a convolution's
    /// reduction index) is invariant in the inner loop and hoisted by the C compiler.
    pub(crate) fn inner_axis(&self) -> Axis {
        match self.kernel_strides() {
            Some((_, row, col)) if row.unsigned_abs() < col.unsigned_abs() => Axis::Row,
            Some(_) => Axis::Col,
            None if self.transposed => Axis::Row,
            None => Axis::Col,
        }
    }
}

/// `b * batch + r * row + c * col` without zero terms or unit factors.
fn strided_index(batch: isize, row: isize, col: isize) -> String {
    linear_index(&[("b", batch), ("r", row), ("c", col)])
}

/// `name0 * stride0 + name1 * stride1 ...` without zero terms or unit factors (`0` if empty).
pub(crate) fn linear_index(terms: &[(&str, isize)]) -> String {
    let terms: Vec<String> = terms
        .iter()
        .filter(|&&(_, stride)| stride != 0)
        .map(|&(name, stride)| match stride {
            1 => name.to_string(),
            _ => format!("{name} * {stride}"),
        })
        .collect();
    if terms.is_empty() {
        "0".to_string()
    } else {
        terms.join(" + ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_index_drops_zero_and_unit_strides() {
        assert_eq!(strided_index(0, 5, 1), "r * 5 + c");
        assert_eq!(strided_index(7, 0, 0), "b * 7");
        assert_eq!(strided_index(0, 0, 0), "0");
        assert_eq!(strided_index(-2, 1, 3), "b * -2 + r + c * 3");
    }

    #[test]
    fn transposed_view_swaps_coordinates_and_strides() {
        let op = Operand::Strided {
            param: "A".into(),
            batch: 0,
            row: 9,
            col: 1,
        };
        let view = View::new(&op, true);
        assert_eq!(
            view.bind_both("i", "j"),
            "const long c = i; (void)c; const long r = j; (void)r;"
        );
        assert_eq!(view.kernel_strides(), Some((0, 1, 9)));
        assert_eq!(view.inner_axis(), Axis::Row);
        assert_eq!(View::new(&op, false).inner_axis(), Axis::Col);
    }
}
