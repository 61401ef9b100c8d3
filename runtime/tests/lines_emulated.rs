//! Scans (`cumsum`, `cumprod`, `cummax`, `cummin`, `logcumsumexp`), `sort` and `topk` on the device (`codegen::cuda::lines`), run on the CPU emulation of
//! CUDA and compared with the reference executor: bit for bit where a thread walks each line in
//! the host's order, or for long sorts a block per line sorting by radix; within a last place
//! for the block-per-line scan of few or long lines. Dimensions first, middle and last (every
//! scan along each in f32, every other dtype along each over the scans — each case is a C++
//! build of the emulation); ties, NaN and −0.0; every dtype through the radix sort.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::random_inputs;
use emulated::{run, Emu};
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::launch::{Executable, Inputs};

/// One node over `x` of `dtype` and shape `[n, 4, 3]`; its outputs `outputs` (JSON).
fn graph(dtype: &str, node: &str, outputs: &str) -> Graph {
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "lines",
        "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}}],
        "inputs": [{{"name": "x", "dtype": "{dtype}", "shape": ["n", 4, 3]}}],
        "nodes": [{node}],
        "outputs": {outputs}}}"#
    ))
    .unwrap_or_else(|e| panic!("{node}: {e}"))
}

/// Values with ties, NaN (floats) and −0.0 beside 0.0.
fn awkward(dtype: DType, n: usize, seed: u64) -> HostTensor {
    let g = graph(
        "f32",
        r#"{"name": "c", "op": "aten.cumsum.default", "args": {"self": {"tensor": "x"}, "dim": 0}}"#,
        r#"[{"tensor": "c"}]"#,
    );
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("n").unwrap(), n as i64);
    let r = &random_inputs(&g, &b, seed, (0, 1))[0];
    let v: Vec<f64> = (0..r.numel())
        .map(|i| match i % 11 {
            0 if dtype.is_float() => f64::NAN,
            1 => -0.0,
            2 | 3 => 1.0,
            _ => (r.get_f64(i) * 4.0).round(),
        })
        .collect();
    if dtype.is_float() {
        HostTensor::from_f64(dtype, &[n, 4, 3], &v)
    } else {
        let v: Vec<i64> = v.iter().map(|&x| x as i64).collect();
        HostTensor::from_i64(dtype, &[n, 4, 3], &v)
    }
}

/// How many times the tiled radix sort of `dtype` keys is launched: the keys, three launches a
/// pass of 8 key bits (those that vary), the gather.
fn phases(dtype: DType) -> usize {
    let bits: usize = match dtype {
        DType::F64 | DType::I64 => 64,
        DType::F32 | DType::I32 => 32,
        DType::F16 => 20,
        DType::BF16 => 16,
        DType::I8 | DType::U8 => 8,
        DType::Bool => 2,
    };
    2 + 3 * bits.div_ceil(8)
}

/// Runs on the emulated device; compares with the reference exactly (NaN equal to NaN). Returns
/// the host steps.
fn exact(what: &str, dev: &mut Emu, exe: &Executable, g: &Graph, x: &HostTensor) -> usize {
    let inputs = std::slice::from_ref(x);
    let b = reference::bind_inputs(g, inputs, &Bindings::new()).unwrap();
    let want = reference::run(g, inputs, &b).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (got, host_steps, _) =
        run(dev, exe, Inputs::Host(inputs), &b).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (gt, w) in got.iter().zip(&want) {
        assert_eq!(gt.shape, w.shape, "{what}");
        for i in 0..w.numel() {
            let (a, c) = (gt.get_f64(i), w.get_f64(i));
            assert!(
                a.to_bits() == c.to_bits() || (a.is_nan() && c.is_nan()),
                "{what}: element {i}: {a} vs reference {c}"
            );
        }
    }
    host_steps
}

