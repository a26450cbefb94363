//! The weights a compiled model keeps, and their packings.
//!
//! Needs: a graph and its execution plan. Guarantees: a weight slot whose
//! only reader is a gemm through its packing ([`raw_weights`] leaves it
//! out) is never kept decoded: its packing reads it in place, or widened
//! into a buffer its thread reuses, or decoded and dropped ([`prepack_all`],
//! `f32_values`). Every other weight is copied once into 64-byte aligned
//! memory and kept (`Kept`; its tensor form decoded only when asked for).
//! Either way, the pages of the model file a weight was read from are given back
//! once its copy exists (`kiln_ir::mapped`), so a weight is resident once
//! — as itself or as its packing — not twice.

use crate::memory::{data_ptr, from_bytes, AlignedBytes};
use crate::packed_cache::{packing_digest, Packed, PackedCache, CACHED_FROM_BYTES};
use kiln_exec::{ExecPlan, Loc, Step};
use kiln_ir::{bail, DType, Error, Graph, Initializer, Result, Tensor, ValueId};
use kiln_runtime::jit::Library;
use std::collections::BTreeSet;
use std::sync::OnceLock;

type FloatsFn = unsafe extern "C" fn() -> std::ffi::c_long;
type KernelFn = unsafe extern "C" fn(*const *mut u8) -> i32;

/// Weight slots by `Loc::Weight` index; `None` where only a packing reads
/// the weight.
pub struct Weights {
    slots: Vec<Option<Kept>>,
}

/// A weight kept for kernels to read: its elements in 64-byte aligned
/// memory, so a kernel's vector loads never straddle cache lines (a
/// decoded tensor's elements sit 16 or 32 bytes into a line, and an
/// LSTM step's matrix-vector product read its matrix measurably slower
/// so; BENCHMARKS.md, session 30), and the tensor decoded from them the
/// first time something needs one (a node the interpreter runs, a graph
/// output). A string tensor, which no kernel reads, is kept as itself.
struct Kept {
    bytes: AlignedBytes,
    dtype: DType,
    shape: Vec<usize>,
    tensor: OnceLock<Tensor>,
}

impl Kept {
    /// `init`'s elements copied once into aligned memory: a model file's
    /// raw little-endian numbers straight from the mapping on a
    /// little-endian host (as the kernels read them; not bools, whose raw
    /// bytes may be other than 0 and 1), anything else decoded first. The
    /// file's pages are given back after.
    fn of(init: &Initializer) -> Result<Kept> {
        let kept = match init {
            Initializer::Raw {
                dtype,
                shape,
                bytes,
            } if cfg!(target_endian = "little")
                && !matches!(dtype, DType::Str | DType::Bool)
                && bytes.len() == shape.iter().product::<usize>() * dtype.size() =>
            {
                Kept::copied(*dtype, shape.clone(), bytes)
            }
            _ => Kept::decoded(init.to_tensor()?)?,
        };
        init.release_resident();
        Ok(kept)
    }

    fn copied(dtype: DType, shape: Vec<usize>, values: &[u8]) -> Kept {
        let mut bytes = AlignedBytes::new(values.len());
        // SAFETY: `bytes` has room for `values`, and they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), bytes.ptr(0), values.len()) };
        Kept {
            bytes,
            dtype,
            shape,
            tensor: OnceLock::new(),
        }
    }

    fn decoded(t: Tensor) -> Result<Kept> {
        let dtype = t.dtype();
        if dtype == DType::Str {
            return Ok(Kept {
                bytes: AlignedBytes::new(0),
                dtype,
                shape: t.shape.clone(),
                tensor: OnceLock::from(t),
            });
        }
        let size = t.len() * dtype.size();
        // SAFETY: `t` holds `size` bytes of numbers at its data pointer.
        let values = unsafe { std::slice::from_raw_parts(data_ptr(&t)?, size) };
        Ok(Kept::copied(dtype, t.shape.clone(), values))
    }

