//! `index_put` and `scatter` on the device (`codegen::cuda::scatter`), run on the CPU emulation of
//! CUDA and compared with the reference executor: every dtype, writes and adds, duplicates,
//! several index tensors, masks, a base read through strides, bad indices, and a recorded call.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::cases::SCATTER_CASES;
use differential::{assert_close, one_op, random_inputs};
use emulated::{compare, run, Emu};
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::launch::{Executable, Inputs, Session, SessionOptions};

/// `cache[pos] = new` (or `+=`) on a [32, 3] cache of `dtype`, `n` new rows.
fn cache_write(dtype: &str, accumulate: bool) -> Graph {
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "cache_write_{dtype}",
        "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 32, "optimization_hint": 4}}],
        "inputs": [{{"name": "cache", "dtype": "{dtype}", "shape": [32, 3]}},
                   {{"name": "pos", "dtype": "i64", "shape": ["n"]}},
                   {{"name": "new", "dtype": "{dtype}", "shape": ["n", 3]}}],
        "nodes": [{{"name": "out", "op": "aten.index_put.default",
                   "args": {{"self": {{"tensor": "cache"}}, "indices": [{{"tensor": "pos"}}],
                            "values": {{"tensor": "new"}}, "accumulate": {accumulate}}}}}],
        "outputs": [{{"tensor": "out"}}]}}"#
    ))
    .unwrap()
}

/// Inputs of [`cache_write`] with positions `pos`.
fn cache_inputs(g: &Graph, pos: &[i64], seed: u64) -> (Vec<HostTensor>, Bindings) {
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("n").unwrap(), pos.len() as i64);
    let mut inputs = random_inputs(g, &b, seed, (-100, 100));
    inputs[1] = HostTensor::from_i64(DType::I64, &[pos.len()], pos);
    let b = reference::bind_inputs(g, &inputs, &b).unwrap();
    (inputs, b)
}

/// Replaces the values of `tensors` by small integers (0..8 for u8, else -4..4): every order of
/// adding them gives the same sums, exactly, in every dtype. (Atomic additions on the device come
/// in any order, and a low-precision dtype rounds each: an order-dependent result.)
fn small_integers(tensors: &mut [HostTensor]) {
    for (k, t) in tensors.iter_mut().enumerate() {
        let shift = if t.dtype == DType::U8 { 0 } else { 4 };
        let v: Vec<i64> = (0..t.numel())
            .map(|i| ((i * 5 + k) % 9) as i64 - shift)
            .collect();
        let shape = t.shape.clone();
        *t = if t.dtype.is_float() {
            let v: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            HostTensor::from_f64(t.dtype, &shape, &v)
        } else {
            HostTensor::from_i64(t.dtype, &shape, &v)
        };
    }
}

#[test]
fn cache_writes_run_on_the_device_in_every_dtype() {
    // Distinct positions (written), then repeated ones (added: every value counts).
    let distinct: Vec<i64> = (0..32).map(|i| (i * 7 + 3) % 32).collect();
    for dtype in [
        "f32", "bf16", "f16", "f64", "i64", "i32", "i8", "u8", "bool",
    ] {
        for accumulate in [false, true] {
            if accumulate && dtype == "bool" {
                continue;
            }
            let g = cache_write(dtype, accumulate);
            let exe = Executable::new(lower(&g).unwrap()).unwrap();
            let mut dev = Emu::new(&format!("cache_write_{dtype}_{accumulate}"), &exe);
            for (seed, n) in [(1u64, 0usize), (2, 1), (3, 5), (4, 32)] {
                let pos: Vec<i64> = if accumulate {
                    (0..n as i64).map(|i| (i * 5) % 3).collect()
                } else {
                    distinct[..n].to_vec()
                };
                let what = format!("{dtype} accumulate {accumulate} n {n}");
                let (mut inputs, b) = cache_inputs(&g, &pos, seed);
                if accumulate {
                    // Not the positions.
                    small_integers(&mut inputs[..1]);
                    small_integers(&mut inputs[2..]);
                }
                let (_, host_steps) = compare(&what, &mut dev, &exe, &g, &inputs, &b);
                assert_eq!(host_steps, 0, "{what}: the scatter ran on the host");
            }
            assert!(
                dev.launched.iter().any(|f| f.ends_with("_write")),
                "{dtype}: {:?}",
                dev.launched
            );
        }
    }
}

