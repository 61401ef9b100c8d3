//! The CPU backend against the op-level reference executor: every lowered op and every example
//! graph (backed and unbacked), compiled once and run at sizes including 0, 1, 2, primes and
//! values far from the hint, storage poisoned before each run. With the `llvm` feature the kernels
//! are native code; without it the same schedule runs on the interpreter.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;

use differential::cases::CASES;
use differential::*;
use guardless_ir::graph::Graph;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_runtime::cpu::{CpuProgram, RunOptions};

fn poisoned() -> RunOptions {
    RunOptions {
        poison: true,
        threads: 2,
    }
}

/// Compiles `graph` once and compares it with the reference at each of `sizes` of `symbol`;
/// returns how many sizes both accepted.
fn check(
    what: &str,
    graph: &Graph,
    symbol: &str,
    sizes: &[i64],
    seed: u64,
    assert_ok: bool,
    ints: (i64, i64),
) -> usize {
    let program = lower(graph).unwrap_or_else(|e| panic!("{what}: {e}"));
    let cpu = CpuProgram::compile(program).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut compared = 0;
    for (s, &v) in sizes.iter().enumerate() {
        // Other sizes of the inputs (a paged batch's sequences) at 2.
        let values = with_input_sizes(graph, &[(symbol, v)], 2);
        let values: Vec<(&str, i64)> = values.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let b = bindings_of(what, graph, &values);
        let inputs = random_inputs(graph, &b, seed * 16 + s as u64, ints);
        let b: Bindings =
            reference::bind_inputs(graph, &inputs, &b).unwrap_or_else(|e| panic!("{what}: {e}"));
        let want = reference::run(graph, &inputs, &b);
        let got = cpu.run(&inputs, &b, &poisoned());
        if let (Err(g), Err(w)) = (&got, &want) {
            eprintln!("{what} at {symbol} = {v}: both fail: {g} / {w}");
        }
        let ideal = || reference::run_unrounded(graph, &inputs, &b).unwrap();
        compared += usize::from(judge_accurate(
            what,
            got,
            want,
            &values,
            assert_ok,
            Some(&ideal),
        ));
    }
    compared
}

#[test]
fn every_lowered_op_matches_the_reference() {
    for (k, &(op, args)) in CASES.iter().enumerate() {
        let g = one_op(op, args);
        let what = format!("{op} {args}");
        let compared = check(
            &what,
            &g,
            "u0",
            &[0, 1, 2, 3, 7, 13, 257],
            k as u64,
            op.starts_with("aten.squeeze"),
            (-3, 7),
        );
        assert!(compared >= 6, "{what}: compared at only {compared} sizes");
    }
}

fn examples_dir() -> String {
    format!("{}/../examples/graphs", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_example_graph_matches_the_reference() {
    let mut names: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap()
        .filter_map(|e| {
            let f = e.unwrap().path().file_name()?.to_str()?.to_string();
            f.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 18, "the examples: {names:?}");
    // The reference is single-threaded: the examples on one thread per core, taken in turn.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(name) = names.get(k) else { break };
                example_matches_the_reference(k, name);
            });
        }
    });
}

fn example_matches_the_reference(k: usize, name: &str) {
    let text = std::fs::read_to_string(format!("{}/{name}.json", examples_dir())).unwrap();
    let g = Graph::from_json(&text).unwrap();
    // The decoder layers' reference is slow: fewer and smaller sizes.
    let sizes: &[i64] = if name.starts_with("llama_decode") {
        &[0, 1, 2, 61]
    } else {
        &[0, 1, 2, 17, 1000]
    };
    // Backed examples start at 1.
    let range = g.env.symbol_range(g.env.symbol_id("n").unwrap());
    let sizes: Vec<i64> = sizes
        .iter()
        .copied()
        .filter(|&v| range.contains(v))
        .collect();
    let compared = check(name, &g, "n", &sizes, 100 + k as u64, false, (0, 4));
    assert_eq!(
        compared,
        sizes.len(),
        "{name}: compared at only {compared} sizes"
    );
}