    fn tensor(&self) -> Result<&Tensor> {
        if let Some(t) = self.tensor.get() {
            return Ok(t);
        }
        let t = from_bytes(self.dtype, self.shape.clone(), self.bytes.ptr_const(0))?;
        Ok(self.tensor.get_or_init(|| t))
    }

    /// The elements' bytes as kernels read them.
    fn values(&self) -> Result<&[u8]> {
        match self.dtype {
            DType::Str => bail!("string tensors have no C representation"),
            dtype => Ok(&self.bytes.bytes()[..self.shape.iter().product::<usize>() * dtype.size()]),
        }
    }

    fn pointer(&self) -> Result<*mut u8> {
        Ok(self.values()?.as_ptr().cast_mut())
    }
}

impl Weights {
    /// Every weight of `plan`, decoded.
    pub fn all(graph: &Graph, plan: &ExecPlan) -> Result<Weights> {
        Self::decode(graph, plan, &(0..plan.weights.len()).collect())
    }

    /// The weights `keep` names, decoded; the others left out.
    pub fn decode(graph: &Graph, plan: &ExecPlan, keep: &BTreeSet<usize>) -> Result<Weights> {
        let slots = (0..plan.weights.len())
            .map(|w| {
                keep.contains(&w)
                    .then(|| initializer(graph, plan, w).and_then(Kept::of))
                    .transpose()
            })
            .collect::<Result<_>>()?;
        Ok(Weights { slots })
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes of the kept weights.
    pub fn bytes(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .map(|kept| kept.values().map_or(0, <[u8]>::len))
            .sum()
    }

    fn get(&self, w: usize) -> Option<&Kept> {
        self.slots.get(w).and_then(Option::as_ref)
    }

    /// Slot `w`; an error if it was left to its packing.
    pub fn tensor(&self, w: usize) -> Result<&Tensor> {
        self.get(w)
            .ok_or_else(|| {
                Error::new(format!(
                    "internal error: weight slot {w} is read but was kept only packed"
                ))
            })?
            .tensor()
    }

    /// Where a kernel reads slot `w`: null where only its packing is read
    /// (a packed gemm does not read its weight).
    pub fn pointer(&self, w: usize) -> Result<*mut u8> {
        match self.slots.get(w) {
            Some(Some(kept)) => kept.pointer(),
            Some(None) => Ok(std::ptr::null_mut()),
            None => bail!("execution plan: weight slot {w} does not exist"),
        }
    }
}

fn initializer<'g>(graph: &'g Graph, plan: &ExecPlan, w: usize) -> Result<&'g Initializer> {
    let id = *plan
        .weights
        .get(w)
        .ok_or_else(|| Error::new(format!("execution plan: weight slot {w} does not exist")))?;
    graph
        .initializers
        .get(&ValueId(id as u32))
        .ok_or_else(|| Error::new(format!("weight '{}' has no data", graph.values[id].name)))
}

/// The weight slots read as they are: by a kernel other than through its
/// packing, by a node the interpreter runs, or as a graph output.
pub fn raw_weights(graph: &Graph, plan: &ExecPlan) -> BTreeSet<usize> {
    let slot = |id: usize| match plan.value(id).map(|v| v.loc) {
        Some(Loc::Weight(w)) => Some(w),
        _ => None,
    };
    let mut needed = BTreeSet::new();
    for s in &plan.steps {
        match s {
            Step::Kernel { args, packing, .. } => {
                let packed = packing.and_then(|p| slot(plan.packings[p].weight));
                for w in args.iter().filter_map(|&a| slot(a)) {
                    let only_packed = packed == Some(w)
                        && args.iter().filter(|&&b| slot(b) == Some(w)).count() == 1;
                    if !only_packed {
                        needed.insert(w);
                    }
                }
            }
            Step::Interp { node, .. } => {
                let n = &graph.nodes[*node];
                let by_name = n
                    .subgraph_reads()
                    .into_iter()
                    .filter_map(|name| graph.find(&name));
                let reads = n.inputs.iter().flatten().copied().chain(by_name);
                needed.extend(reads.filter_map(|v| slot(v.index())));
            }
            Step::Alias { .. } | Step::Assembled { .. } => {}
        }
    }
    needed.extend(plan.outputs.iter().filter_map(|&o| slot(o)));
    needed
}

