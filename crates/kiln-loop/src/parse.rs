//! Parsing the loop IR's text form: the inverse of `Display for Kernel`
//! (text.rs), so kernels round-trip through text.
//!
//! Needs: text as the printer writes it; whitespace between tokens,
//! newlines included, is free.
//! Guarantees: `parse(&k.to_string()) == k` for every kernel whose buffer
//! references are in range and whose buffer names are distinct (index
//! terms keep their order and coefficients, constants their type and
//! exact value). Errors name the line and what was expected there.
//!
//! Hand-written recursive descent over the characters, one method per
//! construct:
//!
//! ```text
//! kernel  := "kernel" name "(" param,* ")" block
//! param   := ["out"] name ":" dtype "[" int,* "]"
//! block   := "{" stmt* "}"
//! stmt    := [kind] "for" name "in" "0.." extent block
//!          | "let" name ":" dtype "=" val
//!          | "alloc" name ":" dtype "[" int,* "]"      (local buffer)
//!          | "gemm" "b<" int "," "m<" int "," "n<" int "," "k<" int ":"
//!                access "=" "sum" factor "*" factor
//!                [("window" | "window_nhwc" | "window_rows") "[" int ("," int)*12
//!                 ["," int ["," int]] "]"] ["then" val]
//!          | access "=" val                       (store)
//!          | name "=" combiner "(" name "," val ")"  (update)
//!          | name "=" ("argmax" | "argmin") ["_last"] "(" name "," val "," idx ")"
//!                                                  (arg-reduction step)
//! factor  := access | "(" val ")"                 (computed: a prologue)
//! extent  := int | "min(" f "," total "-" f "*" name ")"
//! access  := name "[" idx ["if" guard] "]"
//! guard   := idx "<" int ("&&" idx "<" int)*
//! idx     := ["-"] term (("+" | "-") term)*
//! term    := [int "*"] atom | int
//! atom    := name | "(" idx ("floordiv" | "mod") int ")" | "wrap(" val "," int ")"
//! val     := literal ":" dtype ["[" int,* "]"] | "index(" idx ")"
//!          | "inbounds(" [guard] ")" | access | name ("{" name "=" attr "}")* "(" val,* ")"
//!          | name                                  (local)
//! name    := identifier that is no keyword | quoted string
//! ```
//! Attribute values and literals are read by kiln-ir's graph text parser
//! (`kiln_ir::text::parse_attr`, `parse_scalar`), which wrote them.

use crate::ir::{
    ArgStep, Atom, Buffer, Combine, CombineMode, Extent, Gemm, GemmInput, GemmOperand, Guard, Idx,
    Kernel, Loop, LoopKind, Scope, Stmt, Val,
};
use crate::text::is_bare;
use kiln_ir::{DType, Error, Result, Tensor};
use kiln_ops::te::{Combiner, Scalar};
use std::collections::BTreeMap;

/// Parses a kernel from its text form.
pub fn parse(src: &str) -> Result<Kernel> {
    let mut p = Parser {
        src,
        pos: 0,
        buffers: Vec::new(),
        locals: Vec::new(),
    };
    let k = p.kernel()?;
    if p.peek().is_some() {
        return Err(p.expected("the end of the text after the kernel"));
    }
    Ok(k)
}

