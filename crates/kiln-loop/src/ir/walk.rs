//! Walks over the loop IR's values and statements: substitution of index
//! variables, mapping every value a statement holds, renaming updates, and
//! the queries passes ask of a body (declared and reduced locals,
//! arg-reductions, loads, loops by name).
//!
//! Needs: nothing beyond the types of `ir.rs`. Guarantees: rewrites return
//! new statements and leave everything they do not name unchanged.

use super::*;

impl Val {
    pub fn substitute(&self, name: &str, with: &Idx) -> Val {
        let guard = |g: &[(Idx, i64)]| -> Vec<(Idx, i64)> {
            g.iter()
                .map(|(i, e)| (i.substitute(name, with), *e))
                .collect()
        };
        match self {
            Val::Load {
                buf,
                offset,
                guard: g,
            } => Val::Load {
                buf: *buf,
                offset: offset.substitute(name, with),
                guard: guard(g),
            },
            Val::InBounds(g) => Val::InBounds(guard(g)),
            Val::Index(i) => Val::Index(i.substitute(name, with)),
            Val::Call(s, args) => Val::Call(
                s.clone(),
                args.iter().map(|a| a.substitute(name, with)).collect(),
            ),
            Val::Const(_) | Val::Local(_) => self.clone(),
        }
    }

    /// The value with every leaf (not a call) that `f` maps replaced by
    /// what it gives, calls rebuilt around their arguments (loads inside
    /// data-dependent indices are not visited).
    pub fn map_leaves(&self, f: &dyn Fn(&Val) -> Option<Val>) -> Val {
        match self {
            Val::Call(s, args) => {
                Val::Call(s.clone(), args.iter().map(|a| a.map_leaves(f)).collect())
            }
            _ => f(self).unwrap_or_else(|| self.clone()),
        }
    }

    /// Calls `f` with the buffer, offset and guard of every load of the
    /// value (not those inside data-dependent indices).
    pub fn for_each_load(&self, f: &mut dyn FnMut(usize, &Idx, &Guard)) {
        match self {
            Val::Load { buf, offset, guard } => f(*buf, offset, guard),
            Val::Call(_, args) => args.iter().for_each(|a| a.for_each_load(f)),
            _ => {}
        }
    }

    /// Whether the value loads from `buf` (not inside data-dependent indices).
    pub fn reads(&self, buf: usize) -> bool {
        let mut found = false;
        self.for_each_load(&mut |b, _, _| found |= b == buf);
        found
    }

    pub fn vars(&self, out: &mut Vec<String>) {
        match self {
            Val::Load { offset, guard, .. } => {
                offset.vars(out);
                guard.iter().for_each(|(i, _)| i.vars(out));
            }
            Val::InBounds(g) => g.iter().for_each(|(i, _)| i.vars(out)),
            Val::Index(i) => i.vars(out),
            Val::Call(_, args) => args.iter().for_each(|a| a.vars(out)),
            Val::Const(_) | Val::Local(_) => {}
        }
    }
}

impl Val {
    /// `v` cast to `dtype` (ONNX Cast's scalar rule).
    pub fn cast(dtype: DType, v: Val) -> Val {
        let to = kiln_ir::Attr::Int(dtype.onnx_code() as i64);
        Val::Call(Scalar::new("Cast").with_attr("to", to), vec![v])
    }
}

impl Loop {
    /// The loop's iterations `start..start + len` as a loop of its own from 0 (the
    /// variable shifted by `start` in its body), of the same kind.
    pub fn part(&self, start: i64, len: i64) -> Loop {
        let with = Idx::var(&self.var).plus(&Idx::constant(start));
        Loop {
            extent: Extent::Const(len),
            body: self
                .body
                .iter()
                .map(|s| s.substitute(&self.var, &with))
                .collect(),
            ..self.clone()
        }
    }
}

impl Stmt {
    /// `buf[offset] = value`.
    pub fn store(buf: usize, offset: Idx, value: Val) -> Stmt {
        Stmt::Store { buf, offset, value }
    }

    /// The statement with every value it stores, declares or combines
    /// replaced by `f(value, enclosing loops, outermost first)`.
    pub fn map_values(&self, f: &mut dyn FnMut(&Val, &[&Loop]) -> Val) -> Stmt {
        self.map_values_in(f, &mut Vec::new())
    }

