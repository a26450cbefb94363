//! The differential fuzzer's long campaign: random graphs from
//! `kiln_conformance::random_graph` run on the reference interpreter and
//! on the CPU backend under the chosen planners
//! (`kiln_conformance::differential::check`).
//!
//! ```text
//! cargo run --release -p kiln-conformance --example differential -- \
//!     --start 0 --count 10000 [--planners all|apollo,dp,...] [--threads N] \
//!     [--out fuzz/regressions/differential]
//! differential --check FILE.kiln [--planners ...]   # replay a reproducer
//! ```
//!
//! Every case runs in a child process (this program with `--case SEED`),
//! so a fault in generated code is a finding (`crash`) rather than the
//! end of the campaign. Prints progress (cases per second, agreements,
//! skips, findings) every 50 cases and each finding as it happens; writes
//! each finding's minimised reproducer (every candidate checked in a
//! child too) to `<out>/<seed>.kiln`: text IR with a comment header naming
//! the seed, the planners and the finding. Exits with status 1 when there
//! were findings.

use kiln_conformance::differential::{self, CheckOptions, Outcome};
use kiln_conformance::random_graph::{self, GenOptions};
use kiln_fuse::PlannerKind;
use kiln_ir::Graph;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

struct Args {
    start: u64,
    count: u64,
    check: CheckOptions,
    out: PathBuf,
    /// Child mode: run this one case and print its outcome.
    case: Option<u64>,
    /// Child mode: replay this reproducer and print its outcome.
    file: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        start: 0,
        count: 1000,
        check: CheckOptions::default(),
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/differential"),
        case: None,
        file: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--start" => args.start = number()?,
            "--count" => args.count = number()?,
            "--threads" => args.check.threads = number()? as usize,
            "--out" => args.out = PathBuf::from(&value),
            "--planners" => args.check.planners = planners(&value)?,
            "--case" => args.case = Some(number()?),
            "--check" => args.file = Some(PathBuf::from(&value)),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn planners(list: &str) -> Result<Vec<PlannerKind>, String> {
    if list == "all" {
        return Ok(PlannerKind::ALL.to_vec());
    }
    list.split(',')
        .map(|name| {
            PlannerKind::ALL
                .into_iter()
                .find(|p| p.name() == name)
                .ok_or(format!("unknown planner {name}"))
        })
        .collect()
}

/// What a child reported: the outcome's signature and text, or a crash.
struct Report {
    signature: String,
    text: String,
}

/// Child mode: one line `SIGNATURE\tTEXT` on stdout.
fn child(outcome: &Outcome) {
    let text = outcome.to_string().replace('\n', " | ");
    println!("{}\t{text}", outcome.signature());
}

/// Runs this program as a child with `extra` arguments.
fn spawn(args: &Args, planners: &[PlannerKind], extra: &[String]) -> Report {
    let names: Vec<&str> = planners.iter().map(|p| p.name()).collect();
    let exe = std::env::current_exe().expect("own path");
    let out = Command::new(exe)
        .args(extra)
        .args(["--planners", &names.join(",")])
        .args(["--threads", &args.check.threads.to_string()])
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            return Report {
                signature: "spawn failed".into(),
                text: e.to_string(),
            }
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if let Some((sig, text)) = stdout.lines().last().and_then(|l| l.split_once('\t')) {
        return Report {
            signature: sig.into(),
            text: text.into(),
        };
    }
    let tail: String = String::from_utf8_lossy(&out.stderr)
        .lines()
        .rev()
        .take(3)
        .collect::<Vec<_>>()
        .join(" | ");
    Report {
        signature: "crash".into(),
        text: format!("the process died ({}): {tail}", out.status),
    }
}

/// Checks `g` (case `seed`) in a child.
fn check_in_child(args: &Args, g: &Graph, seed: u64, planners: &[PlannerKind]) -> Report {
    let dir = std::env::temp_dir().join(format!("kiln-differential-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{seed}.kiln"));
    let text = differential::header(seed, &args.check, "") + &kiln_ir::text::print(g);
    if let Err(e) = std::fs::write(&path, text) {
        return Report {
            signature: "io".into(),
            text: e.to_string(),
        };
    }
    let extra = ["--check".to_string(), path.display().to_string()];
    spawn(args, planners, &extra)
}

/// Minimises finding `first` of case `seed` and writes its reproducer.
fn record(args: &Args, seed: u64, first: &Report) {
    let g = random_graph::generate(seed, &GenOptions::default());
    let planners = args.check.planners.clone();
    let small = differential::minimize(&g, |c| {
        check_in_child(args, c, seed, &planners).signature == first.signature
    });
    let mut found = check_in_child(args, &small, seed, &planners);
    if found.signature == "crash" {
        let culprits: Vec<&str> = planners
            .iter()
            .filter(|&&p| check_in_child(args, &small, seed, &[p]).signature == "crash")
            .map(|p| p.name())
            .collect();
        found.text = format!("{} (under {})", found.text, culprits.join(", "));
    }
    let text = differential::header(seed, &args.check, &found.text) + &kiln_ir::text::print(&small);
    let path = args.out.join(format!("{seed}.kiln"));
    match std::fs::create_dir_all(&args.out).and_then(|_| std::fs::write(&path, &text)) {
        Ok(()) => println!("  reproducer: {}", path.display()),
        Err(e) => println!("  cannot write {}: {e}\n{text}", path.display()),
    }
}

fn campaign(args: &Args) -> Vec<u64> {
    let (mut agree, mut skipped, mut findings) = (0u64, 0u64, Vec::new());
    let begin = Instant::now();
    for seed in args.start..args.start + args.count {
        let report = spawn(
            args,
            &args.check.planners,
            &["--case".into(), seed.to_string()],
        );
        match report.signature.as_str() {
            "agree" => agree += 1,
            "skipped" => skipped += 1,
            _ => {
                println!("seed {seed}: {}", report.text);
                record(args, seed, &report);
                findings.push(seed);
            }
        }
        let done = seed - args.start + 1;
        if done % 50 == 0 || done == args.count {
            let secs = begin.elapsed().as_secs_f64();
            println!(
                "{done} cases in {secs:.0} s ({:.2}/s): {agree} agree, {skipped} skipped, {} findings",
                done as f64 / secs,
                findings.len()
            );
        }
    }
    findings
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("differential: {e}");
        std::process::exit(2)
    });
    if let Some(seed) = args.case {
        let (_, _, outcome) = differential::run_seed(seed, &GenOptions::default(), &args.check);
        child(&outcome);
        return;
    }
    if let Some(file) = &args.file {
        let outcome = std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|t| differential::replay(&t, &args.check).map_err(|e| e.to_string()));
        match outcome {
            Ok(o) => child(&o),
            Err(e) => println!("invalid\t{}: {e}", Path::new(file).display()),
        }
        return;
    }
    let findings = campaign(&args);
    if !findings.is_empty() {
        println!("findings at seeds {findings:?}");
        std::process::exit(1);
    }
}
