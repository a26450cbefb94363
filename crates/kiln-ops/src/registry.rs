//! The op registry: (domain, op type) → definition. Each op family module
//! under `ops/` registers its ops in `register`.

use crate::Op;
use std::collections::HashMap;
use std::sync::OnceLock;

pub struct Registry {
    ops: HashMap<(String, String), Box<dyn Op>>,
}

impl Registry {
    /// Registers `op` under the default ONNX domain.
    pub fn add(&mut self, name: &str, op: impl Op + 'static) {
        self.add_in("", name, op);
    }

    pub fn add_in(&mut self, domain: &str, name: &str, op: impl Op + 'static) {
        let prev = self
            .ops
            .insert((domain.to_string(), name.to_string()), Box::new(op));
        assert!(prev.is_none(), "op {domain}:{name} registered twice");
    }
}

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let mut r = Registry {
            ops: HashMap::new(),
        };
        crate::ops::register_all(&mut r);
        r
    })
}

/// The definition of `op` in `domain` ("" and "ai.onnx" are the same).
pub fn lookup(domain: &str, op: &str) -> Option<&'static dyn Op> {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    registry()
        .ops
        .get(&(domain.to_string(), op.to_string()))
        .map(|b| b.as_ref())
}

/// All registered (domain, op) names, sorted.
pub fn names() -> Vec<(String, String)> {
    let mut v: Vec<_> = registry().ops.keys().cloned().collect();
    v.sort();
    v
}
