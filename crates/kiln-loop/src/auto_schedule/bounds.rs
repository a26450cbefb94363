//! Bounds checks seen from the loops: where a padded window's checks all
//! hold (its interior) and where a concatenation's checks change answer.
//!
//! Needs: a loop nest whose guarded reads carry their checks as
//! `0 <= idx < n` (`Val::Load` guards, `Val::InBounds`).
//! Guarantees: the points it returns are inside the loop's range and are
//! where `peel` may cut so each part decides every check on the variable
//! the same way (`guards.rs` then drops them).

use crate::ir::{for_each_value, loop_ranges, Atom, Idx, Stmt, Val};

/// The points inside `0..extent` where a bounds check of `var` alone
/// (`0 <= var + c < n`) changes its answer: a concatenation along `var`
/// selects each input on one part between them, and peeled there every
/// part reads one input with no select (`guards.rs`).
pub(super) fn guard_cuts(body: &[Stmt], var: &str, extent: i64) -> Vec<i64> {
    let mut guards = Vec::new();
    guards_in(body, &mut guards);
    let mut cuts: Vec<i64> = guards
        .iter()
        .filter(|(idx, _)| matches!(idx.terms.as_slice(), [(Atom::Var(v), 1)] if v == var))
        .flat_map(|(idx, bound)| [-idx.constant, bound - idx.constant])
        .filter(|&p| 0 < p && p < extent)
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The part `[lo, hi)` of loop `var` (of `extent` iterations) where every
/// bounds check on `var` in `body` holds whatever the other loops' values:
/// the interior of a padded window, which `peel` separates so it runs
/// without checks. `None` when there is no such check or no interior.
pub(crate) fn interior(body: &[Stmt], var: &str, extent: i64) -> Option<(i64, i64)> {
    let ranges = loop_ranges(body);
    let mut guards = Vec::new();
    guards_in(body, &mut guards);
    let (mut lo, mut hi) = (0i64, extent);
    let mut any = false;
    for (idx, bound) in guards.iter().filter(|(i, _)| i.uses(var)) {
        let a = idx
            .terms
            .iter()
            .find(|(t, _)| matches!(t, Atom::Var(x) if x == var))
            .map(|t| t.1)?;
        let mut rest = idx.clone();
        rest.terms
            .retain(|(t, _)| !matches!(t, Atom::Var(x) if x == var));
        if a <= 0 || rest.uses(var) {
            return None;
        }
        let unknown = (i64::MIN / 4, i64::MAX / 4);
        let (rmin, rmax) = rest.range(&|v| ranges.get(v).copied().unwrap_or(unknown));
        lo = lo.max((-rmin + a - 1).div_euclid(a));
        hi = hi.min((bound - 1 - rmax).div_euclid(a) + 1);
        any = true;
    }
    (any && lo < hi && (lo, hi) != (0, extent)).then_some((lo, hi))
}

/// Whether a bounds check in `body` depends on `var`: jammed copies of `var`'s loop would
/// each test their own check inside the vector loop, where one copy's check is hoisted
/// out of it (a 7x7 depthwise window, jammed along its width, ran about ten times slower).
pub(super) fn checks_on(body: &[Stmt], var: &str) -> bool {
    let mut guards = Vec::new();
    guards_in(body, &mut guards);
    guards.iter().any(|(idx, _)| idx.uses(var))
}

fn guards_in(body: &[Stmt], out: &mut Vec<(Idx, i64)>) {
    fn val(v: &Val, out: &mut Vec<(Idx, i64)>) {
        match v {
            Val::Load { guard, .. } | Val::InBounds(guard) => out.extend(guard.iter().cloned()),
            Val::Call(_, args) => args.iter().for_each(|a| val(a, out)),
            _ => {}
        }
    }
    for_each_value(body, &mut |v| val(v, out));
}

#[cfg(test)]
mod tests {
    use crate::parse_kernel;
    use crate::schedule::Directive;
    use kiln_target::CpuPreset;

    /// A channels-last 7x7 depthwise convolution as lowered, padded (`checks`) or not.
    fn depthwise(checks: bool) -> String {
        let guard = if checks {
            " if i1 + r1 - 3 < 20 && i2 + r2 - 3 < 20"
        } else {
            ""
        };
        format!(
            "kernel k(in0: f32[1,26,26,32], in1: f32[7,7,1,32], out out0: f32[1,20,20,32]) {{
  for i1 in 0..20 {{
    for i2 in 0..20 {{
      for i3 in 0..32 {{
        let acc: f32 = 0.0:f32
        for r1 in 0..7 {{
          for r2 in 0..7 {{
            acc = sum(acc, Mul(in0[832*i1 + 832*r1 + 32*i2 + 32*r2 + i3{guard}], in1[224*r1 + 32*r2 + i3]))
          }}
        }}
        out0[640*i1 + 32*i2 + i3] = acc
      }}
    }}
  }}
}}"
        )
    }

    /// The window's taps are added into the output row several per pass, unless the
    /// tap's bounds check depends on the jammed loop (each copy would test its own).
    #[test]
    fn window_taps_jam_only_without_checks_on_them() {
        let v4 = CpuPreset::X86_64V4.desc(2);
        let jams = |checks: bool| {
            let k = parse_kernel(&depthwise(checks)).unwrap();
            assert!(super::checks_on(&k.body, "r2") == checks);
            let schedule = crate::auto_schedule::default_schedule(&k, &v4);
            assert!(
                schedule
                    .0
                    .contains(&Directive::AccumulateOutward("i3".into())),
                "{schedule:?}"
            );
            schedule
                .0
                .iter()
                .any(|d| matches!(d, Directive::Jam { var, .. } if var == "r2"))
        };
        assert!(jams(false));
        assert!(!jams(true));
    }
}
