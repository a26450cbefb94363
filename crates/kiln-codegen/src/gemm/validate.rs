//! Checks a `GemmSpec` before any C is generated, so that bad input is an error and not C that
//! fails to compile or races: names are C identifiers and do not collide with the generated
//! code's, strided operands name a parameter, C is strided and its elements do not overlap.

use std::collections::HashSet;

use kiln_ir::{bail, Result};

use super::{Factor, GemmSpec, Operand, Window};

/// Names the generated code declares itself.
const RESERVED: &[&str] = &["b", "r", "c", "acc"];

pub(crate) fn validate(spec: &GemmSpec) -> Result<()> {
    check_identifier(&spec.name, "function name")?;
    for (what, size) in [
        ("batch", spec.batch),
        ("m", spec.m),
        ("n", spec.n),
        ("k", spec.k),
    ] {
        if size == 0 {
            bail!(
                "gemm {}: {what} is 0 (empty matmuls are not generated)",
                spec.name
            );
        }
    }
    let mut seen = HashSet::new();
    for param in &spec.params {
        check_identifier(&param.name, "parameter name")?;
        if RESERVED.contains(&param.name.as_str()) || param.name.starts_with("kiln_") {
            bail!(
                "gemm {}: parameter name `{}` is reserved (b, r, c, acc, kiln_*)",
                spec.name,
                param.name
            );
        }
        if !seen.insert(param.name.as_str()) {
            bail!(
                "gemm {}: parameter `{}` appears twice",
                spec.name,
                param.name
            );
        }
    }
    let shapes = [
        ("A", &spec.a, spec.m, spec.k),
        ("B", &spec.b, spec.k, spec.n),
        ("C", &spec.c, spec.m, spec.n),
    ];
    for (what, operand, rows, cols) in shapes {
        if let Some(param) = base_param(operand).filter(|param| !seen.contains(param)) {
            bail!(
                "gemm {}: operand {what} reads `{param}`, which is not a parameter",
                spec.name
            );
        }
        match operand {
            Operand::Window(window) => check_window(spec, what, window, rows, cols)?,
            Operand::Expr(expr) if expr.trim().is_empty() => {
                bail!("gemm {}: operand {what} has an empty expression", spec.name)
            }
            _ => {}
        }
    }
    check_prepacked(spec, &seen)?;
    check_output(spec)
}

/// A prepacked factor is a strided or expression operand of a single matmul (the packing has
/// no batch dimension), and its packing is a parameter of its own.
fn check_prepacked(spec: &GemmSpec, params: &HashSet<&str>) -> Result<()> {
    let Some(prepacked) = &spec.prepacked else {
        return Ok(());
    };
    let operand = match prepacked.factor {
        Factor::A => &spec.a,
        Factor::B => &spec.b,
    };
    if !matches!(operand, Operand::Strided { .. } | Operand::Expr(_)) || spec.batch != 1 {
        bail!(
            "gemm {}: only a strided or expression factor of an unbatched matmul can be prepacked",
            spec.name
        );
    }
    if !params.contains(prepacked.param.as_str()) || base_param(operand) == Some(&prepacked.param) {
        bail!(
            "gemm {}: the packing `{}` must be a parameter of its own",
            spec.name,
            prepacked.param
        );
    }
    Ok(())
}

/// The pointer parameter a strided or window operand reads.
fn base_param(operand: &Operand) -> Option<&str> {
    match operand {
        Operand::Strided { param, .. } => Some(param),
        Operand::Window(window) => Some(&window.param),
        Operand::Expr(_) => None,
    }
}

/// A window must have no zero extents and be exactly the operand's shape.
fn check_window(
    spec: &GemmSpec,
    what: &str,
    window: &Window,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let extents = [
        window.size,
        window.out,
        window.kernel,
        window.stride,
        window.dilation,
    ];
    if window.channels == 0 || extents.iter().flatten().any(|&v| v == 0) {
        bail!(
            "gemm {}: operand {what}: convolution window with a zero extent: {window:?}",
            spec.name
        );
    }
    if (window.rows(), window.cols()) != (rows, cols) {
        bail!(
            "gemm {}: operand {what} is {rows} x {cols} but its window is {} x {} (channels x kernel, output pixels)",
            spec.name,
            window.rows(),
            window.cols()
        );
    }
    Ok(())
}

fn check_identifier(name: &str, what: &str) -> Result<()> {
    let mut chars = name.chars();
    let starts_well = chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_');
    if !starts_well || !chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_') {
        bail!("gemm: {what} `{name}` is not a C identifier");
    }
    Ok(())
}

/// C must be strided and every (b, r, c) must land on its own element: sorted by |stride|, each
/// dimension of extent > 1 must step past everything the smaller ones cover.
fn check_output(spec: &GemmSpec) -> Result<()> {
    let Operand::Strided {
        batch, row, col, ..
    } = &spec.c
    else {
        bail!("gemm {}: the output C must be a strided operand", spec.name);
    };
    let mut dims: Vec<(usize, usize)> = [(spec.batch, *batch), (spec.m, *row), (spec.n, *col)]
        .into_iter()
        .filter(|&(extent, _)| extent > 1)
        .map(|(extent, stride)| (extent, stride.unsigned_abs()))
        .collect();
    dims.sort_by_key(|&(_, stride)| stride);
    let mut covered = 0usize;
    for (extent, stride) in dims {
        if stride <= covered {
            bail!(
                "gemm {}: output C strides ({batch}, {row}, {col}) make elements overlap",
                spec.name
            );
        }
        covered = covered.saturating_add(stride.saturating_mul(extent - 1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::{strided, Param};

    fn spec() -> GemmSpec {
        GemmSpec {
            name: "mm".into(),
            params: ["A", "B", "C"]
                .iter()
                .map(|name| Param::new("float*", *name))
                .collect(),
            batch: 1,
            m: 4,
            n: 5,
            k: 3,
            a: strided("A", 3, 1),
            b: strided("B", 5, 1),
            c: strided("C", 5, 1),
            epilogue: None,
            prepacked: None,
        }
    }

    #[test]
    fn accepts_a_plain_matmul() {
        assert!(validate(&spec()).is_ok());
    }

    #[test]
    fn rejects_overlapping_output() {
        let mut bad = spec();
        bad.c = Operand::Strided {
            param: "C".into(),
            batch: 0,
            row: 3,
            col: 1,
        };
        assert!(validate(&bad).is_err());
        bad.c = Operand::Strided {
            param: "C".into(),
            batch: 0,
            row: 1,
            col: 4,
        };
        assert!(validate(&bad).is_ok(), "column-major C is fine");
    }

    #[test]
    fn rejects_reserved_and_unknown_names() {
        let mut bad = spec();
        bad.params[0].name = "acc".into();
        assert!(validate(&bad).is_err());
        let mut bad = spec();
        bad.a = Operand::Strided {
            param: "X".into(),
            batch: 0,
            row: 3,
            col: 1,
        };
        assert!(validate(&bad).is_err());
        let mut bad = spec();
        bad.k = 0;
        assert!(validate(&bad).is_err());
        let mut bad = spec();
        bad.c = Operand::Expr("1.0f".into());
        assert!(validate(&bad).is_err());
    }
}
