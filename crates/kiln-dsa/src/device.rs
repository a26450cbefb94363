//! A kernel as DSA device code, as data: what `tiling.rs` makes of a
//! loop-IR kernel and the DSA printer (`kiln_codegen::dsa`) prints.
//!
//! A kernel runs in phases (barriers between them). In a phase each core
//! walks tile loops; per tile (or once per core, or once per outer tile:
//! a DMA sits inside the innermost tile loop its box depends on, swTVM
//! Algorithm 3's placement) every buffer the tile touches is copied by DMA
//! into its own local-buffer (LB) array at a fixed offset of the core's
//! LB, the compute runs on the LB arrays only, and the arrays holding
//! results are copied back. Invariant: the arrays of a phase fit the LB
//! (`lb_bytes`), and every load and store of `compute` addresses an LB
//! array inside its box.

use kiln_ir::DType;
use kiln_loop::{Buffer, Idx, Kernel};

/// A loop-IR kernel tiled for a DSA.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceKernel {
    pub name: String,
    /// The kernel's parameters: its DDR buffers (the node's inputs, then
    /// its outputs), in order.
    pub params: Vec<Buffer>,
    pub phases: Vec<Phase>,
    /// Parameters each cluster copies whole from DDR into its global
    /// buffer (GB) before the phases, at this byte offset of the GB:
    /// inputs that several tiles read again, which then come from GB.
    pub staged: Vec<(usize, u64)>,
}

/// One phase: tile loops, LB arrays and the compute of one tile.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// Tile loops, outermost first.
    pub tiles: Vec<TileLoop>,
    /// Whether the tiles of the outermost tile loop are dealt to the cores
    /// in turn (its iterations write disjoint elements); otherwise core 0
    /// runs the whole phase.
    pub spread: bool,
    /// The LB arrays, in LB order.
    pub arrays: Vec<LbArray>,
    /// One tile's compute: `buffers` are the LB arrays (same order as
    /// `arrays`, shaped by their boxes), `body` the kernel's loops with
    /// tiled loops shortened to a tile and every access rebased onto its
    /// array. Tile variables (`TileLoop::tile_var`) are free in it.
    pub compute: Kernel,
}

/// A loop of the kernel cut into tiles: `tile_var` counts tiles, the
/// loop `var` itself runs inside one (`min(tile, extent - tile·tile_var)`
/// iterations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileLoop {
    pub var: String,
    pub tile_var: String,
    pub extent: i64,
    pub tile: i64,
}

impl TileLoop {
    /// How many tiles.
    pub fn count(&self) -> i64 {
        (self.extent + self.tile - 1) / self.tile
    }
}

/// One LB array: the box of a DDR buffer a tile touches.
#[derive(Debug, Clone, PartialEq)]
pub struct LbArray {
    /// The parameter it buffers.
    pub param: usize,
    pub dtype: DType,
    /// Byte offset in the core's LB.
    pub offset: u64,
    /// The box, outermost dimension first (the buffer's dimensions, or one
    /// flat dimension when its accesses are not affine per dimension).
    pub dims: Vec<BoxDim>,
    /// Copied in from DDR/GB before the compute (read, or written only in
    /// part), and back to DDR after it (written).
    pub get: bool,
    pub put: bool,
    /// Where its DMA goes: 0 before the tile loops (once per core), `l`
    /// inside tile loop `l - 1` (once per tile of the loops up to it).
    pub level: usize,
}

/// One dimension of a box: indices `lo .. lo + ext` of a buffer dimension
/// of `size` (clipped to it when the DMA runs: a tail tile's box may
/// reach past the end).
#[derive(Debug, Clone, PartialEq)]
pub struct BoxDim {
    pub size: i64,
    /// The first index, over the tile variables.
    pub lo: Idx,
    pub ext: i64,
}

impl LbArray {
    /// Elements of the array (at least one).
    pub fn elems(&self) -> i64 {
        self.dims.iter().map(|d| d.ext).product::<i64>().max(1)
    }

    /// Bytes of the array.
    pub fn bytes(&self) -> u64 {
        self.elems() as u64 * self.dtype.size() as u64
    }
}

impl Phase {
    /// LB bytes the phase's arrays take (their offsets and sizes).
    pub fn lb_bytes(&self) -> u64 {
        self.arrays
            .iter()
            .map(|a| a.offset + a.bytes())
            .max()
            .unwrap_or(0)
    }
}
