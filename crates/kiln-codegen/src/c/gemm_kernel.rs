//! A kernel whose body is one `Gemm`: the generated matmul instantiated on
//! its operands (strided reads, convolution windows, computed factors) with
//! its epilogue, the entry point calling it, and the prepacking entry
//! points of a weight factor.

use super::{buffer_arguments, KernelSource, Printer, PREPACK_SUFFIX};
use crate::gemm::{
    self, gemm_c_tuned, gemm_prepack_c_tuned, gemm_workspace_tuned, prepack_name, Factor, GemmSpec,
    Operand, Param, Prepacked, Tuning, Window,
};
use crate::scalar_c::storage_type;
use kiln_ir::{bail, DType, Result};
use kiln_loop::{Atom, ConvWindow, Gemm, GemmInput, GemmOperand, Kernel, Val, WindowLayout};
use std::fmt::Write;

/// A kernel that is one matrix product: the gemm template instantiated on
/// the operands (strided when their offsets are, window expressions
/// otherwise), and the entry point calling it. A factor among `constants`
/// of an unbatched product (strided, or any index of its own buffer, like
/// HWIO weights read in OIHW order) is prepacked (B preferred: a weight
/// right of the activations).
pub(super) fn gemm_kernel_c(
    k: &Kernel,
    g: &Gemm,
    constants: &[usize],
    tuning: &Tuning,
) -> Result<KernelSource> {
    let mut params: Vec<Param> = k
        .buffers
        .iter()
        .map(|b| {
            let konst = if b.output { "" } else { "const " };
            Ok(Param::new(
                format!("{konst}{}* restrict", storage_type(b.dtype)?),
                b.name.clone(),
            ))
        })
        .collect::<Result<_>>()?;
    let rows_cols = |o: &GemmOperand, rows: i64, cols: i64| -> Result<Operand> {
        operand(k, o, [g.batch, rows, cols])
    };
    let factor = |i: &GemmInput, rows: i64, cols: i64| -> Result<Operand> {
        match i {
            GemmInput::Read(o) => rows_cols(o, rows, cols),
            GemmInput::Computed(v) => computed(k, v, [g.batch, rows, cols]),
        }
    };
    let window_of = |i: &GemmInput, w: &ConvWindow| -> Result<Operand> {
        match i.read() {
            Some(o) => Ok(Operand::Window(window(&k.buffers[o.buf].name, w))),
            None => bail!("{}: a convolution window over a computed factor", k.name),
        }
    };
    let (a, b) = match &g.window {
        Some(w) if w.layout.is_a() => (window_of(&g.a, w)?, factor(&g.b, g.k, g.n)?),
        Some(w) => (factor(&g.a, g.m, g.k)?, window_of(&g.b, w)?),
        None => (factor(&g.a, g.m, g.k)?, factor(&g.b, g.k, g.n)?),
    };
    let packed = [(Factor::B, &b, &g.b), (Factor::A, &a, &g.a)]
        .into_iter()
        .find_map(|(factor, o, input)| {
            let buf = input.read()?.buf;
            (g.batch == 1
                && constants.contains(&buf)
                && matches!(o, Operand::Strided { .. } | Operand::Expr(_)))
            .then_some((factor, buf))
        });
    let prepacked = packed.map(|(factor, _)| Prepacked {
        factor,
        param: PACKED_PARAM.into(),
    });
    if prepacked.is_some() {
        params.push(Param::new("const float* restrict", PACKED_PARAM));
    }
    let spec = GemmSpec {
        name: format!("{}_gemm", k.name),
        params,
        batch: g.batch as usize,
        m: g.m as usize,
        n: g.n as usize,
        k: g.k as usize,
        a,
        b,
        c: rows_cols(&output_at_zero(&g.c), g.m, g.n)?,
        epilogue: match &g.epilogue {
            Some(e) => Some(epilogue(printer(k, [g.batch, g.m, g.n]), e)?),
            None => None,
        },
        prepacked,
    };
    let mut out = gemm_c_tuned(&spec, tuning)?;
    let workspace = gemm_workspace_tuned(&spec, tuning)?;
    let mut args: Vec<String> = k.buffers.iter().map(|b| b.name.clone()).collect();
    // An output written as a part of a larger tensor (`kiln_loop::write_as_part`) starts
    // `constant` elements into its buffer: the product is called on that address.
    if g.c.offset.constant != 0 {
        args[g.c.buf] = format!("{} + {}", args[g.c.buf], g.c.offset.constant);
    }
    let unpack = buffer_arguments(k, &|_| false)?;
    write!(
        out,
        "int {}(void* const* restrict args) {{\n{unpack}",
        k.name
    )
    .ok();
    if spec.prepacked.is_some() {
        let n = k.buffers.len();
        writeln!(
            out,
            "  const float* {PACKED_PARAM} = (const float*)args[{n}];"
        )
        .ok();
        args.push(PACKED_PARAM.into());
    }
    let ws_arg = k.buffers.len() + usize::from(spec.prepacked.is_some());
    writeln!(
        out,
        "  {}({}, (float*)args[{ws_arg}]);\n  return 0;\n}}",
        spec.name,
        args.join(", ")
    )
    .ok();
    if spec.prepacked.is_some() {
        out.push_str(&gemm_prepack_c_tuned(&spec, tuning)?);
        let packing = prepack_name(&spec);
        let name = format!("{}{PREPACK_SUFFIX}", k.name);
        let n = k.buffers.len();
        args.pop();
        writeln!(
            out,
            "long {name}_floats(void) {{\n  return {packing}_floats();\n}}\nint {name}(void* const* restrict args) {{\n{unpack}  {packing}({}, 0, (float*)args[{n}]);\n  return 0;\n}}",
            args.join(", ")
        )
        .ok();
    }
    Ok(KernelSource {
        c: out,
        packed_buffer: packed.map(|(_, buf)| buf),
        workspace,
    })
}

