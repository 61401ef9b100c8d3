//! The GPU runtime on a real GPU: every example graph, backed and unbacked, at sizes from 0 to
//! 65536 against the reference executor; a memory-bound graph past 2³¹ elements (64-bit
//! indexing); clean errors for a size outside its range and an out-of-range gather index;
//! library steps (MoE routing, long sorts and running sums, a bf16 Mixtral layer's tensor-core
//! grouped matmuls), fused attention in each form, the cuBLASLt epilogue, CUDA graphs and the one
//! download of data-dependent values.
//! Without a CUDA driver (CI) each test reports itself skipped (a `test-skipped:` line that
//! `ci/test` counts; the harness still says ok). With `GUARDLESS_REQUIRE_GPU=1` (`ci/gpu-check`)
//! a test that would skip fails instead.
//!
//! `GUARDLESS_EXAMPLES` points at `examples/graphs` when the binary runs away from the checkout
//! it was built in (`ci/gpu-check` on the GPU machine).

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;

use differential::{assert_accurate, assert_close, random_inputs};
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::cuda::{self, CudaProgram};
use guardless_runtime::launch::{Device, Inputs, Session, SessionOptions};

fn gpu(test: &str) -> bool {
    let why = if !cuda::driver_present() {
        "no CUDA driver (libcuda.so.1 is not on the library path)"
    } else if !cuda::available() {
        "a CUDA driver but no GPU"
    } else {
        return true;
    };
    assert!(
        std::env::var_os("GUARDLESS_REQUIRE_GPU").is_none(),
        "{test}: GUARDLESS_REQUIRE_GPU is set, but {why}"
    );
    skip(test, why);
    false
}

/// Reports `test` skipped past the harness's output capture, where `ci/test` counts it.
fn skip(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "\ntest-skipped: {test}: {why}");
}

fn examples_dir() -> std::path::PathBuf {
    std::env::var_os("GUARDLESS_EXAMPLES")
        .map(Into::into)
        .unwrap_or_else(|| format!("{}/../examples/graphs", env!("CARGO_MANIFEST_DIR")).into())
}

fn example(file: &str) -> Graph {
    let path = examples_dir().join(file);
    Graph::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

const POISON: SessionOptions = SessionOptions { poison: true };

/// Example `file` compiled for the GPU, with random inputs at `n` (seeded) and their bindings.
fn at_size(file: &str, n: i64, seed: u64) -> (Graph, CudaProgram, Vec<HostTensor>, Bindings) {
    let g = example(file);
    let gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
    let (inputs, b) = differential::inputs_at(&g, n, seed);
    (g, gpu, inputs, b)
}

#[test]
fn every_example_matches_the_reference_at_every_size() {
    if !gpu("every_example_matches_the_reference_at_every_size") {
        return;
    }
    let mut files: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".json"))
        .collect();
    files.sort();
    // All of them, unless GUARDLESS_EXAMPLES names a folder of chosen ones.
    let chosen = std::env::var_os("GUARDLESS_EXAMPLES").is_some();
    assert!(
        files.len() >= 18 || (chosen && !files.is_empty()),
        "examples: {files:?}"
    );
    for file in files {
        let g = example(&file);
        let mut gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
        let n_id = g.env.symbol_id("n").unwrap();
        // The reference executor is slow (seconds per million elements on big graphs): past a
        // predicted 1.5 s, a graph that computes each row from that row alone is checked on
        // sampled rows (the reference on those rows' inputs); any other runs on the GPU only,
        // where poison still catches every element no kernel wrote (a NaN in a float output,
        // -1 in an index).
        let independent = differential::rows_are_independent(&g, n_id);
        let mut per_row = 0.0f64;
        for (seed, n) in [0, 1, 2, 17, 1000, 4097, 65536].into_iter().enumerate() {
            let mut b = Bindings::new();
            b.set(n_id, n);
            if g.env.check_bindings(&b).is_err() {
                continue; // backed graphs start at 1
            }
            // The host holds inputs as f64 and draws them one by one: the sampler's 65536 rows of
            // 50257 logits would take 26 GB and minutes there. Sizes past 4096 rows up to 2^28
            // input elements run (the decoder layer's 65536 × 256 …), larger ones are reported.
            let elements: i64 = g
                .inputs
                .iter()
                .map(|i| {
                    i.shape
                        .iter()
                        .map(|&d| g.env.evaluate(d, &b).unwrap())
                        .product::<i64>()
                })
                .sum();
            if elements > 1 << 28 {
                println!("{file}: n = {n} not run: {elements} input elements (over 2^28)");
                continue;
            }
            let inputs = random_inputs(&g, &b, seed as u64, (0, 4));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let got = gpu
                .run(&inputs, &b, &POISON)
                .unwrap_or_else(|e| panic!("{file} at n = {n}: {e}"));
            if per_row * n as f64 > 1.5 {
                if independent {
                    let n = n as usize;
                    for a in [0, n / 2 - 4, n - 8] {
                        let want = differential::reference_on_rows(&g, &inputs, n_id, (a, 8))
                            .unwrap_or_else(|| panic!("{file}: rows {a}.. of {n}"));
                        let rows: Vec<HostTensor> = got
                            .iter()
                            .map(|t| {
                                if t.shape.first() == Some(&n) {
                                    differential::rows_of(t, a, 8)
                                } else {
                                    t.clone()
                                }
                            })
                            .collect();
                        let ideal =
                            || differential::unrounded_on_rows(&g, &inputs, n_id, (a, 8)).unwrap();
                        differential::assert_accurate(
                            &format!("{file} at n = {n}, rows {a}.."),
                            &rows,
                            &want,
                            &ideal,
                        );
                    }
                    println!("{file}: n = {n}: sampled rows match the reference");
                    continue;
                }
                for (i, t) in got.iter().enumerate() {
                    let bad = (0..t.numel()).find(|&j| {
                        let v = t.get_f64(j);
                        if t.dtype.is_float() {
                            v.is_nan()
                        } else {
                            v < 0.0
                        }
                    });
                    assert!(
                        bad.is_none(),
                        "{file} output {i} at n = {n}: element {bad:?} unwritten"
                    );
                }
                println!(
                    "{file}: n = {n} ran (reference skipped: ~{:.0} s)",
                    per_row * n as f64
                );
                continue;
            }
            let start = std::time::Instant::now();
            let want = reference::run(&g, &inputs, &b).unwrap();
            per_row = start.elapsed().as_secs_f64() / n.max(1) as f64;
            let ideal = || reference::run_unrounded(&g, &inputs, &b).unwrap();
            assert_accurate(&format!("{file} at n = {n}"), &got, &want, &ideal);
            println!("{file}: n = {n} matches the reference");
        }
    }
}

