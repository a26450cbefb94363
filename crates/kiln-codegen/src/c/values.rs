//! The C printer's values: indices, bounds checks, guarded reads (branch-free
//! where GCC keeps their masks apart), element-wise calls and literals.

use super::*;

/// Whether `i` reads an index from a buffer (a gather's data-dependent index).
fn reads_data(i: &Idx) -> bool {
    i.terms.iter().any(|(a, _)| match a {
        Atom::Var(_) => false,
        Atom::Div(e, _) | Atom::Mod(e, _) => reads_data(e),
        Atom::Data { .. } => true,
    })
}

/// Whether `v` occurs in `i` only as a plain term (not under a division or remainder).
fn affine_in(i: &Idx, v: &str) -> bool {
    i.terms.iter().all(|(a, _)| match a {
        Atom::Var(_) => true,
        Atom::Div(e, _) | Atom::Mod(e, _) => !e.uses(v),
        Atom::Data { .. } => false,
    })
}

/// The suffix of the prelude's `kiln_keep_*`/`kiln_select_*` for C type `ty`.
fn select_suffix(ty: &str) -> Result<&'static str> {
    Ok(match ty {
        "float" => "f32",
        "double" => "f64",
        "int8_t" => "i8",
        "int16_t" => "i16",
        "int32_t" => "i32",
        "int64_t" => "i64",
        "uint8_t" => "u8",
        "uint16_t" => "u16",
        "uint32_t" => "u32",
        "uint64_t" => "u64",
        other => bail!("no branch-free select for C type {other}"),
    })
}

