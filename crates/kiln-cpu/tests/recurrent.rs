//! RNN, GRU and LSTM unrolled into their time steps' products and gates
//! (`kiln-ops` `rnn/unrolled.rs`): forward, reverse and bidirectional
//! layers with biases, initial states, peepholes and both GRU candidate
//! forms, batch first or not, as generated kernels on the CPU backend under
//! every planner, with the interpreter's results on the graph as written
//! (its f64 recurrence); a clipped layer stays on the interpreter. (Two
//! directions are two independent chains of steps: the dp planner's
//! merges made groups that waited on each other until `Partition::can_merge`
//! followed paths group by group.)

mod common;

use common::{check_planners, values};
use kiln_ir::Result;

/// How many nodes [`common::check_planners`] leaves to the interpreter.
fn check(src: &str, name: &str) -> Result<usize> {
    Ok(check_planners(src, name)?.1.len())
}

/// A layer of `op` (`gates` gates, hidden size 3, input 4, sequence 5,
/// batch 2) with `attrs`; `extra` names the inputs after W and R (as
/// `_` or initializers the caller declares in `inits`); outputs of
/// `outs`.
fn layer(
    op: &str,
    gates: usize,
    dirs: usize,
    attrs: &str,
    inits: &str,
    extra: &str,
    outs: &str,
) -> String {
    let (h, i) = (3, 4);
    format!(
        r#"graph "g" opsets [""=17] {{
  input %x: f32[5,2,{i}]
  init %w: f32[{dirs},{gh},{i}] = [{}]
  init %r: f32[{dirs},{gh},{h}] = [{}]
{inits}  node "rnn" {outs} = {op}(%x, %w, %r{extra}) {{hidden_size={h}{attrs}}}
  output {}
}}"#,
        values(dirs * gates * h * i, 1),
        values(dirs * gates * h * h, 2),
        outs.split(", ")
            .map(|o| o.split(':').next().unwrap_or(o))
            .collect::<Vec<_>>()
            .join(", "),
        gh = gates * h,
    )
}

#[test]
fn recurrent_layers_become_generated_kernels() -> Result<()> {
    let bias = |dirs: usize, gates: usize| {
        format!(
            "  init %b: f32[{dirs},{}] = [{}]\n",
            2 * gates * 3,
            values(dirs * 2 * gates * 3, 3)
        )
    };
    let h0 = |dirs: usize| format!("  init %h0: f32[{dirs},2,3] = [{}]\n", values(dirs * 6, 4));
    let cases = [
        (
            "lstm",
            layer(
                "LSTM",
                4,
                1,
                "",
                "",
                "",
                "%y: f32[5,1,2,3], %yh: f32[1,2,3], %yc: f32[1,2,3]",
            ),
        ),
        (
            "lstm bidirectional",
            layer(
                "LSTM",
                4,
                2,
                r#", direction="bidirectional""#,
                "",
                "",
                "%y: f32[5,2,2,3], %yh: f32[2,2,3], %yc: f32[2,2,3]",
            ),
        ),
        (
            "gru bidirectional",
            layer(
                "GRU",
                3,
                2,
                r#", direction="bidirectional""#,
                "",
                "",
                "%y: f32[5,2,2,3], %yh: f32[2,2,3]",
            ),
        ),
        (
            "lstm bidirectional, bias, states, peepholes",
            layer(
                "LSTM",
                4,
                2,
                r#", direction="bidirectional""#,
                &format!(
                    "{}{}  init %c0: f32[2,2,3] = [{}]\n  init %p: f32[2,9] = [{}]\n",
                    bias(2, 4),
                    h0(2),
                    values(12, 5),
                    values(18, 6)
                ),
                ", %b, _, %h0, %c0, %p",
                "%y: f32[5,2,2,3], %yh: f32[2,2,3], %yc: f32[2,2,3]",
            ),
        ),
        (
            "gru reverse, bias",
            layer(
                "GRU",
                3,
                1,
                r#", direction="reverse""#,
                &bias(1, 3),
                ", %b",
                "%y: f32[5,1,2,3], %yh: f32[1,2,3]",
            ),
        ),
        (
            "gru linear before reset, state",
            layer(
                "GRU",
                3,
                1,
                ", linear_before_reset=1",
                &format!("{}{}", bias(1, 3), h0(1)),
                ", %b, _, %h0",
                "%y: f32[5,1,2,3], %yh: f32[1,2,3]",
            ),
        ),
        (
            "rnn",
            layer(
                "RNN",
                1,
                1,
                "",
                &bias(1, 1),
                ", %b",
                "%y: f32[5,1,2,3], %yh: f32[1,2,3]",
            ),
        ),
    ];
    for (name, src) in cases {
        assert_eq!(check(&src, name)?, 0, "{name}: left to the interpreter");
    }
    Ok(())
}

#[test]
fn clipped_layers_stay_with_the_interpreter() -> Result<()> {
    let src = layer("LSTM", 4, 1, ", clip=0.5", "", "", "%y: f32[5,1,2,3]");
    assert_eq!(check(&src, "clipped")?, 1);
    Ok(())
}