const WIDE: &str = r#"{
 "format": "guardless-graph", "version": 1, "name": "wide_add",
 "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 40000, "optimization_hint": 64}],
 "inputs": [{"name": "x", "dtype": "u8", "shape": [65536]}, {"name": "r", "dtype": "u8", "shape": ["n"]}],
 "nodes": [
  {"name": "r2", "op": "aten.unsqueeze.default", "args": {"self": {"tensor": "r"}, "dim": 1}},
  {"name": "y", "op": "aten.add.Tensor", "args": {"self": {"tensor": "x"}, "other": {"tensor": "r2"}}}
 ],
 "outputs": [{"tensor": "y"}]
}"#;

#[test]
fn more_than_two_gigaelements_index_in_64_bits() {
    if !gpu("more_than_two_gigaelements_index_in_64_bits") {
        return;
    }
    let g = Graph::from_json(WIDE).unwrap();
    let mut gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
    let n: usize = 32800; // y [n, 65536]: 2 149 580 800 elements > 2³¹
    let x: Vec<i64> = (0..65536).map(|j| (j % 7) as i64).collect();
    let r: Vec<i64> = (0..n).map(|i| (i % 11) as i64).collect();
    let inputs = [
        HostTensor::from_i64(DType::U8, &[65536], &x),
        HostTensor::from_i64(DType::U8, &[n], &r),
    ];
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("n").unwrap(), n as i64);
    let (exe, dev) = gpu.parts();
    let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
    s.execute(dev).unwrap();
    let y = &s.output_views(dev).unwrap()[0];
    assert_eq!(y.shape, [n, 65536]);
    // Rows on both sides of the 2³¹ boundary (row 32768), read back a row at a time.
    let mut row = vec![0u8; 65536];
    for i in [0, 1, 12345, 32767, 32768, 32799] {
        dev.download(y.address + (i * 65536) as u64, &mut row)
            .unwrap();
        for (j, &v) in row.iter().enumerate() {
            assert_eq!(v as usize, j % 7 + i % 11, "y[{i}, {j}]");
        }
    }
}

