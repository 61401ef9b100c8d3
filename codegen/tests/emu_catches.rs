//! The CUDA emulation catches what a GPU would: one planted bug of each class, in a small kernel
//! or in generated code, and the emulation's report of it. Each check here fails when the
//! emulation's mechanism for that class is taken out (the schedule's shuffles, the shared-memory
//! poison, the sanitizers).

mod emu;

use std::ffi::c_void;

use emu::{build_source, sanitized, Compiled};

/// Memory a kernel reads and writes: one allocation of exactly `bytes` (ASan's allocator in a
/// sanitized child: a byte past the end is a report), 16-byte aligned.
struct Exact {
    ptr: *mut u8,
    bytes: usize,
}

impl Exact {
    fn new(bytes: usize) -> Exact {
        let mut ptr = std::ptr::null_mut();
        assert_eq!(
            unsafe { libc::posix_memalign(&mut ptr, 16, bytes.max(1)) },
            0
        );
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, bytes) };
        Exact {
            ptr: ptr as *mut u8,
            bytes,
        }
    }

    fn floats(values: &[f32]) -> Exact {
        let e = Exact::new(values.len() * 4);
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), e.ptr as *mut f32, values.len()) };
        e
    }

    fn read_floats(&self) -> Vec<f32> {
        let n = self.bytes / 4;
        unsafe { std::slice::from_raw_parts(self.ptr as *const f32, n) }.to_vec()
    }
}

impl Drop for Exact {
    fn drop(&mut self) {
        unsafe { libc::free(self.ptr as *mut c_void) };
    }
}

/// Launches `gl_run_<f>(grid, block, args)` of a kernel taking `(float* out, const float* in,
/// long long n)`.
fn launch(c: &Compiled, f: &str, grid: u32, block: u32, out: &Exact, input: &Exact, n: i64) {
    let mut o = out.ptr as i64;
    let mut i = input.ptr as i64;
    let mut n = n;
    let mut args: Vec<*mut c_void> = vec![
        &mut o as *mut i64 as *mut c_void,
        &mut i as *mut i64 as *mut c_void,
        &mut n as *mut i64 as *mut c_void,
    ];
    let run: libloading::Symbol<unsafe extern "C" fn(u32, u32, *mut *mut c_void)> =
        unsafe { c.lib.get(format!("gl_run_{f}").as_bytes()) }.unwrap();
    unsafe { run(grid, block, args.as_mut_ptr()) };
}

/// Kernels with one planted bug each, as the generated code would be written (`extern "C"
/// __global__`, with a launch wrapper).
const PLANTED: &str = r#"
#define KERNEL(name, body) \
  extern "C" __global__ void name(float* out, const float* in, long long n) body \
  extern "C" void gl_run_##name(unsigned grid, unsigned block, void** args) { \
    gl_launch(grid, block, [&] { name(*(float**)args[0], *(const float**)args[1], *(long long*)args[2]); }); \
  }

// Reads one element past the end of `in` (the bound should be `< n`).
KERNEL(read_past_end, {
  const long long i = (long long)blockIdx.x * 32 + threadIdx.x;
  if (i <= n) out[i < n ? i : 0] = in[i];
})

// A 16-byte vector load one float into the buffer: not 16-byte aligned.
KERNEL(misaligned_vector, {
  const long long i = (long long)blockIdx.x * 32 + threadIdx.x;
  if (i * 4 + 8 <= n) {
    uint4 w = reinterpret_cast<const uint4*>(in + 1 + i * 4)[0];
    out[i] = __int_as_float((int)w.x);
  }
})

// An int32 linear index that wraps past 2^31 (blocks of 2^16 rows of 2^16 columns).
KERNEL(int32_index_wraps, {
  const int row = (int)blockIdx.x * 65536;
  const int i = row * 65536 + (int)threadIdx.x;
  if (threadIdx.x == 0 && i >= 0) out[0] = in[0];
})

// Threads t < 16 fill their slot of shared memory; every thread reads its own.
KERNEL(uninitialized_shared, {
  __shared__ float s[32];
  if (threadIdx.x < 16) s[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x];
})

