//! `cache_read(buf, at)`: a local copy of what loop `at` reads of a
//! parameter (TVM's `cache_read` attached at a loop, i.e. computed at it).
//!
//! Needs: a kernel whose loop `at` reads parameter `buf` (and does not
//! write it) at offsets and guards that depend, besides variables bound
//! outside `at`, only on loops inside it whose extent is known at `at`'s
//! start: constant, or a split's tail whose outer loop is `at` or outside
//! it.
//! Guarantees: at the start of `at`'s body, one local buffer per distinct
//! read (offset and guard) of `buf` is declared ([`Stmt::Alloc`]), indexed
//! densely by the inner loop variables that read uses (in nesting order,
//! each dimension the loop's largest extent), and filled by a nest over
//! those variables, with their extents, with the read itself (zero where
//! its guard fails, as the read gives); the read then loads the local
//! buffer, unguarded. Every value the kernel computes is unchanged.
//!
//! What it is for: a window whose taps do not depend on the vectorized
//! loop (a first convolution reading a channels-first image and writing
//! channels-last, vectorized along output channels) is read once per
//! output point into registers-sized storage, bounds checks included,
//! instead of once per vector lane behind a masked load.

use crate::ir::{Buffer, Extent, Guard, Idx, Kernel, Loop, LoopKind, Scope, Stmt, Val};
use crate::lower::flatten;
use crate::schedule::rewrite;
use kiln_ir::{bail, Result};

/// One distinct read of the cached buffer.
type Read = (Idx, Vec<(Idx, i64)>);

/// Applies `cache_read(buf, at)` to `k` (see the module doc).
pub fn cache_read(k: &Kernel, buf: &str, at: &str) -> Result<Kernel> {
    let Some(b) = k
        .buffers
        .iter()
        .position(|x| x.name == buf && x.scope == Scope::Param)
    else {
        bail!("schedule: cache_read: no parameter '{buf}'");
    };
    let mut buffers = k.buffers.clone();
    let mut found = false;
    let body = rewrite(&k.body, at, &mut |l| {
        found = true;
        Ok(vec![Stmt::Loop(cache_in_loop(&mut buffers, l, b)?)])
    })?;
    if !found {
        bail!("schedule: cache_read: no loop '{at}'");
    }
    Ok(Kernel {
        name: k.name.clone(),
        buffers,
        body,
    })
}

/// Loop `l` with its reads of buffer `b` cached in new locals (appended to
/// `buffers`).
fn cache_in_loop(buffers: &mut Vec<Buffer>, l: &Loop, b: usize) -> Result<Loop> {
    let inner = inner_loops(&l.body);
    let mut reads: Vec<Read> = Vec::new();
    collect_reads(&l.body, b, &mut reads)?;
    let mut prologue = Vec::new();
    let mut locals = Vec::new();
    for (offset, guard) in &reads {
        let uses = |v: &str| offset.uses(v) || guard.iter().any(|(g, _)| g.uses(v));
        let mut vars = Vec::new();
        for (v, extent) in inner.iter().filter(|(v, _)| uses(v)) {
            if matches!(extent, Extent::Tail { outer, .. } if inner.iter().any(|(i, _)| i == outer))
            {
                bail!(
                    "schedule: cache_read: the read uses loop '{v}', whose bound changes inside the loop"
                );
            }
            vars.push((v.clone(), extent.clone()));
        }
        let shape: Vec<usize> = vars.iter().map(|(_, e)| e.max() as usize).collect();
        let index = flatten(
            &vars.iter().map(|(v, _)| Idx::var(v)).collect::<Vec<_>>(),
            &shape,
        );
        let local = buffers.len();
        buffers.push(Buffer {
            name: kiln_ir::unique_name(&format!("{}_cache", buffers[b].name), &|n| {
                buffers.iter().any(|x| x.name == n)
            }),
            dtype: buffers[b].dtype,
            shape,
            output: false,
            scope: Scope::Local,
        });
        prologue.push(Stmt::Alloc(local));
        let fill = Stmt::Store {
            buf: local,
            offset: index.clone(),
            value: Val::Load {
                buf: b,
                offset: offset.clone(),
                guard: guard.clone(),
            },
        };
        prologue.push(vars.iter().rev().fold(fill, |body, (v, e)| {
            Stmt::Loop(Loop {
                var: v.clone(),
                extent: e.clone(),
                kind: LoopKind::Serial,
                body: vec![body],
            })
        }));
        locals.push(((offset.clone(), guard.clone()), local, index));
    }
    let mut body = prologue;
    body.extend(l.body.iter().map(|s| {
        s.map_values(&mut |v, _| {
            replace_reads(v, &|buf, offset, guard| {
                let (_, local, index) = locals
                    .iter()
                    .find(|(read, _, _)| buf == b && read.0 == *offset && read.1 == *guard)?;
                Some(Val::Load {
                    buf: *local,
                    offset: index.clone(),
                    guard: Vec::new(),
                })
            })
        })
    }));
    Ok(Loop { body, ..l.clone() })
}

