//! The HTML page of `kiln sim -o`: the summary, and the timeline of the
//! simulated kernels as inline SVG (no external assets): one lane for the
//! cluster's DMA (weights, later layers' weights, activations in, outputs
//! out) and one row per core, each kernel's compute drawn across the
//! cores it runs on and coloured by where its output lives.

use kiln_dsa::sim::{CycleSpan, KernelReport};
use kiln_dsa::SimReport;
use std::fmt::Write;

const PLOT_WIDTH: f64 = 1400.0;
const LEFT: f64 = 60.0;
const DMA_Y: f64 = 24.0;
const LANE_HEIGHT: f64 = 18.0;
const CORES_Y: f64 = 60.0;
const CORE_HEIGHT: f64 = 10.0;

/// The DMA phases' colours and names, in drawing order.
const DMA_PHASES: [(&str, &str); 4] = [
    ("#4e79a7", "weights"),
    ("#76b7b2", "later layers' weights"),
    ("#f28e2b", "activations in"),
    ("#b07aa1", "outputs out"),
];

/// The whole page.
pub fn page(label: &str, report: &SimReport) -> String {
    let mut html = String::new();
    let title = format!(
        "kiln sim: {} on {} ({})",
        escape(label),
        escape(&report.target),
        report.schedule
    );
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>body{{font-family:sans-serif;margin:16px}} pre{{background:#f6f6f6;padding:8px}}</style>\
         </head><body>\n<h1>{title}</h1>\n<pre>{}</pre>\n{}\n{}\n</body></html>\n",
        escape(&report.to_string()),
        legend(),
        timeline(report)
    );
    html
}

fn legend() -> String {
    let mut items: Vec<String> = DMA_PHASES
        .iter()
        .map(|(color, name)| swatch(color, &format!("DMA: {name}")))
        .collect();
    for scope in ["LB", "GB", "DDR"] {
        items.push(swatch(
            scope_color(scope),
            &format!("compute, output in {scope}"),
        ));
    }
    format!("<p>{}</p>", items.join(" "))
}

fn swatch(color: &str, name: &str) -> String {
    format!("<span style=\"background:{color};padding:0 8px\">&nbsp;</span> {name}")
}

fn scope_color(scope: &str) -> &'static str {
    match scope {
        "LB" => "#59a14f",
        "GB" => "#edc948",
        _ => "#e15759",
    }
}

/// The SVG: the DMA lane, a row per core, a cycle axis.
fn timeline(report: &SimReport) -> String {
    let cores = f64::from(report.cores_per_cluster);
    let height = CORES_Y + cores * CORE_HEIGHT + 40.0;
    let scale = PLOT_WIDTH / report.cycles.max(1) as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-size=\"11\">\n",
        LEFT + PLOT_WIDTH + 20.0
    );
    let _ = writeln!(
        svg,
        "<text x=\"4\" y=\"{}\">DMA</text><text x=\"4\" y=\"{}\">cores</text>",
        DMA_Y + 13.0,
        CORES_Y + 10.0
    );
    for k in &report.per_kernel {
        draw_kernel(&mut svg, k, scale);
    }
    axis(&mut svg, report.cycles, CORES_Y + cores * CORE_HEIGHT + 4.0);
    svg.push_str("</svg>");
    svg
}

/// One kernel: its DMA phases in the DMA lane, its compute on its cores.
fn draw_kernel(svg: &mut String, k: &KernelReport, scale: f64) {
    let phases = [k.weights_at, k.late_weights_at, k.inputs_at, k.outputs_at];
    for (span, (color, name)) in phases.iter().zip(DMA_PHASES) {
        let what = format!("kernel {} {name}", k.name);
        rect(svg, *span, scale, (DMA_Y, LANE_HEIGHT), color, &what);
    }
    let what = format!(
        "kernel {} (%{}, {} nodes, output in {}): compute {} cycles, DMA {} cycles, DDR {} B, GB {} B",
        k.name, k.output, k.nodes, k.scope, k.compute_cycles, k.dma_cycles, k.ddr_bytes, k.gb_bytes
    );
    let rows = (CORES_Y, k.traffic.cores as f64 * CORE_HEIGHT);
    rect(svg, k.compute_at, scale, rows, scope_color(&k.scope), &what);
}

/// A bar over `span` (cycles) at `(y, height)`; nothing when empty.
fn rect(
    svg: &mut String,
    span: CycleSpan,
    scale: f64,
    (y, height): (f64, f64),
    color: &str,
    what: &str,
) {
    if span.end <= span.start {
        return;
    }
    let x = LEFT + span.start as f64 * scale;
    let width = ((span.end - span.start) as f64 * scale).max(0.5);
    let _ = writeln!(
        svg,
        "<rect x=\"{x:.1}\" y=\"{y}\" width=\"{width:.1}\" height=\"{height}\" fill=\"{color}\" stroke=\"#fff\" stroke-width=\"0.3\"><title>{} [{}..{}]</title></rect>",
        escape(what),
        span.start,
        span.end
    );
}

/// Five ticks in cycles under the cores.
fn axis(svg: &mut String, cycles: u64, y: f64) {
    for tick in 0..=5u64 {
        let at = cycles * tick / 5;
        let x = LEFT + at as f64 * PLOT_WIDTH / cycles.max(1) as f64;
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{y}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#333\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{at}</text>",
            y + 5.0,
            y + 17.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">cycles</text>",
        LEFT + PLOT_WIDTH,
        y + 28.0
    );
}

/// Text safe inside HTML and SVG elements and attributes.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped() {
        assert_eq!(escape("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}