/// The name of the prepacked factor's parameter in a gemm kernel.
const PACKED_PARAM: &str = "packed";

/// The C expression of a gemm epilogue printed by `p` (which knows the
/// ranges of `b`, `r`, `c`: batch, rows and columns); the product is the
/// float `acc`.
pub(crate) fn epilogue(mut p: Printer<'_>, e: &Val) -> Result<String> {
    p.locals.insert("acc".to_string(), DType::F32);
    let (text, dtype) = p.val(e)?;
    if dtype != DType::F32 {
        bail!("gemm epilogue computes {dtype}, the product is f32");
    }
    Ok(text)
}

/// The gemm template's window read of buffer `param`.
fn window(param: &str, w: &ConvWindow) -> Window {
    let pair = |p: [i64; 2]| [p[0] as usize, p[1] as usize];
    Window {
        param: param.to_string(),
        batch: w.batch_stride as isize,
        channels: w.channels as usize,
        pixel_stride: w.pixel_stride as usize,
        size: pair(w.size),
        out: pair(w.out),
        kernel: pair(w.kernel),
        stride: pair(w.stride),
        pad: pair(w.pad),
        dilation: pair(w.dilation),
        layout: match w.layout {
            WindowLayout::Nchw => gemm::WindowLayout::Columns,
            WindowLayout::Nhwc => gemm::WindowLayout::ChannelsLast,
            WindowLayout::NchwRows => gemm::WindowLayout::Rows,
        },
        images: w.images as usize,
        image_stride: w.image_stride as isize,
    }
}

/// A computed gemm factor (a prologue): its value as a C expression over
/// `b`, `r`, `c`, evaluated while the factor is packed.
pub(crate) fn computed(k: &Kernel, v: &Val, extents: [i64; 3]) -> Result<Operand> {
    let (text, dtype) = printer(k, extents).val(v)?;
    if dtype != DType::F32 {
        bail!(
            "{}: a gemm prologue computes {dtype}, the product is f32",
            k.name
        );
    }
    Ok(Operand::Expr(text))
}

/// A printer of values over a gemm operand's `b`, `r`, `c` below `extents`.
pub(crate) fn printer(k: &Kernel, extents: [i64; 3]) -> Printer<'_> {
    with_gemm_ranges(Printer::new(k), extents)
}

/// The output operand with its constant offset left out (added to the
/// pointer the product is called on instead), so a part of a larger
/// tensor is as strided as a whole one.
fn output_at_zero(c: &GemmOperand) -> GemmOperand {
    let mut at_zero = c.clone();
    at_zero.offset.constant = 0;
    at_zero
}

/// `p` knowing the ranges of a gemm's `b`, `r`, `c` below `extents`.
pub(crate) fn with_gemm_ranges(mut p: Printer<'_>, extents: [i64; 3]) -> Printer<'_> {
    for (v, e) in ["b", "r", "c"].iter().zip(extents) {
        p.ranges.insert(v.to_string(), (0, e - 1));
    }
    p
}

/// A gemm operand: strided when its offset is `sb·b + sr·r + sc·c`,
/// otherwise a C expression over `b`, `r`, `c` (with its guard).
fn operand(k: &Kernel, o: &GemmOperand, extents: [i64; 3]) -> Result<Operand> {
    let name = &k.buffers[o.buf].name;
    let coeff = |v: &str| {
        o.offset
            .terms
            .iter()
            .find(|(a, _)| matches!(a, Atom::Var(x) if x == v))
            .map(|t| t.1 as isize)
            .unwrap_or(0)
    };
    let plain = o.guard.is_empty()
        && o.offset.constant == 0
        && o.offset
            .terms
            .iter()
            .all(|(a, _)| matches!(a, Atom::Var(_)));
    if plain {
        return Ok(Operand::Strided {
            param: name.clone(),
            batch: coeff("b"),
            row: coeff("r"),
            col: coeff("c"),
        });
    }
    let (read, _) = printer(k, extents).val(&Val::Load {
        buf: o.buf,
        offset: o.offset.clone(),
        guard: o.guard.clone(),
    })?;
    Ok(Operand::Expr(read))
}
