//! Concatenations assembled in place on the CPU: each part's producer
//! writes straight into the concatenation's output, and the concatenation
//! copies nothing (issue 19: SqueezeNet's and GoogLeNet's channel
//! concatenations were kernels of their own).
//!
//! Needs: the fused graph and the kernel chosen for each node.
//! Guarantees: [`assemble_concats`] marks a concatenation assembled only
//! when `kiln_exec::assemble::part_producers` accepts it and every
//! producer's kernel can write its part in place
//! (`kiln_loop::write_as_part`); those kernels are replaced by the
//! rewritten ones, printed again (with the producer's tuning, no in-place
//! input), and the
//! execution plan gives the parts the whole's memory. Otherwise nothing
//! changes and the concatenation copies as before. Results are the same
//! either way: each producer stores the same values, at the part's place
//! in the whole.

use crate::select::{constant_buffers, NodeKernel};
use kiln_codegen::c::kernel_c;
use kiln_exec::assemble::part_producers;
use kiln_ir::{Graph, Result, ValueId};
use kiln_loop::write_as_part::{write_as_part, Part};
use kiln_target::TargetDesc;

/// Per node, whether it is a concatenation now assembled in place; the
/// kernels of its parts' producers in `chosen` are rewritten.
pub fn assemble_concats(
    g: &Graph,
    chosen: &mut [std::result::Result<NodeKernel, String>],
    scope_reads: &[Vec<ValueId>],
    target: &TargetDesc,
) -> Result<Vec<bool>> {
    let mut assembled = vec![false; g.nodes.len()];
    for n in 0..g.nodes.len() {
        // Only a concatenation with a kernel of its own: one left to the
        // interpreter would read its parts from their own places.
        if chosen[n].is_err() {
            continue;
        }
        let runs_kernel =
            |p: usize| !assembled[p] && chosen[p].as_ref().is_ok_and(|k| k.view.is_none());
        let Some(producers) = part_producers(g, n, &runs_kernel, scope_reads) else {
            continue;
        };
        let Some(rewritten) = parts_written_in_place(g, n, &producers, chosen, target)? else {
            continue;
        };
        for (p, k) in producers.into_iter().zip(rewritten) {
            chosen[p] = Ok(k);
        }
        assembled[n] = true;
    }
    Ok(assembled)
}

/// The kernels of concatenation `n`'s producers, each writing its part in
/// place, or `None` when one of them cannot.
fn parts_written_in_place(
    g: &Graph,
    n: usize,
    producers: &[usize],
    chosen: &[std::result::Result<NodeKernel, String>],
    target: &TargetDesc,
) -> Result<Option<Vec<NodeKernel>>> {
    let node = &g.nodes[n];
    let Some(whole) = node.outputs.first().copied().flatten() else {
        return Ok(None);
    };
    let Some(shape) = g.ty(whole).shape.clone() else {
        return Ok(None);
    };
    let axis = node.attr_int_or("axis", 0)?;
    let axis = if axis < 0 {
        axis + shape.len() as i64
    } else {
        axis
    };
    let Ok(axis) = usize::try_from(axis) else {
        return Ok(None);
    };
    let mut offset = 0;
    let mut kernels = Vec::with_capacity(producers.len());
    for (&part, &p) in node.inputs.iter().flatten().zip(producers) {
        let Ok(producer) = &chosen[p] else {
            return Ok(None);
        };
        let at = Part {
            whole: shape.clone(),
            axis,
            offset,
        };
        let Some(k) = part_kernel(g, p, part, producer, &at, target) else {
            return Ok(None);
        };
        offset += g
            .ty(part)
            .shape
            .as_ref()
            .and_then(|s| s.get(axis))
            .copied()
            .unwrap_or(0);
        kernels.push(k);
    }
    Ok(Some(kernels))
}

/// Node `p`'s kernel with its output `part` written at `at`, printed
/// again; `None` when the loops do not allow it or the C printer refuses
/// the result.
fn part_kernel(
    g: &Graph,
    p: usize,
    part: ValueId,
    producer: &NodeKernel,
    at: &Part,
    target: &TargetDesc,
) -> Option<NodeKernel> {
    let outputs = g.nodes[p].outputs.iter().flatten();
    let buf = producer.inputs.len() + outputs.into_iter().position(|&o| o == part)?;
    let output = producer.kernel.buffers.get(buf)?;
    if !output.output {
        return None;
    }
    let kernel = write_as_part(&producer.kernel, buf, at)?;
    let constants = constant_buffers(g, &g.nodes[p], &producer.inputs);
    let source = kernel_c(&kernel, None, &constants, target, &producer.tuning).ok()?;
    Some(NodeKernel {
        c: source.c,
        packs: source.packed_buffer.map(|b| producer.inputs[b]),
        workspace: source.workspace,
        kernel,
        schedule: producer.schedule.clone(),
        inputs: producer.inputs.clone(),
        in_place: None,
        view: None,
        tuning: producer.tuning.clone(),
    })
}
