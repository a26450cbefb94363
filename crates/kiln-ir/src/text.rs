//! Textual form of the graph IR. `print` and `parse` are exact inverses:
//! `parse(&print(g)) == g` for every graph (tested in `tests/text_roundtrip.rs`).
//!
//! ```text
//! graph "main" opsets [""=17] {
//!   input %x: f32[1,3]
//!   init %w: f32[3] = [1.0, 2.0, 3.0]
//!   node "add0" %y: f32[1,3] = Add(%x, %w)
//!   node "" %a: f32[1,3], _ = Dropout(%y, _) {ratio=0.5}
//!   output %y, %a
//! }
//! ```
//! Value names are `%name`, or `%"any text"` when the name has other
//! characters. Types are `dtype[d0,d1]`, `dtype[]` for scalars and `dtype[?]`
//! for data-dependent shapes. Attribute lists that are empty carry their kind
//! (`ints[]`, `floats[]`, `strings[]`). Floats print in Rust's shortest
//! round-trip form, so values survive exactly.

use crate::graph::{Attr, Graph, Initializer, Node, TensorType, ValueId};
use crate::{bail, dispatch_all, with_dtype, DType, Data, Elem, Error, Result, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// Prints a graph in the textual form.
pub fn print(g: &Graph) -> String {
    print_elided(g, None)
}

/// Prints a graph, showing at most `max_elems` elements of each constant
/// when given. Elided output (`...`) is for people: it does not parse back.
pub fn print_elided(g: &Graph, max_elems: Option<usize>) -> String {
    let mut out = String::new();
    print_graph(g, &mut out, 0, max_elems);
    out
}

fn is_bare(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-'))
}

fn quote(s: &str) -> String {
    format!("{s:?}")
}

fn value_ref(g: &Graph, id: ValueId) -> String {
    let name = g.name(id);
    if is_bare(name) {
        format!("%{name}")
    } else {
        format!("%{}", quote(name))
    }
}

fn typed_value(g: &Graph, id: ValueId) -> String {
    format!("{}: {}", value_ref(g, id), g.ty(id))
}

fn opt_ref(g: &Graph, v: &Option<ValueId>, typed: bool) -> String {
    match v {
        None => "_".to_string(),
        Some(id) if typed => typed_value(g, *id),
        Some(id) => value_ref(g, *id),
    }
}

fn print_graph(g: &Graph, out: &mut String, indent: usize, elide: Option<usize>) {
    let pad = "  ".repeat(indent + 1);
    let opsets: Vec<String> = g
        .opsets
        .iter()
        .map(|(d, v)| format!("{}={v}", quote(d)))
        .collect();
    let _ = writeln!(
        out,
        "graph {} opsets [{}] {{",
        quote(&g.name),
        opsets.join(", ")
    );
    for &id in &g.inputs {
        let _ = writeln!(out, "{pad}input {}", typed_value(g, id));
    }
    for &id in &g.captures {
        let _ = writeln!(out, "{pad}capture {}", typed_value(g, id));
    }
    for (&id, init) in &g.initializers {
        let data = match init.to_tensor() {
            Ok(t) => data_literal(&t.data, elide),
            Err(e) => format!("<undecodable: {e}>"),
        };
        let _ = writeln!(out, "{pad}init {} = {data}", typed_value(g, id));
    }
    for node in &g.nodes {
        print_node(g, node, out, indent, elide);
    }
    // Values that nothing defines (only in unverified graphs) still round-trip.
    let outs: Vec<String> = g.outputs.iter().map(|&id| value_ref(g, id)).collect();
    let _ = writeln!(out, "{pad}output {}", outs.join(", "));
    let _ = write!(out, "{}}}", "  ".repeat(indent));
    if indent == 0 {
        out.push('\n');
    }
}

fn print_node(g: &Graph, node: &Node, out: &mut String, indent: usize, elide: Option<usize>) {
    let pad = "  ".repeat(indent + 1);
    let outs: Vec<String> = node.outputs.iter().map(|o| opt_ref(g, o, true)).collect();
    let ins: Vec<String> = node.inputs.iter().map(|i| opt_ref(g, i, false)).collect();
    let op = if node.domain.is_empty() {
        node.op.clone()
    } else {
        format!("{}@{}", quote(&node.domain), node.op)
    };
    let _ = write!(
        out,
        "{pad}node {} {} = {op}({})",
        quote(&node.name),
        outs.join(", "),
        ins.join(", ")
    );
    if !node.attrs.is_empty() {
        out.push_str(" {");
        for (i, (k, v)) in node.attrs.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let key = if is_bare(k) { k.clone() } else { quote(k) };
            let _ = write!(out, "{key}=");
            print_attr(v, out, indent + 1, elide);
        }
        out.push('}');
    }
    out.push('\n');
}

