//! kiln's scratchpad accelerator (DSA) target.
//!
//! - [`desc`]: hardware descriptions (GraphTurbo §1's clusters × cores ×
//!   units with local and global buffers, swTVM's Sunway core group) and
//!   the presets (`presets/*.toml`), `dsa:NAME` / `dsa:PATH.toml` targets.
//! - [`nest`], [`text`]: the loop nests swTVM's local-memory algorithms
//!   (§5) read, and their text form.
//! - swTVM §5, one algorithm per module: [`correlation`] (Algorithm 4),
//!   [`classify`] (Algorithm 5), [`ldm`] (Algorithm 1, buffer sizes),
//!   [`reorder`] (Algorithm 2, loop order), [`dma`] (Algorithm 3, DMA
//!   placement); [`tile`] (what a buffer holds, contiguous runs) and
//!   [`count`] (transfers and bytes) serve them.
//! - [`plan`]: the three algorithms run in order for one kernel.
//! - Code generation's input: [`tiling`] cuts a loop-IR kernel into tiles
//!   whose bounding boxes ([`boxes`]) fit the LB, sized and ordered by
//!   swTVM Algorithms 1 and 2 where the phase allows (`tile_choice`), with
//!   DMA placed per swTVM Algorithm 3, giving a [`device::DeviceKernel`]
//!   (printed by `kiln_codegen::dsa`).
//! - GraphTurbo §3–§4.3, one algorithm per module: [`split_info`]
//!   (Algorithm 1, eq. 1) with [`propagate`] (its lines 7–11: a split
//!   carried through a sub-graph, halos included), [`grouping`] (Algorithm 2, and §1.1's layers),
//!   [`instances`] (Algorithm 3, BFS/DFS), [`scope`] (Algorithm 4 and
//!   §3.5's concat/copy/redistribute), [`reuse`] (§4.3, liveness-based
//!   spilling, with the parts of a tensor its readers no longer need
//!   released early: `release`); [`opgraph`] is the graph they read, [`schedule`] the
//!   result (`graphturbo`) with its text and Table 3's counts;
//!   [`baselines`] the schedules §5 compares with (`per_layer`,
//!   `astitch_like`, Fig. 15's `layers-in-gb`).
//! - The simulator (GraphTurbo §5, modelled): [`traffic`] (bytes per
//!   memory level per instance, the compulsory floor), [`timing`] (phase
//!   durations from the description's rates, the timeline with §4.4's
//!   across-layer scheduling), [`sim`] (`simulate`: the report).

pub mod baselines;
pub mod boxes;
pub mod classify;
pub mod correlation;
pub mod count;
pub mod desc;
pub mod device;
pub mod dma;
pub mod grouping;
pub mod instances;
pub mod ldm;
pub mod nest;
pub mod opgraph;
pub mod plan;
pub mod propagate;
mod reduction;
mod release;
pub mod reorder;
pub mod reuse;
pub mod schedule;
pub mod scope;
pub mod sim;
pub mod split_info;
pub mod text;
pub mod tile;
mod tile_choice;
mod tile_refine;
mod tile_select;
pub mod tiling;
pub mod timing;
pub mod traffic;
pub mod weight_slices;

pub use baselines::{per_layer, schedule, ScheduleKind};
pub use desc::{parse_target, DsaDesc};
pub use device::DeviceKernel;
pub use nest::{Access, Affine, Loop, Nest, Term};
pub use plan::{plan_kernel, KernelPlan};
pub use schedule::{graphturbo, Schedule, ScopeCounts};
pub use sim::{simulate, SimOptions, SimReport};
pub use text::parse_nest;
pub use tiling::tile_kernel;
