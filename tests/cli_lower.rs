//! `guardless lower GRAPH --emit loop-ir` against golden text (`GUARDLESS_BLESS=1` rewrites the
//! golden files after a deliberate change).

use std::process::Command;

fn lower(graph: &str) -> (bool, String, String) {
    let path = format!("{}/examples/graphs/{graph}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["lower", &path, "--emit", "loop-ir"])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn loop_ir_matches_the_golden_text() {
    for name in ["rms_norm.unbacked", "rms_norm.backed"] {
        let (ok, text, err) = lower(&format!("{name}.json"));
        assert!(ok, "{name}: {err}");
        let golden = format!(
            "{}/tests/golden/{name}.loop-ir.txt",
            env!("CARGO_MANIFEST_DIR")
        );
        if std::env::var_os("GUARDLESS_BLESS").is_some() {
            std::fs::write(&golden, &text).unwrap();
        }
        let want = std::fs::read_to_string(&golden).unwrap();
        assert_eq!(
            text, want,
            "{name}: the loop IR changed; rerun with GUARDLESS_BLESS=1 if that is intended"
        );
    }
}

#[test]
fn lower_rejects_unknown_emit_and_reports_lowering_errors() {
    let path = format!(
        "{}/examples/graphs/rms_norm.unbacked.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["lower", &path, "--emit", "cuda"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected loop-ir"));
    let dir = std::env::temp_dir().join(format!("guardless-cli-lower-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let g = dir.join("histc.json");
    std::fs::write(
        &g,
        r#"{"format": "guardless-graph", "version": 1, "inputs": [{"name": "a", "dtype": "f32", "shape": [2, 3]}],
            "nodes": [{"name": "p", "op": "aten.histc.default", "args": {"self": {"tensor": "a"}, "bins": 0}}],
            "outputs": [{"tensor": "p"}]}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["lower", g.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node 'p' (aten.histc.default): bins must be a positive constant"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