#[test]
fn index_put_forms_match_the_reference_on_the_device() {
    let cases = [
        // A middle dimension indexed, values added; several index tensors; a scalar value.
        r#"{"self": {"tensor": "z"}, "indices": [null, {"tensor": "ids"}], "values": {"tensor": "z"}, "accumulate": true}"#,
        r#"{"self": {"tensor": "i"}, "indices": [{"tensor": "ids"}, {"tensor": "ids"}], "values": 7}"#,
        r#"{"self": {"tensor": "h"}, "indices": [{"tensor": "ids"}], "values": {"tensor": "h"}, "accumulate": true}"#,
        // A boolean mask: its count from a select on the device (read back), then the writes.
        r#"{"self": {"tensor": "x"}, "indices": [{"tensor": "m"}], "values": 2.5}"#,
        r#"{"self": {"tensor": "h"}, "indices": [{"tensor": "m"}], "values": -1, "accumulate": true}"#,
    ];
    for args in cases {
        let g = one_op("aten.index_put.default", args);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new("index_put_forms", &exe);
        for (seed, n) in [(5u64, 0i64), (6, 1), (7, 3), (8, 13)] {
            let mut b = Bindings::new();
            b.set(g.env.symbol_id("u0").unwrap(), n);
            // Indices index dimensions of size u0 (or 5): drawn from [0, min(u0, 5)).
            let mut inputs = random_inputs(&g, &b, seed, (0, n.clamp(1, 5)));
            for t in inputs.iter_mut().filter(|t| t.dtype.is_float()) {
                small_integers(std::slice::from_mut(t));
            }
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let what = format!("{args} at u0 = {n}");
            let (_, host_steps) = compare(&what, &mut dev, &exe, &g, &inputs, &b);
            assert_eq!(host_steps, 0, "{what}");
        }
    }
}

#[test]
fn scatter_forms_match_the_reference_on_the_device() {
    for &(op, args) in SCATTER_CASES {
        let g = one_op(op, args);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new("scatter_forms", &exe);
        let rows = args.contains(r#""dim": 0"#);
        for (seed, n) in [(5u64, 0i64), (6, 1), (7, 3), (8, 13)] {
            let mut b = Bindings::new();
            b.set(g.env.symbol_id("u0").unwrap(), n);
            let mut inputs = random_inputs(&g, &b, seed, (0, 5));
            for t in inputs.iter_mut().filter(|t| t.dtype.is_float()) {
                small_integers(std::slice::from_mut(t));
            }
            // The index `i` [u0, 5]: along the columns a permutation of 0..5 per row (writes to
            // distinct places, whose order the device does not keep); down the rows, repeated
            // rows (added).
            let m = if rows { n.clamp(1, 5) } else { 5 };
            let at = g.inputs.iter().position(|i| i.name == "i").unwrap();
            let idx: Vec<i64> = (0..n * 5).map(|e| (e % 5 + e / 5) % m).collect();
            inputs[at] = HostTensor::from_i64(DType::I64, &[n as usize, 5], &idx);
            let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
            let what = format!("{op} {args} at u0 = {n}");
            let (_, host_steps) = compare(&what, &mut dev, &exe, &g, &inputs, &b);
            assert_eq!(host_steps, 0, "{what}");
        }
        assert!(
            dev.launched.iter().any(|f| f.ends_with("_write")),
            "{op}: {:?}",
            dev.launched
        );
    }
}

#[test]
fn a_base_read_through_strides_is_copied_by_a_kernel() {
    // x stored column-major, columns k written: the base is read through its strides.
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "strided_base",
        "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 64}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["n", 5], "strides": [1, "n"]},
                   {"name": "k", "dtype": "i64", "shape": [2]},
                   {"name": "v", "dtype": "f32", "shape": ["n", 2]}],
        "nodes": [{"name": "out", "op": "aten.index_put.default",
                   "args": {"self": {"tensor": "x"}, "indices": [null, {"tensor": "k"}], "values": {"tensor": "v"}}}],
        "outputs": [{"tensor": "out"}]}"#,
    )
    .unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("strided_base", &exe);
    for (seed, n) in [(9u64, 0i64), (10, 1), (11, 6)] {
        let mut b = Bindings::new();
        b.set(g.env.symbol_id("n").unwrap(), n);
        let mut inputs = random_inputs(&g, &b, seed, (0, 5));
        inputs[1] = HostTensor::from_i64(DType::I64, &[2], &[4, 1]);
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        compare(
            &format!("strided base, n = {n}"),
            &mut dev,
            &exe,
            &g,
            &inputs,
            &b,
        );
    }
    // Lowering gives the scatter a row-major copy of the transposed base: a pointwise kernel
    // (the scatter's own copy kernel when the base is row-major).
    assert!(
        dev.launched.iter().any(|f| f.starts_with("pointwise_"))
            && dev.launched.iter().any(|f| f.starts_with("scatter_")),
        "{:?}",
        dev.launched
    );
}