/// Every packing of `plan`, in order: mapped from the cache when a start
/// before packed the same weights with the same library
/// ([`crate::packed_cache`]; models packing at least
/// [`CACHED_FROM_BYTES`]), else made by `threads` threads (packing is bound
/// by first touches of fresh memory; BERT-base packs 340 MB) and stored
/// there. Records each packing's size in the plan. A weight `weights` left
/// out is decoded for its packing and dropped after it.
pub fn prepack_all(
    lib: &Library,
    graph: &Graph,
    plan: &mut ExecPlan,
    weights: &Weights,
    threads: usize,
) -> Result<Vec<Packed>> {
    let jobs: Vec<Job> = plan
        .packings
        .iter()
        .map(|p| packing_job(plan, &p.kernel))
        .collect::<Result<_>>()?;
    let sizes: Vec<usize> = jobs
        .iter()
        .map(|job| packing_bytes(lib, &job.kernel))
        .collect::<Result<_>>()?;
    let plan_ref: &ExecPlan = plan;
    let cache = if sizes.iter().sum::<usize>() >= CACHED_FROM_BYTES {
        let digests = in_parallel(&jobs, threads, |job, _: &mut ()| {
            job.digest(graph, plan_ref, weights)
        })?;
        Some(PackedCache::new(lib, &digests, sizes.clone()))
    } else {
        None
    };
    let packed = match cache.as_ref().and_then(PackedCache::load) {
        Some(mapped) => mapped,
        None => {
            let fresh = in_parallel(&jobs, threads, |job, scratch| {
                job.pack(lib, graph, plan_ref, weights, scratch)
            })?;
            if let Some(cache) = &cache {
                cache.store(&fresh);
            }
            fresh.into_iter().map(Packed::Owned).collect()
        }
    };
    for (p, bytes) in plan.packings.iter_mut().zip(&sizes) {
        p.bytes = *bytes;
    }
    Ok(packed)
}

/// One packing to make: the kernel and, per argument, the weight slot it
/// reads (the other arguments are not read by packing).
struct Job {
    kernel: String,
    slots: Vec<Option<usize>>,
}

fn packing_job(plan: &ExecPlan, kernel: &str) -> Result<Job> {
    let step = plan.steps.iter().find_map(|s| match s {
        Step::Kernel {
            kernel: k, args, ..
        } if k == kernel => Some(args),
        _ => None,
    });
    let Some(args) = step else {
        bail!("packing of kernel {kernel} without its step");
    };
    let slots = args
        .iter()
        .map(|&a| match plan.value(a).map(|v| v.loc) {
            Some(Loc::Weight(w)) => Ok(Some(w)),
            Some(_) => Ok(None),
            None => bail!("execution plan: value %{a} has no place"),
        })
        .collect::<Result<_>>()?;
    Ok(Job {
        kernel: kernel.to_string(),
        slots,
    })
}

