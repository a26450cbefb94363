//! Progress on stderr while long work runs — a spinner with the elapsed
//! time while a model's C compiles, a bar over `kiln tune`'s candidates —
//! drawn only when stderr is a terminal: logs and pipes get nothing.

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

/// A bar counting `total` steps of `unit`, with a message per step.
pub fn counter(total: u64, unit: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let template = format!("{{bar:30}} {{pos}}/{{len}} {unit} ({{elapsed}}) {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}
