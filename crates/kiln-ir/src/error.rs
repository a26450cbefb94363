//! One error type for all of kiln: a message plus a chain of context
//! (file, node, op, opset) added as the error travels up, and what kind of
//! failure it is. [`Error::location`] reads the file, node, op and opset
//! back out of the chain (the Python package's exceptions carry them).

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    message: String,
    context: Vec<String>,
    kind: ErrorKind,
    /// The model file, when the error was raised while reading one.
    file: Option<String>,
}

/// What kind of failure an [`Error`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input (model, tensor, option) is invalid, or something failed.
    Invalid,
    /// A shape or value is not known at compile time (yet); the input is
    /// not invalid.
    NotStatic,
    /// The input is valid but kiln does not implement it (an op, a domain).
    Unsupported,
    /// What a backend needs is not on this machine (a driver, a library, a
    /// device); the input is not at fault.
    Unavailable,
}

/// Where an error happened, as far as its context says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    pub file: Option<String>,
    /// The name of the innermost node the context or message describes
    /// (`None` for an unnamed node).
    pub node: Option<String>,
    /// The op of that node (`domain.Op` outside the default domain).
    pub op: Option<String>,
    pub opset: Option<i64>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            context: Vec::new(),
            kind: ErrorKind::Invalid,
            file: None,
        }
    }

    /// An error saying something is only known at run time.
    pub fn not_static(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::NotStatic,
            ..Error::new(message)
        }
    }

    /// An error saying kiln does not implement something valid.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Unsupported,
            ..Error::new(message)
        }
    }

    pub fn is_not_static(&self) -> bool {
        self.kind == ErrorKind::NotStatic
    }

    /// An error of kind [`ErrorKind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Unavailable,
            ..Error::new(message)
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Adds the model file as the outer context.
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        let file = file.into();
        self.context.push(file.clone());
        self.file.get_or_insert(file);
        self
    }

    /// The file, node, op and opset this error names. Nodes are found in
    /// the form `Node::describe` prints (`node 'name' (Op)`), followed by
    /// ` (opset N)` where the opset is known.
    pub fn location(&self) -> Location {
        let mut loc = Location {
            file: self.file.clone(),
            ..Location::default()
        };
        // Innermost first: the message, then the contexts inward-out.
        let texts = std::iter::once(&self.message).chain(self.context.iter());
        for text in texts {
            if loc.op.is_none() {
                if let Some((node, op)) = described_node(text) {
                    loc.node = (!node.is_empty()).then_some(node);
                    loc.op = Some(op);
                }
            }
            if loc.opset.is_none() {
                loc.opset = opset_in(text);
            }
        }
        loc
    }

    /// Adds an outer context, printed before the message ("file x.onnx: node n: ...").
    pub fn context(mut self, ctx: impl Into<String>) -> Self {
        self.context.push(ctx.into());
        self
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// `(name, op)` of the first `node 'name' (Op)`, `node (Op)` or
/// `node 'name' (Op, opset N)` in `text`.
fn described_node(text: &str) -> Option<(String, String)> {
    let start = text.find("node ")? + "node ".len();
    let rest = &text[start..];
    let (name, after) = match rest.strip_prefix('\'') {
        Some(quoted) => {
            // Names may hold quotes: the name ends at the last `' (`.
            let end = quoted.rfind("' (")?;
            (quoted[..end].to_string(), &quoted[end + 2..])
        }
        None => (String::new(), rest),
    };
    let inside = after.strip_prefix('(')?;
    let inside = &inside[..inside.find(')')?];
    let op = inside.split(", opset ").next().unwrap_or_default();
    (!op.is_empty() && !op.contains(' ')).then(|| (name, op.to_string()))
}

/// N of the first `(opset N)` or `, opset N)` in `text`.
fn opset_in(text: &str) -> Option<i64> {
    let start = text.find("opset ")? + "opset ".len();
    let rest = &text[start..];
    rest[..rest.find(')')?].trim().parse().ok()
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for ctx in self.context.iter().rev() {
            write!(f, "{ctx}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::new(e.to_string())
    }
}

/// Adds context to a `Result`'s error lazily.
pub trait ResultExt<T> {
    fn ctx<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn ctx<C: Into<String>>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.context(f()))
    }
}

/// `bail!("fmt", args..)` returns early with an `Error`.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::Error::new(format!($($arg)*))) };
}

/// `ensure!(cond, "fmt", args..)` bails when `cond` is false.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => { if !$cond { $crate::bail!($($arg)*) } };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_reads_file_node_op_and_opset() {
        let e = Error::unsupported("unsupported op 'Foo' (domain ai.onnx)")
            .context("node 'a (b)' (Foo) (opset 17)")
            .in_file("m.onnx");
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert_eq!(
            e.location(),
            Location {
                file: Some("m.onnx".into()),
                node: Some("a (b)".into()),
                op: Some("Foo".into()),
                opset: Some(17),
            }
        );
        assert_eq!(
            e.to_string(),
            "m.onnx: node 'a (b)' (Foo) (opset 17): unsupported op 'Foo' (domain ai.onnx)"
        );
    }

    #[test]
    fn location_takes_the_innermost_node_and_unnamed_nodes() {
        let e = Error::new("node (com.x.Bar): bad")
            .context("node 'outer' (If)")
            .context("graph");
        let loc = e.location();
        assert_eq!(loc.node, None);
        assert_eq!(loc.op.as_deref(), Some("com.x.Bar"));
        assert_eq!(loc.file, None);
        assert_eq!(loc.opset, None);
        assert_eq!(Error::new("no node here").location(), Location::default());
        // The importer's form.
        let e = Error::new("bad").context("node 'n1' (Conv, opset 13)");
        let loc = e.location();
        assert_eq!(
            (loc.node.as_deref(), loc.op.as_deref(), loc.opset),
            (Some("n1"), Some("Conv"), Some(13))
        );
    }
}