impl Job {
    /// The hash of what this packing reads ([`packing_digest`]). The model
    /// file's pages read for it are given back after.
    fn digest(&self, graph: &Graph, plan: &ExecPlan, weights: &Weights) -> Result<u128> {
        let mut read = Vec::new();
        let mut slots = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            slots.push(match *slot {
                None => None,
                Some(w) => Some(match weights.get(w) {
                    Some(kept) => kept.values()?,
                    None => {
                        let init = initializer(graph, plan, w)?;
                        read.push(init);
                        match init {
                            Initializer::Raw { bytes, .. } => &bytes[..],
                            Initializer::Tensor(t) => tensor_bytes(t)?,
                        }
                    }
                }),
            });
        }
        let digest = packing_digest(&self.kernel, slots.into_iter());
        read.iter().for_each(|init| init.release_resident());
        Ok(digest)
    }

    /// Packs, reading the weights `weights` left out where they are or
    /// widened into `scratch` (see [`f32_values`]), else decoded and
    /// dropped.
    fn pack(
        &self,
        lib: &Library,
        graph: &Graph,
        plan: &ExecPlan,
        weights: &Weights,
        scratch: &mut Vec<Vec<f32>>,
    ) -> Result<AlignedBytes> {
        scratch.resize_with(self.slots.len(), Vec::new);
        let mut transient = Vec::new();
        let mut read = Vec::new();
        let mut ptrs = Vec::with_capacity(self.slots.len() + 1);
        for (slot, buffer) in self.slots.iter().zip(scratch.iter_mut()) {
            ptrs.push(match *slot {
                None => std::ptr::null_mut(),
                Some(w) => match weights.get(w) {
                    Some(kept) => kept.pointer()?,
                    None => {
                        let init = initializer(graph, plan, w)?;
                        read.push(init);
                        match f32_values(init, buffer) {
                            Some(values) => values,
                            None => {
                                transient.push(init.to_tensor()?);
                                data_ptr(&transient[transient.len() - 1])?
                            }
                        }
                    }
                },
            });
        }
        let packing = prepack(lib, &self.kernel, ptrs);
        read.iter().for_each(|init| init.release_resident());
        packing
    }
}

/// Where a packing reads an f32 weight: in the model file's mapping when
/// its values can be read there (little-endian, 4-byte aligned), in a
/// decoded tensor's own storage, else widened into `buffer`, which the
/// packing thread reuses for its next weight. Either way no fresh pages
/// are written per weight: a decoded copy of each was BERT-base's 340 MB
/// written and dropped at every start. `None` for other element types
/// (and for raw bytes of the wrong length, which decoding reports).
fn f32_values(init: &Initializer, buffer: &mut Vec<f32>) -> Option<*mut u8> {
    match init {
        Initializer::Tensor(t) if t.dtype() == DType::F32 => data_ptr(t).ok(),
        Initializer::Raw {
            dtype: DType::F32,
            bytes,
            shape,
        } if bytes.len() == shape.iter().product::<usize>() * 4 => {
            let aligned = bytes.as_ptr().align_offset(std::mem::align_of::<f32>()) == 0;
            if cfg!(target_endian = "little") && aligned {
                return Some(bytes.as_ptr().cast_mut());
            }
            buffer.clear();
            buffer.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
            Some(buffer.as_mut_ptr().cast())
        }
        _ => None,
    }
}

/// `work` on each job by `threads` threads, each with its own `S`;
/// results in job order.
fn in_parallel<J: Sync, T: Send, S: Default>(
    jobs: &[J],
    threads: usize,
    work: impl Fn(&J, &mut S) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: Vec<Result<Vec<(usize, T)>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(jobs.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    let mut state = S::default();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(job) = jobs.get(i) else {
                            return Ok(mine);
                        };
                        mine.push((i, work(job, &mut state)?));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(Error::new("a weight-packing thread panicked")))
            })
            .collect()
    });
    let mut results: Vec<Option<T>> = (0..jobs.len()).map(|_| None).collect();
    for (i, r) in done
        .into_iter()
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
    {
        results[i] = Some(r);
    }
    results
        .into_iter()
        .map(|r| r.ok_or_else(|| Error::new("a weight was not packed")))
        .collect()
}

/// The bytes of kernel `name`'s packing, as [`AlignedBytes`] holds them
/// (whole 64-byte words).
fn packing_bytes(lib: &Library, name: &str) -> Result<usize> {
    // SAFETY: a prepacked kernel's source defines `long NAME_prepack_floats(void)`.
    let floats: FloatsFn =
        unsafe { lib.symbol(&format!("{name}{}_floats", kiln_codegen::c::PREPACK_SUFFIX))? };
    // SAFETY: no arguments; returns a size.
    let n = usize::try_from(unsafe { floats() })
        .map_err(|_| Error::new("negative weight packing size"))?;
    let bytes = n as u128 * 4;
    kiln_ir::limits::check_bytes(&format!("kernel {name}'s weight packing"), bytes)?;
    Ok((bytes as usize).next_multiple_of(64))
}

