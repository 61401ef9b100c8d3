//! `guardless check GRAPH`, run as a user would.

mod common;

use common::{example, guardless};

#[test]
fn check_prints_symbols_inputs_ops_and_outputs() {
    let (ok, out, err) = guardless(&["check", &example("rms_norm.unbacked.json")]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("graph 'rms_norm': 2 inputs, 8 nodes, 1 outputs\n"),
        "{out}"
    );
    assert!(
        out.contains("n        unbacked  range [0, 65536]  optimization hint 4096"),
        "{out}"
    );
    assert!(out.contains("x        bf16[n, 4096]  user"), "{out}");
    assert!(out.contains("aten.mul.Tensor                  x2"), "{out}");
    assert!(out.contains("inferred:\n"), "{out}");
    assert!(
        out.contains("ms           aten.mean.dim                        f32[n, 1]"),
        "{out}"
    );
    let (ok, out, _) = guardless(&["check", &example("rms_norm.backed.json")]);
    assert!(
        ok && out.contains("n        backed    range [1, 65536]  hint 512"),
        "{out}"
    );
}

#[test]
fn check_reports_bad_graphs_with_the_file_and_position() {
    let dir = std::env::temp_dir().join(format!("guardless-cli-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        "{\n  \"format\": \"guardless-graph\",\n  \"version\": 1,\n  \"inputs\": [,]\n}\n",
    )
    .unwrap();
    let (ok, _, err) = guardless(&["check", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("bad.json") && err.contains("line 4, column 14"),
        "{err}"
    );
    let stated = dir.join("stated.json");
    std::fs::write(
        &stated,
        r#"{"format": "guardless-graph", "version": 1, "symbols": [{"name": "n", "kind": "unbacked"}],
            "inputs": [{"name": "x", "dtype": "f32", "shape": ["n", 4]}],
            "nodes": [{"name": "y", "op": "aten.neg.default", "args": {"self": {"tensor": "x"}}, "shape": ["n", 3]}],
            "outputs": [{"tensor": "y"}]}"#,
    )
    .unwrap();
    let (ok, _, err) = guardless(&["check", stated.to_str().unwrap()]);
    assert!(
        !ok && err.contains("node 'y' (aten.neg.default): stated shape [n, 3], inferred [n, 4]"),
        "{err}"
    );
    let (ok, _, err) = guardless(&["check", dir.join("missing.json").to_str().unwrap()]);
    assert!(!ok && err.contains("missing.json"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A name with a newline and a preprocessor line in it: `check` and `compile` refuse the graph,
/// naming where, and print no raw control character.
#[test]
fn names_with_control_characters_are_refused_and_printed_escaped() {
    let dir = std::env::temp_dir().join(format!("guardless-cli-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("hostile.json");
    std::fs::write(
        &bad,
        r#"{"format": "guardless-graph", "version": 1, "name": "h",
            "inputs": [{"name": "x", "dtype": "f32", "shape": [4]}],
            "nodes": [{"name": "s\n#define expf(x) (1.0f)\n", "op": "aten._softmax.default",
                       "args": {"self": {"tensor": "x"}, "dim": 0, "half_to_float": false}}],
            "outputs": [{"tensor": "s\n#define expf(x) (1.0f)\n"}]}"#,
    )
    .unwrap();
    for cmd in ["check", "compile"] {
        let (ok, out, err) = guardless(&[cmd, bad.to_str().unwrap()]);
        assert!(!ok, "{cmd} accepted it: {out}");
        assert!(
            err.contains("nodes[0].name") && err.contains("U+000A"),
            "{cmd}: {err}"
        );
        let body = err.trim_end_matches('\n');
        assert!(
            !body.chars().any(|c| c.is_control()),
            "{cmd}: raw control characters in {err:?}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
