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

/// The path of `tests/graphs/NAME` (graphs the tests of several crates share).
pub fn test_graph(name: &str) -> String {
    format!("{}/tests/graphs/{name}", env!("CARGO_MANIFEST_DIR"))
}