#[test]
fn bad_sizes_and_indices_are_clean_errors_on_the_gpu() {
    if !gpu("bad_sizes_and_indices_are_clean_errors_on_the_gpu") {
        return;
    }
    let (g, mut gpu, mut inputs, b) = at_size("rotary_embedding.unbacked.json", 5, 3);
    let n_id = g.env.symbol_id("n").unwrap();
    let mut p: Vec<i64> = (0..5).map(|i| inputs[1].get_f64(i) as i64).collect();
    p[3] = 5000; // past the 2048-entry cache
    inputs[1] = HostTensor::from_i64(DType::I64, &[5], &p);
    let e = gpu.run(&inputs, &b, &POISON).unwrap_err();
    assert!(e.to_string().contains("index"), "{e}");
    let mut big = Bindings::new();
    big.set(n_id, 70000);
    let e = gpu.run(&[], &big, &POISON).unwrap_err();
    assert!(e.to_string().contains("outside its range"), "{e}");
}

#[test]
fn a_recorded_call_replays_as_a_cuda_graph() {
    if !gpu("a_recorded_call_replays_as_a_cuda_graph") {
        return;
    }
    // A decoder layer step (matmuls through cuBLAS, fused kernels) recorded once and replayed.
    let (g, mut gpu, inputs, b) = at_size("llama_decoder_layer.unbacked.json", 3, 5);
    let want = reference::run(&g, &inputs, &b).unwrap();
    let (exe, dev) = gpu.parts();
    let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
    s.capture(dev).unwrap();
    for _ in 0..3 {
        s.replay(dev).unwrap();
    }
    let ideal = || reference::run_unrounded(&g, &inputs, &b).unwrap();
    {
        let got = s.outputs(dev).unwrap();
        assert_accurate(
            "llama decoder layer, CUDA graph replay",
            &got,
            &want,
            &ideal,
        );
    }
    // A call that reads a data-dependent size back on the host cannot be recorded.
    let (_, mut gpu, inputs, b) = at_size("moe_routing.unbacked.json", 5, 6);
    let (exe, dev) = gpu.parts();
    let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
    let e = s.capture(dev).unwrap_err().to_string();
    assert!(e.contains("reads data-dependent sizes back"), "{e}");
}

#[test]
fn a_kv_cache_on_the_gpu_is_written_back_where_it_lies() {
    if !gpu("a_kv_cache_on_the_gpu_is_written_back_where_it_lies") {
        return;
    }
    let g = differential::cache_accumulate();
    let mut gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
    let ins = differential::cache_accumulate_inputs();
    let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
    let (exe, dev) = gpu.parts();
    // The caller's tensors on the device, row-major: read in place, the cache written in place.
    let mut keep = Vec::new();
    let mut tensors = Vec::new();
    for t in &ins {
        let bytes = guardless_runtime::elements::to_bytes(t);
        let m = dev.alloc(bytes.len(), false).unwrap();
        dev.upload(dev.address(&m), &bytes).unwrap();
        let mut strides = vec![1i64; t.shape.len()];
        for d in (0..t.shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * t.shape[d + 1] as i64;
        }
        tensors.push(guardless_runtime::launch::DeviceTensor {
            address: dev.address(&m),
            bytes: bytes.len(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            strides,
        });
        keep.push(m);
    }
    let mut s = Session::new(dev, exe, Inputs::Device(&tensors), &b, &POISON).unwrap();
    assert_eq!(s.copied_input_bytes, 0);
    for call in 1..=2 {
        s.execute(dev).unwrap();
        s.check(dev).unwrap();
        let mut bytes = vec![0u8; 256];
        dev.download(tensors[0].address, &mut bytes).unwrap();
        let got = guardless_runtime::elements::to_data(&bytes, DType::F32, 64);
        assert_eq!(got, differential::cache_after(call).data, "call {call}");
    }
    drop((s, keep));
}

#[test]
fn library_steps_run_on_the_gpu() {
    if !gpu("library_steps_run_on_the_gpu") {
        return;
    }
    // The MoE path (sort, histc, cumsum, grouped matmul), and a cumsum with a topk: every step
    // on the device, against the reference.
    let moe = Graph::from_json(include_str!("../../tests/graphs/moe_grouped_mm.json")).unwrap();
    let lines = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "lines",
        "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["n", 8]}, {"name": "m", "dtype": "i64", "shape": [2, "n"]}],
        "nodes": [{"name": "c", "op": "aten.cumsum.default", "args": {"self": {"tensor": "m"}, "dim": -1}},
                  {"name": "t", "op": "aten.topk.default", "args": {"self": {"tensor": "x"}, "k": 2}}],
        "outputs": [{"tensor": "c"}, {"tensor": "t", "index": 0}, {"tensor": "t", "index": 1}]}"#,
    )
    .unwrap();
    // A top-p sampler's sort of the vocabulary and running sum of the sorted values: long
    // lines, by radix and by a block a line.
    let vocab = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "vocab_sort",
        "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 1024}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["n", 32000]}],
        "nodes": [{"name": "s", "op": "aten.sort.default", "args": {"self": {"tensor": "x"}, "dim": -1, "descending": true}},
                  {"name": "c", "op": "aten.cumsum.default", "args": {"self": {"tensor": "s", "index": 0}, "dim": -1}}],
        "outputs": [{"tensor": "s", "index": 0}, {"tensor": "s", "index": 1}, {"tensor": "c"}]}"#,
    )
    .unwrap();
    for (g, symbol, sizes) in [
        (&moe, "u0", [0, 13, 1000]),
        (&lines, "n", [0, 17, 5000]),
        (&vocab, "n", [0, 1, 8]),
    ] {
        let mut gpu = CudaProgram::compile(lower(g).unwrap()).unwrap();
        for (seed, n) in sizes.into_iter().enumerate() {
            let mut b = Bindings::new();
            b.set(g.env.symbol_id(symbol).unwrap(), n);
            let inputs = random_inputs(g, &b, seed as u64, (0, 3));
            let b = reference::bind_inputs(g, &inputs, &b).unwrap();
            let want = reference::run(g, &inputs, &b).unwrap();
            let (exe, dev) = gpu.parts();
            let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
            s.execute(dev).unwrap();
            assert_eq!(s.host_steps, 0, "{}: host steps at {n}", g.name);
            let ideal = || reference::run_unrounded(g, &inputs, &b).unwrap();
            let got = s.outputs(dev).unwrap();
            assert_accurate(&format!("{} at {n}", g.name), &got, &want, &ideal);
        }
    }
}

