//! `guardless compile GRAPH --emit schedule,dot,manifest,cuda,ptx,report [--out-dir DIR]
//! [--arch sm_90] [--codegen cuda|llvm-ptx] [--gpu h200]`:
//! the scheduler's decisions as text or as a Graphviz graph, the launch manifest (JSON), the generated CUDA C, and the
//! PTX/CUBIN NVRTC makes of it. With `--out-dir`, every requested product is written there
//! (`schedule.txt`, `schedule.dot`, `manifest.json`, `kernels.cu` with `kernels.json` — each variant's function,
//! parameters and error messages —, `kernels.ptx`, `kernels.cubin`, `compile.log`); without, the
//! one requested product is printed. NVRTC results go through the disk cache
//! (`$GUARDLESS_CACHE_DIR`, else `$XDG_CACHE_HOME/guardless`, else `~/.cache/guardless`).
//! `report` compiles through NVRTC too and writes `report.txt`: per kernel and variant, what the
//! compiled code will cost on the GPU `--gpu` names ([`guardless_codegen::report`]).
//! `--codegen llvm-ptx` makes the PTX through LLVM's NVPTX backend instead (`kernels.llvm.ptx`,
//! one thread per row): a cross-check of the code generator, not the GPU path.

use std::path::{Path, PathBuf};

use guardless_codegen::build::build;
use guardless_codegen::cache::Cache;
use guardless_codegen::cuda::generate;
use guardless_codegen::report::{report, GpuModel};
use guardless_codegen::schedule::schedule;
use guardless_ir::graph::Graph;

const PRODUCTS: [&str; 6] = ["schedule", "dot", "manifest", "cuda", "ptx", "report"];

pub fn run(
    path: &Path,
    emit: &str,
    out_dir: Option<&PathBuf>,
    arch: &str,
    codegen: &str,
    gpu: &str,
) -> Result<String, String> {
    if !matches!(codegen, "cuda" | "llvm-ptx") {
        return Err(format!("--codegen {codegen}: expected cuda or llvm-ptx"));
    }
    let gpu = GpuModel::parse(gpu)?;
    let wanted: Vec<&str> = emit.split(',').map(str::trim).collect();
    if let Some(w) = wanted.iter().find(|w| !PRODUCTS.contains(w)) {
        return Err(format!(
            "--emit {w}: expected schedule, dot, manifest, cuda, ptx or report (comma-separated)"
        ));
    }
    if out_dir.is_none() && wanted.len() != 1 {
        return Err("several products need --out-dir".into());
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let graph = Graph::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut program =
        guardless_ir::lower::lower(&graph).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut s = schedule(&mut program);
    // NVRTC first when PTX is wanted: a kernel that spills gets a smaller configuration, and the
    // schedule, the manifest and the CUDA written are the ones compiled.
    if codegen != "cuda" && wanted.contains(&"report") {
        return Err("--emit report reads NVRTC's output: it needs --codegen cuda".into());
    }
    let built = if codegen == "cuda" && (wanted.contains(&"ptx") || wanted.contains(&"report")) {
        Some(
            build(&mut program, &mut s, &Cache::from_env(), arch)
                .map_err(|e| format!("{}: {e}", path.display()))?,
        )
    } else {
        None
    };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if out_dir.is_some() {
        // The directory is a compiled artifact: `guardless run --artifact DIR` reads the graph
        // from it.
        files.push(("graph.json".to_string(), text.clone().into_bytes()));
    }
    if wanted.contains(&"schedule") {
        files.push(("schedule.txt".to_string(), s.to_text(&program).into_bytes()));
    }
    if wanted.contains(&"dot") {
        files.push(("schedule.dot".to_string(), s.to_dot(&program).into_bytes()));
    }
    if wanted.contains(&"manifest") {
        let m = serde_json::to_string_pretty(&s.manifest(&program)).map_err(|e| e.to_string())?;
        files.push(("manifest.json".to_string(), m.into_bytes()));
    }
    if codegen == "llvm-ptx" {
        if wanted.contains(&"cuda") {
            return Err("--codegen llvm-ptx makes PTX, not CUDA C: drop cuda from --emit".into());
        }
        if wanted.contains(&"ptx") {
            files.push((
                "kernels.llvm.ptx".to_string(),
                llvm_ptx(&mut program, &s, arch, path)?,
            ));
        }
    } else if wanted
        .iter()
        .any(|w| matches!(*w, "cuda" | "ptx" | "report"))
    {
        let (module, units, fallbacks) = match built {
            Some(b) => (b.module, b.units, b.fallbacks),
            None => (generate(&mut program, &s), Vec::new(), Vec::new()),
        };
        if wanted.contains(&"report") {
            let r = report(&mut program, &s, &module, &units, &gpu);
            files.push(("report.txt".to_string(), r.to_text().into_bytes()));
        }
        if wanted.contains(&"cuda") {
            files.push(("kernels.cu".to_string(), module.source.clone().into_bytes()));
            // What the launcher needs beside the manifest: the function of each variant, its
            // parameters (derived sizes with their expressions), the error messages by code, and
            // the configurations a spill made the compile fall back to (loading the artifact
            // applies them).
            let index = serde_json::json!({
                "entries": module.entries,
                "errors": module.errors,
                "fallbacks": fallbacks,
            });
            let index = serde_json::to_string_pretty(&index).map_err(|e| e.to_string())?;
            files.push(("kernels.json".to_string(), index.into_bytes()));
        }
        if wanted.contains(&"ptx") {
            // Through the disk cache: an unchanged graph compiles once per machine.
            // Translation units compile in parallel; unit i is kernels.i.{ptx,cubin} when there
            // are several.
            let several = units.len() > 1;
            for (i, (c, _)) in units.into_iter().enumerate() {
                let name = |ext: &str| -> String {
                    if several {
                        format!("kernels.{i}.{ext}")
                    } else {
                        format!("kernels.{ext}")
                    }
                };
                files.push((name("ptx"), c.ptx.into_bytes()));
                files.push((name("cubin"), c.cubin));
                files.push((name("log"), c.log.into_bytes()));
            }
        }
    }
    match out_dir {
        None => {
            let (_, bytes) = files.swap_remove(0);
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let mut written = Vec::new();
            for (name, bytes) in files {
                let f = dir.join(&name);
                std::fs::write(&f, bytes).map_err(|e| format!("{}: {e}", f.display()))?;
                written.push(f.display().to_string());
            }
            Ok(format!("wrote {}\n", written.join(", ")))
        }
    }
}

/// PTX through LLVM's NVPTX backend (a cross-check of the code generator; feature `llvm`).
#[cfg(feature = "llvm")]
fn llvm_ptx(
    program: &mut guardless_ir::loop_ir::Program,
    s: &guardless_codegen::schedule::Schedule,
    arch: &str,
    path: &Path,
) -> Result<Vec<u8>, String> {
    let m = guardless_runtime::llvm::ptx::generate(program, s, arch)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(m.ptx.into_bytes())
}

#[cfg(not(feature = "llvm"))]
fn llvm_ptx(
    _: &mut guardless_ir::loop_ir::Program,
    _: &guardless_codegen::schedule::Schedule,
    _: &str,
    _: &Path,
) -> Result<Vec<u8>, String> {
    Err("--codegen llvm-ptx: this build has no LLVM (build with --features llvm)".into())
}