// Each thread reads its right neighbour's slot and then overwrites its own, with no barrier
// between the reads and the writes: right only when every thread reads before its left
// neighbour writes (an order the GPU does not promise).
KERNEL(missing_barrier, {
  __shared__ float s[32];
  s[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  if (threadIdx.x + 1 < 32) {
    const float right = s[threadIdx.x + 1];
    s[threadIdx.x] = 2.0f * right;
  }
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
})

// Block b adds its value to what block b - 1 wrote: right only when blocks run in order.
KERNEL(blocks_in_order, {
  if (threadIdx.x == 0) out[blockIdx.x] = in[blockIdx.x] + (blockIdx.x > 0 ? out[blockIdx.x - 1] : 0.0f);
})

// A warp-synchronous tree sum in shared memory with neither barriers nor shuffles between steps.
KERNEL(warp_synchronous_sum, {
  __shared__ float s[64];
  s[threadIdx.x] = in[threadIdx.x];
  s[threadIdx.x + 32] = 0.0f;
  for (int o = 16; o > 0; o >>= 1) s[threadIdx.x] += s[threadIdx.x + o];
  if (threadIdx.x == 0) out[0] = s[0];
})
"#;

/// The outputs of `f` over `seeds` schedules (fresh inputs 1, 2, …, outputs zeroed each time).
fn outputs(c: &Compiled, f: &str, grid: u32, block: u32, n: usize, seeds: &[u64]) -> Vec<Vec<f32>> {
    seeds
        .iter()
        .map(|&seed| {
            c.configure(seed);
            let input = Exact::floats(&(1..=n).map(|v| v as f32).collect::<Vec<_>>());
            let out = Exact::new(n * 4);
            launch(c, f, grid, block, &out, &input, n as i64);
            out.read_floats()
        })
        .collect()
}

#[test]
fn a_race_a_dependency_between_blocks_and_warp_synchronous_code_change_the_results() {
    let c = build_source("planted", PLANTED, false);
    let seeds: Vec<u64> = (1..=4).collect();
    // Right in order (seed 0): the fixed order the emulation used to have hid these.
    let in_order = |f: &str, grid, n| outputs(&c, f, grid, 32, n, &[0]).remove(0);
    let right: Vec<f32> = (0..32)
        .map(|t| if t < 31 { 2.0 * (t + 2) as f32 } else { 32.0 })
        .collect();
    assert_eq!(in_order("missing_barrier", 1, 32), right);
    let prefix: Vec<f32> = (1..=32).map(|b| (b * (b + 1) / 2) as f32).collect();
    assert_eq!(in_order("blocks_in_order", 32, 32), prefix);
    for (f, grid, want) in [
        ("missing_barrier", 1, right.clone()),
        ("blocks_in_order", 32, prefix.clone()),
    ] {
        let got = outputs(&c, f, grid, 32, 32, &seeds);
        assert!(
            got.iter().any(|g| *g != want),
            "{f}: every seeded schedule gave the in-order result"
        );
    }
    // The warp-synchronous sum is wrong in any order of the fibers; the sum of 1..=32 is 528.
    for got in outputs(&c, "warp_synchronous_sum", 1, 32, 32, &[0, 1, 2]) {
        assert_ne!(got[0], 528.0, "warp-synchronous sum");
    }
}

#[test]
fn shared_memory_no_thread_wrote_reads_as_poison() {
    let c = build_source("planted", PLANTED, false);
    // Two blocks: the second must not see what the first left in shared memory either.
    for got in outputs(&c, "uninitialized_shared", 2, 32, 64, &[0, 1]) {
        for b in 0..2 {
            for t in 0..32 {
                let v = got[b * 32 + t];
                if t < 16 {
                    assert_eq!(v, (t + 1) as f32);
                } else {
                    assert!(
                        v.is_nan(),
                        "block {b} thread {t} read {v} from unwritten shared memory"
                    );
                }
            }
        }
    }
}

/// Runs planted kernel `f` in a sanitized child process; returns its exit status and stderr.
fn in_sanitized_child(test: &str, f: &str) -> Option<(Option<i32>, String)> {
    let out = sanitized(test, &[("PLANTED_KERNEL", f)])?;
    Some((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// In the sanitized child: runs the kernel `PLANTED_KERNEL` names (the parent checks the report).
fn run_planted_in_child() {
    let f = std::env::var("PLANTED_KERNEL").unwrap();
    let c = emu::build_source("planted-sanitized", PLANTED, true);
    let n = 64usize;
    let input = Exact::floats(&(1..=n).map(|v| v as f32).collect::<Vec<_>>());
    let out = Exact::new(n * 4);
    let grid = match f.as_str() {
        "int32_index_wraps" => 40000,
        // Threads up to 95: thread 64 reads in[64].
        "read_past_end" => 3,
        _ => 2,
    };
    if f == "int32_index_wraps" {
        // Only the blocks past the wrap: 32768 · 2^32 overflows int.
        c.sample(&[0, 32768]);
    }
    launch(&c, &f, grid, 32, &out, &input, n as i64);
    println!("planted kernel {f} ran to the end");
}

#[test]
fn sanitized_emulation_reports_reads_past_the_end_misaligned_vectors_and_wrapping_indices() {
    const TEST: &str =
        "sanitized_emulation_reports_reads_past_the_end_misaligned_vectors_and_wrapping_indices";
    if emu::asan_loaded() {
        return run_planted_in_child();
    }
    for (f, report) in [
        ("read_past_end", "heap-buffer-overflow"),
        ("misaligned_vector", "misaligned address"),
        ("int32_index_wraps", "signed integer overflow"),
    ] {
        let (code, stderr) = in_sanitized_child(TEST, f).unwrap();
        assert!(
            code.is_some_and(|c| c != 0) && stderr.contains(report),
            "{f}: expected a report of '{report}', got exit {code:?}:\n{stderr}"
        );
        // The report names the kernel's source line.
        assert!(stderr.contains("kernels.cpp"), "{f}: {stderr}");
    }
}

#[test]
fn a_correct_kernel_runs_clean_under_the_sanitizers() {
    const TEST: &str = "a_correct_kernel_runs_clean_under_the_sanitizers";
    if emu::asan_loaded() {
        let c = emu::build_source(
            "clean-sanitized",
            &PLANTED.replace("if (i <= n) out", "if (i < n) out"),
            true,
        );
        let input = Exact::floats(&[1.0; 64]);
        let out = Exact::new(64 * 4);
        launch(&c, "read_past_end", 2, 32, &out, &input, 64);
        assert_eq!(out.read_floats(), vec![1.0; 64]);
        println!("clean run finished");
        return;
    }
    let out = sanitized(TEST, &[]).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("clean run finished"),
        "{}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
}
