//! The run-time CUDA bindings end to end: NVRTC compiles (when NVRTC can
//! be found; required when `CI` or `KILN_NVRTC` is set), and a GPU round
//! trip and kernel launch (when a driver and GPU exist; otherwise `open`
//! must fail with a CUDA error, not panic).

use kiln_cuda::ffi::{driver::attr, image, Arch, DeviceBuffer, Function, Gpu, Module, Nvrtc};
use std::ffi::c_void;

const ADD: &str = r#"
extern "C" __global__ void add(const float* a, float* b, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] += a[i];
}
"#;

/// NVRTC, or `None` (with a note) where it may be absent.
fn nvrtc_or_skip() -> Option<&'static Nvrtc> {
    match Nvrtc::global() {
        Ok(nvrtc) => Some(nvrtc),
        Err(e) => {
            let required =
                std::env::var_os("CI").is_some() || std::env::var_os("KILN_NVRTC").is_some();
            assert!(
                !required,
                "NVRTC must load when CI or KILN_NVRTC is set: {e}"
            );
            eprintln!("skipping: NVRTC not found ({e})");
            None
        }
    }
}

#[test]
fn handles_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<Nvrtc>();
    both::<Gpu>();
    both::<DeviceBuffer>();
    both::<Module>();
    both::<Function>();
}

#[test]
fn nvrtc_compiles_ptx_and_cubin() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    eprintln!(
        "NVRTC {:?} from {}",
        nvrtc.version(),
        nvrtc.path().display()
    );
    for arch in [Arch::Compute(80), Arch::Compute(90), Arch::Sm(90)] {
        let out = nvrtc
            .compile(ADD, "add.cu", &arch, &[])
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(out.is_ptx, arch.is_ptx());
        if out.is_ptx {
            let text = String::from_utf8_lossy(&out.image);
            assert!(
                text.contains(".entry add"),
                "{arch}: no kernel entry in\n{text}"
            );
            assert!(
                text.contains(&format!(".target sm_{}", &arch.to_string()[8..])),
                "{text}"
            );
            assert_eq!(out.image.last(), Some(&0), "PTX must end in a NUL");
        } else {
            assert!(
                out.image.starts_with(b"\x7fELF"),
                "{arch}: cubin is not ELF"
            );
        }
        image::check(&out.image).unwrap_or_else(|e| panic!("{arch}: {e}"));
    }
}

#[test]
fn nvrtc_reports_compile_errors_with_the_log() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let bad = "extern \"C\" __global__ void broken(float* a) { a[0] = ; }";
    let err = match nvrtc.compile(bad, "broken_kernel.cu", &Arch::Compute(80), &[]) {
        Ok(_) => panic!("a syntax error compiled"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.starts_with("NVRTC failed to compile broken_kernel.cu for compute_80: "),
        "{err}"
    );
    assert!(err.contains("expected an expression"), "{err}");
}

#[test]
fn nvrtc_rejects_bad_input_without_panicking() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let nul = nvrtc.compile("int x;\0", "nul.cu", &Arch::Compute(80), &[]);
    assert!(nul.is_err_and(|e| e.to_string().contains("NUL")));
    let name = nvrtc.compile("int x;", "a\0b", &Arch::Compute(80), &[]);
    assert!(name.is_err());
    let option = nvrtc.compile(ADD, "add.cu", &Arch::Compute(80), &["--no-such-option"]);
    assert!(option.is_err_and(|e| e.to_string().contains("add.cu")));
}