/// The loops inside `body` (nesting order) with their extents.
fn inner_loops(body: &[Stmt]) -> Vec<(String, Extent)> {
    let mut out: Vec<(String, Extent)> = Vec::new();
    for s in body {
        if let Stmt::Loop(l) = s {
            if !out.iter().any(|(v, _)| *v == l.var) {
                out.push((l.var.clone(), l.extent.clone()));
            }
            for inner in inner_loops(&l.body) {
                if !out.iter().any(|(v, _)| *v == inner.0) {
                    out.push(inner);
                }
            }
        }
    }
    out
}

/// The distinct reads of buffer `b` in `body`; an error when `body`
/// writes `b`.
fn collect_reads(body: &[Stmt], b: usize, out: &mut Vec<Read>) -> Result<()> {
    for s in body {
        match s {
            Stmt::Loop(l) => collect_reads(&l.body, b, out)?,
            Stmt::Store { buf, .. } if *buf == b => {
                bail!("schedule: cache_read of a buffer the loop writes")
            }
            Stmt::Store { value, .. } | Stmt::Let { value, .. } | Stmt::Update { value, .. } => {
                value.for_each_load(&mut |buf, offset, guard| {
                    let read = (offset.clone(), guard.clone());
                    if buf == b && !out.contains(&read) {
                        out.push(read);
                    }
                })
            }
            Stmt::ArgUpdate(_) => bail!("schedule: cache_read around an arg-reduction"),
            Stmt::Combine(_) => bail!("schedule: cache_read around a parallel combine"),
            Stmt::Gemm(_) => bail!("schedule: cache_read around a gemm"),
            Stmt::Alloc(_) => {}
        }
    }
    Ok(())
}

/// `v` with every load that `f` maps replaced by what it gives.
fn replace_reads(v: &Val, f: &dyn Fn(usize, &Idx, &Guard) -> Option<Val>) -> Val {
    v.map_leaves(&|leaf| match leaf {
        Val::Load { buf, offset, guard } => f(*buf, offset, guard),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::cache_read;
    use crate::parse_kernel;

    /// A padded 3-tap window read once per output point: the copy keeps
    /// the guard, the read loses it.
    #[test]
    fn caches_a_padded_window_per_point() {
        let k = parse_kernel(
            "kernel k(in0: f32[8], out out0: f32[8,4]) {
  for i0 in 0..8 {
    for i1 in 0..4 {
      let acc: f32 = 0.0:f32
      for r0 in 0..3 {
        acc = sum(acc, in0[i0 + r0 - 1 if i0 + r0 - 1 < 8])
      }
      out0[4*i0 + i1] = acc
    }
  }
}",
        )
        .unwrap();
        let cached = cache_read(&k, "in0", "i0").unwrap();
        let want = "kernel k(in0: f32[8], out out0: f32[8,4]) {
  for i0 in 0..8 {
    alloc in0_cache: f32[3]
    for r0 in 0..3 {
      in0_cache[r0] = in0[i0 + r0 - 1 if i0 + r0 - 1 < 8]
    }
    for i1 in 0..4 {
      let acc: f32 = 0.0:f32
      for r0 in 0..3 {
        acc = sum(acc, in0_cache[r0])
      }
      out0[4*i0 + i1] = acc
    }
  }
}";
        assert_eq!(cached.to_string(), want);
        assert_eq!(parse_kernel(want).unwrap(), cached);
    }

    /// A split's tail bound known at the cached loop's start sizes the copy
    /// (the local holds the largest tile); one that changes inside it
    /// cannot.
    #[test]
    fn caches_over_a_split_tail_bound_outside() {
        let k = parse_kernel(
            "kernel k(in0: f32[10], out out0: f32[10]) {
  for i0o in 0..3 {
    for i0i in 0..min(4, 10 - 4*i0o) {
      out0[4*i0o + i0i] = in0[4*i0o + i0i]
    }
  }
}",
        )
        .unwrap();
        let cached = cache_read(&k, "in0", "i0o").unwrap();
        let want = "kernel k(in0: f32[10], out out0: f32[10]) {
  for i0o in 0..3 {
    alloc in0_cache: f32[4]
    for i0i in 0..min(4, 10 - 4*i0o) {
      in0_cache[i0i] = in0[4*i0o + i0i]
    }
    for i0i in 0..min(4, 10 - 4*i0o) {
      out0[4*i0o + i0i] = in0_cache[i0i]
    }
  }
}";
        assert_eq!(cached.to_string(), want);
        let outer = parse_kernel(
            "kernel k(in0: f32[10], out out0: f32[10]) {
  for j in 0..2 {
    for i0o in 0..3 {
      for i0i in 0..min(4, 10 - 4*i0o) {
        out0[4*i0o + i0i] = in0[4*i0o + i0i]
      }
    }
  }
}",
        )
        .unwrap();
        let err = cache_read(&outer, "in0", "j").unwrap_err().to_string();
        assert!(err.contains("'i0i'"), "{err}");
        let err = cache_read(&k, "out0", "i0o").unwrap_err().to_string();
        assert!(err.contains("writes"), "{err}");
        assert!(cache_read(&k, "in0", "nope").is_err());
    }
}