impl Printer<'_> {
    fn range(&self, i: &Idx) -> (i64, i64) {
        i.range(&|v| {
            self.ranges
                .get(v)
                .copied()
                .unwrap_or((i64::MIN / 4, i64::MAX / 4))
        })
    }

    pub(crate) fn idx(&self, i: &Idx) -> Result<String> {
        let mut parts = Vec::new();
        for (a, c) in &i.terms {
            let atom = self.atom(a)?;
            parts.push(if *c == 1 { atom } else { format!("{c}*{atom}") });
        }
        if i.constant != 0 || parts.is_empty() {
            parts.push(i.constant.to_string());
        }
        Ok(format!("({})", parts.join(" + ")))
    }

    fn atom(&self, a: &Atom) -> Result<String> {
        Ok(match a {
            Atom::Var(v) => v.clone(),
            Atom::Div(e, d) if self.range(e).0 >= 0 => format!("({} / {d})", self.idx(e)?),
            Atom::Mod(e, d) if self.range(e).0 >= 0 => format!("({} % {d})", self.idx(e)?),
            Atom::Div(e, d) => format!("kiln_fdiv({}, {d})", self.idx(e)?),
            Atom::Mod(e, d) => format!("kiln_fmod({}, {d})", self.idx(e)?),
            Atom::Data { value, extent } => {
                let (v, _) = self.val(value)?;
                format!("kiln_idx((int64_t){v}, {extent}, &err)")
            }
        })
    }

    pub(crate) fn guard(&self, g: &[(Idx, i64)]) -> Result<String> {
        let parts = self.guard_terms(g, |s, e| format!("({s} >= 0 && {s} < {e})"))?;
        Ok(parts.join(" && "))
    }

    /// The guard `g` as a C condition without short-circuit operators.
    fn guard_mask(&self, g: &[(Idx, i64)]) -> Result<String> {
        let parts = self.guard_terms(g, |s, e| format!("({s} >= 0) & ({s} < {e})"))?;
        Ok(format!("({})", parts.join(" & ")))
    }

    /// One C condition per bound of `g`, from the printed index and its extent.
    fn guard_terms(
        &self,
        g: &[(Idx, i64)],
        term: impl Fn(&str, i64) -> String,
    ) -> Result<Vec<String>> {
        g.iter().map(|(i, e)| Ok(term(&self.idx(i)?, *e))).collect()
    }

    /// Whether the guarded read of `offset` under `guard` may be printed as a conditional
    /// read, `(g ? buf[offset] : 0)`, which GCC if-converts into a masked load.
    ///
    /// GCC 12.2 vectorizes a group of masked loads (loads at neighbouring offsets, e.g. the
    /// taps of a window once an inner loop is unrolled, in a loop GCC chose to vectorize)
    /// with the first vector's mask for every vector of the group, and reads zeros where the
    /// guard holds: differential finding 268 (`fuzz/regressions/differential/268-gcc12.c`).
    /// A masked load only joins such a group when its offset steps by more than one element
    /// per iteration of the vectorized loop, and the wrong mask only matters when the guard
    /// differs between the lanes. So a read stays conditional (a masked or unswitched load,
    /// as fast as it gets) only inside an `omp simd` loop GCC vectorizes as it is (more
    /// than 16 iterations, so it is never unrolled completely first) that it reads at unit
    /// stride, or under a guard that does not depend on that loop (the padded windows of
    /// pooling and depthwise convolution along rows, channels-last or not; the reads of
    /// one group, within a row, then share one mask); and where a data-dependent index
    /// must not be evaluated out of bounds. Every other guarded read is unconditional: see
    /// [`Printer::val`].
    fn conditional_read(&self, offset: &Idx, guard: &[(Idx, i64)]) -> bool {
        if self.conditional_reads || reads_data(offset) || guard.iter().any(|(i, _)| reads_data(i))
        {
            return true;
        }
        let Some((v, extent)) = &self.simd else {
            return false;
        };
        if *extent <= 16 || !affine_in(offset, v) {
            return false;
        }
        let step: i64 = offset
            .terms
            .iter()
            .filter(|(a, _)| matches!(a, Atom::Var(x) if x == v))
            .map(|(_, c)| *c)
            .sum();
        step == 1 || !guard.iter().any(|(i, _)| i.uses(v))
    }

    /// Whether `v` contains a guarded read printed as an unconditional one: then every
    /// select around it is printed without a branch too (see [`Printer::val`]).
    pub(super) fn has_unconditional_read(&self, v: &Val) -> bool {
        match v {
            Val::Load { buf, offset, guard } => {
                !guard.is_empty()
                    && !self.k.buffers[*buf].shape.contains(&0)
                    && !self.conditional_read(offset, guard)
            }
            Val::Call(_, args) => args.iter().any(|a| self.has_unconditional_read(a)),
            Val::InBounds(_) | Val::Const(_) | Val::Index(_) | Val::Local(_) => false,
        }
    }

    /// The read of `buf[offset]` under `guard` in the buffer's storage type (see
    /// [`Printer::val`] for the forms of a guarded read).
    pub(super) fn stored_read(
        &self,
        buf: usize,
        offset: &Idx,
        guard: &[(Idx, i64)],
    ) -> Result<String> {
        let b = &self.k.buffers[buf];
        let stored = storage_type(b.dtype)?;
        let read = format!("{}[{}]", b.name, self.idx(offset)?);
        Ok(if guard.is_empty() {
            read
        } else if b.shape.contains(&0) {
            // No index is in bounds of an empty buffer.
            format!("({stored})0")
        } else if self.conditional_read(offset, guard) {
            format!("({} ? {read} : ({stored})0)", self.guard(guard)?)
        } else {
            let g = self.guard_mask(guard)?;
            format!(
                "kiln_keep_{}({g}, {}[{} & -(int64_t){g}])",
                select_suffix(stored)?,
                b.name,
                self.idx(offset)?
            )
        })
    }

    /// The C expression of `v` and its element type.
    ///
    /// A guarded read is `(g ? buf[offset] : 0)` where [`Printer::conditional_read`] allows
    /// it. Elsewhere it reads unconditionally, at offset 0 when the guard fails, and selects
    /// with integer masks: `kiln_keep_T(g, buf[offset & -g])`; a `Where` around such a read
    /// is `kiln_select_T(c, a, b)`, also branch-free. A branch on the guard anywhere around
    /// the read (a `?:` arm, or one GCC's jump threading copies the read into) lets GCC move
    /// the read under the branch and if-convert it into a masked load again.
    pub(crate) fn val(&self, v: &Val) -> Result<(String, DType)> {
        Ok(match v {
            Val::Load { buf, offset, guard } => {
                let dtype = self.k.buffers[*buf].dtype;
                match half_blocks::find(&self.widened, *buf, offset).filter(|_| guard.is_empty()) {
                    Some(a) => (format!("{}[{}]", a.array, a.var), dtype),
                    None => (widen(dtype, &self.stored_read(*buf, offset, guard)?), dtype),
                }
            }
            Val::Call(s, args)
                if s.op == "Where" && args.len() == 3 && self.has_unconditional_read(v) =>
            {
                let c = match &args[0] {
                    Val::InBounds(g) if !g.is_empty() => self.guard_mask(g)?,
                    c => self.val(c)?.0,
                };
                let (a, ta) = self.val(&args[1])?;
                let (b, tb) = self.val(&args[2])?;
                let t = call_dtype(s, &[DType::Bool, ta, tb])?;
                let ty = c_type(t)?;
                let e = format!(
                    "kiln_select_{}(({c}) != 0, ({ty})({a}), ({ty})({b}))",
                    select_suffix(ty)?
                );
                (e, t)
            }
            Val::Call(s, args)
                if args.len() == 2
                    && matches!(s.op.as_str(), "And" | "Or" | "Min" | "Max")
                    && self.has_unconditional_read(v) =>
            {
                let (a, ta) = self.val(&args[0])?;
                let (b, tb) = self.val(&args[1])?;
                if ta == DType::Bool && tb == DType::Bool {
                    // `&&` and `||` would read `b` under a branch.
                    let op = if matches!(s.op.as_str(), "And" | "Min") {
                        "&"
                    } else {
                        "|"
                    };
                    (
                        format!("(uint8_t)((({a}) != 0) {op} (({b}) != 0))"),
                        DType::Bool,
                    )
                } else {
                    call_c(s, &[ta, tb], &[a, b])?
                }
            }
            Val::InBounds(g) if g.is_empty() => ("(uint8_t)1".into(), DType::Bool),
            Val::InBounds(g) => (format!("(uint8_t)({})", self.guard(g)?), DType::Bool),
            Val::Const(t) => (literal(t)?, t.dtype()),
            Val::Index(i) => (format!("(int64_t){}", self.idx(i)?), DType::I64),
            Val::Local(n) => match self.locals.get(n) {
                Some(d) => (n.clone(), *d),
                None => bail!("read of undeclared local '{n}'"),
            },
            Val::Call(s, args) => match (s.op.as_str(), args.as_slice()) {
                ("Pow", [x, Val::Const(e)]) => match small_power(e) {
                    Some(n) => self.product(x, n)?,
                    None => self.call(s, args)?,
                },
                _ => self.call(s, args)?,
            },
        })
    }

    /// `x` multiplied by itself to make its `n`-th power.
    fn product(&self, x: &Val, n: u32) -> Result<(String, DType)> {
        let (x, t) = self.val(x)?;
        let v = format!("(({}){x})", c_type(t)?);
        let factors = vec![v; n as usize];
        Ok((format!("({})", factors.join(" * ")), t))
    }

    fn call(&self, s: &kiln_ops::te::Scalar, args: &[Val]) -> Result<(String, DType)> {
        Ok({
            {
                let (texts, types): (Vec<String>, Vec<DType>) = args
                    .iter()
                    .map(|a| self.val(a))
                    .collect::<Result<Vec<_>>>()?
                    .into_iter()
                    .unzip();
                call_c(s, &types, &texts)?
            }
        })
    }
}

