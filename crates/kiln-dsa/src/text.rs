//! The text form of a [`Nest`], so tests are text in, text out:
//!
//! ```text
//! nest matmul            # a name
//! loop x 1024            # loops, outermost first
//! loop y 1024
//! loop k 1024
//! in A[x][k] elem 4      # read tensors: name, one [index] per dimension
//! in B[k][y] elem 4      #   (outermost first), bytes per element
//! out C[x][y] elem 4     # written tensors
//! ```
//!
//! An index is `term + term + …`, a term `var`, `N*var` or `N`. `#` starts
//! a comment. Guarantees: `parse_nest(&nest.to_string()) == nest` for every
//! valid nest whose constant terms are merged into one (the printed form);
//! a parsed nest is valid (errors name the line).

use crate::nest::{Access, Affine, Loop, Nest, Term};
use kiln_ir::error::ResultExt;
use kiln_ir::{bail, ensure, Result};
use std::fmt;

impl fmt::Display for Nest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nest {}", self.name)?;
        for l in &self.loops {
            writeln!(f, "loop {} {}", l.var, l.extent)?;
        }
        for t in &self.tensors {
            write!(f, "{} {}", if t.is_output { "out" } else { "in" }, t.name)?;
            for dim in &t.dims {
                write!(f, "[{}]", self.index_text(dim))?;
            }
            writeln!(f, " elem {}", t.elem_bytes)?;
        }
        Ok(())
    }
}

impl Nest {
    /// `2*oh + kh + 1`: an index in the text form.
    pub fn index_text(&self, index: &Affine) -> String {
        let mut parts: Vec<String> = index
            .terms
            .iter()
            .map(|t| {
                let var = self.loops.get(t.loop_index).map_or("?", |l| l.var.as_str());
                match t.coeff {
                    1 => var.to_string(),
                    c => format!("{c}*{var}"),
                }
            })
            .collect();
        if index.constant != 0 || parts.is_empty() {
            parts.push(index.constant.to_string());
        }
        parts.join(" + ")
    }
}

/// Reads the text form; the nest is validated.
pub fn parse_nest(text: &str) -> Result<Nest> {
    let lines: Vec<(usize, Vec<&str>)> = text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.split('#').next().unwrap_or("")))
        .map(|(n, line)| (n, line.split_whitespace().collect::<Vec<_>>()))
        .filter(|(_, words)| !words.is_empty())
        .collect();
    let mut nest = Nest {
        name: String::new(),
        loops: Vec::new(),
        tensors: Vec::new(),
    };
    // Loops first, so that indices may name any loop.
    for (n, words) in &lines {
        match words[0] {
            "nest" => nest.name = parse_name(words).ctx(|| format!("line {n}"))?,
            "loop" => nest
                .loops
                .push(parse_loop(words).ctx(|| format!("line {n}"))?),
            "in" | "out" => {}
            other => bail!("line {n}: unknown statement '{other}' (nest, loop, in, out)"),
        }
    }
    ensure!(!nest.name.is_empty(), "the text has no 'nest NAME' line");
    for (n, words) in &lines {
        if words[0] == "in" || words[0] == "out" {
            let access = parse_access(&nest, words).ctx(|| format!("line {n}"))?;
            nest.tensors.push(access);
        }
    }
    nest.validate()?;
    Ok(nest)
}

fn parse_name(words: &[&str]) -> Result<String> {
    match words {
        [_, name] => Ok(name.to_string()),
        _ => bail!("expected 'nest NAME'"),
    }
}

fn parse_loop(words: &[&str]) -> Result<Loop> {
    match words {
        [_, var, extent] => Ok(Loop {
            var: var.to_string(),
            extent: parse_number(extent)?,
        }),
        _ => bail!("expected 'loop VAR EXTENT'"),
    }
}

