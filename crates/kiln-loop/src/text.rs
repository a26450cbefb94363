//! The text form of the loop IR, for tests and `kiln compile --emit loops`.
//!
//! ```text
//! kernel k0(in0: f32[2,3], out out0: f32[2,3]) {
//!   parallel for i0 in 0..6 {
//!     out0[i0] = Relu(in0[i0])
//!   }
//! }
//! ```
//!
//! Guarantees: the form is exact and unambiguous, so `parse.rs` reads it
//! back (`parse(&k.to_string()) == k` for every kernel whose buffer
//! references are in range and whose buffer names are distinct):
//! - output buffers are marked `out`;
//! - names that are not plain identifiers, or that are keywords of the
//!   form, print quoted (`"a b"`);
//! - constants carry their type (`0.0:f64`, `-inf:f32`, `3:i64`,
//!   `[1.5]:f32[1]`), floats in the shortest form that reads back exactly;
//! - index terms print in order with their coefficients (`4*i0 - i1 + 2`),
//!   the constant last; a guard `i < 9` means `0 <= i < 9`;
//! - a split's tail extent prints as `min(f, total - f*outer)`;
//! - a parallel loop's combine prints as `combine ordered acc = sum(acc,
//!   acc_w)` (or `atomic`).

use crate::ir::{
    Atom, Buffer, ConvWindow, Extent, Gemm, GemmInput, GemmOperand, Idx, Kernel, LoopKind, Scope,
    Stmt, Val, WindowLayout,
};
use kiln_ir::Tensor;
use std::fmt::{self, Write};

/// Words of the form that a bare name may not be (they print quoted).
pub(crate) const KEYWORDS: &[&str] = &[
    "kernel",
    "out",
    "for",
    "in",
    "parallel",
    "vectorized",
    "unrolled",
    "let",
    "gemm",
    "alloc",
    "combine",
    "sum",
    "if",
    "min",
    "floordiv",
    "mod",
    "wrap",
    "index",
    "inbounds",
];

/// A name that prints without quotes: an identifier that is no keyword.
pub(crate) fn is_bare(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&name)
}

/// A name as printed: bare, or quoted.
struct Name<'a>(&'a str);

impl fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if is_bare(self.0) {
            write!(f, "{}", self.0)
        } else {
            write!(f, "{:?}", self.0)
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let params: Vec<String> = self
            .buffers
            .iter()
            .filter(|b| b.scope == Scope::Param)
            .map(|b| {
                let out = if b.output { "out " } else { "" };
                format!("{out}{}", Declared(b))
            })
            .collect();
        writeln!(f, "kernel {}({}) {{", Name(&self.name), params.join(", "))?;
        let mut out = String::new();
        for s in &self.body {
            write_stmt(&mut out, self, s, 1)?;
        }
        write!(f, "{out}}}")
    }
}

fn write_stmt(out: &mut String, k: &Kernel, s: &Stmt, depth: usize) -> fmt::Result {
    let pad = "  ".repeat(depth);
    match s {
        Stmt::Loop(l) => {
            let kind = match l.kind {
                LoopKind::Serial => "",
                LoopKind::Parallel => "parallel ",
                LoopKind::Vectorized => "vectorized ",
                LoopKind::Unrolled => "unrolled ",
            };
            writeln!(out, "{pad}{kind}for {} in 0..{} {{", Name(&l.var), l.extent)?;
            for s in &l.body {
                write_stmt(out, k, s, depth + 1)?;
            }
            writeln!(out, "{pad}}}")
        }
        Stmt::Store { buf, offset, value } => writeln!(
            out,
            "{pad}{} = {}",
            Access(k, *buf, offset, &[]),
            ValText(k, value)
        ),
        Stmt::Let { name, dtype, value } => {
            writeln!(
                out,
                "{pad}let {}: {dtype} = {}",
                Name(name),
                ValText(k, value)
            )
        }
        Stmt::Update {
            name,
            combiner,
            value,
        } => writeln!(
            out,
            "{pad}{0} = {1}({0}, {2})",
            Name(name),
            combiner.name(),
            ValText(k, value)
        ),
        Stmt::Combine(c) => writeln!(
            out,
            "{pad}combine {} {1} = {2}({1}, {3})",
            c.mode.name(),
            Name(&c.name),
            c.combiner.name(),
            ValText(k, &c.value)
        ),
        Stmt::ArgUpdate(a) => writeln!(
            out,
            "{pad}{} = arg{}{}({}, {}, {})",
            Name(&a.name),
            a.combiner.name(),
            if a.last { "_last" } else { "" },
            Name(&a.best),
            ValText(k, &a.value),
            IdxText(k, &a.index)
        ),
        Stmt::Gemm(g) => writeln!(out, "{pad}{}", GemmText(k, g)),
        Stmt::Alloc(b) => writeln!(out, "{pad}alloc {}", Declared(&k.buffers[*b])),
    }
}