fn fmt_f32(v: f32) -> String {
    format!("{v:?}")
}

fn print_attr(a: &Attr, out: &mut String, indent: usize, elide: Option<usize>) {
    match a {
        Attr::Int(v) => {
            let _ = write!(out, "{v}");
        }
        Attr::Float(v) => out.push_str(&fmt_f32(*v)),
        Attr::String(s) => out.push_str(&quote(s)),
        Attr::Ints(v) if v.is_empty() => out.push_str("ints[]"),
        Attr::Floats(v) if v.is_empty() => out.push_str("floats[]"),
        Attr::Strings(v) if v.is_empty() => out.push_str("strings[]"),
        Attr::Ints(v) => {
            let s: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            let _ = write!(out, "[{}]", s.join(", "));
        }
        Attr::Floats(v) => {
            let s: Vec<String> = v.iter().map(|x| fmt_f32(*x)).collect();
            let _ = write!(out, "floats[{}]", s.join(", "));
        }
        Attr::Strings(v) => {
            let s: Vec<String> = v.iter().map(|x| quote(x)).collect();
            let _ = write!(out, "[{}]", s.join(", "));
        }
        Attr::Tensor(t) => {
            let _ = write!(out, "tensor {} {}", t.ty(), data_literal(&t.data, elide));
        }
        Attr::Graph(g) => print_graph(g, out, indent, elide),
    }
}

/// An attribute value in the text form (subgraphs printed inline), exact:
/// [`parse_attr`] reads it back.
pub fn format_attr(a: &Attr) -> String {
    let mut out = String::new();
    print_attr(a, &mut out, 0, None);
    out
}

/// A tensor's elements as a literal: `1.5` for a scalar, `[1, 2]` otherwise,
/// exact: [`parse_scalar`] reads it back given the type.
pub fn format_scalar(t: &crate::Tensor) -> String {
    let lit = data_literal(&t.data, None);
    if t.shape.is_empty() {
        lit.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string()
    } else {
        lit
    }
}

fn data_literal(d: &Data, elide: Option<usize>) -> String {
    let limit = elide.unwrap_or(usize::MAX);
    if d.len() > limit {
        let head = d.gather(0..limit);
        let s = data_literal(&head, None);
        return format!("{}, ...]", &s[..s.len() - 1]);
    }
    let items: Vec<String> = match d {
        Data::F32(v) => v.iter().map(|x| fmt_f32(*x)).collect(),
        Data::F64(v) => v.iter().map(|x| format!("{x:?}")).collect(),
        Data::F16(v) => v.iter().map(|x| fmt_f32(x.to_f32())).collect(),
        Data::BF16(v) => v.iter().map(|x| fmt_f32(x.to_f32())).collect(),
        Data::Str(v) => v.iter().map(|x| quote(x)).collect(),
        other => dispatch_all!(other, |v: T| v.iter().map(|x| format!("{x:?}")).collect()),
    };
    format!("[{}]", items.join(", "))
}

// ---------------------------------------------------------------- parsing

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Value(String),
    Punct(char),
}