#[test]
fn convolutions_match_the_reference() {
    for dtype in ["f32", "bf16"] {
        for (k, &case) in differential::cases::CONV_CASES.iter().enumerate() {
            let g = conv_graph(dtype, &[case]);
            let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
            let mut compared = 0;
            for (s, &sizes) in CONV_SIZES.iter().enumerate() {
                let values = conv_values(&g, sizes);
                let what = format!("conv {dtype} {case:?}");
                let b = bindings_of(&what, &g, &values);
                let inputs = random_inputs(&g, &b, (k * 16 + s) as u64, (0, 4));
                let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
                let want = reference::run(&g, &inputs, &b);
                let got = cpu.run(&inputs, &b, &poisoned());
                compared += usize::from(judge(&what, got, want, &values, false));
            }
            assert!(
                compared >= CONV_SIZES.len() - 2,
                "{dtype} {case:?}: {compared}"
            );
        }
    }
}

#[test]
fn batch_norm_and_max_pooling_match_the_reference() {
    for dtype in ["f32", "bf16"] {
        let g = pooling_graph(dtype);
        let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
        for (s, (n, h, w)) in [(1, 5, 7), (2, 8, 8), (0, 4, 4), (3, 17, 12)]
            .into_iter()
            .enumerate()
        {
            let values = [("n", n), ("h", h), ("w", w)];
            let what = format!("pooling {dtype}");
            let b = bindings_of(&what, &g, &values);
            let inputs = random_inputs(&g, &b, s as u64, (0, 4));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let want = reference::run(&g, &inputs, &b);
            let got = cpu.run(&inputs, &b, &poisoned());
            assert!(
                judge(&what, got, want, &values, false),
                "{what} at {values:?}"
            );
        }
    }
}

#[test]
fn scatters_match_the_reference() {
    for (k, &(op, args)) in differential::cases::SCATTER_CASES.iter().enumerate() {
        let g = one_op(op, args);
        let what = format!("{op} {args}");
        // Indices in [0, 2): in range once u0 is 2 (scatters down the rows), else both refuse.
        let compared = check(
            &what,
            &g,
            "u0",
            &[0, 1, 2, 3, 7, 13, 257],
            k as u64,
            false,
            (0, 2),
        );
        assert!(compared >= 5, "{what}: compared at only {compared} sizes");
        check(&what, &g, "u0", &[3, 13], k as u64, false, (-2, 9));
    }
}