#[test]
fn duplicate_targets_without_accumulate_keep_one_of_their_values_per_element() {
    let g = cache_write("f32", false);
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("cache_duplicates", &exe);
    let (inputs, b) = cache_inputs(&g, &[2, 9, 2, 2, 9, 30, 2], 12);
    let (got, _, _) = run(&mut dev, &exe, Inputs::Host(&inputs), &b).unwrap();
    let (cache, new, out) = (&inputs[0], &inputs[2], &got[0]);
    let pos = [2, 9, 2, 2, 9, 30, 2];
    // Element by element (each is its own write): as stored, f32.
    let at = |t: &HostTensor, r: usize, c: usize| t.get_f64(r * 3 + c) as f32;
    for r in 0..32 {
        let written: Vec<usize> = (0..7).filter(|&i| pos[i] == r as i64).collect();
        for c in 0..3 {
            if written.is_empty() {
                assert_eq!(at(out, r, c), at(cache, r, c), "({r}, {c}) untouched");
            } else {
                assert!(
                    written.iter().any(|&i| at(out, r, c) == at(new, i, c)),
                    "({r}, {c}): {} is none of the values written there",
                    at(out, r, c)
                );
            }
        }
    }
}

#[test]
fn bad_indices_are_clean_errors_and_negative_ones_wrap() {
    let g = cache_write("f32", true);
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("cache_bad_index", &exe);
    for bad in [32, -33, i64::MAX] {
        let (inputs, b) = cache_inputs(&g, &[1, bad, 4], 13);
        let e = run(&mut dev, &exe, Inputs::Host(&inputs), &b)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node 'out' (aten.index_put.default): an index is out of range")
                && e.contains("(in the kernel of"),
            "{bad}: {e}"
        );
    }
    // -1 is the last row, as in PyTorch.
    let (inputs, b) = cache_inputs(&g, &[-1, 0, -32], 14);
    compare("negative positions", &mut dev, &exe, &g, &inputs, &b);
}

#[test]
fn a_call_that_scatters_on_the_device_can_be_recorded() {
    let g = differential::cache_accumulate();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("cache_accumulate_capture", &exe);
    let ins = differential::cache_accumulate_inputs();
    let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
    let options = SessionOptions { poison: true };
    let mut s = Session::new(&mut dev, &exe, Inputs::Host(&ins), &b, &options).unwrap();
    s.capture(&mut dev).unwrap();
    for _ in 2..=3 {
        s.replay(&mut dev).unwrap();
    }
    assert_eq!(
        s.outputs(&mut dev).unwrap()[0],
        differential::cache_after(3)
    );
}

/// [`differential::cache_accumulate`] that also returns `written - cache`, which reads the
/// cache as it was after the scatter.
fn cache_reread() -> Graph {
    differential::cache_accumulate_with(
        "cache_reread",
        r#", {"name": "delta", "op": "aten.sub.Tensor", "args": {"self": {"tensor": "written"}, "other": {"tensor": "cache"}}}"#,
        r#", {"tensor": "delta"}"#,
    )
}

#[test]
fn a_cache_write_written_back_is_done_in_place() {
    let ins = differential::cache_accumulate_inputs();
    for (reread, g) in [
        (false, differential::cache_accumulate()),
        (true, cache_reread()),
    ] {
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new(&format!("cache_update_{reread}"), &exe);
        let mut host = ins.clone();
        calls_in_place(
            &mut dev,
            &exe,
            &g,
            &mut host,
            3,
            Some(0),
            &format!("reread {reread}"),
        );
        // In place: no copy of the 256-byte cache, in or back. Read again after the scatter:
        // a copy in and a copy back per call.
        let copies = if reread { 3 * 2 * 256 } else { 0 };
        assert_eq!(dev.copied_bytes, copies, "reread {reread}");
    }
}