#[test]
fn an_exported_bf16_mixtral_layer_runs_on_the_gpu() {
    if !gpu("an_exported_bf16_mixtral_layer_runs_on_the_gpu") {
        return;
    }
    // Hugging Face's Mixtral layer in bf16 (grouped_mm experts on the tensor cores), up to 1024
    // tokens: no host step, the reference's values.
    let g = Graph::from_json(include_str!(
        "../../tests/graphs/mixtral_bf16_grouped_mm.json"
    ))
    .unwrap();
    let mut gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
    for (seed, batch, seq) in [(1, 2, 9), (2, 8, 128), (3, 64, 2)] {
        let what = format!("mixtral at {batch} x {seq}");
        let b = differential::bindings_of(&what, &g, &[("u0", batch), ("u1", seq)]);
        let inputs = random_inputs(&g, &b, seed, (0, 256));
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let want = reference::run(&g, &inputs, &b).unwrap();
        let (exe, dev) = gpu.parts();
        let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
        s.execute(dev).unwrap();
        assert_eq!(s.host_steps, 0, "{what}: host steps");
        let ideal = || reference::run_unrounded(&g, &inputs, &b).unwrap();
        assert_accurate(&what, &s.outputs(dev).unwrap(), &want, &ideal);
    }
}

#[test]
fn addmm_adds_its_bias_in_the_cublaslt_epilogue() {
    if !gpu("addmm_adds_its_bias_in_the_cublaslt_epilogue") {
        return;
    }
    // A linear layer (weight transposed as nn.Linear keeps it): the bias by cuBLASLt, no
    // kernel, no fallback; k = 0 leaves the bias in every row.
    for dtype in ["f32", "bf16", "f16"] {
        let g = differential::linear(dtype, "[16]", "");
        let mut gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
        for (n, k) in [(0, 8), (1, 8), (17, 40), (4097, 64), (5, 0)] {
            let what = format!("linear {dtype} n = {n} k = {k}");
            let mut b = Bindings::new();
            b.set(g.env.symbol_id("n").unwrap(), n);
            b.set(g.env.symbol_id("k").unwrap(), k);
            let inputs = random_inputs(&g, &b, n as u64, (0, 4));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let want = reference::run(&g, &inputs, &b).unwrap();
            let (exe, dev) = gpu.parts();
            let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
            s.execute(dev).unwrap();
            assert_eq!(s.host_steps, 0, "{what}");
            assert_close(&what, &s.outputs(dev).unwrap()[0], &want[0]);
            assert_eq!(
                dev.epilogue_fallbacks, 0,
                "{what}: cuBLASLt refused the bias epilogue: {:?}",
                dev.epilogue_error
            );
        }
    }
}