    fn map_values_in<'a>(
        &'a self,
        f: &mut dyn FnMut(&Val, &[&Loop]) -> Val,
        loops: &mut Vec<&'a Loop>,
    ) -> Stmt {
        match self {
            Stmt::Loop(l) => {
                loops.push(l);
                let body = l.body.iter().map(|s| s.map_values_in(f, loops)).collect();
                loops.pop();
                Stmt::Loop(Loop { body, ..l.clone() })
            }
            Stmt::Store { buf, offset, value } => Stmt::Store {
                buf: *buf,
                offset: offset.clone(),
                value: f(value, loops),
            },
            Stmt::Let { name, dtype, value } => Stmt::Let {
                name: name.clone(),
                dtype: *dtype,
                value: f(value, loops),
            },
            Stmt::Update {
                name,
                combiner,
                value,
            } => Stmt::Update {
                name: name.clone(),
                combiner: *combiner,
                value: f(value, loops),
            },
            Stmt::ArgUpdate(a) => Stmt::ArgUpdate(Box::new(ArgStep {
                value: f(&a.value, loops),
                ..(**a).clone()
            })),
            Stmt::Combine(c) => Stmt::Combine(Box::new(Combine {
                value: f(&c.value, loops),
                ..(**c).clone()
            })),
            Stmt::Gemm(g) => Stmt::Gemm(g.clone()),
            Stmt::Alloc(b) => Stmt::Alloc(*b),
        }
    }

    /// Replaces variable `name` by `with` in every index of the statement.
    pub fn substitute(&self, name: &str, with: &Idx) -> Stmt {
        match self {
            Stmt::Loop(l) => Stmt::Loop(Loop {
                body: l.body.iter().map(|s| s.substitute(name, with)).collect(),
                ..l.clone()
            }),
            Stmt::Store { buf, offset, value } => Stmt::Store {
                buf: *buf,
                offset: offset.substitute(name, with),
                value: value.substitute(name, with),
            },
            Stmt::Let {
                name: n,
                dtype,
                value,
            } => Stmt::Let {
                name: n.clone(),
                dtype: *dtype,
                value: value.substitute(name, with),
            },
            Stmt::Update {
                name: n,
                combiner,
                value,
            } => Stmt::Update {
                name: n.clone(),
                combiner: *combiner,
                value: value.substitute(name, with),
            },
            Stmt::ArgUpdate(a) => Stmt::ArgUpdate(Box::new(ArgStep {
                value: a.value.substitute(name, with),
                index: a.index.substitute(name, with),
                ..(**a).clone()
            })),
            Stmt::Combine(c) => Stmt::Combine(Box::new(Combine {
                value: c.value.substitute(name, with),
                ..(**c).clone()
            })),
            Stmt::Gemm(g) => Stmt::Gemm(g.clone()),
            Stmt::Alloc(b) => Stmt::Alloc(*b),
        }
    }
}

/// Every local `body` declares (inside loops too), with its type.
pub fn declared_locals(body: &[Stmt]) -> Vec<(&str, DType)> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Let { name, dtype, .. } => out.push((name.as_str(), *dtype)),
            Stmt::Loop(l) => out.extend(declared_locals(&l.body)),
            _ => {}
        }
    }
    out
}

/// The first loop over `var` in `body`, searching nested loops too.
pub fn find_loop<'a>(body: &'a [Stmt], var: &str) -> Option<&'a Loop> {
    body.iter().find_map(|s| match s {
        Stmt::Loop(l) if l.var == var => Some(l),
        Stmt::Loop(l) => find_loop(&l.body, var),
        _ => None,
    })
}

/// `s` with each update (inside loops too) of a local that `rename(name,
/// combiner)` gives a new name for updating that name instead.
pub fn renamed_updates(s: &Stmt, rename: &dyn Fn(&str, Combiner) -> Option<String>) -> Stmt {
    match s {
        Stmt::Update {
            name,
            combiner,
            value,
        } => Stmt::Update {
            name: rename(name, *combiner).unwrap_or_else(|| name.clone()),
            combiner: *combiner,
            value: value.clone(),
        },
        Stmt::Loop(l) => Stmt::Loop(Loop {
            body: l.body.iter().map(|s| renamed_updates(s, rename)).collect(),
            ..l.clone()
        }),
        other => other.clone(),
    }
}

