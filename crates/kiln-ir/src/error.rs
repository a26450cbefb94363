//! One error type for all of kiln: a message plus a chain of context
//! (file, node, op, opset) added as the error travels up.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    message: String,
    context: Vec<String>,
    /// Raised because a shape or value is not known at compile time (yet),
    /// not because the input is invalid.
    not_static: bool,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            context: Vec::new(),
            not_static: false,
        }
    }

    /// An error saying something is only known at run time.
    pub fn not_static(message: impl Into<String>) -> Self {
        Error {
            not_static: true,
            ..Error::new(message)
        }
    }

    pub fn is_not_static(&self) -> bool {
        self.not_static
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