/// A numeric tensor's elements as bytes.
fn tensor_bytes(t: &Tensor) -> Result<&[u8]> {
    let ptr = data_ptr(t)?;
    // SAFETY: `data_ptr` points at the tensor's `len` elements of its dtype, borrowed from `t`.
    Ok(unsafe { std::slice::from_raw_parts(ptr, t.len() * t.dtype().size()) })
}

/// Runs kernel `name`'s prepacking entry point on `args` (its buffers,
/// null but for the weights): the packing it then reads after its buffers.
fn prepack(lib: &Library, name: &str, mut args: Vec<*mut u8>) -> Result<AlignedBytes> {
    // SAFETY: a prepacked kernel's source defines `int NAME_prepack(void* const*)`.
    let pack: KernelFn =
        unsafe { lib.symbol(&format!("{name}{}", kiln_codegen::c::PREPACK_SUFFIX))? };
    let mut packing = AlignedBytes::new(packing_bytes(lib, name)?);
    args.push(packing.ptr(0));
    // SAFETY: the weight pointers hold the kernel's declared shapes and the
    // packing has the size the kernel asked for; nothing else is read.
    let rc = unsafe { pack(args.as_ptr()) };
    if rc != 0 {
        bail!("kernel {name}: packing its weight failed");
    }
    Ok(packing)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUES: [f32; 5] = [1.5, -2.0, 3.25, 0.0, 7.0];

    /// `VALUES` as raw little-endian bytes starting `skew` bytes past a
    /// 4-byte boundary.
    fn raw(skew: usize) -> Initializer {
        let mut buffer = vec![0u8; 8 + VALUES.len() * 4];
        let start = buffer.as_ptr().align_offset(4) + skew;
        for (k, v) in VALUES.iter().enumerate() {
            buffer[start + 4 * k..start + 4 * k + 4].copy_from_slice(&v.to_le_bytes());
        }
        let bytes = bytes::Bytes::from(buffer).slice(start..start + VALUES.len() * 4);
        Initializer::Raw {
            dtype: DType::F32,
            shape: vec![VALUES.len()],
            bytes,
        }
    }

    fn read(values: *mut u8) -> Vec<f32> {
        // SAFETY: `f32_values` gave an aligned pointer to `VALUES.len()` floats.
        unsafe { std::slice::from_raw_parts(values as *const f32, VALUES.len()) }.to_vec()
    }

    #[test]
    fn a_packing_reads_f32_weights_in_place_or_widened_into_its_buffer() {
        let mut buffer = Vec::new();
        let aligned = raw(0);
        let Initializer::Raw { bytes, .. } = &aligned else {
            unreachable!()
        };
        let in_place = f32_values(&aligned, &mut buffer).expect("aligned f32");
        assert_eq!(in_place, bytes.as_ptr().cast_mut(), "read where it is");
        assert_eq!(read(in_place), VALUES);
        assert!(buffer.is_empty());

        let widened = f32_values(&raw(1), &mut buffer).expect("misaligned f32");
        assert_eq!(widened, buffer.as_mut_ptr().cast(), "read from the buffer");
        assert_eq!(read(widened), VALUES);

        let decoded = Initializer::Tensor(Tensor::from_vec(vec![5], VALUES.to_vec()).unwrap());
        assert_eq!(
            read(f32_values(&decoded, &mut buffer).expect("tensor")),
            VALUES
        );
    }

    #[test]
    fn other_types_and_short_bytes_are_left_to_decoding() {
        let mut buffer = Vec::new();
        let ints = Initializer::Tensor(Tensor::from_vec(vec![2], vec![1i64, 2]).unwrap());
        assert!(f32_values(&ints, &mut buffer).is_none());
        let Initializer::Raw { bytes, .. } = raw(0) else {
            unreachable!()
        };
        let short = Initializer::Raw {
            dtype: DType::F32,
            shape: vec![VALUES.len() + 1],
            bytes,
        };
        assert!(f32_values(&short, &mut buffer).is_none());
        assert!(short.to_tensor().is_err(), "decoding reports the length");
    }
}
