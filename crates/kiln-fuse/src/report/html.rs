//! `kiln explain -o report.html`: one self-contained HTML file with an
//! inline SVG drawing of the planned graph (issue 5, item 6).
//!
//! Needs: a graph and its [`Planned`] result; optionally a profile of
//! (group index, milliseconds).
//! Guarantees: no external scripts, styles or fonts; one box per node
//! (its op, with name and output types in a tooltip), one arrow per
//! producer→consumer pair, and one outlined rectangle per group (kernel)
//! labelled with its kind, bytes in/out and, when profiled, its time.
//! Every name from the model is XML-escaped. Layout: `layout.rs`.

use super::layout::{layout, Rect, BOX_H, BOX_W, HEADER};
use super::summary::{human_bytes, summarize, GroupSummary};
use crate::metrics::metrics;
use crate::Planned;
use kiln_ir::Graph;
use std::fmt::Write;

const PAGE_STYLE: &str = "body{font-family:sans-serif;margin:16px}svg{border:1px solid #ccc}";
/// Inside the `<svg>`, so that the drawing also stands alone.
const SVG_STYLE: &str = "text{font-family:sans-serif}\
.node rect{fill:#fff;stroke:#444}\
.node text{font-size:11px;text-anchor:middle;dominant-baseline:middle}\
.group{fill-opacity:0.25;stroke:#333;stroke-width:1.2}\
.single{stroke-dasharray:3 2;stroke:#999}\
.label{font-size:10px;fill:#222}\
.edge{fill:none;stroke:#777;stroke-width:1;marker-end:url(#arrow)}";

/// The report page; `profile` gives (group index, milliseconds) pairs.
pub fn html(g: &Graph, planned: &Planned, profile: &[(usize, f64)]) -> String {
    let m = metrics(g, &planned.plan);
    let mut page = String::new();
    let title = format!(
        "kiln explain: {} ({})",
        escape(&g.name),
        planned.plan.planner
    );
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>{PAGE_STYLE}</style></head><body>\n<h1>{title}</h1>\n<p>{} primitive nodes → {} kernels \
         (fusion ratio {:.2}), {} between kernels, planned in {:.3} s.</p>\n",
        m.primitive_nodes,
        m.kernels,
        m.fusion_ratio,
        human_bytes(m.intermediate_bytes),
        planned.seconds
    );
    page += &svg(g, planned, profile);
    page += "\n</body></html>\n";
    page
}

/// The drawing.
fn svg(g: &Graph, planned: &Planned, profile: &[(usize, f64)]) -> String {
    let producers = node_producers(g);
    let members: Vec<Vec<usize>> = planned
        .plan
        .groups
        .iter()
        .map(|x| x.nodes.clone())
        .collect();
    let l = layout(&producers, &members);
    let summaries = summarize(g, &planned.plan, profile);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\">\n\
         <style>{SVG_STYLE}</style><defs><marker id=\"arrow\" viewBox=\"0 0 6 6\" refX=\"6\" refY=\"3\" markerWidth=\"6\" \
         markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L6,3 L0,6 z\" fill=\"#777\"/></marker></defs>\n",
        l.width, l.height
    );
    for (i, summary) in summaries.iter().enumerate() {
        s += &group_svg(i, summary, l.groups[i]);
    }
    for (n, ps) in producers.iter().enumerate() {
        for &p in ps {
            s += &edge_svg(l.nodes[p], l.nodes[n]);
        }
    }
    for (n, r) in l.nodes.iter().enumerate() {
        s += &node_svg(g, n, *r);
    }
    s += "</svg>";
    s
}

/// The producing nodes of each node's inputs (deduplicated).
fn node_producers(g: &Graph) -> Vec<Vec<usize>> {
    let producers = g.producers();
    g.nodes
        .iter()
        .map(|node| crate::graph::producer_nodes(node, &producers))
        .collect()
}

fn group_svg(i: usize, s: &GroupSummary, r: Rect) -> String {
    let class = if s.nodes.len() > 1 {
        "group"
    } else {
        "group single"
    };
    let time = s
        .time_ms
        .map(|t| format!(" · {t:.3} ms"))
        .unwrap_or_default();
    format!(
        "<g><title>kernel {i}: {}</title><rect class=\"{class}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" \
         height=\"{:.1}\" rx=\"4\" fill=\"{}\"/><text class=\"label\" x=\"{:.1}\" y=\"{:.1}\">#{i} {} · in {} · out {}{time}</text></g>\n",
        escape(&s.ops),
        r.x,
        r.y,
        r.w,
        r.h,
        kind_color(&s.kind),
        r.x + 4.0,
        r.y + HEADER - 6.0,
        escape(&s.kind),
        human_bytes(s.bytes_in),
        human_bytes(s.bytes_out),
    )
}

fn edge_svg(from: Rect, to: Rect) -> String {
    let (x1, y1) = (from.x + from.w / 2.0, from.y + from.h);
    let (x2, y2) = (to.x + to.w / 2.0, to.y);
    let bend = ((y2 - y1) / 2.0).max(8.0);
    format!(
        "<path class=\"edge\" d=\"M{x1:.1},{y1:.1} C{x1:.1},{:.1} {x2:.1},{:.1} {x2:.1},{y2:.1}\"/>\n",
        y1 + bend,
        y2 - bend
    )
}

fn node_svg(g: &Graph, n: usize, r: Rect) -> String {
    let node = &g.nodes[n];
    let types: Vec<String> = node
        .outputs
        .iter()
        .flatten()
        .map(|&v| g.ty(v).to_string())
        .collect();
    format!(
        "<g class=\"node\"><title>{} ({}) → {}</title><rect x=\"{:.1}\" y=\"{:.1}\" width=\"{BOX_W}\" \
         height=\"{BOX_H}\" rx=\"3\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>\n",
        escape(&node.name),
        escape(&node.op),
        escape(&types.join(", ")),
        r.x,
        r.y,
        r.x + r.w / 2.0,
        r.y + r.h / 2.0,
        escape(&shorten(&node.op, 16))
    )
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        text.chars().take(max - 1).chain(['…']).collect()
    }
}

/// A fill colour per kind (stable: derived from the kind's bytes).
fn kind_color(kind: &str) -> &'static str {
    const PALETTE: [&str; 8] = [
        "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    ];
    let h = kind
        .bytes()
        .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
    PALETTE[h % PALETTE.len()]
}

/// Escapes text for XML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out += "&amp;",
            '<' => out += "&lt;",
            '>' => out += "&gt;",
            '"' => out += "&quot;",
            '\'' => out += "&apos;",
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_shortens() {
        assert_eq!(escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("abc", 4), "abc");
    }
}