/// `calls` calls of `g` in one session on `dev`, `host`'s tensors on the device read in place:
/// each call's outputs compared with the reference's, `host` then updated by the call's
/// write-backs, and (`input`) that input as the device holds it compared with `host`'s.
fn calls_in_place(
    dev: &mut Emu,
    exe: &Executable,
    g: &Graph,
    host: &mut [HostTensor],
    calls: usize,
    input: Option<usize>,
    label: &str,
) {
    let b = reference::bind_inputs(g, host, &Bindings::new()).unwrap();
    let (keep, tensors): (Vec<_>, Vec<_>) = host
        .iter()
        .map(|t| emulated::to_device(dev, t, false))
        .unzip();
    let options = SessionOptions { poison: true };
    let mut s = Session::new(dev, exe, Inputs::Device(&tensors), &b, &options).unwrap();
    for call in 1..=calls {
        let want = reference::run(g, host, &b).unwrap();
        g.write_back(host, &want).unwrap();
        s.execute(dev).unwrap();
        for (gt, w) in s.outputs(dev).unwrap().iter().zip(&want) {
            assert_close(&format!("{label}, call {call}"), gt, w);
        }
        if let Some(k) = input {
            assert_eq!(
                emulated::download(dev, &tensors[k]),
                host[k],
                "{label}, call {call}: the caller's input {k}"
            );
        }
    }
    drop((s, keep));
}

#[test]
fn a_scatter_whose_values_read_its_own_base_is_not_done_in_place() {
    // Rows reversed: `x[idx] = x[idx2]`. Done in place, a thread could read a row another one
    // has already overwritten (on the emulator, the second block reads the first's targets);
    // the base is copied instead, and the result is exact.
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "reverse_rows",
        "symbols": [{"name": "t", "kind": "unbacked", "min": 0, "max": 128}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": [128, 4]},
                   {"name": "idx", "dtype": "i64", "shape": ["t"]},
                   {"name": "idx2", "dtype": "i64", "shape": ["t"]}],
        "nodes": [{"name": "v", "op": "aten.index.Tensor", "args": {"self": {"tensor": "x"}, "indices": [{"tensor": "idx2"}]}},
                  {"name": "w", "op": "aten.index_put.default",
                   "args": {"self": {"tensor": "x"}, "indices": [{"tensor": "idx"}], "values": {"tensor": "v"}}}],
        "outputs": [{"tensor": "w", "mutates": "x"}]}"#,
    )
    .unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("reverse_rows", &exe);
    let x: Vec<f64> = (0..512).map(|i| i as f64).collect();
    let ids: Vec<i64> = (0..128).collect();
    let reversed: Vec<i64> = (0..128).rev().collect();
    let ins = [
        HostTensor::from_f64(DType::F32, &[128, 4], &x),
        HostTensor::from_i64(DType::I64, &[128], &ids),
        HostTensor::from_i64(DType::I64, &[128], &reversed),
    ];
    let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
    let want = reference::run(&g, &ins, &b).unwrap();
    let (keep, tensors): (Vec<_>, Vec<_>) = ins
        .iter()
        .map(|t| emulated::to_device(&mut dev, t, false))
        .unzip();
    let options = SessionOptions { poison: true };
    let mut s = Session::new(&mut dev, &exe, Inputs::Device(&tensors), &b, &options).unwrap();
    s.execute(&mut dev).unwrap();
    assert_eq!(s.outputs(&mut dev).unwrap()[0], want[0]);
    assert_eq!(emulated::download(&mut dev, &tensors[0]), want[0]);
    drop((s, keep));
}

#[test]
fn a_view_of_a_cache_written_in_place_reads_the_cache() {
    // scores = new · written^T: the matmul reads the updated cache through a transposed view.
    let g = differential::cache_accumulate_with(
        "cache_view",
        r#", {"name": "wt", "op": "aten.t.default", "args": {"self": {"tensor": "written"}}},
           {"name": "scores", "op": "aten.mm.default", "args": {"self": {"tensor": "new"}, "mat2": {"tensor": "wt"}}}"#,
        r#", {"tensor": "scores"}"#,
    );
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("cache_view", &exe);
    let mut host = differential::cache_accumulate_inputs();
    small_integers(&mut host[2..]);
    calls_in_place(&mut dev, &exe, &g, &mut host, 2, None, "cache view");
    assert_eq!(dev.copied_bytes, 0, "the cache was copied");
    assert!(dev.gemms > 0);
}

#[test]
fn a_pooled_cache_written_layer_by_layer_is_updated_in_place_on_the_device() {
    let g = differential::pooled_cache();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("pooled_cache", &exe);
    let mut host = differential::pooled_cache_inputs();
    calls_in_place(&mut dev, &exe, &g, &mut host, 2, Some(0), "pooled cache");
    assert_eq!(dev.copied_bytes, 0, "the pool was copied");
}
