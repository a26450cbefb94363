//! The text form of a [`GpuMapping`]: launches separated by `; `, each
//! `kind(args)` with statements as `#N` (`#F..#T` a range, `#F..` from
//! `F` on) and counts with their unit (`32 threads`). `parse(print(m)) ==
//! m`.

use super::{GpuMapping, Launch};
use kiln_ir::{bail, Error, Result};
use std::fmt;

impl fmt::Display for Launch {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Launch::Threads { stmt, var, extent } => {
                write!(f, "threads(#{stmt}, {var}, {extent})")
            }
            Launch::Rows {
                stmt,
                var,
                extent,
                threads,
            } => write!(f, "rows(#{stmt}, {var}, {extent}, {threads} threads)"),
            Launch::AllReduce {
                from,
                to,
                blocks,
                threads,
            } => write!(
                f,
                "all_reduce(#{from}..#{to}, {blocks} blocks, {threads} threads)"
            ),
            Launch::Columns {
                stmt,
                var,
                extent,
                groups,
                splits,
            } => {
                write!(f, "columns(#{stmt}, {var}, {extent}, {groups} groups")?;
                if *splits > 1 {
                    write!(f, ", {splits} splits")?;
                }
                write!(f, ")")
            }
            Launch::Block { from, to, threads } => {
                write!(f, "block(#{from}..#{to}, {threads} threads)")
            }
            Launch::SplitRows {
                stmt,
                rows,
                blocks_per_row,
                threads,
            } => match rows {
                Some((var, extent)) => write!(
                    f,
                    "split_rows(#{stmt}, {var}, {extent}, {blocks_per_row} blocks per row, {threads} threads)"
                ),
                None => write!(
                    f,
                    "split_rows(#{stmt}.., {blocks_per_row} blocks, {threads} threads)"
                ),
            },
            Launch::Gemm { stmt } => write!(f, "gemm(#{stmt})"),
            Launch::Single { from, to } => write!(f, "single(#{from}..#{to})"),
        }
    }
}

impl fmt::Display for GpuMapping {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|l| l.to_string()).collect();
        write!(f, "{}", parts.join("; "))
    }
}

impl std::str::FromStr for GpuMapping {
    type Err = Error;

    fn from_str(s: &str) -> Result<GpuMapping> {
        if s.trim().is_empty() {
            return Ok(GpuMapping::default());
        }
        s.split("; ")
            .map(launch)
            .collect::<Result<_>>()
            .map(GpuMapping)
    }
}

/// One launch, `kind(args)`.
fn launch(text: &str) -> Result<Launch> {
    let text = text.trim();
    let Some((kind, rest)) = text.split_once('(') else {
        bail!("launch '{text}' is not kind(arguments)");
    };
    let Some(args) = rest.strip_suffix(')') else {
        bail!("launch '{text}' does not end with ')'");
    };
    let a: Vec<&str> = args.split(", ").collect();
    let arity = |n: usize| -> Result<()> {
        if a.len() == n {
            Ok(())
        } else {
            bail!(
                "launch '{text}' has {} arguments, {kind} takes {n}",
                a.len()
            )
        }
    };
    Ok(match kind {
        "threads" => {
            arity(3)?;
            Launch::Threads {
                stmt: stmt(a[0])?,
                var: a[1].to_string(),
                extent: number(a[2])?,
            }
        }
        "rows" => {
            arity(4)?;
            Launch::Rows {
                stmt: stmt(a[0])?,
                var: a[1].to_string(),
                extent: number(a[2])?,
                threads: count(a[3], "threads")?,
            }
        }
        "columns" => {
            if a.len() != 5 {
                arity(4)?;
            }
            Launch::Columns {
                stmt: stmt(a[0])?,
                var: a[1].to_string(),
                extent: number(a[2])?,
                groups: count(a[3], "groups")?,
                splits: a.get(4).map_or(Ok(1), |s| count(s, "splits"))?,
            }
        }
        "all_reduce" => {
            arity(3)?;
            let (from, to) = range(a[0])?;
            Launch::AllReduce {
                from,
                to,
                blocks: count(a[1], "blocks")?,
                threads: count(a[2], "threads")?,
            }
        }
        "block" => {
            arity(2)?;
            let (from, to) = range(a[0])?;
            Launch::Block {
                from,
                to,
                threads: count(a[1], "threads")?,
            }
        }
        "split_rows" => split_rows(text, &a)?,
        "gemm" => {
            arity(1)?;
            Launch::Gemm { stmt: stmt(a[0])? }
        }
        "single" => {
            arity(1)?;
            let (from, to) = range(a[0])?;
            Launch::Single { from, to }
        }
        other => bail!("unknown launch kind '{other}' in '{text}'"),
    })
}

