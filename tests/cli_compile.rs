//! `guardless compile GRAPH --emit schedule|manifest` against golden text (`GUARDLESS_BLESS=1`
//! rewrites the golden files after a deliberate change).

use std::process::Command;

fn compile(graph: &str, emit: &str) -> (bool, String, String) {
    let path = format!("{}/examples/graphs/{graph}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["compile", &path, "--emit", emit])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn schedules_match_the_golden_text() {
    for name in [
        "rms_norm.unbacked",
        "fused_add_rms_norm.unbacked",
        "llama_mlp.unbacked",
        "moe_routing.unbacked",
    ] {
        let (ok, text, err) = compile(&format!("{name}.json"), "schedule");
        assert!(ok, "{name}: {err}");
        let golden = format!(
            "{}/tests/golden/{name}.schedule.txt",
            env!("CARGO_MANIFEST_DIR")
        );
        if std::env::var_os("GUARDLESS_BLESS").is_some() {
            std::fs::write(&golden, &text).unwrap();
        }
        let want = std::fs::read_to_string(&golden).unwrap();
        assert_eq!(
            text, want,
            "{name}: the schedule changed; rerun with GUARDLESS_BLESS=1 if that is intended"
        );
    }
}

#[test]
fn the_manifest_is_json_and_unknown_emits_are_refused() {
    let (ok, text, err) = compile("softmax.unbacked.json", "manifest");
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["format"], "guardless-manifest");
    assert!(v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["kind"] == "kernel"));
    let (ok, _, err) = compile("softmax.unbacked.json", "llvm");
    assert!(!ok);
    assert!(
        err.contains("expected schedule, manifest, cuda or ptx"),
        "{err}"
    );
    let (ok, _, err) = compile("softmax.unbacked.json", "cuda,schedule");
    assert!(!ok);
    assert!(err.contains("need --out-dir"), "{err}");
}

/// `--out-dir` writes the compiled artifact: schedule, manifest, CUDA source, and — with NVRTC
/// (under ci/test) — PTX, CUBIN and the compile log.
#[test]
fn out_dir_holds_the_compiled_artifact() {
    let dir = std::env::temp_dir().join(format!("guardless-artifact-{}", std::process::id()));
    let path = format!(
        "{}/examples/graphs/rms_norm.unbacked.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let with_ptx = std::env::var_os("GUARDLESS_CUDA_INCLUDE").is_some();
    let emit = if with_ptx {
        "schedule,manifest,cuda,ptx"
    } else {
        println!("no ptx: GUARDLESS_CUDA_INCLUDE is not set (run ci/setup, source .tools/env)");
        "schedule,manifest,cuda"
    };
    let out = Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["compile", &path, "--emit", emit, "--out-dir"])
        .arg(&dir)
        .env("GUARDLESS_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cu = std::fs::read_to_string(dir.join("kernels.cu")).unwrap();
    assert!(cu.contains("extern \"C\" __global__"));
    assert!(dir.join("schedule.txt").exists() && dir.join("manifest.json").exists());
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("kernels.json")).unwrap()).unwrap();
    let entries = index["entries"].as_array().unwrap();
    assert!(!entries.is_empty());
    // Every generated entry names a function defined in the source.
    for e in entries.iter().filter(|e| e["generated"] == true) {
        let name = e["name"].as_str().unwrap();
        assert!(cu.contains(&format!(" {name}(")), "{name}");
    }
    if with_ptx {
        let ptx = std::fs::read_to_string(dir.join("kernels.ptx")).unwrap();
        assert!(ptx.contains(".version 9.0"), "PTX version");
        assert!(std::fs::metadata(dir.join("kernels.cubin")).unwrap().len() > 0);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn llvm_ptx_is_a_second_ptx_path() {
    let g = format!(
        "{}/examples/graphs/softmax.unbacked.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["compile", &g, "--codegen", "llvm-ptx", "--emit", "ptx"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if cfg!(feature = "llvm") {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(".version 8.5") && text.contains(".entry k0_"),
            "{text}"
        );
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("no LLVM"), "{err}");
    }
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["compile", &g, "--codegen", "llvm-ptx", "--emit", "cuda"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not CUDA C"));
    let unknown = std::process::Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["compile", &g, "--codegen", "tvm", "--emit", "ptx"])
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        err.contains("--codegen tvm: expected cuda or llvm-ptx"),
        "{err}"
    );
}

/// `GUARDLESS_CACHE_DIR=''` turns the disk cache off: compiling PTX writes nothing into the
/// working directory (it once wrote entries there).
#[test]
fn an_empty_cache_dir_disables_the_cache() {
    if std::env::var_os("GUARDLESS_CUDA_INCLUDE").is_none() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\ntest-skipped: an_empty_cache_dir_disables_the_cache: no CUDA toolchain (ci/setup's .tools/env)"
        );
        return;
    }
    let cwd = std::env::temp_dir().join(format!("guardless-cache-cwd-{}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    let path = format!(
        "{}/examples/graphs/softmax.unbacked.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["compile", &path, "--emit", "ptx"])
        .current_dir(&cwd)
        .env("GUARDLESS_CACHE_DIR", "")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(&cwd).unwrap().collect();
    assert!(
        left.is_empty(),
        "written into the working directory: {left:?}"
    );
    std::fs::remove_dir_all(&cwd).ok();
}