/// An operand reference: buffer number, offset and guard.
type Access = (usize, Idx, Guard);

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// The kernel's buffer names: parameters, then locals as declared.
    buffers: Vec<String>,
    /// The local buffers declared so far.
    locals: Vec<Buffer>,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl Parser<'_> {
    // ------------------------------------------------------------ tokens

    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn skip_ws(&mut self) {
        self.pos = self.src.len() - self.rest().trim_start().len();
    }

    /// The next character after whitespace (nothing is consumed, so an
    /// error about what was just read still names its line).
    fn peek(&self) -> Option<char> {
        self.rest().trim_start().chars().next()
    }

    fn line(&self) -> usize {
        self.src[..self.pos].matches('\n').count() + 1
    }

    /// An error at the next token: what was expected and what is there.
    fn expected(&mut self, what: &str) -> Error {
        self.skip_ws();
        let found: String = self
            .rest()
            .chars()
            .take_while(|c| !c.is_whitespace())
            .take(24)
            .collect();
        let found = if found.is_empty() {
            "the end of the text".to_string()
        } else {
            format!("'{found}'")
        };
        Error::new(format!(
            "line {}: expected {what}, found {found}",
            self.line()
        ))
    }

    /// An error about what was just read (on the line where it ends).
    fn error(&self, msg: &str) -> Error {
        Error::new(format!("line {}: {msg}", self.line()))
    }

    /// An error from kiln-ir's parser about a piece of text just read;
    /// its line numbers count within the piece, so one-line pieces drop them.
    fn nested_error(&self, what: &str, text: &str, e: &Error) -> Error {
        let msg = e.message();
        let msg = match msg.split_once(": ") {
            Some((line, rest)) if line.starts_with("line ") && !text.contains('\n') => rest,
            _ => msg,
        };
        self.error(&format!("bad {what} '{text}': {msg}"))
    }

    /// Consumes the next `len` bytes after whitespace.
    fn consume(&mut self, len: usize) {
        self.skip_ws();
        self.pos += len;
    }

    /// Consumes `token` when `found` (it comes next); says whether it did.
    fn take(&mut self, found: bool, token: &str) -> bool {
        if found {
            self.consume(token.len());
        }
        found
    }

    /// An error unless `found`: what was expected was `token`.
    fn require(&mut self, found: bool, token: &str) -> Result<()> {
        if found {
            Ok(())
        } else {
            Err(self.expected(&format!("'{token}'")))
        }
    }

    /// Consumes `s` (punctuation) if it comes next.
    fn eat(&mut self, s: &str) -> bool {
        let found = self.rest().trim_start().starts_with(s);
        self.take(found, s)
    }

    fn expect(&mut self, s: &str) -> Result<()> {
        let found = self.eat(s);
        self.require(found, s)
    }

    /// The identifier-like word that comes next (keywords included),
    /// without consuming it.
    fn peek_word(&self) -> &str {
        let rest = self.rest().trim_start();
        let end = rest.find(|c| !is_word_char(c)).unwrap_or(rest.len());
        &rest[..end]
    }

    /// Consumes the word `w` if it comes next as a whole word.
    fn eat_word(&mut self, w: &str) -> bool {
        let found = self.peek_word() == w;
        self.take(found, w)
    }

    fn expect_word(&mut self, w: &str) -> Result<()> {
        let found = self.eat_word(w);
        self.require(found, w)
    }

    fn word(&mut self, what: &str) -> Result<String> {
        let w = self.peek_word().to_string();
        if w.is_empty() {
            return Err(self.expected(what));
        }
        self.consume(w.len());
        Ok(w)
    }

    /// The quoted string starting at byte `i` and its length in bytes.
    fn quoted_at(&self, i: usize) -> Result<(String, usize)> {
        let text = self.src[i..].lines().next().unwrap_or("");
        kiln_ir::text::parse_quoted(&self.src[i..])
            .map_err(|e| self.nested_error("quoted string", text, &e))
    }

    /// A name: a bare identifier that is no keyword, or a quoted string.
    fn name(&mut self, what: &str) -> Result<String> {
        if self.peek() == Some('"') {
            self.skip_ws();
            let (s, len) = self.quoted_at(self.pos)?;
            self.pos += len;
            return Ok(s);
        }
        let w = self.peek_word().to_string();
        if !is_bare(&w) {
            return Err(self.expected(what));
        }
        self.consume(w.len());
        Ok(w)
    }

    fn int(&mut self, what: &str) -> Result<i64> {
        self.skip_ws();
        let sign = usize::from(self.rest().starts_with('-'));
        let digits = self.rest()[sign..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(self.rest().len() - sign);
        let text = &self.rest()[..sign + digits];
        match text.parse::<i64>() {
            Ok(v) if digits > 0 => {
                self.pos += text.len();
                Ok(v)
            }
            _ => Err(self.expected(what)),
        }
    }

    /// The unsigned integer that comes next, if any (not consumed on error).
    fn magnitude(&mut self) -> Result<Option<u64>> {
        self.skip_ws();
        let n = self
            .rest()
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(self.rest().len());
        if n == 0 {
            return Ok(None);
        }
        let v = self.rest()[..n]
            .parse::<u64>()
            .map_err(|_| self.expected("an integer in range"))?;
        self.pos += n;
        Ok(Some(v))
    }

    fn dtype(&mut self) -> Result<DType> {
        let w = self.word("an element type")?;
        w.parse()
            .map_err(|e: Error| self.error(&format!("expected an element type: {}", e.message())))
    }

    /// `[d0,d1,...]`
    fn dims(&mut self) -> Result<Vec<usize>> {
        self.expect("[")?;
        self.list("]", |p| {
            let d = p.magnitude()?.ok_or_else(|| p.expected("a dimension"))?;
            usize::try_from(d).map_err(|_| p.expected("a dimension in range"))
        })
    }

    /// Comma-separated items up to `close` (consumed).
    fn list<T>(&mut self, close: &str, item: impl Fn(&mut Self) -> Result<T>) -> Result<Vec<T>> {
        let mut items = Vec::new();
        while !self.eat(close) {
            if !items.is_empty() {
                self.expect(",")?;
            }
            items.push(item(self)?);
        }
        Ok(items)
    }

    /// The text up to (not including) `stop` outside brackets and strings:
    /// an attribute value or a literal, handed to kiln-ir's parser.
    fn raw_until(&mut self, stop: char, what: &str) -> Result<&str> {
        self.skip_ws();
        let start = self.pos;
        let mut depth = 0usize;
        let mut i = start;
        while let Some(c) = self.src[i..].chars().next() {
            match c {
                _ if c == stop && depth == 0 => {
                    self.pos = i;
                    return Ok(self.src[start..i].trim_end());
                }
                '"' => {
                    let (_, len) = self.quoted_at(i)?;
                    i += len;
                    continue;
                }
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' if depth == 0 => break,
                ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
            i += c.len_utf8();
        }
        Err(self.expected(&format!("{what} followed by '{stop}'")))
    }

    // ------------------------------------------------------------ kernel

    fn kernel(&mut self) -> Result<Kernel> {
        self.expect_word("kernel")?;
        let name = self.name("the kernel's name")?;
        self.expect("(")?;
        let buffers = self.list(")", Self::param)?;
        for (i, b) in buffers.iter().enumerate() {
            if buffers[..i].iter().any(|c| c.name == b.name) {
                return Err(self.error(&format!("buffer {:?} is declared twice", b.name)));
            }
        }
        self.buffers = buffers.iter().map(|b| b.name.clone()).collect();
        let body = self.block()?;
        let mut buffers = buffers;
        buffers.append(&mut self.locals);
        Ok(Kernel {
            name,
            buffers,
            body,
        })
    }

    /// After `alloc`: a local buffer's declaration, numbered after the
    /// parameters and the locals before it.
    fn alloc(&mut self) -> Result<Stmt> {
        let mut b = self.param()?;
        if b.output {
            return Err(self.error("a local buffer is not an output"));
        }
        if self.buffers.contains(&b.name) {
            return Err(self.error(&format!("buffer {:?} is declared twice", b.name)));
        }
        b.scope = Scope::Local;
        self.buffers.push(b.name.clone());
        self.locals.push(b);
        Ok(Stmt::Alloc(self.buffers.len() - 1))
    }

    /// `[out] name: dtype[dims]`
    fn param(&mut self) -> Result<Buffer> {
        let output = self.eat_word("out");
        let name = self.name("a buffer name")?;
        self.expect(":")?;
        let dtype = self.dtype()?;
        let shape = self.dims()?;
        Ok(Buffer {
            name,
            dtype,
            shape,
            output,
            scope: Scope::Param,
        })
    }

    fn block(&mut self) -> Result<Vec<Stmt>> {
        self.expect("{")?;
        let mut body = Vec::new();
        while !self.eat("}") {
            if self.peek().is_none() {
                return Err(self.expected("a statement or '}'"));
            }
            body.push(self.stmt()?);
        }
        Ok(body)
    }

    fn stmt(&mut self) -> Result<Stmt> {
        let kind = match self.peek_word() {
            "for" => Some(LoopKind::Serial),
            "parallel" => Some(LoopKind::Parallel),
            "vectorized" => Some(LoopKind::Vectorized),
            "unrolled" => Some(LoopKind::Unrolled),
            _ => None,
        };
        if let Some(kind) = kind {
            if kind != LoopKind::Serial {
                self.word("a loop kind")?;
            }
            return self.for_loop(kind);
        }
        if self.eat_word("let") {
            let name = self.name("a local's name")?;
            self.expect(":")?;
            let dtype = self.dtype()?;
            self.expect("=")?;
            let value = self.val()?;
            return Ok(Stmt::Let { name, dtype, value });
        }
        if self.eat_word("gemm") {
            return self.gemm();
        }
        if self.eat_word("alloc") {
            return self.alloc();
        }
        if self.eat_word("combine") {
            return self.combine();
        }
        let name = self.name("a statement")?;
        if self.peek() == Some('[') {
            let (buf, offset, guard) = self.access_of(&name)?;
            if !guard.is_empty() {
                return Err(self.error("a store takes no guard"));
            }
            self.expect("=")?;
            let value = self.val()?;
            return Ok(Stmt::Store { buf, offset, value });
        }
        self.update(name)
    }

    fn for_loop(&mut self, kind: LoopKind) -> Result<Stmt> {
        self.expect_word("for")?;
        let var = self.name("a loop variable")?;
        self.expect_word("in")?;
        self.expect("0..")?;
        let extent = self.extent()?;
        let body = self.block()?;
        Ok(Stmt::Loop(Loop {
            var,
            extent,
            kind,
            body,
        }))
    }

    /// `n`, or a split's tail `min(f, total - f*outer)`.
    fn extent(&mut self) -> Result<Extent> {
        if !self.eat_word("min") {
            return Ok(Extent::Const(self.int("a trip count")?));
        }
        self.expect("(")?;
        let factor = self.int("the split factor")?;
        self.expect(",")?;
        let total = self.int("the split extent")?;
        self.expect("-")?;
        if self.int("the split factor")? != factor {
            return Err(self.error("the tail's two split factors differ"));
        }
        self.expect("*")?;
        let outer = self.name("the outer loop variable")?;
        self.expect(")")?;
        Ok(Extent::Tail {
            total,
            outer,
            factor,
        })
    }

    /// `name = combiner(name, value)`
    fn update(&mut self, name: String) -> Result<Stmt> {
        self.expect("=")?;
        let word = self.word("a combiner")?;
        if let Some(arg) = word.strip_prefix("arg") {
            return self.arg_update(name, arg);
        }
        let combiner = Combiner::from_name(&word)
            .ok_or_else(|| self.error(&format!("unknown combiner '{word}'")))?;
        self.expect("(")?;
        if self.name("the updated local")? != name {
            return Err(self.error(&format!("an update of {name:?} combines another local")));
        }
        self.expect(",")?;
        let value = self.val()?;
        self.expect(")")?;
        Ok(Stmt::Update {
            name,
            combiner,
            value,
        })
    }

    /// `ordered|atomic name = combiner(name, value)` after `combine`
    fn combine(&mut self) -> Result<Stmt> {
        let mode = match self.word("a combine mode")?.as_str() {
            "ordered" => CombineMode::Ordered,
            "atomic" => CombineMode::Atomic,
            other => return Err(self.error(&format!("unknown combine mode '{other}'"))),
        };
        let name = self.name("the combined local")?;
        let Stmt::Update {
            name,
            combiner,
            value,
        } = self.update(name)?
        else {
            return Err(self.error("a combine takes a combiner, not an arg-reduction"));
        };
        Ok(Stmt::Combine(Box::new(Combine {
            name,
            combiner,
            value,
            mode,
        })))
    }

    /// `name = argmax_last(best, value, index)` after `arg`: `kind` is the rest of
    /// the word (`max_last`).
    fn arg_update(&mut self, name: String, kind: &str) -> Result<Stmt> {
        let (kind, last) = match kind.strip_suffix("_last") {
            Some(k) => (k, true),
            None => (kind, false),
        };
        let combiner = match Combiner::from_name(kind) {
            Some(c @ (Combiner::Max | Combiner::Min)) => c,
            _ => return Err(self.error(&format!("unknown arg-reduction 'arg{kind}'"))),
        };
        self.expect("(")?;
        let best = self.name("the arg-reduction's extreme")?;
        self.expect(",")?;
        let value = self.val()?;
        self.expect(",")?;
        let index = self.idx()?;
        self.expect(")")?;
        Ok(Stmt::ArgUpdate(Box::new(ArgStep {
            name,
            best,
            combiner,
            last,
            value,
            index,
        })))
    }

    /// `gemm b<B, m<M, n<N, k<K: C[..] = sum A[..] * B[..]`
    fn gemm(&mut self) -> Result<Stmt> {
        let mut sizes = [0i64; 4];
        for (i, axis) in ["b", "m", "n", "k"].into_iter().enumerate() {
            if i > 0 {
                self.expect(",")?;
            }
            self.expect_word(axis)?;
            self.expect("<")?;
            sizes[i] = self.int("a gemm size")?;
        }
        self.expect(":")?;
        let c = self.operand()?;
        self.expect("=")?;
        self.expect_word("sum")?;
        let a = self.factor()?;
        self.expect("*")?;
        let b = self.factor()?;
        let layout = crate::ir::WindowLayout::ALL
            .into_iter()
            .find(|&layout| self.eat_word(crate::text::window_word(layout)));
        let window = if let Some(layout) = layout {
            self.expect("[")?;
            let mut n = vec![self.int("a window number")?];
            while n.len() < 17 && self.eat(",") {
                n.push(self.int("a window number")?);
            }
            if n.len() < 13 || n.len() == 16 {
                return Err(self.error(
                    "a window has 13 numbers (14 with a batch stride, 15 with a pixel stride, 17 with images and their stride)",
                ));
            }
            self.expect("]")?;
            Some(crate::text::window_from_numbers(&n, layout))
        } else {
            None
        };
        let epilogue = if self.eat_word("then") {
            Some(self.val()?)
        } else {
            None
        };
        let [batch, m, n, k] = sizes;
        Ok(Stmt::Gemm(Box::new(Gemm {
            batch,
            m,
            n,
            k,
            a,
            b,
            c,
            window,
            epilogue,
        })))
    }

    /// A gemm factor: a read, or `(value)` computed while packing.
    fn factor(&mut self) -> Result<GemmInput> {
        if !self.eat("(") {
            return Ok(GemmInput::Read(self.operand()?));
        }
        let value = self.val()?;
        self.expect(")")?;
        Ok(GemmInput::Computed(value))
    }

    fn operand(&mut self) -> Result<GemmOperand> {
        let name = self.name("a buffer name")?;
        let (buf, offset, guard) = self.access_of(&name)?;
        Ok(GemmOperand { buf, offset, guard })
    }

    /// `[offset]` or `[offset if guard]` after buffer `name`.
    fn access_of(&mut self, name: &str) -> Result<Access> {
        let buf = self
            .buffers
            .iter()
            .position(|b| b == name)
            .ok_or_else(|| self.error(&format!("unknown buffer {name:?}")))?;
        self.expect("[")?;
        let offset = self.idx()?;
        let guard = if self.eat_word("if") {
            self.guard()?
        } else {
            Vec::new()
        };
        self.expect("]")?;
        Ok((buf, offset, guard))
    }

    /// `idx < n && idx < n ...` (each meaning `0 <= idx < n`).
    fn guard(&mut self) -> Result<Guard> {
        let mut g = Vec::new();
        loop {
            let i = self.idx()?;
            self.expect("<")?;
            g.push((i, self.int("a guard bound")?));
            if !self.eat("&&") {
                return Ok(g);
            }
        }
    }

    // ------------------------------------------------------------ indices

    fn idx(&mut self) -> Result<Idx> {
        let mut idx = Idx::default();
        let mut negative = self.eat("-");
        loop {
            self.term(negative, &mut idx)?;
            negative = if self.eat("+") {
                false
            } else if self.eat("-") {
                true
            } else {
                return Ok(idx);
            };
        }
    }

    /// `c*atom`, `atom` or a constant, added to `idx` with its sign.
    fn term(&mut self, negative: bool, idx: &mut Idx) -> Result<()> {
        let signed = |p: &mut Self, m: u64| {
            let v = if negative {
                -i128::from(m)
            } else {
                i128::from(m)
            };
            i64::try_from(v).map_err(|_| p.expected("a coefficient in range"))
        };
        let coeff = match self.magnitude()? {
            Some(m) if self.eat("*") => signed(self, m)?,
            Some(m) => {
                let c = signed(self, m)?;
                idx.constant = idx
                    .constant
                    .checked_add(c)
                    .ok_or_else(|| self.error("index constant out of range"))?;
                return Ok(());
            }
            None => signed(self, 1)?,
        };
        let atom = self.atom()?;
        idx.terms.push((atom, coeff));
        Ok(())
    }

    fn atom(&mut self) -> Result<Atom> {
        if self.eat("(") {
            let e = Box::new(self.idx()?);
            let div = if self.eat_word("floordiv") {
                true
            } else if self.eat_word("mod") {
                false
            } else {
                return Err(self.expected("'floordiv' or 'mod'"));
            };
            let d = self.int("a divisor")?;
            self.expect(")")?;
            return Ok(if div {
                Atom::Div(e, d)
            } else {
                Atom::Mod(e, d)
            });
        }
        if self.eat_word("wrap") {
            self.expect("(")?;
            let value = Box::new(self.val()?);
            self.expect(",")?;
            let extent = self.int("the wrapped extent")?;
            self.expect(")")?;
            return Ok(Atom::Data { value, extent });
        }
        Ok(Atom::Var(self.name("an index term")?))
    }

    // ------------------------------------------------------------ values

    fn val(&mut self) -> Result<Val> {
        match self.peek() {
            None => return Err(self.expected("a value")),
            Some(c) if c.is_ascii_digit() || c == '-' || c == '[' => return self.constant(),
            _ => {}
        }
        if self.eat_word("index") {
            self.expect("(")?;
            let i = self.idx()?;
            self.expect(")")?;
            return Ok(Val::Index(i));
        }
        if self.eat_word("inbounds") {
            self.expect("(")?;
            let g = if self.peek() == Some(')') {
                Vec::new()
            } else {
                self.guard()?
            };
            self.expect(")")?;
            return Ok(Val::InBounds(g));
        }
        if self.literal_word_ahead() {
            return self.constant();
        }
        let name = self.name("a value")?;
        match self.peek() {
            Some('[') => {
                let (buf, offset, guard) = self.access_of(&name)?;
                Ok(Val::Load { buf, offset, guard })
            }
            Some('(' | '{') => self.call(name),
            _ => Ok(Val::Local(name)),
        }
    }

    /// Whether a word or string followed by `:` comes next: a literal such
    /// as `inf:f32`, `true:bool` or `"s":str` (a name is never followed by
    /// `:` where a value is read).
    fn literal_word_ahead(&self) -> bool {
        let rest = self.rest().trim_start();
        let len = if rest.starts_with('"') {
            match kiln_ir::text::parse_quoted(rest) {
                Ok((_, n)) => n,
                Err(_) => return false,
            }
        } else {
            rest.find(|c| !is_word_char(c)).unwrap_or(rest.len())
        };
        len > 0 && rest[len..].trim_start().starts_with(':')
    }

    /// `literal:dtype` or `[literal,...]:dtype[dims]`.
    fn constant(&mut self) -> Result<Val> {
        let lit = self.raw_until(':', "a literal")?.to_string();
        self.expect(":")?;
        let dtype = self.dtype()?;
        let shape = if self.peek() == Some('[') {
            self.dims()?
        } else {
            Vec::new()
        };
        let t: Tensor = kiln_ir::text::parse_scalar(&lit, dtype, &shape)
            .map_err(|e| self.nested_error(&format!("{dtype} literal"), &lit, &e))?;
        Ok(Val::Const(t))
    }

    /// `Op{name=attr}...(args)`
    fn call(&mut self, op: String) -> Result<Val> {
        let mut attrs = BTreeMap::new();
        while self.eat("{") {
            let name = self.name("an attribute name")?;
            self.expect("=")?;
            let text = self.raw_until('}', "an attribute value")?.to_string();
            let value = kiln_ir::text::parse_attr(&text)
                .map_err(|e| self.nested_error("attribute value", &text, &e))?;
            self.expect("}")?;
            attrs.insert(name, value);
        }
        self.expect("(")?;
        let args = self.list(")", Self::val)?;
        Ok(Val::Call(Scalar { op, attrs }, args))
    }
}
