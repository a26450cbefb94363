//! Reads the text form `text.rs` prints.
//!
//! Needs: text in that form. Guarantees: `parse_plan(&p.to_string()) == p`
//! for every plan; any other text is an error naming the line.

use crate::plan::{Exec, ExecPlan, Loc, Packing, PlanValue, Step, WorkspaceSlice};
use crate::text::HEADER;
use kiln_ir::text::parse_quoted;
use kiln_ir::{bail, DType, Error, Result};

/// The plan printed as `src`.
pub fn parse_plan(src: &str) -> Result<ExecPlan> {
    let mut lines = src
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    match lines.next() {
        Some((_, l)) if l.trim() == HEADER => {}
        _ => bail!("execution plan: expected '{HEADER}' on the first line"),
    }
    let mut plan = ExecPlan {
        values: Vec::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        weights: Vec::new(),
        packings: Vec::new(),
        steps: Vec::new(),
        exec: Vec::new(),
        alignment: 1,
        arena_bytes: 0,
        arena_bound: 0,
        arena_total: 0,
        workspace_bytes: 0,
        threads: 1,
        boxed: 0,
    };
    for (n, line) in lines {
        let mut c = Cursor { rest: line.trim() };
        line_into(&mut c, &mut plan)
            .map_err(|e| Error::new(format!("execution plan line {}: {e}", n + 1)))?;
    }
    plan.inputs = ordered(&plan.values, |l| match l {
        Loc::Input(i) => Some(i),
        _ => None,
    })?;
    plan.weights = ordered(&plan.values, |l| match l {
        Loc::Weight(i) => Some(i),
        _ => None,
    })?;
    Ok(plan)
}

/// The ids of the values whose location `slot` numbers 0, 1, … in order.
fn ordered(values: &[PlanValue], slot: impl Fn(Loc) -> Option<usize>) -> Result<Vec<usize>> {
    let mut found: Vec<(usize, usize)> = values
        .iter()
        .filter_map(|v| slot(v.loc).map(|i| (i, v.id)))
        .collect();
    found.sort();
    for (k, (i, _)) in found.iter().enumerate() {
        if *i != k {
            bail!("execution plan: slot {k} is missing or given twice");
        }
    }
    Ok(found.into_iter().map(|(_, id)| id).collect())
}

fn line_into(c: &mut Cursor, plan: &mut ExecPlan) -> Result<()> {
    match c.word()? {
        "alignment" => {
            plan.alignment = c.number()?;
            c.keyword("threads")?;
            plan.threads = c.number()?;
            c.keyword("boxed")?;
            plan.boxed = c.number()?;
        }
        "arena" => {
            plan.arena_bytes = c.number()?;
            c.keyword("bound")?;
            plan.arena_bound = c.number()?;
            c.keyword("total")?;
            plan.arena_total = c.number()?;
        }
        "workspace" => plan.workspace_bytes = c.number()?,
        "value" => {
            let v = value(c)?;
            if plan.values.last().is_some_and(|last| last.id >= v.id) {
                bail!("values must be in increasing id order");
            }
            plan.values.push(v);
        }
        "output" => plan.outputs.push(c.value_ref()?),
        "packing" => {
            let kernel = c.word()?.to_string();
            let weight = c.value_ref()?;
            c.keyword("bytes")?;
            plan.packings.push(Packing {
                kernel,
                weight,
                bytes: c.number()?,
            });
        }
        "step" => {
            if c.number()? != plan.steps.len() {
                bail!("steps must be numbered in order");
            }
            plan.steps.push(step(c)?);
        }
        "exec" => plan.exec.push(exec(c)?),
        other => bail!("unknown line '{other}'"),
    }
    c.end()
}

fn value(c: &mut Cursor) -> Result<PlanValue> {
    let id = c.value_ref()?;
    let name = c.quoted()?;
    let ty = c.word()?;
    let (dtype, shape) = match ty.split_once('[') {
        Some((d, dims)) => {
            let dims = dims
                .strip_suffix(']')
                .ok_or_else(|| Error::new(format!("bad shape in '{ty}'")))?;
            let shape = dims
                .split(',')
                .filter(|d| !d.is_empty())
                .map(|d| {
                    d.parse()
                        .map_err(|_| Error::new(format!("bad dimension '{d}'")))
                })
                .collect::<Result<Vec<usize>>>()?;
            (d, Some(shape))
        }
        None => match ty.strip_suffix('?') {
            Some(d) => (d, None),
            None => bail!("expected a type like f32[1,2] or f32?, found '{ty}'"),
        },
    };
    let dtype: DType = dtype.parse()?;
    let loc = match c.word()? {
        "input" => Loc::Input(c.number()?),
        "weight" => Loc::Weight(c.number()?),
        "arena" => Loc::Arena(c.number()?),
        "boxed" => Loc::Boxed(c.number()?),
        other => bail!("unknown location '{other}'"),
    };
    Ok(PlanValue {
        id,
        name,
        dtype,
        shape,
        loc,
    })
}

