//! The text form of the loop IR, for tests and `kiln compile --emit loops`.
//!
//! ```text
//! kernel k0(in0: f32[2,3], out0: f32[2,3]) {
//!   parallel for i0 in 0..6 {
//!     out0[i0] = Relu(in0[i0])
//!   }
//! }
//! ```

use crate::ir::{Atom, Extent, Gemm, GemmOperand, Idx, Kernel, LoopKind, Stmt, Val};
use std::fmt::{self, Write};

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let params: Vec<String> = self
            .buffers
            .iter()
            .map(|b| {
                let dims: Vec<String> = b.shape.iter().map(|d| d.to_string()).collect();
                format!("{}: {}[{}]", b.name, b.dtype, dims.join(","))
            })
            .collect();
        writeln!(f, "kernel {}({}) {{", self.name, params.join(", "))?;
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
            writeln!(out, "{pad}{kind}for {} in 0..{} {{", l.var, l.extent)?;
            for s in &l.body {
                write_stmt(out, k, s, depth + 1)?;
            }
            writeln!(out, "{pad}}}")
        }
        Stmt::Store { buf, offset, value } => writeln!(
            out,
            "{pad}{}[{offset}] = {}",
            k.buffers[*buf].name,
            ValText(k, value)
        ),
        Stmt::Let { name, dtype, value } => {
            writeln!(out, "{pad}let {name}: {dtype} = {}", ValText(k, value))
        }
        Stmt::Update {
            name,
            combiner,
            value,
        } => writeln!(
            out,
            "{pad}{name} = {}({name}, {})",
            combiner.name(),
            ValText(k, value)
        ),
        Stmt::Gemm(g) => writeln!(out, "{pad}{}", GemmText(k, g)),
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
            } => write!(f, "min({factor}, {total} - {factor}*{outer})"),
        }
    }
}

impl fmt::Display for Idx {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, (a, c)) in self.terms.iter().enumerate() {
            match (i, *c < 0) {
                (0, false) => {}
                (0, true) => write!(f, "-")?,
                (_, false) => write!(f, " + ")?,
                (_, true) => write!(f, " - ")?,
            }
            if c.abs() != 1 {
                write!(f, "{}*", c.abs())?;
            }
            write!(f, "{a}")?;
        }
        match (self.terms.is_empty(), self.constant) {
            (true, c) => write!(f, "{c}"),
            (false, 0) => Ok(()),
            (false, c) if c < 0 => write!(f, " - {}", -c),
            (false, c) => write!(f, " + {c}"),
        }
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Atom::Var(v) => write!(f, "{v}"),
            Atom::Div(e, d) => write!(f, "({e} floordiv {d})"),
            Atom::Mod(e, d) => write!(f, "({e} mod {d})"),
            Atom::Data { value, extent } => {
                write!(f, "wrap({}, {extent})", ValText(&Kernel::EMPTY, value))
            }
        }
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
        self.buffers
            .get(b)
            .map(|x| x.name.clone())
            .unwrap_or(format!("buf{b}"))
    }
}

/// A value printed with the kernel's buffer names.
struct ValText<'a>(&'a Kernel, &'a Val);

impl fmt::Display for ValText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let k = self.0;
        match self.1 {
            Val::Load { buf, offset, guard } => {
                if guard.is_empty() {
                    write!(f, "{}[{offset}]", k.buffer_name(*buf))
                } else {
                    write!(f, "{}[{offset} if {}]", k.buffer_name(*buf), Guard(guard))
                }
            }
            Val::InBounds(g) => write!(f, "inbounds({})", Guard(g)),
            Val::Const(t) => write!(f, "{}", kiln_ir::text::format_scalar(t)),
            Val::Index(i) => write!(f, "index({i})"),
            Val::Local(n) => write!(f, "{n}"),
            Val::Call(s, args) => {
                write!(f, "{}", s.op)?;
                for (name, v) in &s.attrs {
                    write!(f, "{{{name}={}}}", kiln_ir::text::format_attr(v))?;
                }
                let args: Vec<String> = args.iter().map(|a| ValText(k, a).to_string()).collect();
                write!(f, "({})", args.join(", "))
            }
        }
    }
}

struct Guard<'a>(&'a [(Idx, i64)]);

impl fmt::Display for Guard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(i, e)| format!("{i} < {e}")).collect();
        write!(f, "{}", parts.join(" && "))
    }
}

struct GemmText<'a>(&'a Kernel, &'a Gemm);

impl fmt::Display for GemmText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let (k, g) = (self.0, self.1);
        let operand = |o: &GemmOperand| {
            if o.guard.is_empty() {
                format!("{}[{}]", k.buffer_name(o.buf), o.offset)
            } else {
                format!(
                    "{}[{} if {}]",
                    k.buffer_name(o.buf),
                    o.offset,
                    Guard(&o.guard)
                )
            }
        };
        write!(
            f,
            "gemm b<{}, m<{}, n<{}, k<{}: {} = sum {} * {}",
            g.batch,
            g.m,
            g.n,
            g.k,
            operand(&g.c),
            operand(&g.a),
            operand(&g.b)
        )
    }
}