#[test]
fn a_16_bit_addmm_with_an_epilogue_rounds_once_on_the_gpu() {
    if !gpu("a_16_bit_addmm_with_an_epilogue_rounds_once_on_the_gpu") {
        return;
    }
    // cuBLAS stores the bf16/f16 product in f32 and the epilogue kernel rounds once: with
    // integral inputs (sums exact in f32 in any order) the reference's result bit for bit.
    for dtype in ["bf16", "f16"] {
        for (bias, extra) in [
            ("[16]", r#", "beta": 2, "alpha": 0.5"#),
            (r#"["n", 16]"#, ""),
        ] {
            let g = differential::linear(dtype, bias, extra);
            let mut gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
            for (n, k) in [(0, 64), (33, 64), (4097, 64), (7, 0)] {
                let what = format!("linear {dtype} {bias}{extra} n = {n} k = {k}");
                let mut b = Bindings::new();
                b.set(g.env.symbol_id("n").unwrap(), n);
                b.set(g.env.symbol_id("k").unwrap(), k);
                let inputs = differential::integral(random_inputs(&g, &b, 5, (0, 4)));
                let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
                let want = reference::run(&g, &inputs, &b).unwrap();
                let (exe, dev) = gpu.parts();
                let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
                s.execute(dev).unwrap();
                assert_eq!(s.host_steps, 0, "{what}");
                assert_eq!(s.outputs(dev).unwrap()[0].data, want[0].data, "{what}");
            }
        }
    }
}

#[test]
fn convolutions_run_on_the_gpu() {
    if !gpu("convolutions_run_on_the_gpu") {
        return;
    }
    // Every case of CONV_CASES in one graph, f32 and bf16, at sizes up to 2 × 96 × 128.
    for dtype in ["f32", "bf16"] {
        let g = differential::conv_graph(dtype, differential::cases::CONV_CASES);
        let mut gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
        for (s, sizes) in [(1, 3, 5, 7), (2, 2, 8, 8), (0, 2, 4, 4), (2, 3, 96, 128)]
            .into_iter()
            .enumerate()
        {
            let values = differential::conv_values(&g, sizes);
            let what = format!("conv {dtype} at {values:?}");
            let b = differential::bindings_of(&what, &g, &values);
            let inputs = random_inputs(&g, &b, 70 + s as u64, (0, 4));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let want = reference::run(&g, &inputs, &b).unwrap();
            let (exe, dev) = gpu.parts();
            let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
            s.execute(dev).unwrap();
            assert_eq!(s.host_steps, 0, "{what}");
            let ideal = || reference::run_unrounded(&g, &inputs, &b).unwrap();
            assert_accurate(&what, &s.outputs(dev).unwrap(), &want, &ideal);
        }
    }
}

#[test]
fn batch_norm_and_max_pooling_run_on_the_gpu() {
    if !gpu("batch_norm_and_max_pooling_run_on_the_gpu") {
        return;
    }
    for dtype in ["f32", "bf16"] {
        let g = differential::pooling_graph(dtype);
        let mut gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
        for (s, (n, h, w)) in [(1, 5, 7), (0, 4, 4), (8, 112, 112)]
            .into_iter()
            .enumerate()
        {
            let values = [("n", n), ("h", h), ("w", w)];
            let what = format!("pooling {dtype} at {values:?}");
            let b = differential::bindings_of(&what, &g, &values);
            let inputs = random_inputs(&g, &b, 80 + s as u64, (0, 4));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let want = reference::run(&g, &inputs, &b).unwrap();
            let (exe, dev) = gpu.parts();
            let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
            s.execute(dev).unwrap();
            let ideal = || reference::run_unrounded(&g, &inputs, &b).unwrap();
            assert_accurate(&what, &s.outputs(dev).unwrap(), &want, &ideal);
        }
    }
}

#[test]
fn data_dependent_values_come_back_in_one_download_on_the_gpu() {
    if !gpu("data_dependent_values_come_back_in_one_download_on_the_gpu") {
        return;
    }
    let g = differential::two_selects_and_an_item("i64");
    let mut gpu = CudaProgram::compile(lower(&g).unwrap()).unwrap();
    for n in [0usize, 1, 4097, 100000] {
        let x: Vec<f64> = (0..n).map(|i| f64::from(u8::from(i % 3 == 0))).collect();
        let y: Vec<i64> = (0..n).map(|i| i64::from(i % 5 == 1)).collect();
        let inputs = [
            HostTensor::from_f64(DType::F32, &[n], &x),
            HostTensor::from_i64(DType::I32, &[n], &y),
            HostTensor::from_i64(DType::I64, &[4], &[9, 8, 37, 6]),
        ];
        let b = reference::bind_inputs(&g, &inputs, &Bindings::new()).unwrap();
        let want = reference::run(&g, &inputs, &b).unwrap();
        let (exe, dev) = gpu.parts();
        let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
        s.execute(dev).unwrap();
        assert_eq!((s.host_steps, s.readbacks), (0, 1), "n = {n}");
        for (got, w) in s.outputs(dev).unwrap().iter().zip(&want) {
            assert_close(&format!("n = {n}"), got, w);
        }
    }
}

/// Attention graph `g` on the GPU at each (query length `u0`, key length `u1`), against the
/// reference. A graph with one length (`projected`) takes `u0` alone.
fn attention_on_the_gpu(what: &str, g: &Graph, lengths: &[(i64, i64)]) {
    let one_length = g.env.symbol_id("u1").is_none();
    let mut gpu = CudaProgram::compile(lower(g).unwrap()).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (s, &(u0, u1)) in lengths.iter().enumerate() {
        let values = [("u0", u0), ("u1", u1)];
        let values = &values[..if one_length { 1 } else { 2 }];
        let at = format!("{what} at {values:?}");
        let b = differential::bindings_of(&at, g, values);
        let inputs = random_inputs(g, &b, 90 + s as u64, (-3, 7));
        let b = reference::bind_inputs(g, &inputs, &b).unwrap();
        let want = reference::run(g, &inputs, &b).unwrap();
        let (exe, dev) = gpu.parts();
        let mut s = Session::new(dev, exe, Inputs::Host(&inputs), &b, &POISON).unwrap();
        s.execute(dev).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(s.host_steps, 0, "{at}");
        let ideal = || reference::run_unrounded(g, &inputs, &b).unwrap();
        assert_accurate(&at, &s.outputs(dev).unwrap(), &want, &ideal);
    }
}

#[test]
fn fused_attention_runs_on_the_gpu() {
    if !gpu("fused_attention_runs_on_the_gpu") {
        return;
    }
    use differential::attention::{graph, projected, Form, BASE};
    // Grouped-query decode over long caches: the keys split in shares (up to 64) and merged;
    // prefill lengths across many 16 × 32 tiles (the reference executor's time bounds them: the
    // decoder layer example runs attention to 65536 positions).
    let gqa = Form {
        heads: 4,
        kv_heads: 1,
        ..BASE
    };
    let lengths = [
        (0, 0),
        (1, 1),
        (1, 5000),
        (1, 40000),
        (7, 3000),
        (100, 1100),
    ];
    attention_on_the_gpu("f32", &graph(gqa), &lengths);
    let causal = Form {
        causal: true,
        ..gqa
    };
    attention_on_the_gpu(
        "f32 causal",
        &graph(causal),
        &[(500, 500), (2, 4000), (33, 40)],
    );
    // 8 × 16 tiles: head dims to 256 in bf16, and f64.
    let wide = Form {
        dtype: "bf16",
        d: 256,
        dv: 200,
        causal: true,
        ..BASE
    };
    attention_on_the_gpu(
        "bf16 d256",
        &graph(wide),
        &[(1, 3000), (200, 200), (9, 2000)],
    );
    let f64 = Form {
        dtype: "f64",
        heads: 4,
        kv_heads: 2,
        d: 40,
        dv: 24,
        ..BASE
    };
    attention_on_the_gpu("f64", &graph(f64), &[(1, 1200), (65, 700)]);
    // Masks through zero strides, operands transposed, f16.
    for (what, mask) in [
        ("bool mask", ("bool", r#"B, 1, "u0", "u1""#)),
        ("additive mask", ("f32", r#""u0", "u1""#)),
    ] {
        let f = Form {
            dtype: "f16",
            heads: 4,
            kv_heads: 2,
            d: 128,
            dv: 128,
            causal: what == "bool mask",
            mask: Some(mask),
            transposed: true,
            scale: Some(0.125),
        };
        attention_on_the_gpu(what, &graph(f), &[(1, 2), (1, 1500), (100, 1000)]);
    }
    // The output written as the projection reads it.
    for causal in [false, true] {
        attention_on_the_gpu("projected", &projected(causal), &[(1, 0), (600, 0)]);
    }
}
