//! `distribute(var)`: loop distribution (fission) — a loop whose body is
//! several statements becomes one copy of the loop per statement.
//!
//! Needs: loop `var`'s body holds only loops and stores (no locals, no
//! allocations), no statement reads a buffer that one of them writes, and
//! the statements write disjoint elements (as the parts of a `peel` do).
//! Guarantees: the copies run one after the other, each visiting its
//! statement's iterations in the original order; under the needs above no
//! statement sees another's effects, so every stored value is unchanged.
//!
//! What it is for: after `peel` splits an inner loop into parts, the loop
//! around them distributes over the parts so each part is again a perfect
//! nest that `reorder` can interchange (a blocked transpose's partial
//! tiles, `auto_schedule/transpose.rs`).

use crate::ir::{for_each_load, Loop, Stmt};
use kiln_ir::{bail, Result};

/// Loop `l` distributed over the statements of its body (see the module doc).
pub fn distribute(l: &Loop) -> Result<Vec<Stmt>> {
    let mut written = Vec::new();
    for s in &l.body {
        stored_buffers(s, &mut written)?;
    }
    let mut reads_written = false;
    for_each_load(&l.body, &mut |b, _, _| {
        reads_written |= written.contains(&b)
    });
    if reads_written {
        bail!(
            "schedule: distribute: loop '{}' reads a buffer it writes",
            l.var
        );
    }
    Ok(l.body
        .iter()
        .map(|s| {
            Stmt::Loop(Loop {
                body: vec![s.clone()],
                ..l.clone()
            })
        })
        .collect())
}

/// Adds the buffers `s` stores to `out`; an error for any statement other
/// than a loop or a store.
fn stored_buffers(s: &Stmt, out: &mut Vec<usize>) -> Result<()> {
    match s {
        Stmt::Store { buf, .. } => out.push(*buf),
        Stmt::Loop(l) => {
            for s in &l.body {
                stored_buffers(s, out)?;
            }
        }
        _ => bail!("schedule: distribute: only loops and stores can be distributed"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::parse_kernel;
    use crate::schedule::{apply, Directive, Schedule};

    #[test]
    fn distributes_a_loop_over_the_parts_of_a_peel() {
        let k = parse_kernel(
            "kernel k(in0: f32[4,10], out out0: f32[4,10]) {
  for i0 in 0..4 {
    for i1 in 0..8 {
      out0[10*i0 + i1] = in0[10*i0 + i1]
    }
    for i1 in 0..2 {
      out0[10*i0 + i1 + 8] = in0[10*i0 + i1 + 8]
    }
  }
}",
        )
        .unwrap();
        let d = Schedule(vec![Directive::Distribute("i0".into())]);
        let want = "kernel k(in0: f32[4,10], out out0: f32[4,10]) {
  for i0 in 0..4 {
    for i1 in 0..8 {
      out0[10*i0 + i1] = in0[10*i0 + i1]
    }
  }
  for i0 in 0..4 {
    for i1 in 0..2 {
      out0[10*i0 + i1 + 8] = in0[10*i0 + i1 + 8]
    }
  }
}";
        assert_eq!(apply(&k, &d).unwrap().to_string(), want);
    }

    #[test]
    fn refuses_a_loop_reading_what_it_writes() {
        let k = parse_kernel(
            "kernel k(in0: f32[4], out out0: f32[4], out out1: f32[4]) {
  for i0 in 0..4 {
    out0[i0] = in0[i0]
    out1[i0] = out0[i0]
  }
}",
        )
        .unwrap();
        let d = Schedule(vec![Directive::Distribute("i0".into())]);
        let err = apply(&k, &d).unwrap_err().to_string();
        assert!(err.contains("reads a buffer it writes"), "{err}");
    }
}
