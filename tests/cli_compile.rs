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
        err.contains("expected schedule, dot, manifest, cuda, ptx or report"),
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

/// The statements of a DOT document as this checker reads them: node declarations
/// (`id [attrs];`) and edges (`a -> b [attrs];`), with every quoted string closed and the
/// braces balanced; an error says what is malformed.
/// Node identifiers, and edges as (from, to).
type DotStatements = (Vec<String>, Vec<(String, String)>);

fn dot_statements(text: &str) -> Result<DotStatements, String> {
    let body = text
        .trim()
        .strip_prefix("digraph schedule {")
        .and_then(|t| t.strip_suffix('}'))
        .ok_or("not `digraph schedule { … }`")?;
    let (mut nodes, mut edges) = (Vec::new(), Vec::new());
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let stmt = line.strip_suffix(';').ok_or(format!("no `;`: {line}"))?;
        // Quoted strings: closed, escapes only of quotes and backslashes (or \l line ends).
        let (mut quoted, mut chars) = (false, stmt.chars());
        while let Some(c) = chars.next() {
            match (quoted, c) {
                (true, '\\') => match chars.next() {
                    Some('"' | '\\' | 'l') => {}
                    other => return Err(format!("escape \\{other:?} in {line}")),
                },
                (_, '"') => quoted = !quoted,
                (false, '{' | '}') => return Err(format!("a brace outside a label: {line}")),
                _ => {}
            }
        }
        if quoted {
            return Err(format!("an unclosed string: {line}"));
        }
        let head = stmt.split(" [").next().unwrap_or(stmt);
        let is_id = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric());
        match head.split_once(" -> ") {
            Some((a, b)) if is_id(a) && is_id(b) => edges.push((a.into(), b.into())),
            None if matches!(head, "node" | "edge") || head.starts_with("rankdir=") => {}
            None if is_id(head) => nodes.push(head.to_string()),
            _ => return Err(format!("not a statement: {line}")),
        }
    }
    Ok((nodes, edges))
}

/// `--emit dot`: for every example graph, a Graphviz graph with a node per kernel and library
/// step (as many as the text schedule counts), edges only between declared nodes, every kernel
/// reached, the outputs reached; and Graphviz's `dot` lays it out (`ci/setup` installs it; under
/// CI a missing `dot` fails, elsewhere the layout check reports itself skipped).
#[test]
fn the_schedule_as_a_graphviz_graph() {
    let dot_found = Command::new("dot").arg("-V").output().is_ok();
    if !dot_found {
        assert!(
            std::env::var_os("CI").is_none(),
            "Graphviz's dot is missing: ci/setup installs it"
        );
        eprintln!(
            "\ntest-skipped: the_schedule_as_a_graphviz_graph (layout by dot): no dot on PATH"
        );
    }
    let dir = format!("{}/examples/graphs", env!("CARGO_MANIFEST_DIR"));
    let mut graphs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    graphs.sort();
    assert!(graphs.len() >= 10, "{graphs:?}");
    for name in &graphs {
        let (ok, text, err) = compile(name, "dot");
        assert!(ok, "{name}: {err}");
        let (nodes, edges) =
            dot_statements(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        let (ok, schedule, err) = compile(name, "schedule");
        assert!(ok, "{name}: {err}");
        // "schedule: K kernels, L library calls"
        let counts: Vec<usize> = schedule
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .filter_map(|w| w.trim_end_matches(',').parse().ok())
            .collect();
        let kernels = nodes.iter().filter(|n| n.starts_with('k')).count();
        let library = nodes.iter().filter(|n| n.starts_with("lib")).count();
        assert_eq!(vec![kernels, library], counts, "{name}\n{text}");
        for (a, b) in &edges {
            assert!(
                nodes.contains(a) && nodes.contains(b),
                "{name}: edge {a} -> {b}"
            );
        }
        for n in nodes.iter().filter(|n| !n.starts_with("in")) {
            assert!(
                edges.iter().any(|(_, b)| b == n),
                "{name}: nothing flows into {n}"
            );
        }
        assert!(
            text.contains("label=\"kernel ") && text.contains(" when "),
            "{name}"
        );
        if dot_found {
            let mut child = Command::new("dot")
                .arg("-Tsvg")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && stderr.trim().is_empty(),
                "{name}: dot: {stderr}"
            );
            let svg = String::from_utf8(out.stdout).unwrap();
            // dot writes a DOCTYPE: allowed.
            let options = roxmltree::ParsingOptions {
                allow_dtd: true,
                ..Default::default()
            };
            let doc =
                roxmltree::Document::parse_with_options(&svg, options).expect("dot's SVG parses");
            let drawn = doc
                .descendants()
                .filter(|n| n.attribute("class") == Some("node"))
                .count();
            assert_eq!(
                drawn,
                nodes.len(),
                "{name}: dot drew another number of nodes"
            );
        }
    }
}

