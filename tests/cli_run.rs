//! `guardless run GRAPH --device cpu|auto|reference`, as a user runs it.

mod common;

use common::{example, guardless, test_graph};

use guardless_ir::graph::{DType, Graph};
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_ir::tensor_io;

#[test]
fn run_on_files_matches_the_reference_and_saves_outputs() {
    let dir = std::env::temp_dir().join(format!("guardless-cli-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (inputs, outputs) = (dir.join("in.safetensors"), dir.join("out.safetensors"));
    let x = HostTensor::random(DType::BF16, &[5, 4096], 1, (0, 1));
    let w = HostTensor::random(DType::BF16, &[4096], 2, (0, 1));
    tensor_io::write(&inputs, &[("x".into(), x.clone()), ("w".into(), w.clone())]).unwrap();
    let path = example("rms_norm.unbacked.json");
    let (ok, out, err) = guardless(&[
        "run",
        &path,
        "--device",
        "reference",
        "--inputs",
        inputs.to_str().unwrap(),
        "--save-outputs",
        outputs.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.starts_with("out: bf16[5, 4096] min "), "{out}");
    assert!(
        out.contains("ran on reference in") && out.contains("saved 1 outputs"),
        "{out}"
    );
    let saved = tensor_io::read(&outputs).unwrap();
    let g = Graph::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let b = reference::bind_inputs(&g, &[x, w], &Bindings::new()).unwrap();
    let want = reference::run(&g, &reference_inputs(&inputs), &b).unwrap();
    assert_eq!(saved["out"], want[0]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_cpu_backend_runs_by_default_and_checks_against_the_reference() {
    let devices: &[&str] = if guardless::runtime::cuda::available() {
        &["cpu"] // auto picks the GPU there (tests/cuda_run.rs)
    } else {
        &["cpu", "auto"]
    };
    for &device in devices {
        let (ok, out, err) = guardless(&[
            "run",
            &example("softmax.unbacked.json"),
            "--random",
            "--bind",
            "n=37",
            "--device",
            device,
            "--check",
        ]);
        assert!(ok, "{err}");
        assert!(out.starts_with("compiled for the CPU ("), "{out}");
        assert!(out.contains("ran on cpu in"), "{out}");
        // Within f32's tolerance of the reference; the largest difference is printed.
        let diff: f64 = out
            .split("max |difference| ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no difference in {out}"));
        assert!(
            out.contains("matches the reference (rtol 1.3e-6, atol 1e-5"),
            "{out}"
        );
        assert!(diff < 1e-6, "{out}");
    }
}

fn reference_inputs(path: &std::path::Path) -> Vec<HostTensor> {
    let mut all = tensor_io::read(path).unwrap();
    vec![all.remove("x").unwrap(), all.remove("w").unwrap()]
}

#[test]
fn random_inputs_take_bound_sizes() {
    let (ok, out, err) = guardless(&[
        "run",
        &example("rms_norm.unbacked.json"),
        "--random",
        "--seed",
        "3",
        "--bind",
        "n=3",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.lines().any(|l| l.starts_with("out: bf16[3, 4096]")),
        "{out}"
    );
    let (ok, out, _) = guardless(&[
        "run",
        &example("rms_norm.unbacked.json"),
        "--random",
        "--bind",
        "n=0",
    ]);
    assert!(
        ok && out
            .lines()
            .any(|l| l.starts_with("out: bf16[0, 4096] (empty)")),
        "{out}"
    );
}

#[test]
fn bad_run_requests_are_clear_errors() {
    let g = example("rms_norm.unbacked.json");
    let cases: &[(&[&str], &str)] = &[
        (&["run", &g], "give --inputs"),
        (&["run", &g, "--random", "--bind", "u7=3"], "no symbol 'u7'"),
        (
            &["run", &g, "--random", "--bind", "n=2000000"],
            "n = 2000000 is outside its range",
        ),
        (
            &["run", &g, "--random", "--bind", "n=x"],
            "'x' is not an integer",
        ),
        (
            &["run", &g, "--random", "--device", "tpu"],
            "expected cpu, cuda, auto or reference",
        ),
        (
            &["run", &g, "--random", "--bind", "n=1,n=2"],
            "'n' is given twice",
        ),
    ];
    for (args, want) in cases {
        let (ok, _, err) = guardless(args);
        assert!(!ok && err.contains(want), "{args:?}: {err}");
    }
    if !guardless::runtime::cuda::driver_present() {
        let (ok, _, err) = guardless(&["run", &g, "--random", "--device", "cuda"]);
        assert!(!ok && err.contains("no CUDA driver"), "{err}");
    }
    // An artifact holds GPU kernels: the CPU cannot run it.
    let (ok, _, err) = guardless(&["run", "--artifact", "/nonexistent", "--device", "cpu"]);
    assert!(!ok && err.contains("--artifact holds GPU kernels"), "{err}");
    let dir = std::env::temp_dir().join(format!("guardless-cli-run-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Sizes whose random inputs could not fit in memory are refused before anything is allocated.
    let big = dir.join("big.json");
    std::fs::write(
        &big,
        r#"{"format": "guardless-graph", "version": 1, "symbols": [{"name": "n", "kind": "unbacked"}],
            "inputs": [{"name": "x", "dtype": "f32", "shape": ["n", 100000]}], "outputs": [{"tensor": "x"}]}"#,
    )
    .unwrap();
    let (ok, _, err) = guardless(&[
        "run",
        big.to_str().unwrap(),
        "--random",
        "--bind",
        "n=20000",
    ]);
    assert!(!ok && err.contains("would exceed"), "{err}");
    let f = dir.join("in.safetensors");
    tensor_io::write(
        &f,
        &[(
            "x".into(),
            HostTensor::random(DType::BF16, &[2, 8], 0, (0, 1)),
        )],
    )
    .unwrap();
    let (ok, _, err) = guardless(&["run", &g, "--inputs", f.to_str().unwrap()]);
    assert!(!ok && err.contains("no tensor named 'w'"), "{err}");
    tensor_io::write(
        &f,
        &[
            (
                "x".into(),
                HostTensor::random(DType::BF16, &[2, 8], 0, (0, 1)),
            ),
            (
                "w".into(),
                HostTensor::random(DType::BF16, &[4096], 0, (0, 1)),
            ),
        ],
    )
    .unwrap();
    let (ok, _, err) = guardless(&["run", &g, "--inputs", f.to_str().unwrap()]);
    assert!(
        !ok && err.contains("input 'x'") && err.contains("dimension 1 is 8"),
        "{err}"
    );
    tensor_io::write(
        &f,
        &[
            (
                "x".into(),
                HostTensor::random(DType::F32, &[2, 4096], 0, (0, 1)),
            ),
            (
                "w".into(),
                HostTensor::random(DType::BF16, &[4096], 0, (0, 1)),
            ),
        ],
    )
    .unwrap();
    let (ok, _, err) = guardless(&["run", &g, "--inputs", f.to_str().unwrap()]);
    assert!(
        !ok && err.contains("input 'x': dtype f32, the graph says bf16"),
        "{err}"
    );
    std::fs::write(&f, b"not a safetensors file").unwrap();
    let (ok, _, err) = guardless(&["run", &g, "--inputs", f.to_str().unwrap()]);
    assert!(!ok && err.contains("not a safetensors file"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_backed_graph_run_where_its_guard_fails_is_recompiled_and_says_so() {
    // With s1's example value 1, `x + y` broadcasts y and guards s1 == 1.
    let path = test_graph("guarded_broadcast.json");
    let run = |bind: &str| {
        let (ok, out, err) = guardless(&[
            "run", &path, "--random", "--bind", bind, "--device", "cpu", "--check",
        ]);
        assert!(ok, "{bind}: {err}");
        assert!(
            out.contains("matches the reference (rtol 1.3e-6, atol 1e-5; max |difference| 0e0)"),
            "{out}"
        );
        out
    };
    let out = run("s0=5,s1=5");
    assert!(
        out.contains("guard `s1 == 1` failed for these sizes: recompiled for them (1 recompile)"),
        "{out}"
    );
    let out = run("s0=5,s1=1");
    assert!(!out.contains("recompile"), "{out}");
}

#[test]
fn an_output_written_back_into_an_input_says_so() {
    let path = test_graph("accumulate_written_back.json");
    for device in ["cpu", "reference"] {
        let (ok, out, err) = guardless(&[
            "run", &path, "--random", "--bind", "n=3", "--device", device,
        ]);
        assert!(ok, "{err}");
        assert!(
            out.lines().any(|l| l.starts_with("sum: f32[3, 4] ")
                && l.ends_with("(written back into input 'state')")),
            "{out}"
        );
    }
}

/// `--check` fails (exit 1) when an output is beyond tolerance, naming the output, the element
/// and how far, after printing the run; given tolerances are applied as they are. The decoder
/// layer in bf16 passes by default: beyond torch's bf16 tolerance in places, but no less
/// accurate than the reference against the graph evaluated without rounding.
#[test]
fn check_fails_beyond_tolerance_and_passes_rounding() {
    let rms = example("rms_norm.unbacked.json");
    let (ok, out, err) = guardless(&[
        "run", &rms, "--random", "--bind", "n=3", "--device", "cpu", "--check", "--rtol", "0",
        "--atol", "0",
    ]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("out: bf16[3, 4096]") && out.contains("FAILED: out["),
        "{out}"
    );
    assert!(
        err.contains("--check: 1 output differ") && err.contains("allowed (rtol 0e0, atol 0e0)"),
        "{err}"
    );
    let decoder = example("llama_decoder_layer.unbacked.json");
    let (ok, out, err) = guardless(&[
        "run", &decoder, "--random", "--bind", "n=20", "--device", "cpu", "--check",
    ]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("matches the reference") || out.contains("no less accurate"),
        "{out}"
    );
}

/// A safetensors file with a tensor the graph does not take: a warning naming it; an output with
/// no finite element says so (not `min inf max -inf`).
#[test]
fn extra_input_tensors_warn_and_nonfinite_outputs_say_so() {
    let dir = std::env::temp_dir().join(format!("guardless-cli-run-extra-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inputs = dir.join("in.safetensors");
    let x = HostTensor::from_f64(DType::F32, &[2, 3], &[f64::NAN; 6]);
    let extra = HostTensor::zeros(DType::F32, &[1]);
    tensor_io::write(&inputs, &[("x".into(), x), ("typo".into(), extra)]).unwrap();
    let graph = dir.join("g.json");
    std::fs::write(
        &graph,
        r#"{"format": "guardless-graph", "version": 1, "name": "g",
            "inputs": [{"name": "x", "dtype": "f32", "shape": [2, 3]}],
            "nodes": [{"name": "y", "op": "aten.relu.default", "args": {"self": {"tensor": "x"}}}],
            "outputs": [{"tensor": "y"}]}"#,
    )
    .unwrap();
    let (ok, out, err) = guardless(&[
        "run",
        graph.to_str().unwrap(),
        "--device",
        "reference",
        "--inputs",
        inputs.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("warning:")
            && out.contains("1 tensor the graph does not take, ignored: 'typo'"),
        "{out}"
    );
    assert!(
        out.contains("y: f32[2, 3] no finite element (6 NaN, 0 infinite)"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--max-memory` bounds every allocation: a 4 KB output is refused under 1K on every device, with
/// an error naming the node; bad values are refused by the parser.
#[test]
fn max_memory_bounds_allocations() {
    let g = example("softmax.unbacked.json");
    for device in ["cpu", "reference"] {
        let (ok, _, err) = guardless(&[
            "run",
            &g,
            "--random",
            "--bind",
            "n=2",
            "--device",
            device,
            "--max-memory",
            "1K",
        ]);
        assert!(
            !ok && err.contains("exceed the memory limit (--max-memory), 1024 bytes"),
            "{device}: {err}"
        );
        let (ok, _, err) = guardless(&[
            "run",
            &g,
            "--random",
            "--bind",
            "n=2",
            "--device",
            device,
            "--max-memory",
            "1M",
        ]);
        assert!(ok, "{device}: {err}");
    }
    let (ok, _, err) = guardless(&["run", &g, "--random", "--max-memory", "lots"]);
    assert!(!ok && err.contains("expected bytes"), "{err}");
}

/// Weights in one file (as `guardless.export(...).save` writes them), the user's input in another
/// or random: `--inputs` is repeatable and `--random` fills only what no file gives, at the sizes
/// the given inputs bind.
#[test]
fn inputs_from_several_files_and_random_for_the_rest() {
    let dir = std::env::temp_dir().join(format!("guardless-cli-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (weights, user, again) = (
        dir.join("w.safetensors"),
        dir.join("x.safetensors"),
        dir.join("w2.safetensors"),
    );
    let x = HostTensor::random(DType::BF16, &[6, 4096], 1, (0, 1));
    let w = HostTensor::random(DType::BF16, &[4096], 2, (0, 1));
    tensor_io::write(&weights, &[("w".into(), w.clone())]).unwrap();
    tensor_io::write(&user, &[("x".into(), x.clone())]).unwrap();
    tensor_io::write(&again, &[("w".into(), w.clone())]).unwrap();
    let g = example("rms_norm.unbacked.json");
    let (w_path, x_path) = (weights.to_str().unwrap(), user.to_str().unwrap());

    // Both files: the same result as the reference on those tensors.
    let out_path = dir.join("out.safetensors");
    let (ok, out, err) = guardless(&[
        "run",
        &g,
        "--device",
        "reference",
        "--inputs",
        w_path,
        "--inputs",
        x_path,
        "--save-outputs",
        out_path.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.starts_with("out: bf16[6, 4096]"), "{out}");
    let graph = Graph::from_json(&std::fs::read_to_string(&g).unwrap()).unwrap();
    let b = reference::bind_inputs(&graph, &[x.clone(), w.clone()], &Bindings::new()).unwrap();
    let want = reference::run(&graph, &[x, w.clone()], &b).unwrap();
    assert_eq!(tensor_io::read(&out_path).unwrap()["out"], want[0]);

    // The weights alone: an error naming the missing input, unless --random fills it.
    let (ok, _, err) = guardless(&["run", &g, "--inputs", w_path]);
    assert!(
        !ok && err.contains("no tensor named 'x'") && err.contains("--random"),
        "{err}"
    );
    let (ok, out, err) = guardless(&[
        "run",
        &g,
        "--device",
        "reference",
        "--inputs",
        w_path,
        "--random",
        "--bind",
        "n=3",
        "--save-outputs",
        out_path.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.starts_with("out: bf16[3, 4096]"), "{out}");
    // The file's weights were used, not random ones: the reference on the same random x (the
    // seed's values for input 0) and the file's w agrees.
    let random_x = HostTensor::random(DType::BF16, &[3, 4096], 0, (0, 4));
    let b =
        reference::bind_inputs(&graph, &[random_x.clone(), w.clone()], &Bindings::new()).unwrap();
    let want = reference::run(&graph, &[random_x, w], &b).unwrap();
    assert_eq!(tensor_io::read(&out_path).unwrap()["out"], want[0]);

    // A name in two files is ambiguous.
    let (ok, _, err) = guardless(&[
        "run",
        &g,
        "--inputs",
        w_path,
        "--inputs",
        again.to_str().unwrap(),
        "--random",
    ]);
    assert!(
        !ok && err.contains("the input 'w' is in") && err.contains("give it once"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
