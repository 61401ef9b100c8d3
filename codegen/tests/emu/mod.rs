#![allow(dead_code)]
//! Test support: the generated CUDA compiled as C++ against the CPU emulation of CUDA
//! (`cuda_emu.h`: a thread per CUDA thread, barriers, warp shuffles), with a C wrapper per
//! function, `gl_run_<function>(grid, block, args)`, where `args[i]` points to parameter `i`'s
//! value as `cuLaunchKernel` takes them. Shared by codegen's and the runtime's tests.

pub mod sampled;

use guardless_codegen::cuda::{storage_type, CudaModule, Param};
use guardless_ir::loop_ir::Program;

/// C++ wrappers `gl_run_<function>(grid, block, args)` that unpack arguments and launch.
pub fn launchers(p: &Program, m: &CudaModule) -> String {
    let mut out = String::new();
    let mut done = std::collections::HashSet::new();
    for e in m.entries.iter().filter(|e| e.generated) {
        if !done.insert(e.name.clone()) {
            continue;
        }
        let args: Vec<String> = e
            .params
            .iter()
            .enumerate()
            .map(|(i, prm)| match prm {
                Param::Buffer { buffer, written } => {
                    let b = p.buffers.iter().find(|b| &b.name == buffer).unwrap();
                    let t = storage_type(b.dtype);
                    let q = if *written { "" } else { "const " };
                    format!("*({q}{t}**)args[{i}]")
                }
                Param::Symbol { .. }
                | Param::Derived { .. }
                | Param::FastDivisor { .. }
                | Param::ErrorBase { .. } => {
                    format!("*(long long*)args[{i}]")
                }
                Param::Error => format!("*(int**)args[{i}]"),
                Param::Workspace { .. } => format!("*(char**)args[{i}]"),
                Param::Phase => format!("*(long long*)args[{i}]"),
            })
            .collect();
        out.push_str(&format!(
            "extern \"C\" void gl_run_{n}(unsigned grid, unsigned block, void** args) {{\n  gl_launch(grid, block, [&] {{ {n}({a}); }});\n}}\n",
            n = e.name,
            a = args.join(", ")
        ));
    }
    out
}

pub struct Compiled {
    pub lib: libloading::Library,
    dir: std::path::PathBuf,
}

