//! A gemm's [`Tuning`] as text (`shape=14x32 transposed=1 kc=192`: only
//! the choices it overrides, `default` for none), the form the tuning
//! cache stores; and the candidates `kiln tune` measures for a vector
//! width.

use super::kernel::{KernelShape, TARGETS};
use super::Tuning;
use kiln_ir::{bail, Result};

impl Tuning {
    /// The overridden choices, space-separated; `default` when none is.
    pub fn to_text(&self) -> String {
        let flag = |b: bool| if b { "1" } else { "0" };
        let mut parts = Vec::new();
        if let Some(s) = self.shape {
            parts.push(format!("shape={}x{}", s.mr, s.nr));
        }
        let flags = [
            ("transposed", self.transposed),
            ("pack_a", self.pack_a),
            ("pack_b", self.pack_b),
            ("staged", self.staged),
            ("prefetch", self.prefetch),
        ];
        for (name, value) in flags {
            if let Some(v) = value {
                parts.push(format!("{name}={}", flag(v)));
            }
        }
        for (name, value) in [
            ("kc", self.kc),
            ("mc", self.mc),
            ("nc", self.nc),
            ("l2", self.l2_bytes),
            ("l1", self.l1_bytes),
        ] {
            if let Some(v) = value {
                parts.push(format!("{name}={v}"));
            }
        }
        if parts.is_empty() {
            "default".to_string()
        } else {
            parts.join(" ")
        }
    }

    /// Reads [`Tuning::to_text`]'s form back.
    pub fn parse(text: &str) -> Result<Tuning> {
        let mut t = Tuning::default();
        for part in text.split_whitespace().filter(|p| *p != "default") {
            let Some((name, value)) = part.split_once('=') else {
                bail!("gemm tuning '{text}': '{part}' is not NAME=VALUE");
            };
            let number = || -> Result<usize> {
                value.parse().map_err(|_| {
                    kiln_ir::Error::new(format!(
                        "gemm tuning '{text}': {name}={value} is not a count"
                    ))
                })
            };
            let flag = || -> Result<bool> {
                match value {
                    "0" => Ok(false),
                    "1" => Ok(true),
                    _ => bail!("gemm tuning '{text}': {name} must be 0 or 1"),
                }
            };
            match name {
                "shape" => t.shape = Some(shape(text, value)?),
                "transposed" => t.transposed = Some(flag()?),
                "pack_a" => t.pack_a = Some(flag()?),
                "pack_b" => t.pack_b = Some(flag()?),
                "staged" => t.staged = Some(flag()?),
                "prefetch" => t.prefetch = Some(flag()?),
                "kc" => t.kc = Some(number()?),
                "mc" => t.mc = Some(number()?),
                "nc" => t.nc = Some(number()?),
                "l2" => t.l2_bytes = Some(number()?),
                "l1" => t.l1_bytes = Some(number()?),
                _ => bail!("gemm tuning '{text}': unknown choice '{name}'"),
            }
        }
        Ok(t)
    }
}

fn shape(text: &str, value: &str) -> Result<KernelShape> {
    let parsed = value
        .split_once('x')
        .and_then(|(m, n)| Some((m.parse().ok()?, n.parse().ok()?)));
    match parsed {
        Some((mr, nr)) if mr > 0 && nr > 0 => Ok(KernelShape { mr, nr }),
        _ => bail!("gemm tuning '{text}': shape '{value}' is not MRxNR"),
    }
}

/// What `kiln tune` measures for a gemm on vectors of `vector_bytes`:
/// every register tile the width has, in both orientations, and for each
/// the K block halved and doubled around the default and, at the default
/// K block, the prepacked weight's next panel prefetched and not (the
/// same choice where the weight is not prepacked: a repeat the tuner
/// measures as a tie).
pub fn candidates(vector_bytes: usize) -> Vec<Tuning> {
    let Some(target) = TARGETS
        .iter()
        .find(|t| t.bytes == vector_bytes)
        .or(TARGETS.last())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for rated in target.shapes {
        for transposed in [false, true] {
            for kc in [None, Some(target.kc_max / 2), Some(target.kc_max * 2)] {
                out.push(Tuning {
                    shape: Some(rated.shape),
                    transposed: Some(transposed),
                    kc,
                    ..Tuning::default()
                });
            }
            for prefetch in [false, true] {
                out.push(Tuning {
                    shape: Some(rated.shape),
                    transposed: Some(transposed),
                    prefetch: Some(prefetch),
                    ..Tuning::default()
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips() {
        let t = Tuning {
            shape: Some(KernelShape { mr: 14, nr: 32 }),
            transposed: Some(true),
            pack_a: Some(false),
            kc: Some(192),
            l2_bytes: Some(1 << 20),
            ..Tuning::default()
        };
        assert_eq!(
            t.to_text(),
            "shape=14x32 transposed=1 pack_a=0 kc=192 l2=1048576"
        );
        assert_eq!(Tuning::parse(&t.to_text()).unwrap(), t);
        assert_eq!(Tuning::parse("default").unwrap(), Tuning::default());
        assert_eq!(Tuning::default().to_text(), "default");
    }

    #[test]
    fn bad_text_is_an_error_naming_the_part() {
        for bad in ["shape=14", "kc=many", "transposed=2", "speed=3", "kc"] {
            let e = Tuning::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad.split('=').next().unwrap()), "{bad}: {e}");
        }
    }

    #[test]
    fn every_width_has_candidates_of_its_own_shapes() {
        for bytes in [64, 32, 16] {
            let c = candidates(bytes);
            assert!(c.len() >= 6, "{bytes}: {}", c.len());
            let target = TARGETS.iter().find(|t| t.bytes == bytes).unwrap();
            assert!(c
                .iter()
                .all(|t| target.shapes.iter().any(|r| Some(r.shape) == t.shape)));
        }
    }
}