/// Names are the user's text: inside a label they are escaped, never part of the DOT syntax.
#[test]
fn dot_labels_escape_names() {
    let dir = std::env::temp_dir().join(format!("guardless-dot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let graph = dir.join("g.json");
    std::fs::write(
        &graph,
        r#"{"format": "guardless-graph", "version": 1,
            "inputs": [{"name": "x\" -> evil [label=\"", "dtype": "f32", "shape": [4]}],
            "nodes": [{"name": "y}\\", "op": "aten.exp.default", "args": {"self": {"tensor": "x\" -> evil [label=\""}}}],
            "outputs": [{"tensor": "y}\\"}]}"#,
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_guardless"))
        .args(["compile", graph.to_str().unwrap(), "--emit", "dot"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (nodes, edges) = dot_statements(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(!nodes.iter().any(|n| n == "evil"), "{text}");
    assert!(
        edges.iter().all(|(a, b)| a != "evil" && b != "evil"),
        "{text}"
    );
    assert!(text.contains(r#"x\" -> evil [label=\""#), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `--emit report`: one block per kernel with its variants' facts from NVRTC, for the GPU
/// `--gpu` names; an unknown GPU or a PTX not made by NVRTC is a clear error.
#[test]
fn the_kernel_report_is_printed_for_the_gpu_named() {
    let path = format!(
        "{}/examples/graphs/rms_norm.unbacked.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_guardless"))
            .args(["compile", &path, "--emit", "report"])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (ok, _, err) = run(&["--gpu", "a100"]);
    assert!(!ok && err.contains("--gpu a100"), "{err}");
    let (ok, _, err) = run(&["--codegen", "llvm-ptx"]);
    assert!(!ok && err.contains("--codegen cuda"), "{err}");
    if std::env::var_os("GUARDLESS_CUDA_INCLUDE").is_none() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\ntest-skipped: the_kernel_report_is_printed_for_the_gpu_named: no CUDA toolchain (ci/setup's .tools/env)"
        );
        return;
    }
    let (ok, text, err) = run(&[]);
    assert!(ok, "{err}");
    assert!(text.starts_with("report for H200 (132 SMs"), "{text}");
    assert!(
        text.contains("kernel reduction_ms_out_0: reduction: n rows × 4096"),
        "{text}"
    );
    assert!(
        text.contains("bytes 16384*n + 8192 = 67117056 at the hints"),
        "{text}"
    );
    // The variant the hint selects is starred; its loads are 16-byte words.
    let chosen = text
        .lines()
        .find(|l| l.trim_start().starts_with("*v"))
        .unwrap();
    assert!(
        chosen.contains("loads 16 B × ") && chosen.contains("0 bytes spilled"),
        "{chosen}"
    );
    let (ok, text, err) = run(&["--gpu", "114,2000,3"]);
    assert!(ok, "{err}");
    assert!(
        text.starts_with("report for the GPU given (114 SMs, 2000 GB/s, 3 µs per launch)"),
        "{text}"
    );
}