impl Drop for Compiled {
    /// The build's directory goes with it (the loaded library stays mapped until unloaded).
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Compiled {
    /// The schedule's seed for the launches that follow (0: blocks and threads in order).
    pub fn configure(&self, seed: u64) {
        let f: libloading::Symbol<unsafe extern "C" fn(u64)> =
            unsafe { self.lib.get(b"gl_emu_configure") }.unwrap();
        unsafe { f(seed) };
    }

    /// Only `blocks` run in the launches that follow (empty: every block).
    pub fn sample(&self, blocks: &[u32]) {
        let f: libloading::Symbol<unsafe extern "C" fn(*const u32, u32)> =
            unsafe { self.lib.get(b"gl_emu_sample") }.unwrap();
        unsafe { f(blocks.as_ptr(), blocks.len() as u32) };
    }
}

/// The seed of the emulation's schedule: `GUARDLESS_EMU_SEED` (to explore), else 1.
pub fn default_seed() -> u64 {
    std::env::var("GUARDLESS_EMU_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// Builds the emulation of `m` (with C wrappers per function) as a shared library and loads it,
/// its schedule seeded by [`default_seed`].
pub fn build(name: &str, p: &Program, m: &CudaModule) -> Compiled {
    let src = format!("{}\n{}", m.source, launchers(p, m));
    build_source(name, &src, false)
}

/// The same built with AddressSanitizer and UndefinedBehaviorSanitizer: the process must have the
/// ASan runtime loaded first (see [`sanitized`]).
pub fn build_sanitized(name: &str, p: &Program, m: &CudaModule) -> Compiled {
    let src = format!("{}\n{}", m.source, launchers(p, m));
    build_source(name, &src, true)
}

/// Builds C++ `source` against the emulation header (sanitized or not) and loads it.
pub fn build_source(name: &str, source: &str, sanitize: bool) -> Compiled {
    // A directory per build: the dynamic loader hands back an already loaded library for the
    // same path, so two builds under one name would run the first one's code.
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("guardless-emu-{name}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header = precompiled_header(sanitize).display().to_string();
    let src = format!("#include \"{header}\"\n{source}\n");
    let cpp = dir.join("kernels.cpp");
    std::fs::write(&cpp, src).unwrap();
    let so = dir.join("kernels.so");
    let mut cmd = std::process::Command::new("c++");
    cmd.args(FLAGS).arg("-shared");
    if sanitize {
        assert!(
            asan_loaded(),
            "a sanitized emulation needs the ASan runtime in the process (emu::sanitized)"
        );
        cmd.args(SANITIZE);
    }
    let out = cmd
        .arg("-o")
        .arg(&so)
        .arg(&cpp)
        .output()
        .expect("a C++ compiler (c++)");
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let c = Compiled { lib, dir };
    c.configure(default_seed());
    c
}

/// The emulation header.
const HEADER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../codegen/tests/emu/cuda_emu.h"
);

/// The flags every unsanitized build shares (the precompiled header's must be the same). No
/// optimization: a test builds the emulation of each graph it runs (a hundred in one binary), and
/// at `-O1` the compile took twice the time the kernels then ran (lines_emulated: 109 s at
/// `-O1` without the precompiled header, 57 s at `-O0` with it).
const FLAGS: [&str; 5] = ["-std=c++20", "-O0", "-fPIC", "-pthread", "-w"];

/// What a sanitized build adds to [`FLAGS`].
const SANITIZE: [&str; 4] = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-g",
];

/// A copy of the emulation header with its precompiled form beside it (`cuda_emu.h.gch`, built
/// with [`FLAGS`], and [`SANITIZE`] for sanitized builds), which the compiler reads instead of
/// parsing the header and the standard library's again: most of a small build's time (a
/// sanitized one's: 2.0 s as text, 0.65 s precompiled). Built once per header, flags and compiler, in
/// a directory named by their hash that every test process shares (it took each emulating test
/// binary 3.5 s): made under a private name, then renamed into place, so a process sees it whole
/// or not at all. Without the precompiled form (the compiler could not make it) the copy is
/// included as text, which is the same code.
fn precompiled_header(sanitize: bool) -> &'static std::path::Path {
    static PCH: [std::sync::OnceLock<std::path::PathBuf>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    PCH[usize::from(sanitize)].get_or_init(|| {
        let sanitizing: &[&str] = if sanitize { &SANITIZE } else { &[] };
        use std::hash::{Hash, Hasher};
        let header = std::fs::read(HEADER).unwrap();
        let compiler = std::process::Command::new("c++")
            .arg("--version")
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default();
        let mut h = std::hash::DefaultHasher::new();
        (&header, &compiler, FLAGS, sanitizing).hash(&mut h);
        let name = format!("guardless-emu-pch-{:016x}", h.finish());
        let shared = std::env::temp_dir().join(&name);
        if shared.join("cuda_emu.h.gch").exists() {
            return shared.join("cuda_emu.h");
        }
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("cuda_emu.h");
        std::fs::write(&copy, &header).unwrap();
        let built = std::process::Command::new("c++")
            .args(FLAGS)
            .args(sanitizing)
            .args(["-x", "c++-header"])
            .arg(&copy)
            .arg("-o")
            .arg(dir.join("cuda_emu.h.gch"))
            .status();
        if !built.is_ok_and(|s| s.success()) {
            let _ = std::fs::remove_file(dir.join("cuda_emu.h.gch"));
            return copy;
        }
        // Another process may have put its (identical) build in place first: then use that one.
        if std::fs::rename(&dir, &shared).is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        shared.join("cuda_emu.h")
    })
}

/// Whether this process runs with the ASan runtime (preloaded by [`sanitized`]).
pub fn asan_loaded() -> bool {
    std::env::var_os(SANITIZED_CHILD).is_some()
}

const SANITIZED_CHILD: &str = "GUARDLESS_EMU_SANITIZED_CHILD";

/// The ASan runtime of the C++ compiler (`c++ -print-file-name=libasan.so`).
fn libasan() -> std::path::PathBuf {
    let out = std::process::Command::new("c++")
        .arg("-print-file-name=libasan.so")
        .output()
        .expect("a C++ compiler (c++)");
    let path = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        path.is_absolute() && path.exists(),
        "the C++ compiler's libasan.so ({}) is missing: install its sanitizer runtime (Debian: libasan8)",
        path.display()
    );
    std::fs::canonicalize(path).unwrap()
}

/// Runs test `test` (this test binary's exact name) again in a child process that has the ASan
/// runtime loaded first, so that sanitized emulations can be loaded there. In the child, returns
/// `None` (the caller goes on with the test's body); in the parent, the child's output.
pub fn sanitized(test: &str, env: &[(&str, &str)]) -> Option<std::process::Output> {
    if asan_loaded() {
        return None;
    }
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(SANITIZED_CHILD, "1")
        .env("LD_PRELOAD", libasan())
        // Rust's own allocations are not the kernels' business; a report stops the child.
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=0:abort_on_error=0:halt_on_error=1:exitcode=86",
        )
        .env(
            "UBSAN_OPTIONS",
            "print_stacktrace=1:halt_on_error=1:exitcode=87",
        );
    for (k, v) in env {
        cmd.env(k, v);
    }
    Some(cmd.output().unwrap())
}