/// `split_rows(#S, VAR, EXTENT, B blocks per row, T threads)` or
/// `split_rows(#S.., B blocks, T threads)`.
fn split_rows(text: &str, a: &[&str]) -> Result<Launch> {
    match a {
        [s, var, extent, per_row, threads] => Ok(Launch::SplitRows {
            stmt: stmt(s)?,
            rows: Some((var.to_string(), number(extent)?)),
            blocks_per_row: count(per_row, "blocks per row")?,
            threads: count(threads, "threads")?,
        }),
        [s, blocks, threads] => {
            let Some(from) = s.strip_suffix("..") else {
                bail!("launch '{text}': one row is '#N..'");
            };
            Ok(Launch::SplitRows {
                stmt: stmt(from)?,
                rows: None,
                blocks_per_row: count(blocks, "blocks")?,
                threads: count(threads, "threads")?,
            })
        }
        _ => bail!(
            "launch '{text}' has {} arguments, split_rows takes 3 or 5",
            a.len()
        ),
    }
}

/// `#N`.
fn stmt(s: &str) -> Result<usize> {
    match s.strip_prefix('#').map(str::parse) {
        Some(Ok(n)) => Ok(n),
        _ => bail!("'{s}' is not a statement number (#N)"),
    }
}

/// `#F..#T`.
fn range(s: &str) -> Result<(usize, usize)> {
    match s.split_once("..") {
        Some((from, to)) => Ok((stmt(from)?, stmt(to)?)),
        None => bail!("'{s}' is not a statement range (#F..#T)"),
    }
}

fn number(s: &str) -> Result<i64> {
    s.parse()
        .map_err(|_| Error::new(format!("'{s}' is not a number")))
}

/// `N unit`.
fn count(s: &str, unit: &str) -> Result<u32> {
    match s.strip_suffix(unit).map(|n| n.trim_end().parse()) {
        Some(Ok(n)) => Ok(n),
        _ => bail!("'{s}' is not a count of {unit}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_launch_kind_round_trips() {
        let text = "threads(#0, i0, 64); rows(#1, o0, 8, 32 threads); columns(#2, i0, 21128, 8 groups); all_reduce(#3..#6, 264 blocks, 256 threads); block(#6..#9, 128 threads); split_rows(#9, o0, 8, 16 blocks per row, 256 threads); split_rows(#10.., 132 blocks, 256 threads); gemm(#11); single(#12..#13); columns(#13, i0, 768, 8 groups, 11 splits)";
        let m: GpuMapping = text.parse().expect("mapping");
        assert_eq!(m.0.len(), 10);
        assert_eq!(m.to_string(), text);
    }

    #[test]
    fn malformed_mappings_are_errors_naming_the_launch() {
        for (bad, says) in [
            ("threads(#0, i0)", "has 2 arguments"),
            ("warps(#0)", "unknown launch kind 'warps'"),
            ("rows(#0, o0, 8, 32 lanes)", "count of threads"),
            ("columns(#0, i0, 64, 8 groups, 2 blocks)", "count of splits"),
            ("single(#0)", "statement range"),
            ("gemm(0)", "statement number"),
            ("gemm(#0", "does not end"),
        ] {
            let err = bad.parse::<GpuMapping>().unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
