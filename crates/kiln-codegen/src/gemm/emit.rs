//! A small line-oriented C writer: keeps indentation so generated code is readable.
//!
//! Needs nothing; guarantees every `open` is matched by a `close` in the caller's code order
//! (it does not check), and that preprocessor lines start in column 0.

pub(crate) struct CWriter {
    out: String,
    depth: usize,
}

impl CWriter {
    pub(crate) fn new() -> CWriter {
        CWriter {
            out: String::new(),
            depth: 0,
        }
    }

    /// One line at the current indentation.
    pub(crate) fn line(&mut self, text: impl AsRef<str>) {
        for _ in 0..self.depth {
            self.out.push_str("    ");
        }
        self.out.push_str(text.as_ref());
        self.out.push('\n');
    }

    /// A preprocessor directive (always at column 0, as tradition wants).
    pub(crate) fn directive(&mut self, text: impl AsRef<str>) {
        self.out.push_str(text.as_ref());
        self.out.push('\n');
    }

    /// `head {` and one level deeper.
    pub(crate) fn open(&mut self, head: impl AsRef<str>) {
        let head = head.as_ref();
        if head.is_empty() {
            self.line("{");
        } else {
            self.line(format!("{head} {{"));
        }
        self.depth += 1;
    }

    /// `}` one level shallower.
    pub(crate) fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.line("}");
    }

    pub(crate) fn finish(self) -> String {
        self.out
    }
}