/// The locals `body` updates without declaring them (reductions carried
/// in from outside it), with their combiners, each once, in order.
pub fn reduced_locals(body: &[Stmt]) -> Vec<(String, Combiner)> {
    fn walk(body: &[Stmt], inside: &mut Vec<String>, out: &mut Vec<(String, Combiner)>) {
        for s in body {
            match s {
                Stmt::Let { name, .. } => inside.push(name.clone()),
                Stmt::Update { name, combiner, .. }
                    if !inside.contains(name) && !out.iter().any(|(n, _)| n == name) =>
                {
                    out.push((name.clone(), *combiner));
                }
                Stmt::Loop(l) => walk(&l.body, inside, out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(body, &mut Vec::new(), &mut out);
    out
}

/// Whether `body` takes arg-reduction steps, inside loops too.
pub fn has_arg_reduction(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::ArgUpdate(_) => true,
        Stmt::Loop(l) => has_arg_reduction(&l.body),
        _ => false,
    })
}

/// Whether `body` takes arg-reduction steps on locals declared outside it: then its
/// loops must run in order (see [`Stmt::ArgUpdate`]).
pub fn carries_arg_reduction(body: &[Stmt]) -> bool {
    fn walk<'a>(body: &'a [Stmt], inside: &mut Vec<&'a str>) -> bool {
        body.iter().any(|s| match s {
            Stmt::Let { name, .. } => {
                inside.push(name);
                false
            }
            Stmt::ArgUpdate(a) => !inside.contains(&a.name.as_str()),
            Stmt::Loop(l) => walk(&l.body, inside),
            _ => false,
        })
    }
    walk(body, &mut Vec::new())
}

/// Calls `f` with the buffer, offset and value of every store of `body`, inside loops too.
pub fn for_each_store(body: &[Stmt], f: &mut dyn FnMut(usize, &Idx, &Val)) {
    for s in body {
        match s {
            Stmt::Store { buf, offset, value } => f(*buf, offset, value),
            Stmt::Loop(l) => for_each_store(&l.body, f),
            _ => {}
        }
    }
}

/// The buffers `body` stores, inside loops too (a buffer once per store).
pub fn stored_buffers(body: &[Stmt]) -> Vec<usize> {
    let mut out = Vec::new();
    for_each_store(body, &mut |buf, _, _| out.push(buf));
    out
}

/// The range `(0, extent - 1)` of every loop variable in `body`, inside loops too (a
/// variable bound twice keeps its innermost loop's range).
pub fn loop_ranges(body: &[Stmt]) -> std::collections::HashMap<String, (i64, i64)> {
    let mut out = std::collections::HashMap::new();
    for_each_loop(body, &mut |l| {
        out.insert(l.var.clone(), (0, l.extent.max().max(1) - 1));
    });
    out
}

/// Calls `f` on every loop of `body`, each before the loops inside it.
pub fn for_each_loop(body: &[Stmt], f: &mut dyn FnMut(&Loop)) {
    for s in body {
        if let Stmt::Loop(l) = s {
            f(l);
            for_each_loop(&l.body, f);
        }
    }
}

/// Calls `f` on every load of the values `body` stores, declares and
/// combines, inside loops too (see [`Val::for_each_load`]).
pub fn for_each_load(body: &[Stmt], f: &mut dyn FnMut(usize, &Idx, &Guard)) {
    for_each_value(body, &mut |v| v.for_each_load(f));
}

/// Calls `f` with every value the statements of `body` (inside loops too) store,
/// declare, combine or compare: the values of stores, `let`s, updates, arg-reduction
/// steps and combines.
pub fn for_each_value(body: &[Stmt], f: &mut dyn FnMut(&Val)) {
    for s in body {
        match s {
            Stmt::Loop(l) => for_each_value(&l.body, f),
            Stmt::Store { value, .. } | Stmt::Let { value, .. } | Stmt::Update { value, .. } => {
                f(value)
            }
            Stmt::ArgUpdate(a) => f(&a.value),
            Stmt::Combine(c) => f(&c.value),
            Stmt::Gemm(_) | Stmt::Alloc(_) => {}
        }
    }
}

/// Whether `body` accumulates in f16 or bf16 (in-order bf16 sums, `Reduction::accumulator_type`): each
/// step rounds, in order, as the interpreter sums.
pub fn accumulates_in_half_float(body: &[Stmt]) -> bool {
    fn visit<'a>(body: &'a [Stmt], half: &mut Vec<&'a str>) -> bool {
        body.iter().any(|s| match s {
            Stmt::Let { name, dtype, .. } if dtype.is_half_float() => {
                half.push(name);
                false
            }
            Stmt::Update { name, combiner, .. } => {
                matches!(combiner, Combiner::Sum | Combiner::Prod) && half.contains(&name.as_str())
            }
            Stmt::Loop(l) => visit(&l.body, half),
            _ => false,
        })
    }
    visit(body, &mut Vec::new())
}

/// Whether `body`'s reductions must take their steps in order: half-float sums round
/// every step, and an arg-reduction's ties go to the first or last index. Neither runs
/// in vector lanes, thread chunks or a GPU block's threads.
pub fn reduces_in_order(body: &[Stmt]) -> bool {
    accumulates_in_half_float(body) || has_arg_reduction(body)
}