/// The scans of `node_op` (both outputs of cummax/cummin) along `dim` of `x`.
fn scan_graph(dtype: &str, shape: &str, op: &str, dim: i64) -> Graph {
    let two = op.starts_with("aten.cumm");
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "scan",
        "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}}],
        "inputs": [{{"name": "x", "dtype": "{dtype}", "shape": {shape}}}],
        "nodes": [{{"name": "c", "op": "{op}", "args": {{"self": {{"tensor": "x"}}, "dim": {dim}}}}}],
        "outputs": [{}]}}"#,
        if two {
            r#"{"tensor": "c", "index": 0}, {"tensor": "c", "index": 1}"#
        } else {
            r#"{"tensor": "c"}"#
        }
    ))
    .unwrap_or_else(|e| panic!("{op}: {e}"))
}

const SCANS: [&str; 5] = [
    "aten.cumsum.default",
    "aten.cumprod.default",
    "aten.cummax.default",
    "aten.cummin.default",
    "aten.logcumsumexp.default",
];

#[test]
fn scans_match_the_host_bit_for_bit() {
    // A thread per line, in the host's order: every scan kind, NaN, -0.0 beside 0.0 and ties.
    // Every op along every dimension in f32; the other dtypes take one dimension per op, in
    // turn, so that each dtype meets every dimension too (each emulation is a C++ build).
    for (oi, op) in SCANS.into_iter().enumerate() {
        for (di, dtype) in ["f32", "bf16", "f16", "i64", "i32"].into_iter().enumerate() {
            if op.contains("logcumsumexp") && !dtype.starts_with('f') && dtype != "bf16" {
                continue;
            }
            for dim in [0, 1, -1] {
                if dtype != "f32" && [0, 1, -1][(oi + di) % 3] != dim {
                    continue;
                }
                let g = scan_graph(dtype, r#"["n", 4, 3]"#, op, dim);
                let exe = Executable::new(lower(&g).unwrap()).unwrap();
                let mut dev = Emu::new("scan", &exe);
                for (seed, n) in [(1, 0), (2, 1), (3, 300)] {
                    let x = awkward(g.inputs[0].dtype, n, seed);
                    let what = format!("{op} {dtype} dim {dim} n {n}");
                    assert_eq!(
                        exact(&what, &mut dev, &exe, &g, &x),
                        0,
                        "{what}: on the host"
                    );
                }
            }
        }
    }
}

#[test]
fn few_or_long_scan_lines_run_a_block_each_or_a_block_a_tile() {
    // Two lines of 5000 (three tiles of 2048, the last partial) along the last dimension, and
    // three of 700 an inner stride apart: a block per line; two of 9000 (five tiles): a block
    // per tile, in three launches. The same combinations in another order — integers, maxima and
    // minima exact; floats within a last place of the output (or the doubles' own error).
    // Each dtype takes one layout per op, in turn: every op runs in every layout (twice) and in
    // every dtype.
    for (oi, op) in SCANS.into_iter().enumerate() {
        let product = op.contains("cumprod");
        let extreme = op.starts_with("aten.cumm");
        for (di, dtype) in ["f64", "f32", "bf16", "f16", "i64", "i32"]
            .into_iter()
            .enumerate()
        {
            if op.contains("logcumsumexp") && !dtype.starts_with('f') && dtype != "bf16" {
                continue;
            }
            for (li, (shape, dim, n, part, launches)) in [
                (r#"[2, "n"]"#, -1, 5000usize, "_block", 1),
                (r#"["n", 3]"#, 0, 700, "_block", 1),
                (r#"[2, "n"]"#, -1, 9000, "_tiled", 3),
            ]
            .into_iter()
            .enumerate()
            {
                if (oi + di) % 3 != li {
                    continue;
                }
                // A log-sum-exp has no tiled form: its few long lines take a block each.
                let (part, launches) = if op.contains("logcumsumexp") && part == "_tiled" {
                    ("_block", 1)
                } else {
                    (part, launches)
                };
                let g = scan_graph(dtype, shape, op, dim);
                let exe = Executable::new(lower(&g).unwrap()).unwrap();
                let mut dev = Emu::new("long_scan", &exe);
                let mut b = Bindings::new();
                b.set(g.env.symbol_id("n").unwrap(), n as i64);
                // Products of integers in [-1, 2) stay exact (and wrap alike); of floats near 1,
                // finite.
                let ints = if product { (-1, 2) } else { (-1000, 1000) };
                let mut inputs = random_inputs(&g, &b, 11, ints);
                if product && g.inputs[0].dtype.is_float() {
                    let x = &inputs[0];
                    let v: Vec<f64> = (0..x.numel()).map(|i| 1.0 + x.get_f64(i) / 256.0).collect();
                    inputs[0] = HostTensor::from_f64(x.dtype, &x.shape, &v);
                }
                let want = reference::run(&g, &inputs, &b).unwrap();
                let (got, host_steps, _) = run(&mut dev, &exe, Inputs::Host(&inputs), &b).unwrap();
                let what = format!("{op} {dtype} {shape} dim {dim}");
                assert_eq!(host_steps, 0, "{what}");
                // (Besides the kernels realizing the scans' inputs.) cummax/cummin scan twice:
                // the values, then the positions.
                let ran: Vec<_> = dev
                    .launched
                    .iter()
                    .filter(|f| f.starts_with("scan_"))
                    .collect();
                let scans = if extreme { 2 } else { 1 };
                assert!(
                    ran.len() == scans * launches && ran.iter().all(|f| f.ends_with(part)),
                    "{what}: {:?}",
                    dev.launched
                );
                let (out, x) = (&got[0], &inputs[0]);
                assert_eq!(out.shape, want[0].shape, "{what}");
                if extreme {
                    for (o, w) in got.iter().zip(&want) {
                        for k in 0..w.numel() {
                            let (a, c) = (o.get_f64(k), w.get_f64(k));
                            assert!(
                                a.to_bits() == c.to_bits(),
                                "{what}: element {k}: {a} vs reference {c}"
                            );
                        }
                    }
                    continue;
                }
                // Each element's line position and the magnitude of the terms so far.
                let (len, inner) = if dim == 0 { (n, 3) } else { (n, 1) };
                let mut magnitude = vec![0.0f64; x.numel()];
                for k in 0..x.numel() {
                    let before = if (k / inner) % len > 0 {
                        magnitude[k - inner]
                    } else {
                        0.0
                    };
                    magnitude[k] = before + x.get_f64(k).abs();
                }
                let bits = match out.dtype {
                    DType::F64 => 53,
                    DType::F32 => 24,
                    DType::F16 => 11,
                    DType::BF16 => 8,
                    _ => 64,
                };
                for (k, m) in magnitude.iter().enumerate() {
                    let (a, w) = (out.get_f64(k), want[0].get_f64(k));
                    let slack = match (bits, product) {
                        (64, _) => 0.0,
                        // Each of up to n roundings of the doubles' products.
                        (_, true) => w.abs() * (2f64.powi(1 - bits) + n as f64 * 2f64.powi(-52)),
                        _ => w.abs() * 2f64.powi(1 - bits) + m * 2f64.powi(-50),
                    };
                    assert!(
                        (a - w).abs() <= slack,
                        "{what}: element {k}: {a} vs reference {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn sort_and_topk_match_the_host() {
    for dtype in ["f32", "bf16", "i64"] {
        for (op, args) in [
            ("sort", r#""dim": 1, "descending": false"#),
            ("sort", r#""dim": 0, "descending": true"#),
            ("topk", r#""k": 2, "dim": -1, "largest": true"#),
            ("topk", r#""k": 3, "dim": 1, "largest": false"#),
        ] {
            let g = graph(
                dtype,
                &format!(
                    r#"{{"name": "s", "op": "aten.{op}.default", "args": {{"self": {{"tensor": "x"}}, {args}}}}}"#
                ),
                r#"[{"tensor": "s", "index": 0}, {"tensor": "s", "index": 1}]"#,
            );
            let exe = Executable::new(lower(&g).unwrap()).unwrap();
            let mut dev = Emu::new("sort", &exe);
            for (seed, n) in [(4, 0), (5, 1), (6, 40)] {
                let x = awkward(g.inputs[0].dtype, n, seed);
                let what = format!("{op} {dtype} {args} n {n}");
                assert_eq!(
                    exact(&what, &mut dev, &exe, &g, &x),
                    0,
                    "{what}: on the host"
                );
            }
        }
    }
}

#[test]
fn radix_passes_over_digits_every_key_shares_are_skipped() {
    // Expert ids (0 to 7: only the lowest digit differs), the same times 256 plus 3 (only the
    // second), and small whole f32 values (the two low mantissa digits are zero): passes are
    // skipped, an odd or even number of them, in both radix forms.
    for (dtype, value) in [
        (
            "i64",
            (|i: usize| (i * 7919 % 8) as f64) as fn(usize) -> f64,
        ),
        ("i64", |i| ((i * 7919 % 8) * 256 + 3) as f64),
        ("f32", |i| (i * 7919 % 50) as f64 - 20.0),
    ] {
        for descending in [false, true] {
            let g = Graph::from_json(&format!(
                r#"{{"format": "guardless-graph", "version": 1, "name": "shared_digits",
                "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}}],
                "inputs": [{{"name": "x", "dtype": "{dtype}", "shape": [2, "n"]}}],
                "nodes": [{{"name": "s", "op": "aten.sort.default", "args": {{"self": {{"tensor": "x"}}, "dim": -1, "descending": {descending}}}}}],
                "outputs": [{{"tensor": "s", "index": 0}}, {{"tensor": "s", "index": 1}}]}}"#
            ))
            .unwrap();
            let exe = Executable::new(lower(&g).unwrap()).unwrap();
            let mut dev = Emu::new("shared_digits", &exe);
            let d = g.inputs[0].dtype;
            for (len, part) in [(2520, "_block"), (4104, "_tiled")] {
                let v: Vec<f64> = (0..2 * len).map(value).collect();
                let x = if d.is_float() {
                    HostTensor::from_f64(d, &[2, len], &v)
                } else {
                    let v: Vec<i64> = v.iter().map(|&x| x as i64).collect();
                    HostTensor::from_i64(d, &[2, len], &v)
                };
                let what = format!("{dtype} descending {descending} of {len}");
                dev.launched.clear();
                assert_eq!(exact(&what, &mut dev, &exe, &g, &x), 0, "{what}");
                assert!(dev.launched.iter().all(|f| f.ends_with(part)), "{what}");
            }
        }
    }
}

#[test]
fn long_sorts_run_by_radix_on_the_device_bit_for_bit() {
    // Lines of 2520 and 4104: past the selection's bound (`keep · len` comparisons), so a radix
    // sort — a block per line at 2520 (three tiles of 1024, the last partial), in every dtype; a
    // block per tile at 4104 (five tiles, the last of 8 elements) — both directions, values and
    // positions, many ties.
    // Both directions in one graph: one emulation build per dtype (each took seconds).
    for dtype in [
        "f64", "f32", "f16", "bf16", "i64", "i32", "i8", "u8", "bool",
    ] {
        let g = Graph::from_json(&format!(
            r#"{{"format": "guardless-graph", "version": 1, "name": "long_sort",
            "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}}],
            "inputs": [{{"name": "x", "dtype": "{dtype}", "shape": [2, "n"]}}],
            "nodes": [{{"name": "a", "op": "aten.sort.default", "args": {{"self": {{"tensor": "x"}}, "dim": -1, "descending": false}}}},
                      {{"name": "d", "op": "aten.sort.default", "args": {{"self": {{"tensor": "x"}}, "dim": -1, "descending": true}}}}],
            "outputs": [{{"tensor": "a", "index": 0}}, {{"tensor": "a", "index": 1}},
                        {{"tensor": "d", "index": 0}}, {{"tensor": "d", "index": 1}}]}}"#
        ))
        .unwrap();
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new("long_sort", &exe);
        let d = g.inputs[0].dtype;
        // Tiles share the keys and the placing with the block form: in a few dtypes, odd
        // and even pass counts (f16 3, f32 4, i64 8, bool 1).
        let tiles = ["f16", "f32", "i64", "bool"].contains(&dtype);
        let forms = [(2520, "_block", 2), (4104, "_tiled", 2 * phases(d))];
        for (len, part, launches) in forms.into_iter().take(1 + usize::from(tiles)) {
            // The same values as [2, len] (awkward makes [n, 4, 3]).
            let x = HostTensor {
                shape: vec![2, len],
                ..awkward(d, len / 6, 9)
            };
            let what = format!("sort {dtype} both directions of {len}");
            dev.launched.clear();
            assert_eq!(
                exact(&what, &mut dev, &exe, &g, &x),
                0,
                "{what}: on the host"
            );
            // Each sort's launches.
            let radix = dev.launched.iter().filter(|f| f.ends_with(part)).count();
            assert_eq!(radix, 2 * launches, "{what}: {:?}", dev.launched);
        }
    }
    // topk and sort of 12 lines across the middle dimension (an inner stride); the function is
    // chosen per call: the selection at the smaller size (2600 and 2500 comparisons a line),
    // the radix sort at the larger (5000 and 90000: few lines).
    for (node, outputs, sizes) in [
        (
            r#"{"name": "s", "op": "aten.topk.default", "args": {"self": {"tensor": "x"}, "k": 10, "dim": 0, "largest": true}}"#,
            r#"[{"tensor": "s", "index": 0}, {"tensor": "s", "index": 1}]"#,
            [(7, 260), (8, 500)],
        ),
        (
            r#"{"name": "s", "op": "aten.sort.default", "args": {"self": {"tensor": "x"}, "dim": 0}}"#,
            r#"[{"tensor": "s", "index": 0}]"#,
            [(7, 50), (8, 300)],
        ),
    ] {
        let g = graph("f32", node, outputs);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new("long_sort_inner", &exe);
        for (seed, n) in sizes {
            let what = format!("{node} n = {n}");
            let x = awkward(DType::F32, n, seed);
            assert_eq!(exact(&what, &mut dev, &exe, &g, &x), 0, "{what}");
        }
        assert!(dev.launched.iter().any(|f| f.ends_with("_block")), "{node}");
        assert!(dev.launched.iter().any(|f| f.ends_with("_write")), "{node}");
    }
    // 4900 comparisons a line: a radix sort for 2 lines, a selection for 4096 (a thread each).
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "many_lines",
        "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["n", 70]}],
        "nodes": [{"name": "s", "op": "aten.sort.default", "args": {"self": {"tensor": "x"}, "dim": -1}}],
        "outputs": [{"tensor": "s", "index": 0}, {"tensor": "s", "index": 1}]}"#,
    )
    .unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("many_lines", &exe);
    for (n, part) in [(2, "_block"), (4096, "_write")] {
        // The first n · 70 awkward values (awkward makes [m, 4, 3]).
        let a = awkward(DType::F32, n * 70 / 12 + 1, 12);
        let v: Vec<f64> = (0..n * 70).map(|i| a.get_f64(i)).collect();
        let x = HostTensor::from_f64(DType::F32, &[n, 70], &v);
        dev.launched.clear();
        assert_eq!(exact(&format!("{n} lines"), &mut dev, &exe, &g, &x), 0);
        assert!(
            dev.launched.iter().all(|f| f.ends_with(part)),
            "{n}: {:?}",
            dev.launched
        );
    }
    // The top 3000 of 12 lines of 4100 an inner stride apart: a block per tile.
    let g = graph(
        "bf16",
        r#"{"name": "s", "op": "aten.topk.default", "args": {"self": {"tensor": "x"}, "k": 3000, "dim": 0, "largest": false}}"#,
        r#"[{"tensor": "s", "index": 0}, {"tensor": "s", "index": 1}]"#,
    );
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("long_sort_tiles_inner", &exe);
    let x = awkward(DType::BF16, 4100, 10);
    assert_eq!(exact("tiled topk", &mut dev, &exe, &g, &x), 0);
    assert!(
        dev.launched.iter().all(|f| f.ends_with("_tiled")),
        "{:?}",
        dev.launched
    );
}