/// `name: dtype[dims]`
struct Declared<'a>(&'a Buffer);

impl fmt::Display for Declared<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let b = self.0;
        let dims: Vec<String> = b.shape.iter().map(|d| d.to_string()).collect();
        write!(f, "{}: {}[{}]", Name(&b.name), b.dtype, dims.join(","))
    }
}

impl fmt::Display for Extent {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Extent::Const(n) => write!(f, "{n}"),
            Extent::Tail {
                total,
                outer,
                factor,
            } => write!(f, "min({factor}, {total} - {factor}*{})", Name(outer)),
        }
    }
}

/// Printed on its own, an index names buffers by number (`buf1`); inside a
/// kernel, by their names.
impl fmt::Display for Idx {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", IdxText(&Kernel::EMPTY, self))
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", AtomText(&Kernel::EMPTY, self))
    }
}

impl Kernel {
    /// Stands in for the kernel when an index is printed on its own.
    const EMPTY: Kernel = Kernel {
        name: String::new(),
        buffers: Vec::new(),
        body: Vec::new(),
    };

    fn buffer_name(&self, b: usize) -> String {
        match self.buffers.get(b) {
            Some(x) => Name(&x.name).to_string(),
            None => format!("buf{b}"),
        }
    }
}

/// An index printed with the kernel's buffer names.
struct IdxText<'a>(&'a Kernel, &'a Idx);

impl fmt::Display for IdxText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let (k, idx) = (self.0, self.1);
        for (i, (a, c)) in idx.terms.iter().enumerate() {
            match (i, *c < 0) {
                (0, false) => {}
                (0, true) => write!(f, "-")?,
                (_, false) => write!(f, " + ")?,
                (_, true) => write!(f, " - ")?,
            }
            if c.unsigned_abs() != 1 {
                write!(f, "{}*", c.unsigned_abs())?;
            }
            write!(f, "{}", AtomText(k, a))?;
        }
        match (idx.terms.is_empty(), idx.constant) {
            (true, c) => write!(f, "{c}"),
            (false, 0) => Ok(()),
            (false, c) if c < 0 => write!(f, " - {}", c.unsigned_abs()),
            (false, c) => write!(f, " + {c}"),
        }
    }
}

struct AtomText<'a>(&'a Kernel, &'a Atom);

impl fmt::Display for AtomText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let k = self.0;
        match self.1 {
            Atom::Var(v) => write!(f, "{}", Name(v)),
            Atom::Div(e, d) => write!(f, "({} floordiv {d})", IdxText(k, e)),
            Atom::Mod(e, d) => write!(f, "({} mod {d})", IdxText(k, e)),
            Atom::Data { value, extent } => write!(f, "wrap({}, {extent})", ValText(k, value)),
        }
    }
}

/// `buf[offset]`, or `buf[offset if guard]` for a guarded access.
struct Access<'a>(&'a Kernel, usize, &'a Idx, &'a [(Idx, i64)]);

impl fmt::Display for Access<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let Access(k, buf, offset, guard) = *self;
        write!(f, "{}[{}", k.buffer_name(buf), IdxText(k, offset))?;
        if !guard.is_empty() {
            write!(f, " if {}", GuardText(k, guard))?;
        }
        write!(f, "]")
    }
}

/// A value printed with the kernel's buffer names.
struct ValText<'a>(&'a Kernel, &'a Val);

impl fmt::Display for ValText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let k = self.0;
        match self.1 {
            Val::Load { buf, offset, guard } => write!(f, "{}", Access(k, *buf, offset, guard)),
            Val::InBounds(g) => write!(f, "inbounds({})", GuardText(k, g)),
            Val::Const(t) => write!(f, "{}", ConstText(t)),
            Val::Index(i) => write!(f, "index({})", IdxText(k, i)),
            Val::Local(n) => write!(f, "{}", Name(n)),
            Val::Call(s, args) => {
                write!(f, "{}", Name(&s.op))?;
                for (name, v) in &s.attrs {
                    write!(f, "{{{}={}}}", Name(name), kiln_ir::text::format_attr(v))?;
                }
                let args: Vec<String> = args.iter().map(|a| ValText(k, a).to_string()).collect();
                write!(f, "({})", args.join(", "))
            }
        }
    }
}

