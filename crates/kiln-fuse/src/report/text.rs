//! `kiln explain`'s text output: a summary line, one line per group
//! (kernel), the planner's notes, and with `--explain-feedback` the
//! groups the backend refused (APOLLO §4.1's feedback).
//!
//! Needs: a graph and its [`Planned`] result.
//! Guarantees: one line per group, in plan order, with its kind, op
//! pattern (long patterns cut, with the op count) and bytes in/out; one
//! line per feedback entry with its pattern, reason and the split.

use super::summary::{human_bytes, ops_pattern, summarize};
use crate::metrics::metrics;
use crate::Planned;
use kiln_ir::Graph;
use std::fmt::Write;

/// Op patterns longer than this are cut in the text summary.
const MAX_PATTERN: usize = 60;

/// The summary; `profile` gives (group index, milliseconds) pairs.
pub fn text(g: &Graph, planned: &Planned, profile: &[(usize, f64)]) -> String {
    let m = metrics(g, &planned.plan);
    let mut out = format!(
        "planner {}: {} primitive nodes -> {} kernels (fusion ratio {:.2}), {} between kernels, planned in {:.3} s\n",
        planned.plan.planner,
        m.primitive_nodes,
        m.kernels,
        m.fusion_ratio,
        human_bytes(m.intermediate_bytes),
        planned.seconds
    );
    for (i, s) in summarize(g, &planned.plan, profile).iter().enumerate() {
        let time = s
            .time_ms
            .map(|t| format!("  {t:.3} ms"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  #{i:<4} {:<13} {:<62} in {:>9}  out {:>9}{time}",
            s.kind,
            cut(&s.ops, s.nodes.len()),
            human_bytes(s.bytes_in),
            human_bytes(s.bytes_out)
        );
    }
    for note in &planned.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// The feedback entries: refused pattern, the backend's reason, and the
/// pieces it was split into.
pub fn feedback_text(g: &Graph, planned: &Planned) -> String {
    if planned.feedback.is_empty() {
        return "feedback: the backend accepted every group\n".to_string();
    }
    let mut out = format!("feedback: {} groups refused\n", planned.feedback.len());
    for f in &planned.feedback {
        let split: Vec<String> = f.split.iter().map(|p| ops_pattern(g, p)).collect();
        let _ = writeln!(
            out,
            "  {}: {}\n    split into: {}",
            f.pattern,
            f.reason,
            split.join(" | ")
        );
    }
    out
}

/// `pattern` cut to [`MAX_PATTERN`] characters, noting the op count.
fn cut(pattern: &str, ops: usize) -> String {
    if pattern.len() <= MAX_PATTERN {
        return pattern.to_string();
    }
    let head: String = pattern.chars().take(MAX_PATTERN - 12).collect();
    format!("{head}… ({ops} ops)")
}