#[test]
fn gpu_round_trip_and_launch_or_clear_error() {
    let gpu = match Gpu::open(0) {
        Ok(gpu) => gpu,
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("CUDA"), "error does not mention CUDA: {msg}");
            eprintln!("skipping GPU checks: {msg}");
            return;
        }
    };
    let (major, minor) = gpu.compute_capability().expect("compute capability");
    eprintln!(
        "{} (sm_{major}{minor}, {} SMs, {} MiB, driver {})",
        gpu.name().expect("name"),
        gpu.sm_count().expect("SM count"),
        gpu.total_memory().expect("memory") >> 20,
        gpu.driver().version().expect("driver version"),
    );
    assert!(gpu.attribute(attr::WARP_SIZE).expect("warp size") == 32);
    assert!(Gpu::open(usize::MAX).is_err());
    round_trip(&gpu);
    if let Some(nvrtc) = nvrtc_or_skip() {
        launch_add(&gpu, nvrtc, Arch::Compute((major * 10 + minor) as u32));
        launch_add(&gpu, nvrtc, Arch::Sm((major * 10 + minor) as u32));
    }
}

fn round_trip(gpu: &Gpu) {
    let bytes = 1 << 20;
    let buf = gpu.alloc(bytes).expect("alloc 1 MiB");
    let pattern: Vec<u8> = (0..bytes).map(|i| (i * 31 % 251) as u8).collect();
    gpu.upload(&buf, 0, &pattern).expect("upload");
    let mut back = vec![0u8; bytes];
    gpu.download(&buf, 0, &mut back).expect("download");
    assert!(back == pattern, "round trip changed the data");

    let copy = gpu.alloc(bytes).expect("alloc copy");
    gpu.copy(&copy, 0, &buf, 0, bytes).expect("device copy");
    gpu.memset_zero(buf.ptr() + 16, 16).expect("memset");
    let mut head = [1u8; 48];
    gpu.download(&buf, 0, &mut head).expect("download head");
    assert_eq!(&head[..16], &pattern[..16]);
    assert!(head[16..32].iter().all(|&b| b == 0));
    gpu.download(&copy, bytes - 8, &mut head[..8])
        .expect("download tail");
    assert_eq!(&head[..8], &pattern[bytes - 8..]);

    assert!(
        gpu.upload(&buf, bytes - 1, &[0, 0]).is_err(),
        "out-of-bounds upload"
    );
    assert!(gpu.download(&buf, usize::MAX, &mut [0u8; 2]).is_err());
    assert!(gpu.alloc(0).expect("empty alloc").is_empty());
}

fn launch_add(gpu: &Gpu, nvrtc: &Nvrtc, arch: Arch) {
    let compiled = match nvrtc.compile(ADD, "add.cu", &arch, &[]) {
        Ok(c) => c,
        Err(e) => return eprintln!("skipping {arch}: this NVRTC cannot target it: {e}"),
    };
    let module = gpu.load_module(&compiled.image).expect("load module");
    let add = module.function("add").expect("find add");
    assert!(module.function("no_such_kernel").is_err());
    let n = 100_000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
    let (da, db) = (upload_f32(gpu, &a), upload_f32(gpu, &b));
    let (mut pa, mut pb, mut len) = (da.ptr(), db.ptr(), n as i64);
    let mut args = [
        &mut pa as *mut u64 as *mut c_void,
        &mut pb as *mut u64 as *mut c_void,
        &mut len as *mut i64 as *mut c_void,
    ];
    let grid = [n.div_ceil(256) as u32, 1, 1];
    let ms = gpu
        // SAFETY: three arguments matching add's (pointer, pointer, i64),
        // pointing at buffers of n floats.
        .elapsed_ms(|| unsafe { gpu.launch(&add, grid, [256, 1, 1], 0, false, &mut args) })
        .expect("timed launch");
    assert!(ms >= 0.0);
    gpu.synchronize().expect("synchronize");
    let mut out = vec![0u8; n * 4];
    gpu.download(&db, 0, &mut out).expect("download result");
    for (i, chunk) in out.chunks_exact(4).enumerate() {
        let got = f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        assert_eq!(got, 3.0 * i as f32, "{arch}: b[{i}]");
    }
    eprintln!("{arch}: add over {n} floats ran in {ms:.3} ms");
}

fn upload_f32(gpu: &Gpu, values: &[f32]) -> DeviceBuffer {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let buf = gpu.alloc(bytes.len()).expect("alloc");
    gpu.upload(&buf, 0, &bytes).expect("upload");
    buf
}