fn step(c: &mut Cursor) -> Result<Step> {
    c.keyword("node")?;
    let node = c.number()?;
    Ok(match c.word()? {
        "kernel" => {
            let kernel = c.word()?.to_string();
            let args = c.list(|c| c.value_ref())?;
            let mut packing = None;
            let mut workspace = None;
            if c.peek_word() == Some("packing") {
                c.word()?;
                packing = Some(c.number()?);
            }
            if c.peek_word() == Some("workspace") {
                c.word()?;
                let slice = c.word()?;
                let (offset, bytes) = slice
                    .split_once('+')
                    .ok_or_else(|| Error::new(format!("expected OFFSET+BYTES, found '{slice}'")))?;
                workspace = Some(WorkspaceSlice {
                    offset: parse_number(offset)?,
                    bytes: parse_number(bytes)?,
                });
            }
            Step::Kernel {
                node,
                kernel,
                args,
                packing,
                workspace,
            }
        }
        "alias" => {
            let value = c.value_ref()?;
            c.keyword("=")?;
            Step::Alias {
                node,
                value,
                of: c.value_ref()?,
            }
        }
        "assembled" => Step::Assembled {
            node,
            value: c.value_ref()?,
        },
        "interp" => Step::Interp {
            node,
            reason: c.quoted()?,
        },
        other => bail!("unknown step kind '{other}'"),
    })
}

fn exec(c: &mut Cursor) -> Result<Exec> {
    let first = c.word()?;
    if let Ok(step) = parse_number(first) {
        return Ok(Exec::Step(step));
    }
    Ok(Exec::Concurrent {
        func: first.to_string(),
        steps: c.list(|c| c.number())?,
    })
}

fn parse_number(s: &str) -> Result<usize> {
    s.parse()
        .map_err(|_| Error::new(format!("expected a number, found '{s}'")))
}

/// The unread part of one line.
struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    fn skip_space(&mut self) {
        self.rest = self.rest.trim_start();
    }

    /// The next space-separated word (a list's parentheses end words).
    fn word(&mut self) -> Result<&'a str> {
        self.skip_space();
        let end = self
            .rest
            .find(|c: char| c.is_whitespace() || c == '(' || c == ')')
            .unwrap_or(self.rest.len());
        if end == 0 {
            bail!("expected a word at '{}'", self.rest);
        }
        let (w, rest) = self.rest.split_at(end);
        self.rest = rest;
        Ok(w)
    }

    fn peek_word(&self) -> Option<&'a str> {
        let mut probe = Cursor { rest: self.rest };
        probe.word().ok()
    }

    fn keyword(&mut self, k: &str) -> Result<()> {
        match self.word()? {
            w if w == k => Ok(()),
            w => bail!("expected '{k}', found '{w}'"),
        }
    }

    fn number(&mut self) -> Result<usize> {
        parse_number(self.word()?)
    }

    fn value_ref(&mut self) -> Result<usize> {
        let w = self.word()?;
        match w.strip_prefix('%') {
            Some(n) => parse_number(n),
            None => bail!("expected a value like %3, found '{w}'"),
        }
    }

    fn quoted(&mut self) -> Result<String> {
        self.skip_space();
        let (s, used) = parse_quoted(self.rest)?;
        self.rest = &self.rest[used..];
        Ok(s)
    }

    /// `( item item … )`.
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        self.skip_space();
        self.rest = self
            .rest
            .strip_prefix('(')
            .ok_or_else(|| Error::new(format!("expected '(' at '{}'", self.rest)))?;
        let mut items = Vec::new();
        loop {
            self.skip_space();
            if let Some(rest) = self.rest.strip_prefix(')') {
                self.rest = rest;
                return Ok(items);
            }
            items.push(item(self)?);
        }
    }

    fn end(&mut self) -> Result<()> {
        self.skip_space();
        if self.rest.is_empty() {
            Ok(())
        } else {
            bail!("unexpected '{}'", self.rest)
        }
    }
}
