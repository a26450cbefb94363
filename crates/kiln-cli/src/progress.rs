//! A spinner with the elapsed time on stderr while long work runs
//! (compiling a model's C), drawn only when stderr is a terminal: logs and
//! pipes get nothing.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

/// Runs `work`, showing `what` and a ticking clock meanwhile; the line is
/// cleared when it returns.
pub fn while_working<T>(what: &str, work: impl FnOnce() -> T) -> T {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    let out = work();
    bar.finish_and_clear();
    out
}