struct Lexer {
    toks: Vec<(Tok, usize)>,
    pos: usize,
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>> {
    let chars: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let word_char =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-' | '+' | '?');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' {
            let (s, next) = lex_string(&chars, i, line)?;
            toks.push((Tok::Str(s), line));
            i = next;
        } else if c == '%' {
            if chars.get(i + 1) == Some(&'"') {
                let (s, next) = lex_string(&chars, i + 1, line)?;
                toks.push((Tok::Value(s), line));
                i = next;
            } else {
                let start = i + 1;
                i = start;
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
                toks.push((Tok::Value(chars[start..i].iter().collect()), line));
            }
        } else if "()[]{},=:@".contains(c) {
            toks.push((Tok::Punct(c), line));
            i += 1;
        } else if word_char(c) {
            let start = i;
            while i < chars.len() && word_char(chars[i]) {
                i += 1;
            }
            toks.push((Tok::Word(chars[start..i].iter().collect()), line));
        } else {
            bail!("line {line}: unexpected character '{c}'");
        }
    }
    Ok(toks)
}

fn lex_string(chars: &[char], start: usize, line: usize) -> Result<(String, usize)> {
    let mut s = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok((s, i + 1)),
            '\\' => {
                let e = *chars
                    .get(i + 1)
                    .ok_or_else(|| Error::new(format!("line {line}: unterminated string")))?;
                i += 2;
                match e {
                    'n' => s.push('\n'),
                    't' => s.push('\t'),
                    'r' => s.push('\r'),
                    '0' => s.push('\0'),
                    '\\' => s.push('\\'),
                    '"' => s.push('"'),
                    '\'' => s.push('\''),
                    'u' => {
                        // Rust debug escapes: \u{XXXX}
                        let close = chars[i..]
                            .iter()
                            .position(|&c| c == '}')
                            .filter(|&close| chars[i] == '{' && close > 1)
                            .ok_or_else(|| Error::new(format!("line {line}: bad \\u escape")))?;
                        let hex: String = chars[i + 1..i + close].iter().collect();
                        let code = u32::from_str_radix(&hex, 16)
                            .map_err(|_| Error::new(format!("line {line}: bad \\u escape")))?;
                        s.push(
                            char::from_u32(code).ok_or_else(|| {
                                Error::new(format!("line {line}: bad \\u escape"))
                            })?,
                        );
                        i += close + 1;
                    }
                    other => bail!("line {line}: unknown escape '\\{other}'"),
                }
            }
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    bail!("line {line}: unterminated string")
}

/// Parses the textual form back into a graph.
pub fn parse(src: &str) -> Result<Graph> {
    let mut lx = Lexer::new(src)?;
    let g = lx.graph()?;
    lx.finish("the graph")?;
    Ok(g)
}

/// Parses one attribute value as [`format_attr`] writes it.
pub fn parse_attr(src: &str) -> Result<Attr> {
    let mut lx = Lexer::new(src)?;
    let a = lx.attr()?;
    lx.finish("the attribute")?;
    Ok(a)
}

/// Parses a literal as [`format_scalar`] writes it into a tensor of
/// `dtype` and `shape` (the literal alone does not say them).
pub fn parse_scalar(src: &str, dtype: DType, shape: &[usize]) -> Result<Tensor> {
    let src = if shape.is_empty() {
        format!("[{src}]")
    } else {
        src.to_string()
    };
    let mut lx = Lexer::new(&src)?;
    let data = lx.data(&TensorType::new(dtype, shape.to_vec()))?;
    lx.finish("the literal")?;
    Tensor::new(shape.to_vec(), data)
}

/// Reads the string literal (Rust's `{:?}` form) at the start of `src`:
/// the string and how many bytes of `src` it took.
pub fn parse_quoted(src: &str) -> Result<(String, usize)> {
    let chars: Vec<char> = src.chars().collect();
    if chars.first() != Some(&'"') {
        bail!("expected a quoted string");
    }
    let (s, end) = lex_string(&chars, 0, 1)?;
    Ok((s, chars[..end].iter().map(|c| c.len_utf8()).sum()))
}