/// A float exponent the printer expands into products: 1, 2 or 3.
fn small_power(e: &Tensor) -> Option<u32> {
    if !e.dtype().is_float() || e.data.len() != 1 {
        return None;
    }
    match e.data.get_f64(0) {
        1.0 => Some(1),
        2.0 => Some(2),
        3.0 => Some(3),
        _ => None,
    }
}

/// A C literal of a 0-d tensor's value, exact for every type.
pub fn literal(t: &Tensor) -> Result<String> {
    let dtype = t.dtype();
    if t.data.len() != 1 {
        bail!("constant is not a scalar");
    }
    let x = t.data.get_f64(0);
    Ok(match dtype {
        // f16 and bf16 compute in float, which holds their values exactly.
        DType::F16 | DType::BF16 => literal(&Tensor::new(
            vec![],
            kiln_ir::Data::from_f64(DType::F32, &[x])?,
        )?)?,
        DType::F32 | DType::F64 => {
            let suffix = if dtype == DType::F32 { "f" } else { "" };
            if x.is_nan() {
                "NAN".into()
            } else if x.is_infinite() {
                if x > 0.0 { "INFINITY" } else { "(-INFINITY)" }.into()
            } else if dtype == DType::F32 {
                format!("{:?}{suffix}", x as f32)
            } else {
                format!("{x:?}")
            }
        }
        DType::Bool => (if x != 0.0 { "1" } else { "0" }).into(),
        DType::I64 => match t.as_slice::<i64>()?[0] {
            i64::MIN => "INT64_MIN".into(),
            v => format!("INT64_C({v})"),
        },
        DType::U64 => format!("UINT64_C({})", t.as_slice::<u64>()?[0]),
        DType::I8 | DType::I16 | DType::I32 | DType::U8 | DType::U16 | DType::U32 => {
            format!("(({}){})", c_type(dtype)?, x as i64)
        }
        other => bail!("the C backend has no literal of type {other}"),
    })
}
