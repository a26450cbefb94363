//! The generated C's f16/bf16 conversions (scalar_c.rs prelude: `kiln_f16_f32`,
//! `kiln_f32_f16`, `kiln_bf16_f32`, `kiln_f32_bf16`, and rounding in float:
//! `kiln_round_f16`, `kiln_round_bf16`) against the `half` crate the
//! interpreter uses, through vectorized loops compiled with kiln's own flags: every
//! 16-bit pattern widened, and rounding of f32 values spread over all exponents plus
//! every tie between neighbouring f16 and bf16 values, subnormals, overflow, zeros,
//! infinities and NaN. The block conversions (`kiln_f16_f32_n`, `kiln_f32_f16_n`,
//! c/half_blocks.rs) convert the same values, by the F16C instructions where the host
//! has them (the test checks they were compiled in).

mod common;

use half::{bf16, f16};
use std::process::Command;

/// Reads `n` u32 inputs from `in.bin`, writes per input (then the f32 bits of
/// rounding it to f16 and to bf16 in float, `kiln_round_*`): f16 bits, bf16 bits (u16
/// each) of its rounding, then the f32 bits of widening the input's low 16 bits as
/// f16 and as bf16; then the same f16 rounding and widening by the block conversions.
/// Prints whether those used the F16C instructions.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    long n = atol(argv[3]);
    uint32_t* in = malloc(n * 4);
    uint16_t* h = malloc(n * 2);
    uint16_t* b = malloc(n * 2);
    uint32_t* hw = malloc(n * 4);
    uint32_t* bw = malloc(n * 4);
    uint32_t* hr = malloc(n * 4);
    uint32_t* br = malloc(n * 4);
    if (fread(in, 4, n, f) != (size_t)n) return 3;
    fclose(f);
    _Pragma("omp simd")
    for (long i = 0; i < n; i++) {
        float x = kiln_bits_f32(in[i]);
        h[i] = kiln_f32_f16(x);
        b[i] = kiln_f32_bf16(x);
        hw[i] = kiln_f32_bits(kiln_f16_f32((uint16_t)in[i]));
        bw[i] = kiln_f32_bits(kiln_bf16_f32((uint16_t)in[i]));
        hr[i] = kiln_f32_bits(kiln_round_f16(x));
        br[i] = kiln_f32_bits(kiln_round_bf16(x));
    }
    FILE* o = fopen(argv[2], "wb");
    fwrite(h, 2, n, o); fwrite(b, 2, n, o); fwrite(hw, 4, n, o); fwrite(bw, 4, n, o);
    fwrite(hr, 4, n, o); fwrite(br, 4, n, o);
    uint16_t* low = malloc(n * 2);
    float* xf = malloc(n * 4);
    for (long i = 0; i < n; i++) { low[i] = (uint16_t)in[i]; xf[i] = kiln_bits_f32(in[i]); }
    kiln_f32_f16_n(h, xf, n);
    kiln_f16_f32_n((float*)hw, low, n);
    fwrite(hw, 4, n, o); fwrite(h, 2, n, o);
    fclose(o);
#if defined(__F16C__)
    printf("hardware 1\n");
#else
    printf("hardware 0\n");
#endif
    return 0;
}
"#;

/// f32 bit patterns: every 16-bit pattern (low bits, for the widening), a stride
/// through all f32 values, and the values at and next to every tie between
/// neighbouring f16 and bf16 values.
fn inputs() -> Vec<u32> {
    let mut v: Vec<u32> = (0..=u16::MAX as u32).collect();
    v.extend((0..u32::MAX / 4099).map(|i| i * 4099));
    for h in 0..0x7c00u16 {
        let (lo, hi) = (f16::from_bits(h).to_f64(), f16::from_bits(h + 1).to_f64());
        let tie = ((lo + hi) / 2.0) as f32; // exact: f16 ties need 12 bits
        for x in [tie, -tie] {
            let bits = x.to_bits();
            v.extend([bits - 1, bits, bits + 1]);
        }
    }
    for b in (0..0x7f80u32).step_by(7) {
        let tie = (b << 16) | 0x8000;
        v.extend([tie - 1, tie, tie + 1, tie | 0x8000_0000]);
    }
    v.extend([
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0x7f80_0001,
        0xffff_ffff,
        0x8000_0000,
    ]);
    v
}