#[test]
fn running_extremes_and_their_positions_match_the_reference() {
    // Integers in [-3, 7): ties everywhere, and a later equal value takes the position over.
    for (k, (input, dim)) in [("i", 0), ("i", -1), ("x", 0), ("h", 1), ("z", 1)]
        .into_iter()
        .enumerate()
    {
        for op in ["aten.cummax.default", "aten.cummin.default"] {
            let args = format!(r#"{{"self": {{"tensor": "{input}"}}, "dim": {dim}}}"#);
            let g = differential::one_op_outputs(
                op,
                &args,
                r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
            );
            let what = format!("{op} {args}");
            let compared = check(
                &what,
                &g,
                "u0",
                &[0, 1, 2, 7, 257],
                k as u64,
                false,
                (-3, 7),
            );
            assert_eq!(compared, 5, "{what}");
        }
    }
}

#[test]
fn a_data_dependent_error_names_the_node_that_indexes() {
    // An embedding lookup with an index past the table: a clean error, not a wild read.
    let g = one_op(
        "aten.embedding.default",
        r#"{"weight": {"tensor": "w"}, "indices": {"tensor": "ids"}}"#,
    );
    let program = lower(&g).unwrap();
    let cpu = CpuProgram::compile(program).unwrap();
    let b = bindings_of("embedding", &g, &[("u0", 4)]);
    let mut inputs = random_inputs(&g, &b, 1, (0, 4));
    let ids = g.inputs.iter().position(|i| i.name == "ids").unwrap();
    inputs[ids] = guardless_ir::tensor::HostTensor::from_i64(
        guardless_ir::graph::DType::I64,
        &[4],
        &[0, 1, 99, 2],
    );
    let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
    assert!(
        reference::run(&g, &inputs, &b).is_err(),
        "the reference rejects it too"
    );
    let err = cpu.run(&inputs, &b, &poisoned()).unwrap_err().to_string();
    // The op the user wrote first (not only the kernel it was fused into, buffer `out`).
    assert!(
        err.starts_with("node 'out' (aten.embedding.default): index 99 is out of range for size 5")
            && err.contains("(in the kernel of buffer"),
        "{err}"
    );
}

/// The decoder layer stacked three times (other weights, other buffer names, the same sizes) is
/// compiled to as many native functions as two layers are: each kernel of a later layer runs an
/// earlier layer's function with its own buffers. The result matches the reference, and an index
/// out of range in the last layer is reported as that layer's node (its own error messages).
#[cfg(feature = "llvm")]
#[test]
fn identical_layers_share_native_functions_with_their_own_buffers_and_errors() {
    use differential::layers::stacked;
    let path = format!("{}/llama_decoder_layer.unbacked.json", examples_dir());
    let one: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let model = |layers| {
        let g = Graph::from_json(&stacked(&one, layers, "x", &["cos_sin_cache"]).to_string());
        let g = g.unwrap();
        let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
        (g, cpu)
    };
    let (_, two) = model(2);
    let (g, cpu) = model(3);
    assert!(two.functions() > 0);
    assert_eq!(cpu.functions(), two.functions());
    assert!(cpu.schedule.kernels.len() > two.schedule.kernels.len());
    for (seed, n) in [(1, 1), (2, 17)] {
        let b = bindings_of("three layers", &g, &[("n", n)]);
        let mut inputs = random_inputs(&g, &b, seed, (0, 64));
        // Weights at the scale of a trained model, so three layers stay finite.
        differential::layers::at_trained_scale(&g, &mut inputs);
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let want = reference::run(&g, &inputs, &b).unwrap();
        let got = cpu.run(&inputs, &b, &poisoned()).unwrap();
        let ideal = || reference::run_unrounded(&g, &inputs, &b).unwrap();
        assert_accurate(&format!("three layers at n = {n}"), &got, &want, &ideal);

        // Layer 2's position ids out of range: layer 2's rotary lookup says so.
        differential::layers::with_last_position(&g, &mut inputs, "l2_positions", n as usize, 2048);
        let err = cpu.run(&inputs, &b, &poisoned()).unwrap_err().to_string();
        assert!(
            err.contains("node 'l2_") && err.contains("out of range"),
            "{err}"
        );
    }
}

#[test]
fn exp_is_within_two_ulp_everywhere() {
    // The backend's inline f32 exp over its whole range, subnormal results, overflow and NaN.
    let g = one_op("aten.exp.default", r#"{"self": {"tensor": "x"}}"#);
    let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
    let rows = 100_000usize;
    let mut xs: Vec<f64> = (0..rows * 5)
        .map(|i| -110.0 + 200.0 * i as f64 / (rows * 5) as f64)
        .collect();
    let specials = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        88.72,
        88.7228,
        89.0,
        -103.97,
        -103.98,
        -104.0,
        1e30,
        -1e30,
        3.0e38,
        -3.0e38,
    ];
    xs[..specials.len()].copy_from_slice(&specials);
    let b = bindings_of("exp", &g, &[("u0", rows as i64)]);
    let mut inputs = random_inputs(&g, &b, 0, (0, 4));
    let x = g.inputs.iter().position(|i| i.name == "x").unwrap();
    inputs[x] = guardless_ir::tensor::HostTensor::from_f64(
        guardless_ir::graph::DType::F32,
        &[rows, 5],
        &xs,
    );
    let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
    let got = cpu.run(&inputs, &b, &poisoned()).unwrap();
    let mut worst = 0u32;
    for (i, &x) in xs.iter().enumerate() {
        let x = x as f32;
        let want = (x as f64).exp() as f32;
        let g = got[0].get_f64(i) as f32;
        if want.is_nan() {
            assert!(g.is_nan(), "exp({x}) = {g}");
            continue;
        }
        let ulp = (g.to_bits() as i64 - want.to_bits() as i64).unsigned_abs() as u32;
        worst = worst.max(ulp);
        assert!(
            ulp <= 2,
            "exp({x}) = {g}, correctly rounded {want} ({ulp} ulp)"
        );
    }
    eprintln!("exp: worst {worst} ulp");
}

#[test]
fn max_and_min_propagate_nan_and_order_signed_zeros() {
    // IEEE 754-2019 maximum/minimum, as the vectorizable select form computes them: NaN wins,
    // -0 < +0; elementwise and as reductions (softmax's row max).
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "maxmin",
            "inputs": [{"name": "x", "dtype": "f32", "shape": [3, 4]},
                       {"name": "y", "dtype": "f32", "shape": [3, 4]}],
            "nodes": [
              {"name": "mx", "op": "aten.maximum.default", "args": {"self": {"tensor": "x"}, "other": {"tensor": "y"}}},
              {"name": "mn", "op": "aten.minimum.default", "args": {"self": {"tensor": "x"}, "other": {"tensor": "y"}}},
              {"name": "rmax", "op": "aten.amax.default", "args": {"self": {"tensor": "x"}, "dim": [1]}},
              {"name": "rmin", "op": "aten.amin.default", "args": {"self": {"tensor": "x"}, "dim": [1]}}],
            "outputs": [{"tensor": "mx"}, {"tensor": "mn"}, {"tensor": "rmax"}, {"tensor": "rmin"}]}"#,
    )
    .unwrap();
    let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    let x = [
        1.0, -inf, nan, 3.0, -0.0, 0.0, -0.0, -0.0, 2.0, 5.0, -1.0, inf,
    ];
    let y = [
        nan, 0.0, 1.0, -3.0, 0.0, -0.0, -0.0, 1.0, 2.0, -5.0, -1.0, 0.0,
    ];
    let t = |v: &[f64]| guardless_ir::tensor::HostTensor {
        dtype: guardless_ir::graph::DType::F32,
        shape: vec![3, 4],
        data: guardless_ir::tensor::Data::Float(v.to_vec()),
    };
    let out = cpu
        .run(&[t(&x), t(&y)], &Bindings::new(), &poisoned())
        .unwrap();
    let bits = |k: usize| match &out[k].data {
        guardless_ir::tensor::Data::Float(v) => v
            .iter()
            .map(|f| (f.is_nan(), f.to_bits()))
            .collect::<Vec<_>>(),
        _ => unreachable!(),
    };
    let want = |v: &[f64]| {
        v.iter()
            .map(|f: &f64| (f.is_nan(), if f.is_nan() { 0 } else { f.to_bits() }))
            .collect::<Vec<_>>()
    };
    let norm = |v: Vec<(bool, u64)>| {
        v.into_iter()
            .map(|(n, b)| (n, if n { 0 } else { b }))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        norm(bits(0)),
        want(&[nan, 0.0, nan, 3.0, 0.0, 0.0, -0.0, 1.0, 2.0, 5.0, -1.0, inf]),
        "maximum"
    );
    assert_eq!(
        norm(bits(1)),
        want(&[nan, -inf, nan, -3.0, -0.0, -0.0, -0.0, -0.0, 2.0, -5.0, -1.0, 0.0]),
        "minimum"
    );
    assert_eq!(norm(bits(2)), want(&[nan, 0.0, inf]), "row max");
    assert_eq!(norm(bits(3)), want(&[nan, -0.0, -1.0]), "row min");
}