impl Lexer {
    fn new(src: &str) -> Result<Lexer> {
        Ok(Lexer {
            toks: lex(src)?,
            pos: 0,
        })
    }

    fn finish(&self, what: &str) -> Result<()> {
        if self.pos == self.toks.len() {
            Ok(())
        } else {
            Err(self.err(&format!("trailing text after {what}")))
        }
    }

    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map(|t| t.1)
            .unwrap_or(0)
    }

    fn err(&self, msg: &str) -> Error {
        let found = match self.toks.get(self.pos) {
            Some((t, _)) => format!("{t:?}"),
            None => "end of input".into(),
        };
        Error::new(format!("line {}: {msg} (found {found})", self.line()))
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }

    fn next(&mut self) -> Result<Tok> {
        let t = self
            .toks
            .get(self.pos)
            .map(|t| t.0.clone())
            .ok_or_else(|| self.err("unexpected end"))?;
        self.pos += 1;
        Ok(t)
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Punct(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, c: char) -> Result<()> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.err(&format!("expected '{c}'")))
        }
    }

    fn eat_word(&mut self, w: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Word(x)) if x == w) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_word(&mut self, w: &str) -> Result<()> {
        if self.eat_word(w) {
            Ok(())
        } else {
            Err(self.err(&format!("expected '{w}'")))
        }
    }

    fn word(&mut self) -> Result<String> {
        match self.next()? {
            Tok::Word(w) => Ok(w),
            _ => {
                self.pos -= 1;
                Err(self.err("expected a word"))
            }
        }
    }

    fn string(&mut self) -> Result<String> {
        match self.next()? {
            Tok::Str(s) => Ok(s),
            _ => {
                self.pos -= 1;
                Err(self.err("expected a quoted string"))
            }
        }
    }

    fn value_name(&mut self) -> Result<String> {
        match self.next()? {
            Tok::Value(s) => Ok(s),
            _ => {
                self.pos -= 1;
                Err(self.err("expected a %value"))
            }
        }
    }

    fn tensor_type(&mut self) -> Result<TensorType> {
        let w = self.word()?;
        let dtype: DType = w.parse().map_err(|e: Error| self.err(e.message()))?;
        self.expect_punct('[')?;
        if self.eat_word("?") {
            self.expect_punct(']')?;
            return Ok(TensorType::unknown_shape(dtype));
        }
        let mut dims = Vec::new();
        while !self.eat_punct(']') {
            if !dims.is_empty() {
                self.expect_punct(',')?;
            }
            let w = self.word()?;
            dims.push(
                w.parse::<usize>()
                    .map_err(|_| self.err("expected a dimension"))?,
            );
        }
        Ok(TensorType::new(dtype, dims))
    }

    /// `[a, b, ...]` of words or strings.
    fn list(&mut self) -> Result<Vec<Tok>> {
        self.expect_punct('[')?;
        let mut items = Vec::new();
        while !self.eat_punct(']') {
            if !items.is_empty() {
                self.expect_punct(',')?;
            }
            items.push(self.next()?);
        }
        Ok(items)
    }

    fn data(&mut self, ty: &TensorType) -> Result<Data> {
        let items = self.list()?;
        let words = || -> Result<Vec<String>> {
            items
                .iter()
                .map(|t| match t {
                    Tok::Word(w) => Ok(w.clone()),
                    Tok::Str(s) => Ok(s.clone()),
                    _ => Err(Error::new(format!(
                        "line {}: bad tensor element {t:?}",
                        self.line()
                    ))),
                })
                .collect()
        };
        let ws = words()?;
        let data = parse_elements(ty.dtype, &ws)
            .map_err(|e| Error::new(format!("line {}: {}", self.line(), e.message())))?;
        if Some(data.len()) != ty.numel() {
            return Err(self.err(&format!("{} values do not fill type {ty}", data.len())));
        }
        Ok(data)
    }

    fn attr(&mut self) -> Result<Attr> {
        match self.peek().cloned() {
            Some(Tok::Str(s)) => {
                self.pos += 1;
                Ok(Attr::String(s))
            }
            Some(Tok::Word(w)) if w == "ints" || w == "floats" || w == "strings" => {
                self.pos += 1;
                let items = self.list()?;
                let strs: Vec<String> = items
                    .into_iter()
                    .map(|t| match t {
                        Tok::Word(w) | Tok::Str(w) => w,
                        _ => String::new(),
                    })
                    .collect();
                self.typed_list(&w, strs)
            }
            Some(Tok::Word(w)) if w == "tensor" => {
                self.pos += 1;
                let ty = self.tensor_type()?;
                let data = self.data(&ty)?;
                Ok(Attr::Tensor(Tensor::new(
                    ty.shape.unwrap_or_default(),
                    data,
                )?))
            }
            Some(Tok::Word(w)) if w == "graph" => Ok(Attr::Graph(Box::new(self.graph()?))),
            Some(Tok::Word(w)) => {
                self.pos += 1;
                if let Ok(v) = w.parse::<i64>() {
                    Ok(Attr::Int(v))
                } else {
                    w.parse::<f32>()
                        .map(Attr::Float)
                        .map_err(|_| self.err("bad attribute value"))
                }
            }
            Some(Tok::Punct('[')) => {
                let items = self.list()?;
                if items.iter().all(|t| matches!(t, Tok::Str(_))) {
                    let v = items
                        .into_iter()
                        .map(|t| {
                            if let Tok::Str(s) = t {
                                s
                            } else {
                                unreachable!()
                            }
                        })
                        .collect();
                    return Ok(Attr::Strings(v));
                }
                let words: Vec<String> = items
                    .into_iter()
                    .map(|t| {
                        if let Tok::Word(w) = t {
                            Ok(w)
                        } else {
                            Err(self.err("bad list element"))
                        }
                    })
                    .collect::<Result<_>>()?;
                self.typed_list("ints", words)
            }
            _ => Err(self.err("expected an attribute value")),
        }
    }

    fn typed_list(&self, kind: &str, items: Vec<String>) -> Result<Attr> {
        let bad = |w: &String| self.err(&format!("bad {kind} element '{w}'"));
        Ok(match kind {
            "ints" => Attr::Ints(
                items
                    .iter()
                    .map(|w| w.parse().map_err(|_| bad(w)))
                    .collect::<Result<_>>()?,
            ),
            "floats" => Attr::Floats(
                items
                    .iter()
                    .map(|w| w.parse().map_err(|_| bad(w)))
                    .collect::<Result<_>>()?,
            ),
            _ => Attr::Strings(items),
        })
    }

    fn graph(&mut self) -> Result<Graph> {
        self.expect_word("graph")?;
        let mut g = Graph::new(self.string()?);
        self.expect_word("opsets")?;
        self.expect_punct('[')?;
        let mut opsets = BTreeMap::new();
        while !self.eat_punct(']') {
            if !opsets.is_empty() {
                self.expect_punct(',')?;
            }
            let d = self.string()?;
            self.expect_punct('=')?;
            let v = self
                .word()?
                .parse::<i64>()
                .map_err(|_| self.err("bad opset version"))?;
            opsets.insert(d, v);
        }
        g.opsets = opsets;
        self.expect_punct('{')?;
        let mut ids: HashMap<String, ValueId> = HashMap::new();
        loop {
            let kw = self.word()?;
            match kw.as_str() {
                "input" | "capture" => {
                    let id = self.define(&mut g, &mut ids)?;
                    if kw == "input" {
                        g.inputs.push(id)
                    } else {
                        g.captures.push(id)
                    }
                }
                "init" => {
                    let id = self.define(&mut g, &mut ids)?;
                    self.expect_punct('=')?;
                    let ty = g.ty(id).clone();
                    let data = self.data(&ty)?;
                    let t = Tensor::new(ty.shape.unwrap_or_default(), data)?;
                    g.initializers.insert(id, Initializer::Tensor(t));
                }
                "node" => self.node(&mut g, &mut ids)?,
                "output" => {
                    loop {
                        let name = self.value_name()?;
                        let id = *ids
                            .get(&name)
                            .ok_or_else(|| self.err(&format!("output %{name} is not defined")))?;
                        g.outputs.push(id);
                        if !self.eat_punct(',') {
                            break;
                        }
                    }
                    self.expect_punct('}')?;
                    return Ok(g);
                }
                _ => {
                    self.pos -= 1;
                    return Err(self.err("expected input, capture, init, node or output"));
                }
            }
        }
    }

    fn define(&mut self, g: &mut Graph, ids: &mut HashMap<String, ValueId>) -> Result<ValueId> {
        let name = self.value_name()?;
        self.expect_punct(':')?;
        let ty = self.tensor_type()?;
        if ids.contains_key(&name) {
            return Err(self.err(&format!("value %{name} is defined twice")));
        }
        let id = g.add_value(name.clone(), ty);
        ids.insert(name, id);
        Ok(id)
    }

    fn node(&mut self, g: &mut Graph, ids: &mut HashMap<String, ValueId>) -> Result<()> {
        let name = self.string()?;
        let mut outputs = Vec::new();
        loop {
            if self.eat_word("_") {
                outputs.push(None);
            } else {
                outputs.push(Some(self.define(g, ids)?));
            }
            if !self.eat_punct(',') {
                break;
            }
        }
        self.expect_punct('=')?;
        let (domain, op) = match self.next()? {
            Tok::Str(d) => {
                self.expect_punct('@')?;
                (d, self.word()?)
            }
            Tok::Word(w) => (String::new(), w),
            _ => return Err(self.err("expected an op name")),
        };
        self.expect_punct('(')?;
        let mut inputs = Vec::new();
        while !self.eat_punct(')') {
            if !inputs.is_empty() {
                self.expect_punct(',')?;
            }
            if self.eat_word("_") {
                inputs.push(None);
            } else {
                let n = self.value_name()?;
                inputs.push(Some(*ids.get(&n).ok_or_else(|| {
                    self.err(&format!("%{n} is used before it is defined"))
                })?));
            }
        }
        let mut attrs = BTreeMap::new();
        if self.eat_punct('{') {
            while !self.eat_punct('}') {
                if !attrs.is_empty() {
                    self.expect_punct(',')?;
                }
                let key = match self.next()? {
                    Tok::Word(w) | Tok::Str(w) => w,
                    _ => return Err(self.err("expected an attribute name")),
                };
                self.expect_punct('=')?;
                let v = self.attr()?;
                attrs.insert(key, v);
            }
        }
        g.nodes.push(Node {
            name,
            op,
            domain,
            inputs,
            outputs,
            attrs,
        });
        Ok(())
    }
}

/// Parses printed elements of `dtype` (halves print as their f32 value).
fn parse_elements(dtype: DType, ws: &[String]) -> Result<Data> {
    fn parse_vec<T: std::str::FromStr>(ws: &[String]) -> Result<Vec<T>> {
        ws.iter()
            .map(|w| {
                w.parse::<T>()
                    .map_err(|_| Error::new(format!("bad element '{w}'")))
            })
            .collect()
    }
    Ok(match dtype {
        DType::F16 => Data::F16(
            parse_vec::<f32>(ws)?
                .into_iter()
                .map(half::f16::from_f32)
                .collect(),
        ),
        DType::BF16 => Data::BF16(
            parse_vec::<f32>(ws)?
                .into_iter()
                .map(half::bf16::from_f32)
                .collect(),
        ),
        DType::Str => Data::Str(ws.to_vec().into()),
        DType::Bool => Data::Bool(parse_vec::<bool>(ws)?.into()),
        dt => with_dtype!(dt, |T| T::wrap(parse_vec::<T>(ws)?)),
    })
}
