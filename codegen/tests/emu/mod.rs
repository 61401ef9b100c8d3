//! Test support: the generated CUDA compiled as C++ against the CPU emulation of CUDA
//! (`cuda_emu.h`: a thread per CUDA thread, barriers, warp shuffles), with a C wrapper per
//! function, `gl_run_<function>(grid, block, args)`, where `args[i]` points to parameter `i`'s
//! value as `cuLaunchKernel` takes them. Shared by codegen's and the runtime's tests.

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
                Param::Symbol { .. } | Param::Derived { .. } => format!("*(long long*)args[{i}]"),
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

pub fn build(name: &str, p: &Program, m: &CudaModule) -> Compiled {
    // A directory per build: the dynamic loader hands back an already loaded library for the
    // same path, so two builds under one name would run the first one's code.
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("guardless-emu-{name}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../codegen/tests/emu/cuda_emu.h"
    );
    let src = format!("#include \"{header}\"\n{}\n{}", m.source, launchers(p, m));
    let cpp = dir.join("kernels.cpp");
    std::fs::write(&cpp, src).unwrap();
    let so = dir.join("kernels.so");
    let out = std::process::Command::new("c++")
        .args([
            "-std=c++20",
            "-O1",
            "-shared",
            "-fPIC",
            "-pthread",
            "-w",
            "-o",
        ])
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
    Compiled { lib, dir }
}