#[test]
fn a_bf16_addmm_with_an_epilogue_rounds_once() {
    // Other scales, and a bias that is not a row: the host's gemm keeps the product in f32 for
    // the epilogue, so with integral inputs (exact sums) the result is the reference's bit for
    // bit, where rounding the product to bf16 first left some elements one step off.
    for (bias, extra) in [
        ("[16]", r#", "beta": 2, "alpha": 0.5"#),
        (r#"["n", 16]"#, ""),
    ] {
        let g = linear("bf16", bias, extra);
        let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
        for (n, k) in [(0, 64), (33, 64), (7, 0)] {
            let what = format!("{bias}{extra} n = {n} k = {k}");
            let b = bindings_of(&what, &g, &[("n", n), ("k", k)]);
            let inputs = integral(random_inputs(&g, &b, 3, (0, 4)));
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let want = reference::run(&g, &inputs, &b).unwrap();
            let got = cpu.run(&inputs, &b, &poisoned()).unwrap();
            assert_eq!(got[0].data, want[0].data, "{what}");
        }
    }
}

/// A reduction over a size that a later node asserts to be 1 (a view of `[3, u]` as `[3]`): the
/// schedule, which then knows the size is 1, must keep it a reduction of rows of one element. It
/// became a pointwise kernel whose sum ran across the rows, leaving outputs unwritten (found by
/// backed random graphs: a broadcast at hint 1, then a view).
#[test]
fn a_reduction_over_a_size_later_asserted_one_sums_each_row() {
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "sum then view",
        "symbols": [{"name": "u", "kind": "unbacked", "min": 1, "max": 64}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": [5, "u"]}],
        "nodes": [
          {"name": "total", "op": "aten.sum.dim_IntList",
           "args": {"self": {"tensor": "x"}, "dim": [1], "keepdim": true}},
          {"name": "flat", "op": "aten.view.default",
           "args": {"self": {"tensor": "x"}, "size": [5]}}],
        "outputs": [{"tensor": "total"}, {"tensor": "flat"}]}"#,
    )
    .unwrap();
    // At 1 both agree; at 3 both refuse the view (the lowered program by its assert).
    let compared = check("sum then view", &g, "u", &[1, 3], 5, true, (0, 4));
    assert_eq!(compared, 1);
}

/// Inputs declared transposed, read by library steps, a reduction, a copy and as outputs.
#[test]
fn transposed_inputs_match_the_reference() {
    let g = test_graph("transposed_inputs.json");
    let compared = check("transposed inputs", &g, "u0", &SIZES, 3, false, (0, 4));
    assert_eq!(compared, SIZES.len());
}

/// The GPU tests' sampled check at sizes too large for the whole reference
/// (`differential::reference_on_rows`), run here on the CPU backend: the examples that compute
/// each row of `n` alone are found so, and their sampled rows match; attention (rows see each
/// other) and routing by data-dependent counts are not taken for row-wise.
#[test]
fn sampled_rows_check_row_wise_examples() {
    let dir = format!("{}/../examples/graphs", env!("CARGO_MANIFEST_DIR"));
    let mut row_wise = Vec::new();
    for name in [
        "rms_norm",
        "softmax",
        "silu_and_mul",
        "layer_norm",
        "rotary_embedding",
        "llama_mlp",
        "fused_add_rms_norm",
        "sampler",
        "llama_decoder_layer",
        "moe_routing",
    ] {
        let file = format!("{name}.unbacked");
        let g = Graph::from_json(&std::fs::read_to_string(format!("{dir}/{file}.json")).unwrap())
            .unwrap();
        let n_id = g.env.symbol_id("n").unwrap();
        if !rows_are_independent(&g, n_id) {
            continue;
        }
        row_wise.push(name);
        let n = if name == "sampler" { 40 } else { 300 };
        let mut b = Bindings::new();
        b.set(n_id, n);
        let inputs = random_inputs(&g, &b, 11, (0, 4));
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
        let got = cpu.run(&inputs, &b, &poisoned()).unwrap();
        let n = n as usize;
        for a in [0, n / 2 - 4, n - 8] {
            let want = reference_on_rows(&g, &inputs, n_id, (a, 8)).unwrap();
            let rows: Vec<_> = got.iter().map(|t| rows_of(t, a, 8)).collect();
            let ideal = || unrounded_on_rows(&g, &inputs, n_id, (a, 8)).unwrap();
            assert_accurate(&format!("{file}, rows {a}.."), &rows, &want, &ideal);
        }
    }
    assert_eq!(
        row_wise,
        [
            "rms_norm",
            "softmax",
            "silu_and_mul",
            "layer_norm",
            "rotary_embedding",
            "llama_mlp",
            "fused_add_rms_norm",
            "sampler"
        ]
    );
}

/// A size from `.item()` at 2^40 or 2^62 used as a tensor's size: the CPU backend refuses it
/// before allocating, naming the buffer and the size (it aborted the process once).
#[test]
fn impossible_sizes_are_errors_on_the_cpu_backend() {
    let g = Graph::from_json(ITEM_SIZED).unwrap();
    let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
    for v in [1i64 << 40, 1 << 62, 3] {
        let x =
            guardless_ir::tensor::HostTensor::from_i64(guardless_ir::graph::DType::I64, &[], &[v]);
        let r = cpu.run(std::slice::from_ref(&x), &Bindings::new(), &poisoned());
        if v == 3 {
            assert_eq!(r.unwrap()[0].shape, [3, 2]);
        } else {
            let e = r.expect_err("refused").to_string();
            assert!(
                e.contains("(f)")
                    && (e.contains("exceed") || e.contains("overflow") || e.contains("spanning")),
                "{e}"
            );
        }
    }
}
