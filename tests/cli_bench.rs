//! `guardless bench GRAPH --sizes … [--compare-backed] [--json]`, as a user runs it.

mod common;

use common::{example, guardless, test_graph};

#[test]
fn one_compile_timed_at_every_size_against_specialized_compiles() {
    let path = example("rms_norm.unbacked.json");
    let args = [
        "bench",
        &path,
        "--device",
        "cpu",
        "--sizes",
        "n=0,1,33",
        "--compare-backed",
        "--warmup",
        "0",
        "--iters",
        "2",
    ];
    let (ok, out, err) = guardless(&args);
    assert!(ok, "{err}");
    assert!(out.contains("compiled once for the CPU"), "{out}");
    assert!(
        out.contains("unb/stat") && out.contains("unb/back"),
        "{out}"
    );
    let rows: Vec<&str> = out.lines().skip(2).collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows[2].trim_start().starts_with("33 "), "{out}");

    let mut json_args = args.to_vec();
    json_args.push("--json");
    let (ok, out, err) = guardless(&json_args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for (r, n) in rows.iter().zip([0u64, 1, 33]) {
        assert_eq!(r["size"], n);
        // bf16 x [n, 4096] and w [4096] read once, out [n, 4096] written once.
        assert_eq!(r["compulsory_bytes"], 2 * (n * 4096 * 2) + 4096 * 2);
        for k in ["unbacked_us", "backed_us", "static_us"] {
            assert!(r[k].as_f64().unwrap() >= 0.0, "{k}: {r}");
        }
        let ratio = r["unbacked_over_static"].as_f64().unwrap();
        let want = r["unbacked_us"].as_f64().unwrap() / r["static_us"].as_f64().unwrap();
        assert!((ratio - want).abs() < 1e-9, "{r}");
    }
    assert!(v["compile_s"].as_f64().unwrap() > 0.0);
    // Unbacked: one compile served every size.
    assert_eq!(v["recompiles"], 0);
    assert!(rows.iter().all(|r| r["recompiled"].is_null()));
}

#[test]
fn a_backed_graph_recompiles_where_its_guard_fails_and_counts_it() {
    let path = test_graph("guarded_broadcast.json");
    let args = [
        "bench",
        &path,
        "--device",
        "cpu",
        "--sizes",
        "s1=1,6,1,6",
        "--warmup",
        "0",
        "--iters",
        "1",
    ];
    let (ok, out, err) = guardless(&args);
    assert!(ok, "{err}");
    assert!(out.contains("compiled for the CPU"), "{out}");
    assert!(
        out.contains("1 recompile: a guard of the backed compile failed at s1=6 "),
        "{out}"
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let (ok, out, err) = guardless(&json_args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["recompiles"], 1);
    let recompiled: Vec<&serde_json::Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["recompiled"])
        .collect();
    assert_eq!(recompiled[0], &serde_json::Value::Null);
    assert_eq!(recompiled[1], "s1 == 1");
    assert!(recompiled[2].is_null() && recompiled[3].is_null(), "{out}");
}

#[test]
fn bad_bench_arguments_are_clear_errors() {
    let path = example("softmax.unbacked.json");
    for (args, want) in [
        (vec!["--sizes", "m=1"], "the graph has no symbol 'm'"),
        (vec!["--sizes", "n=1,x"], "'x' is not an integer"),
        (vec!["--sizes", "n"], "expected NAME=V"),
        (vec!["--sizes", "n=-3"], "outside its range"),
        (
            vec!["--sizes", "n=3", "--device", "tpu"],
            "expected cuda, cpu or auto",
        ),
        (vec!["--sizes", "n=3", "--iters", "0"], "at least 1"),
        (
            vec!["--sizes", "n=3", "--device", "cpu", "--cuda-graphs"],
            "CUDA graphs are the GPU's; the device here is cpu",
        ),
    ] {
        let mut all = vec!["bench", path.as_str()];
        all.extend(args.iter().copied());
        let (ok, _, err) = guardless(&all);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `--plot`: an SVG that parses as XML with the three timed lines, both panels' axes and the
/// legends; a PNG of the plot's size. Anything else is refused before timing.
#[test]
fn the_plot_is_an_svg_or_a_png_of_the_table() {
    let dir = std::env::temp_dir().join(format!("guardless-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = example("rms_norm.unbacked.json");
    let bench = |plot: &std::path::Path, compare: bool| {
        let plot = plot.to_str().unwrap().to_string();
        let mut args = vec![
            "bench", &path, "--device", "cpu", "--sizes", "n=1,8,64", "--warmup", "0", "--iters",
            "1", "--plot", &plot,
        ];
        if compare {
            args.push("--compare-backed");
        }
        let (ok, _, err) = guardless(&args);
        assert!(ok, "{err}");
    };
    let svg = dir.join("bench.svg");
    bench(&svg, true);
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for want in [
        "unbacked (compiled once)",
        "backed (compiled per size)",
        "static (compiled per size)",
        "unbacked / static",
        "unbacked / backed",
        "µs per call (median)",
        "n",
    ] {
        assert!(texts.contains(&want), "no text {want:?} in {texts:?}");
    }
    // Three timed lines and two ratio lines (plus the line at 1 and the legend's samples), each
    // through its three sizes.
    let lines: Vec<usize> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .map(|n| {
            n.attribute("points")
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .collect();
    assert!(lines.iter().filter(|&&k| k == 3).count() >= 5, "{lines:?}");

    // Without --compare-backed: the unbacked line alone, no ratio panel.
    bench(&svg, false);
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let texts: Vec<&str> = doc
        .descendants()
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    assert!(texts.contains(&"unbacked (compiled once)"), "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("static")), "{texts:?}");

    let png = dir.join("bench.png");
    bench(&png, true);
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!((&bytes[12..16], be(16), be(20)), (&b"IHDR"[..], 960, 720));

    let (ok, _, err) = guardless(&[
        "bench",
        &path,
        "--device",
        "cpu",
        "--sizes",
        "n=1",
        "--plot",
        "table.pdf",
    ]);
    assert!(!ok && err.contains("expected a .svg or .png file"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
