//! swTVM §5's local-memory plan for one kernel, in the paper's order:
//! buffer sizes for the target's local buffer (Algorithm 1), the outer
//! loops reordered to need fewer transfers (Algorithm 2), the transfers
//! placed (Algorithm 3) and counted before and after the reordering.
//!
//! Needs a valid nest and a target description. Guarantees: the tiles fit
//! the local buffer, `after.transfers <= before.transfers`, one placement
//! per tensor.

use crate::count::{count_dma, DmaCount};
use crate::desc::DsaDesc;
use crate::dma::outer_loops;
use crate::ldm::{choose_buffers, BufferChoice, LdmBudget};
use crate::nest::Nest;
use crate::reorder::reorder_loops;
use kiln_ir::error::ResultExt;
use kiln_ir::Result;
use std::fmt::Write;

/// The plan of one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelPlan {
    pub budget: LdmBudget,
    pub buffers: BufferChoice,
    /// The outer loops in the nest's order, and as Algorithm 2 orders them.
    pub given_order: Vec<usize>,
    pub order: Vec<usize>,
    pub before: DmaCount,
    pub after: DmaCount,
}

/// Plans `nest` for one core of `desc`.
pub fn plan_kernel(nest: &Nest, desc: &DsaDesc) -> Result<KernelPlan> {
    let plan = || {
        let budget = LdmBudget::from_desc(desc);
        let buffers = choose_buffers(nest, budget)?;
        let given_order = outer_loops(nest, &buffers.sizes);
        let order = reorder_loops(nest, &buffers.sizes, &given_order)?;
        Ok(KernelPlan {
            before: count_dma(nest, &buffers.sizes, &given_order)?,
            after: count_dma(nest, &buffers.sizes, &order)?,
            budget,
            buffers,
            given_order,
            order,
        })
    };
    plan().ctx(|| format!("nest '{}' on {}", nest.name, desc.name))
}

impl KernelPlan {
    /// The plan as text: buffers, orders, and each tensor's transfers
    /// after the reordering.
    pub fn describe(&self, nest: &Nest) -> String {
        let names = |order: &[usize]| -> String {
            let names: Vec<&str> = order.iter().map(|&v| nest.loops[v].var.as_str()).collect();
            names.join(" ")
        };
        let mut text = String::new();
        let buffers: Vec<String> = nest
            .loops
            .iter()
            .zip(&self.buffers.sizes)
            .map(|(l, size)| format!("{}={size}", l.var))
            .collect();
        let _ = writeln!(
            text,
            "buffer {} ({} of {} bytes)",
            buffers.join(" "),
            self.buffers.usage_bytes,
            self.budget.capacity_bytes
        );
        let _ = writeln!(
            text,
            "order {} -> {}",
            names(&self.given_order),
            names(&self.order)
        );
        for traffic in &self.after.per_tensor {
            let p = &traffic.placement;
            let place = match p.depth {
                0 => "before all loops".to_string(),
                d => format!("in {}", nest.loops[self.order[d - 1]].var),
            };
            let _ = writeln!(
                text,
                "dma {} {place}: {} gets, {} puts of {} bytes ({} per tile)",
                nest.tensors[p.tensor].name,
                traffic.gets,
                traffic.puts,
                p.run_bytes,
                p.runs_per_tile
            );
        }
        let _ = writeln!(
            text,
            "transfers {} -> {}, bytes {} -> {}",
            self.before.transfers, self.after.transfers, self.before.bytes, self.after.bytes
        );
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse_nest;

    #[test]
    fn matmul_plan_on_sunway() {
        let nest = crate::text::matmul_1024();
        let plan = plan_kernel(&nest, &DsaDesc::preset("sunway-cg").unwrap()).unwrap();
        let expected = "\
buffer x=1 y=128 k=64 (33536 of 65536 bytes)
order x y k -> y k x
dma A in x: 131072 gets, 0 puts of 256 bytes (1 per tile)
dma B in k: 8192 gets, 0 puts of 512 bytes (64 per tile)
dma C in x: 122880 gets, 131072 puts of 512 bytes (1 per tile)
transfers 8527872 -> 393216, bytes 4332716032 -> 167772160
";
        assert_eq!(plan.describe(&nest), expected);
    }

    #[test]
    fn errors_name_the_nest_and_target() {
        let nest = parse_nest("nest huge\nloop i 2\nin A[i] elem 100000\n").unwrap();
        let err = plan_kernel(&nest, &DsaDesc::preset("stcp920").unwrap()).unwrap_err();
        assert!(
            err.to_string().starts_with("nest 'huge' on stcp920: "),
            "{err}"
        );
    }
}
