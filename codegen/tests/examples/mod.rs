//! The example graphs (`examples/graphs/`) for the codegen tests: by name, all names, and the
//! unbacked form with `n` redeclared at a given hint and kind.
#![allow(dead_code)]

use serde_json::Value;

pub fn examples_dir() -> String {
    format!("{}/../examples/graphs", env!("CARGO_MANIFEST_DIR"))
}

pub fn example(name: &str) -> String {
    std::fs::read_to_string(format!("{}/{name}.json", examples_dir())).unwrap()
}

/// The base names of the examples (`rms_norm`, …).
pub fn example_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let f = p.file_name()?.to_str()?.to_string();
            f.strip_suffix(".unbacked.json").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// The example with `n` declared `kind` at hint `h` over [0, 65536].
pub fn with_hint(name: &str, kind: &str, h: i64) -> String {
    let mut v: Value = serde_json::from_str(&example(&format!("{name}.unbacked"))).unwrap();
    for s in v["symbols"].as_array_mut().unwrap() {
        if s["name"] == "n" {
            *s = if kind == "backed" {
                serde_json::json!({"name": "n", "kind": "backed", "hint": h, "min": 0, "max": 65536})
            } else {
                serde_json::json!({"name": "n", "kind": "unbacked", "optimization_hint": h, "min": 0, "max": 65536})
            };
        }
    }
    v.to_string()
}

/// NVRTC and the CUDA headers, or why the test is skipped. Under `ci/test` (which sources
/// `.tools/env`) they must be there.
pub fn toolchain() -> Option<std::path::PathBuf> {
    let required = std::env::var_os("GUARDLESS_CUDA_INCLUDE").is_some();
    match (
        guardless_codegen::nvrtc::ensure_loaded(),
        guardless_codegen::nvrtc::cuda_include(),
    ) {
        (Ok(()), Ok(inc)) => Some(inc),
        (Err(e), _) | (_, Err(e)) => {
            assert!(
                !required,
                "the CUDA toolchain of .tools/env is unusable: {e}"
            );
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "\ntest-skipped: NVRTC: {e}");
            None
        }
    }
}
