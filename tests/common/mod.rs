//! What the command-line tests share: running the built `guardless` binary as a user would, and
//! the paths of the example graphs. Each test file uses the part it needs.
#![allow(dead_code)]

use std::process::Command;

/// Runs `guardless ARGS`: whether it succeeded, its stdout and its stderr.
pub fn guardless(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The path of `examples/graphs/NAME`.
pub fn example(name: &str) -> String {
    format!("{}/examples/graphs/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Writes a graph `x + y` over [s0, 4] and [s1, 4] with backed sizes into a fresh directory
/// named after `tag`: s1's example value 1 makes lowering broadcast y and guard `s1 == 1`.
/// Returns (directory, graph path).
pub fn guarded_broadcast_graph(tag: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("guardless-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bcast.json");
    std::fs::write(
        &path,
        r#"{"format": "guardless-graph", "version": 1, "name": "bcast",
        "symbols": [{"name": "s0", "kind": "backed", "hint": 6, "min": 1, "max": 1000},
                    {"name": "s1", "kind": "backed", "hint": 1, "min": 1, "max": 1000}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["s0", 4]},
                   {"name": "y", "dtype": "f32", "shape": ["s1", 4]}],
        "nodes": [{"name": "out", "op": "aten.add.Tensor",
                   "args": {"self": {"tensor": "x"}, "other": {"tensor": "y"}}}],
        "outputs": [{"tensor": "out"}]}"#,
    )
    .unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}