fn same(got: u32, want: f32) -> bool {
    let g = f32::from_bits(got);
    (g.is_nan() && want.is_nan()) || got == want.to_bits()
}

#[test]
fn half_conversions_match_the_half_crate() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        eprintln!("note: no C compiler `{cc}` found; half conversion test skipped");
        return;
    }
    let native = kiln_runtime::jit::CompilerConfig::default_flags("native");
    let f16c = kiln_target::host().half_conversions;
    // As the JIT compiles for this host; then, where that used F16C, without it (the block
    // conversions' per-value path).
    check_conversions(&cc, &native, f16c);
    if f16c {
        check_conversions(
            &cc,
            &[native, vec!["-mno-f16c".to_string()]].concat(),
            false,
        );
    }
}

/// Compiles the program with `flags`, checks it used the F16C instructions exactly when
/// `hardware`, and compares its conversions with the `half` crate's.
fn check_conversions(cc: &str, flags: &[String], hardware: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (source, exe) = (dir.path().join("h.c"), dir.path().join("h"));
    std::fs::write(&source, kiln_codegen::c::prelude() + PROGRAM).expect("write C");
    common::compile(cc, flags, &source, &exe);
    let xs = inputs();
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let (input, output) = (dir.path().join("in.bin"), dir.path().join("out.bin"));
    std::fs::write(&input, bytes).expect("write inputs");
    let run = Command::new(&exe)
        .args([&input, &output])
        .arg(xs.len().to_string())
        .output()
        .expect("run test program");
    assert!(run.status.success(), "conversion program failed: {run:?}");
    assert_eq!(
        String::from_utf8_lossy(&run.stdout).contains("hardware 1"),
        hardware,
        "the block conversions use F16C exactly where {flags:?} and the host description have it"
    );
    let out = std::fs::read(&output).expect("read outputs");
    let n = xs.len();
    let u16_at = |k: usize| u16::from_le_bytes([out[2 * k], out[2 * k + 1]]);
    let u32_at = |k: usize| u32::from_le_bytes(out[4 * k..4 * k + 4].try_into().expect("4 bytes"));
    let mut bad = Vec::new();
    for (i, &x) in xs.iter().enumerate() {
        let f = f32::from_bits(x);
        let (h, b) = (u16_at(i), u16_at(n + i));
        let want_h = f16::from_f32(f);
        let want_b = bf16::from_f32(f);
        if !(h == want_h.to_bits() || (want_h.is_nan() && f16::from_bits(h).is_nan())) {
            bad.push(format!(
                "f16({f:e} = {x:#x}) = {h:#x}, half gives {:#x}",
                want_h.to_bits()
            ));
        }
        if !(b == want_b.to_bits() || (want_b.is_nan() && bf16::from_bits(b).is_nan())) {
            bad.push(format!(
                "bf16({f:e} = {x:#x}) = {b:#x}, half gives {:#x}",
                want_b.to_bits()
            ));
        }
        let low = x as u16;
        if !same(u32_at(n + i), f16::from_bits(low).to_f32()) {
            bad.push(format!("f16 bits {low:#x} widened to {:#x}", u32_at(n + i)));
        }
        if !same(u32_at(2 * n + i), bf16::from_bits(low).to_f32()) {
            bad.push(format!(
                "bf16 bits {low:#x} widened to {:#x}",
                u32_at(2 * n + i)
            ));
        }
        if !same(u32_at(3 * n + i), want_h.to_f32()) {
            bad.push(format!(
                "f16 rounding of {f:e} = {x:#x} is {:#x}",
                u32_at(3 * n + i)
            ));
        }
        let block_h = u16_at(12 * n + i);
        if !(block_h == want_h.to_bits() || (want_h.is_nan() && f16::from_bits(block_h).is_nan())) {
            bad.push(format!("block f16({f:e} = {x:#x}) = {block_h:#x}"));
        }
        if !same(u32_at(5 * n + i), f16::from_bits(low).to_f32()) {
            bad.push(format!(
                "block f16 bits {low:#x} widened to {:#x}",
                u32_at(5 * n + i)
            ));
        }
        if !same(u32_at(4 * n + i), want_b.to_f32()) {
            bad.push(format!(
                "bf16 rounding of {f:e} = {x:#x} is {:#x}",
                u32_at(4 * n + i)
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches, first: {:?}",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
}