/// `in NAME[i][j] elem N` (the words of the line; spaces may appear
/// inside the brackets).
fn parse_access(nest: &Nest, words: &[&str]) -> Result<Access> {
    let rest = words[1..].join(" ");
    let Some((indexed, bytes)) = rest.rsplit_once(" elem ") else {
        bail!("expected '{} NAME[index]… elem BYTES'", words[0])
    };
    let Some((name, dims_text)) = indexed.split_once('[') else {
        bail!("tensor '{indexed}' has no [index]")
    };
    let Some(dims_text) = dims_text.trim_end().strip_suffix(']') else {
        bail!("tensor '{name}': the last index has no ']'")
    };
    let dims = dims_text
        .split("][")
        .map(|d| parse_index(nest, d))
        .collect::<Result<Vec<_>>>()
        .ctx(|| format!("tensor '{name}'"))?;
    Ok(Access {
        name: name.trim().to_string(),
        dims,
        elem_bytes: parse_number(bytes.trim())?,
        is_output: words[0] == "out",
    })
}

/// `2*oh + kh + 1`.
fn parse_index(nest: &Nest, text: &str) -> Result<Affine> {
    let mut index = Affine::default();
    for term in text.split('+').map(str::trim) {
        if let Ok(constant) = term.parse::<u64>() {
            index.constant = index.constant.saturating_add(constant);
            continue;
        }
        let (coeff, var) = match term.split_once('*') {
            Some((c, v)) => (parse_number(c.trim())?, v.trim()),
            None => (1, term),
        };
        let Some(loop_index) = nest.loop_index(var) else {
            bail!("'{var}' in index '{text}' is not a loop variable")
        };
        index.terms.push(Term { loop_index, coeff });
    }
    Ok(index)
}

fn parse_number(word: &str) -> Result<u64> {
    word.parse()
        .map_err(|_| kiln_ir::Error::new(format!("'{word}' is not a non-negative integer")))
}

/// swTVM's matrix-multiplication example (§5.2, Figure 2) at 1024³, f32: the
/// nest several algorithms' tests start from.
#[cfg(test)]
pub(crate) fn matmul_1024() -> crate::nest::Nest {
    parse_nest(
        "nest matmul\nloop x 1024\nloop y 1024\nloop k 1024\n\
         in A[x][k] elem 4\nin B[k][y] elem 4\nout C[x][y] elem 4\n",
    )
    .expect("the matmul nest parses")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONV: &str = "nest conv\n\
        loop co 8\nloop oh 5\nloop ci 3\nloop kh 3\n\
        in I[ci][2*oh + kh + 1] elem 4\n\
        in W[co][ci][kh] elem 2\n\
        out O[co][oh] elem 4\n";

    #[test]
    fn text_round_trips() {
        let nest = parse_nest(CONV).unwrap();
        assert_eq!(nest.to_string(), CONV);
        assert_eq!(parse_nest(&nest.to_string()).unwrap(), nest);
        let input = &nest.tensors[0];
        assert_eq!(input.shape(&nest), vec![3, 12]);
        assert_eq!(input.dims[1].span(&[1, 2, 1, 3]), 5);
    }

    #[test]
    fn comments_blank_lines_and_spacing_are_accepted() {
        let text = "# a comment\n\nnest m\nloop i 4 # rows\n  in A[ i ][2 * i+3] elem 4\n";
        let nest = parse_nest(text).unwrap();
        assert_eq!(
            nest.to_string(),
            "nest m\nloop i 4\nin A[i][2*i + 3] elem 4\n"
        );
    }

    #[test]
    fn bad_text_names_the_line() {
        let cases = [
            ("nest m\nloop i 4\nin A[j] elem 4\n", "line 3"),
            ("nest m\nloop i x\n", "line 2"),
            (
                "nest m\nloop i 4\nfor A[i] elem 4\n",
                "line 3: unknown statement",
            ),
            ("nest m\nloop i 4\nin A[i elem 4\n", "line 3"),
            (
                "nest m\nloop i 4\nloop j 2\nin A[i] elem 4\n",
                "'j' indexes no tensor",
            ),
            ("nest m\nloop i 0\nin A[i] elem 4\n", "extent 0"),
            ("nest m\nloop i 4\nin A[i + i] elem 4\n", "repeats 'i'"),
            ("loop i 4\nin A[i] elem 4\n", "no 'nest NAME'"),
        ];
        for (text, expected) in cases {
            let err = parse_nest(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }
}