/// `literal:dtype`, with the shape for tensors that are not 0-d.
struct ConstText<'a>(&'a Tensor);

impl fmt::Display for ConstText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let t = self.0;
        write!(f, "{}:{}", kiln_ir::text::format_scalar(t), t.data.dtype())?;
        if !t.shape.is_empty() {
            let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
            write!(f, "[{}]", dims.join(","))?;
        }
        Ok(())
    }
}

struct GuardText<'a>(&'a Kernel, &'a [(Idx, i64)]);

impl fmt::Display for GuardText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (n, (i, e)) in self.1.iter().enumerate() {
            if n > 0 {
                write!(f, " && ")?;
            }
            write!(f, "{} < {e}", IdxText(self.0, i))?;
        }
        Ok(())
    }
}

struct GemmText<'a>(&'a Kernel, &'a Gemm);

impl<'a> fmt::Display for GemmText<'a> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let (k, g) = (self.0, self.1);
        let operand = |o: &'a GemmOperand| Access(k, o.buf, &o.offset, &o.guard);
        let factor = |i: &'a GemmInput| match i {
            GemmInput::Read(o) => operand(o).to_string(),
            GemmInput::Computed(v) => format!("({})", ValText(k, v)),
        };
        write!(
            f,
            "gemm b<{}, m<{}, n<{}, k<{}: {} = sum {} * {}",
            g.batch,
            g.m,
            g.n,
            g.k,
            operand(&g.c),
            factor(&g.a),
            factor(&g.b)
        )?;
        if let Some(w) = &g.window {
            write!(
                f,
                " {}[{}]",
                window_word(w.layout),
                window_numbers(w)
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        if let Some(e) = &g.epilogue {
            write!(f, " then {}", ValText(k, e))?;
        }
        Ok(())
    }
}

/// A window's numbers in its text form: channels, image size, output
/// size, kernel, stride, padding and dilation (each pair height then
/// width), then the batch stride when not 0 or a later number follows,
/// then the pixel stride when it is not the channel count or images
/// follow, then the images and their stride when there are several.
pub(crate) fn window_numbers(w: &ConvWindow) -> Vec<i64> {
    let [h, wd] = w.size;
    let [oh, ow] = w.out;
    let [kh, kw] = w.kernel;
    let [sh, sw] = w.stride;
    let [ph, pw] = w.pad;
    let [dh, dw] = w.dilation;
    let mut n = vec![w.channels, h, wd, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw];
    let images = w.images != 1;
    let pixel_stride = images || w.pixel_stride != w.channels;
    if pixel_stride || w.batch_stride != 0 {
        n.push(w.batch_stride);
    }
    if pixel_stride {
        n.push(w.pixel_stride);
    }
    if images {
        n.extend([w.images, w.image_stride]);
    }
    n
}

/// The text word introducing a window: `window` (NCHW, B's),
/// `window_nhwc` (A's) or `window_rows` (NCHW, A's).
pub(crate) fn window_word(layout: WindowLayout) -> &'static str {
    match layout {
        WindowLayout::Nchw => "window",
        WindowLayout::Nhwc => "window_nhwc",
        WindowLayout::NchwRows => "window_rows",
    }
}

/// The window of [`window_numbers`] (13 numbers, 14 with the batch
/// stride, 15 with the pixel stride, 17 with the images).
pub(crate) fn window_from_numbers(n: &[i64], layout: WindowLayout) -> ConvWindow {
    ConvWindow {
        channels: n[0],
        size: [n[1], n[2]],
        out: [n[3], n[4]],
        kernel: [n[5], n[6]],
        stride: [n[7], n[8]],
        pad: [n[9], n[10]],
        dilation: [n[11], n[12]],
        layout,
        batch_stride: n.get(13).copied().unwrap_or(0),
        pixel_stride: n.get(14).copied().unwrap_or(n[0]),
        images: n.get(15).copied().unwrap_or(1),
        image_stride: n.get(16).copied().unwrap_or(0),
    }
}
