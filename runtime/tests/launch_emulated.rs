//! The launcher (`launch`), run on a device made of the CPU emulation of CUDA (`emulated`).
//! Everything the GPU runtime decides — memory plan, variants by predicate and alignment, grids,
//! derived sizes, host steps, data-dependent sizes, device inputs read in place, errors — is
//! checked against the reference executor here.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::{assert_close, inputs_at, random_inputs};
use emulated::{example, read_at, run, to_device, Emu};
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::elements::{self, Either};
use guardless_runtime::launch::{Device, Executable, Inputs, Session, SessionOptions};

#[test]
fn examples_match_the_reference_through_the_launcher() {
    for name in [
        "rms_norm.unbacked",
        "softmax.unbacked",
        "silu_and_mul.backed",
        "rotary_embedding.unbacked",
        // mm and nonzero on the device (its counts read back), then kernels sized by them.
        "moe_routing.unbacked",
    ] {
        let g = example(name);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new(name, &exe);
        for (seed, n) in [(1, 0), (2, 1), (3, 17), (4, 40)] {
            if n == 0 && name.ends_with(".backed") {
                continue; // backed sizes start at 1
            }
            let (inputs, b) = inputs_at(&g, n, seed);
            let want = reference::run(&g, &inputs, &b).unwrap();
            let (got, host_steps, _) = run(&mut dev, &exe, Inputs::Host(&inputs), &b).unwrap();
            assert_eq!(got.len(), want.len());
            for (i, (gt, w)) in got.iter().zip(&want).enumerate() {
                assert_close(&format!("{name} output {i} at n = {n}"), gt, w);
            }
            assert_eq!(host_steps, 0, "{name}: host steps");
        }
        assert!(!dev.launched.is_empty(), "{name}: nothing launched");
        if name.starts_with("moe") {
            assert!(dev.gemms > 0, "moe_routing's router matmul ran on the host");
        }
    }
}

const MATMULS: &str = r#"{
 "format": "guardless-graph", "version": 1, "name": "matmuls",
 "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 4096, "optimization_hint": 64}],
 "inputs": [
  {"name": "x", "dtype": "f32", "shape": ["n", 8]},
  {"name": "w", "dtype": "f32", "shape": [5, 8], "kind": "parameter"},
  {"name": "q", "dtype": "f32", "shape": [3, "n", 4]},
  {"name": "k", "dtype": "f32", "shape": [3, 4, 6]}
 ],
 "nodes": [
  {"name": "wt", "op": "aten.t.default", "args": {"self": {"tensor": "w"}}},
  {"name": "y", "op": "aten.mm.default", "args": {"self": {"tensor": "x"}, "mat2": {"tensor": "wt"}}},
  {"name": "r", "op": "aten.relu.default", "args": {"self": {"tensor": "y"}}},
  {"name": "s", "op": "aten.bmm.default", "args": {"self": {"tensor": "q"}, "mat2": {"tensor": "k"}}},
  {"name": "xs", "op": "aten.slice.Tensor", "args": {"self": {"tensor": "x"}, "dim": 1, "start": 0, "end": 8, "step": 2}},
  {"name": "ws", "op": "aten.slice.Tensor", "args": {"self": {"tensor": "wt"}, "dim": 0, "start": 0, "end": 8, "step": 2}},
  {"name": "z", "op": "aten.mm.default", "args": {"self": {"tensor": "xs"}, "mat2": {"tensor": "ws"}}}
 ],
 "outputs": [{"tensor": "r"}, {"tensor": "s"}, {"tensor": "z"}]
}"#;

#[test]
fn matmuls_run_on_the_device_in_every_layout_the_lowering_makes() {
    let g = Graph::from_json(MATMULS).unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("matmuls", &exe);
    for (seed, n) in [(1, 0), (2, 1), (3, 13)] {
        let (inputs, b) = inputs_at(&g, n, seed);
        let want = reference::run(&g, &inputs, &b).unwrap();
        let before = dev.gemms;
        let (got, host_steps, _) = run(&mut dev, &exe, Inputs::Host(&inputs), &b).unwrap();
        for (i, (gt, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("matmuls output {i} at n = {n}"), gt, w);
        }
        // x·wᵀ (a transposed operand), the bmm and the product of the step-2 slices (which the
        // lowering makes contiguous by a kernel first) all reach the device when non-empty.
        let (device, host) = if n == 0 { (0, 0) } else { (3, 0) };
        assert_eq!(dev.gemms - before, device, "device matmuls at n = {n}");
        assert_eq!(host_steps, host, "host matmuls at n = {n}");
    }
}

#[test]
fn device_inputs_are_read_in_place_when_their_layout_is_the_graphs() {
    let name = "rms_norm.unbacked";
    let g = example(name);
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("rms_norm_device_inputs", &exe);
    let (inputs, b) = inputs_at(&g, 9, 7);
    let want = reference::run(&g, &inputs, &b).unwrap();
    // Each input on the "device", row-major; the first also transposed in storage.
    let (mut keep, contiguous): (Vec<_>, Vec<_>) =
        inputs.iter().map(|t| to_device(&mut dev, t, false)).unzip();
    let (got, _, copied) = run(&mut dev, &exe, Inputs::Device(&contiguous), &b).unwrap();
    assert_eq!(copied, 0, "contiguous device inputs were copied");
    for (gt, w) in got.iter().zip(&want) {
        assert_close("rms_norm from device inputs", gt, w);
    }
    // x [n, h] stored column-major: the same values, another layout; copied once.
    let x = &inputs[0];
    let (rows, cols) = (x.shape[0], x.shape[1]);
    let (m, column_major) = to_device(&mut dev, x, true);
    keep.push(m);
    let mut strided = contiguous.clone();
    strided[0] = column_major;
    let (got, _, copied) = run(&mut dev, &exe, Inputs::Device(&strided), &b).unwrap();
    assert_eq!(copied, rows * cols * x.dtype.size());
    for (gt, w) in got.iter().zip(&want) {
        assert_close("rms_norm from a column-major device input", gt, w);
    }
    // Strides that reach past the bytes given are refused, naming the input.
    let mut short = contiguous.clone();
    short[0].bytes -= 1;
    let e = run(&mut dev, &exe, Inputs::Device(&short), &b).unwrap_err();
    assert!(e.to_string().starts_with("input 0:"), "{e}");
    drop(keep);
}

#[test]
fn bad_calls_are_clean_errors() {
    let g = example("rotary_embedding.unbacked");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("rotary_errors", &exe);
    let (mut inputs, b) = inputs_at(&g, 5, 3);
    // A position past the cache: the gather's bounds check raises it from the kernel.
    let positions = &mut inputs[1];
    let mut p: Vec<i64> = (0..positions.numel())
        .map(|i| positions.get_f64(i) as i64)
        .collect();
    p[3] = 5000;
    *positions = HostTensor::from_i64(DType::I64, &positions.shape.clone(), &p);
    let e = run(&mut dev, &exe, Inputs::Host(&inputs), &b).unwrap_err();
    assert!(e.to_string().contains("index"), "{e}");
    // A size outside the symbol's declared range.
    let mut big = Bindings::new();
    big.set(g.env.symbol_id("n").unwrap(), 70000);
    let e = run(&mut dev, &exe, Inputs::Host(&[]), &big).unwrap_err();
    assert!(e.to_string().contains('n'), "{e}");
    // An input of the wrong shape.
    let mut b6 = Bindings::new();
    b6.set(g.env.symbol_id("n").unwrap(), 6);
    let e = run(&mut dev, &exe, Inputs::Host(&inputs), &b6).unwrap_err();
    assert!(e.to_string().starts_with("input 0:"), "{e}");
}

const ROW_SUMS: &str = r#"{
 "format": "guardless-graph", "version": 1, "name": "row_sums",
 "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 4096, "optimization_hint": 4}],
 "inputs": [{"name": "x", "dtype": "f32", "shape": ["n", 40000]}],
 "nodes": [
  {"name": "s", "op": "aten.sum.dim_IntList", "args": {"self": {"tensor": "x"}, "dim": [-1]}}
 ],
 "outputs": [{"tensor": "s"}]
}"#;

#[test]
fn split_reductions_combine_their_partials_in_a_last_launch() {
    // One pass whose result is stored: the row's 4 blocks (of 256 threads) write partials
    // (launch 0), then every block combines them and block 0 stores the sum (launch 1).
    let g = Graph::from_json(ROW_SUMS).unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let text = exe.schedule.to_text(&exe.program);
    assert!(
        text.contains("v0 (tuned for 4): split 4, 256 threads"),
        "{text}"
    );
    let mut dev = Emu::new("row_sums", &exe);
    for (seed, n) in [(1, 0), (2, 1), (3, 3)] {
        let mut b = Bindings::new();
        b.set(g.env.symbol_id("n").unwrap(), n);
        // Positive terms: 40000 random signed ones cancel to a sum whose f32 rounding error is
        // past any fixed tolerance.
        let x = &random_inputs(&g, &b, seed, (0, 4))[0];
        let values: Vec<f64> = (0..x.numel()).map(|i| x.get_f64(i).abs()).collect();
        let inputs = vec![HostTensor::from_f64(DType::F32, &x.shape, &values)];
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let want = reference::run(&g, &inputs, &b).unwrap();
        let before = dev.launched.len();
        let (got, _, _) = run(&mut dev, &exe, Inputs::Host(&inputs), &b).unwrap();
        assert_close(&format!("row sums at n = {n}"), &got[0], &want[0]);
        assert_eq!(
            dev.launched.len() - before,
            if n == 0 { 0 } else { 2 },
            "launches at n = {n}"
        );
    }
}

#[test]
fn output_views_are_where_the_outputs_lie_on_the_device() {
    let g = example("fused_add_rms_norm.unbacked");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("fused_add_rms_norm_views", &exe);
    let (inputs, b) = inputs_at(&g, 6, 5);
    let mut s = Session::new(
        &mut dev,
        &exe,
        Inputs::Host(&inputs),
        &b,
        &SessionOptions { poison: true },
    )
    .unwrap();
    s.execute(&mut dev).unwrap();
    let copied = s.outputs(&mut dev).unwrap();
    let views = s.output_views(&mut dev).unwrap();
    assert_eq!(views.len(), copied.len());
    for (v, t) in views.iter().zip(&copied) {
        assert_eq!((v.dtype, &v.shape), (t.dtype, &t.shape));
        // Read back through the view's own strides: the same elements.
        let mut bytes = vec![0u8; v.bytes];
        dev.download(v.address, &mut bytes).unwrap();
        let mut idx = vec![0i64; v.shape.len()];
        let sizes: Vec<i64> = v.shape.iter().map(|&n| n as i64).collect();
        for e in 0..t.numel() {
            let at: i64 = idx.iter().zip(&v.strides).map(|(&i, &s)| i * s).sum();
            let got = match elements::read(&bytes, v.dtype, at as usize) {
                Either::F(x) => x,
                Either::I(x) => x as f64,
            };
            assert_eq!(got.to_bits(), t.get_f64(e).to_bits(), "element {e}");
            elements::next_index(&mut idx, &sizes);
        }
    }
}

#[test]
fn an_output_that_mutates_an_input_is_written_back_on_the_device() {
    let g = differential::cache_accumulate();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("cache_accumulate", &exe);
    let ins = differential::cache_accumulate_inputs();
    let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
    let options = SessionOptions { poison: true };
    // Host inputs: the session's copy of the cache changes with every execution.
    let mut s = Session::new(&mut dev, &exe, Inputs::Host(&ins), &b, &options).unwrap();
    for call in 1..=3 {
        s.execute(&mut dev).unwrap();
        assert_eq!(
            s.outputs(&mut dev).unwrap()[0],
            differential::cache_after(call)
        );
    }
    drop(s);
    // Device inputs: the caller's cache is written — in place when row-major, through its
    // strides when column-major (copied in, then written back).
    for transposed in [false, true] {
        let (keep, tensors): (Vec<_>, Vec<_>) = ins
            .iter()
            .enumerate()
            .map(|(k, t)| to_device(&mut dev, t, transposed && k == 0))
            .unzip();
        let mut s = Session::new(&mut dev, &exe, Inputs::Device(&tensors), &b, &options).unwrap();
        assert_eq!(s.copied_input_bytes, if transposed { 256 } else { 0 });
        for call in 1..=2 {
            s.execute(&mut dev).unwrap();
            let cache = &tensors[0];
            let got: Vec<f64> = (0..64)
                .map(|i| {
                    let at = (i / 4) as i64 * cache.strides[0] + (i % 4) as i64 * cache.strides[1];
                    unsafe { read_at(cache.address, DType::F32, at) }
                })
                .collect();
            let want = differential::cache_after(call);
            let want: Vec<f64> = (0..64).map(|i| want.get_f64(i)).collect();
            assert_eq!(got, want, "transposed {transposed}, call {call}");
        }
        drop((s, keep));
    }
}

/// `state += delta` written back into `state` (`tests/graphs/accumulate_written_back.json`,
/// [5, 4] f32) on an emulated device named `name`: the graph, the executable, the device, the
/// state `0, 1, …`, `delta(i)`, and the inputs with their bindings.
#[allow(clippy::type_complexity)]
fn accumulate(
    name: &str,
    delta: impl Fn(f64) -> f64,
) -> (
    Graph,
    Executable,
    Emu,
    Vec<f64>,
    Vec<f64>,
    [HostTensor; 2],
    Bindings,
) {
    let g = differential::test_graph("accumulate_written_back.json");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let dev = Emu::new(name, &exe);
    let state: Vec<f64> = (0..20).map(|i| i as f64).collect();
    let delta: Vec<f64> = (0..20).map(|i| delta(i as f64)).collect();
    let ins = [
        HostTensor::from_f64(DType::F32, &[5, 4], &state),
        HostTensor::from_f64(DType::F32, &[5, 4], &delta),
    ];
    let b = reference::bind_inputs(&g, &ins, &Bindings::new()).unwrap();
    (g, exe, dev, state, delta, ins, b)
}

#[test]
fn an_elementwise_update_of_an_input_is_computed_in_its_storage() {
    // `state += delta`: the kernel reads each element of the state where it writes it, so it
    // writes the caller's state directly — no buffer of its own, no write-back copy.
    let (_, exe, mut dev, state, delta, ins, b) =
        accumulate("accumulate_in_place", |i| 0.5 * i - 3.0);
    let (keep, tensors): (Vec<_>, Vec<_>) =
        ins.iter().map(|t| to_device(&mut dev, t, false)).unzip();
    let options = SessionOptions { poison: true };
    let mut s = Session::new(&mut dev, &exe, Inputs::Device(&tensors), &b, &options).unwrap();
    for call in 1..=3 {
        dev.copied_bytes = 0;
        s.execute(&mut dev).unwrap();
        assert_eq!(dev.copied_bytes, 0, "call {call}: copied");
        let out = s.output_views(&mut dev).unwrap();
        assert_eq!(
            out[0].address, tensors[0].address,
            "the output is the state"
        );
        let want: Vec<f64> = (0..20).map(|i| state[i] + call as f64 * delta[i]).collect();
        let got = emulated::download(&mut dev, &tensors[0]);
        assert_eq!(
            got,
            HostTensor::from_f64(DType::F32, &[5, 4], &want),
            "call {call}"
        );
    }
    drop((s, keep));
    // Not in place: the input read again after the update (fused or not), or read at another
    // element than the one written. Results as the reference's, the old values where read.
    for (name, nodes, outputs) in [
        (
            "reread",
            r#"{"name": "sum", "op": "aten.add.Tensor", "args": {"self": {"tensor": "state"}, "other": {"tensor": "delta"}}},
               {"name": "old", "op": "aten.mul.Tensor", "args": {"self": {"tensor": "state"}, "other": 3}}"#,
            r#"[{"tensor": "sum", "mutates": "state"}, {"tensor": "old"}]"#,
        ),
        (
            "flipped",
            r#"{"name": "f", "op": "aten.flip.default", "args": {"self": {"tensor": "state"}, "dims": [0]}},
               {"name": "sum", "op": "aten.add.Tensor", "args": {"self": {"tensor": "f"}, "other": {"tensor": "delta"}}}"#,
            r#"[{"tensor": "sum", "mutates": "state"}]"#,
        ),
    ] {
        let g = Graph::from_json(&format!(
            r#"{{"format": "guardless-graph", "version": 1, "name": "{name}",
            "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 64}}],
            "inputs": [{{"name": "state", "dtype": "f32", "shape": ["n", 4]}},
                       {{"name": "delta", "dtype": "f32", "shape": ["n", 4]}}],
            "nodes": [{nodes}],
            "outputs": {outputs}}}"#
        ))
        .unwrap();
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new(name, &exe);
        let want = reference::run(&g, &ins, &b).unwrap();
        let mut after = ins.to_vec();
        g.write_back(&mut after, &want).unwrap();
        let (keep, tensors): (Vec<_>, Vec<_>) =
            ins.iter().map(|t| to_device(&mut dev, t, false)).unzip();
        let mut s = Session::new(&mut dev, &exe, Inputs::Device(&tensors), &b, &options).unwrap();
        s.execute(&mut dev).unwrap();
        assert_eq!(dev.copied_bytes, 80, "{name}: the write-back copy");
        for (got, w) in s.outputs(&mut dev).unwrap().iter().zip(&want) {
            assert_close(name, got, w);
        }
        assert_eq!(
            emulated::download(&mut dev, &tensors[0]),
            after[0],
            "{name}"
        );
        drop((s, keep));
    }
}

#[test]
fn a_recorded_call_replays_with_new_input_values() {
    // `state += delta`, written back into `state`: a step that changes its input each call.
    let (_, exe, mut dev, state, delta, ins, b) =
        accumulate("accumulate_replay", |i| 0.25 * i - 1.0);
    // Device inputs read in place: the state is written back where it lies.
    let (keep, tensors): (Vec<_>, Vec<_>) =
        ins.iter().map(|t| to_device(&mut dev, t, false)).unzip();
    let options = SessionOptions { poison: true };
    let mut s = Session::new(&mut dev, &exe, Inputs::Device(&tensors), &b, &options).unwrap();
    let e = s.replay(&mut dev).unwrap_err();
    assert!(e.to_string().contains("capture first"), "{e}");
    let read = |dev: &mut Emu, at: u64| {
        let mut bytes = vec![0u8; 80];
        dev.download(at, &mut bytes).unwrap();
        match elements::to_data(&bytes, DType::F32, 20) {
            guardless_ir::tensor::Data::Float(v) => v,
            other => panic!("{other:?}"),
        }
    };
    let after = |calls: usize, delta: &[f64]| -> Vec<f64> {
        (0..20)
            .map(|i| state[i] + calls as f64 * delta[i])
            .collect()
    };
    // The capture executes once (a call), then records without running anything.
    s.capture(&mut dev).unwrap();
    assert_eq!(read(&mut dev, tensors[0].address), after(1, &delta));
    let launches = dev.launched.len();
    assert!(!dev.recordings[0].is_empty());
    for call in 2..=3 {
        s.replay(&mut dev).unwrap();
        assert_eq!(
            read(&mut dev, tensors[0].address),
            after(call, &delta),
            "call {call}"
        );
    }
    assert!(
        dev.launched.len() > launches,
        "replays launch the recorded kernels"
    );
    // New values in an input read in place: the replay reads them.
    let doubled: Vec<f64> = delta.iter().map(|d| 2.0 * d).collect();
    let bytes = elements::to_bytes(&HostTensor::from_f64(DType::F32, &[5, 4], &doubled));
    dev.upload(tensors[1].address, &bytes).unwrap();
    s.replay(&mut dev).unwrap();
    let want: Vec<f64> = (0..20).map(|i| after(3, &delta)[i] + doubled[i]).collect();
    assert_eq!(read(&mut dev, tensors[0].address), want);
    // The outputs as the session reports them agree.
    let out = s.outputs(&mut dev).unwrap();
    assert_eq!(out[0], HostTensor::from_f64(DType::F32, &[5, 4], &want));
    drop((s, keep));
}

#[test]
fn a_call_with_host_steps_cannot_be_recorded() {
    // nonzero runs on the device, but its counts come back to size what follows.
    let g = example("moe_routing.unbacked");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("moe_routing_capture", &exe);
    let (inputs, b) = inputs_at(&g, 5, 3);
    let options = SessionOptions { poison: true };
    let mut s = Session::new(&mut dev, &exe, Inputs::Host(&inputs), &b, &options).unwrap();
    let e = s.capture(&mut dev).unwrap_err().to_string();
    assert!(
        e.starts_with("cannot record the call: it reads data-dependent sizes back: buf")
            && e.contains("(nz0)"),
        "{e}"
    );
    assert!(dev.recording.is_none() && dev.recordings.is_empty());
    drop(s);
    // An integer matmul runs on the host (cuBLAS multiplies floats).
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "int_mm",
        "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 4096}],
        "inputs": [{"name": "x", "dtype": "i64", "shape": ["n", 3]}, {"name": "w", "dtype": "i64", "shape": [3, 2]}],
        "nodes": [{"name": "c", "op": "aten.mm.default", "args": {"self": {"tensor": "x"}, "mat2": {"tensor": "w"}}}],
        "outputs": [{"tensor": "c"}]}"#,
    )
    .unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("int_mm_capture", &exe);
    let (inputs, b) = inputs_at(&g, 300, 5);
    let mut s = Session::new(&mut dev, &exe, Inputs::Host(&inputs), &b, &options).unwrap();
    let e = s.capture(&mut dev).unwrap_err().to_string();
    assert!(
        e.starts_with("cannot record the call: it runs steps on the host: buf")
            && e.contains("(c)"),
        "{e}"
    );
}

#[test]
fn sizes_named_like_c_keywords_or_generated_locals_run_correctly() {
    // `w` once named the vector loads' loop counter too: every vectorized read used w = 0.
    let g = differential::test_graph("hostile_names.json");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("hostile_names", &exe);
    for (seed, (rows, w, k, t)) in [(3, 4, 3, 17), (5, 8, 2, 1), (33, 64, 4, 5000)]
        .into_iter()
        .enumerate()
    {
        let mut b = Bindings::new();
        for (name, v) in [("int", rows), ("w", w), ("k0", k), ("threadIdx", t)] {
            b.set(g.env.symbol_id(name).unwrap(), v);
        }
        let inputs = random_inputs(&g, &b, 60 + seed as u64, (0, rows.max(1)));
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let what = format!("hostile_names at {rows} × {w}, {k}, {t}");
        let (_, host_steps) = emulated::compare(&what, &mut dev, &exe, &g, &inputs, &b);
        assert_eq!(host_steps, 0, "{what}");
    }
}

#[test]
fn remainders_match_the_reference_on_the_device() {
    // fmod (the dividend's sign) and remainder (the divisor's), floats and integers; an integer
    // zero divisor is an error naming the node.
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "remainders",
        "symbols": [{"name": "u0", "kind": "unbacked", "max": 100000}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["u0", 5]}, {"name": "y", "dtype": "f32", "shape": [5]},
                   {"name": "i", "dtype": "i64", "shape": ["u0", 5]}, {"name": "h", "dtype": "bf16", "shape": ["u0", 5]},
                   {"name": "d", "dtype": "i32", "shape": [5]}],
        "nodes": [{"name": "a", "op": "aten.fmod.Tensor", "args": {"self": {"tensor": "x"}, "other": {"tensor": "y"}}},
                  {"name": "b", "op": "aten.fmod.Scalar", "args": {"self": {"tensor": "i"}, "other": -3}},
                  {"name": "c", "op": "aten.remainder.Tensor", "args": {"self": {"tensor": "h"}, "other": {"tensor": "x"}}},
                  {"name": "e", "op": "aten.remainder.Scalar", "args": {"self": {"tensor": "i"}, "other": 4}},
                  {"name": "f", "op": "aten.remainder.Tensor", "args": {"self": {"tensor": "i"}, "other": {"tensor": "d"}}}],
        "outputs": [{"tensor": "a"}, {"tensor": "b"}, {"tensor": "c"}, {"tensor": "e"}, {"tensor": "f"}]}"#,
    )
    .unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("remainders", &exe);
    for (seed, n) in [(1u64, 0i64), (2, 3), (3, 41)] {
        let mut b = Bindings::new();
        b.set(g.env.symbol_id("u0").unwrap(), n);
        let mut inputs = random_inputs(&g, &b, seed, (-9, 9));
        inputs[4] = HostTensor::from_i64(DType::I32, &[5], &[3, -3, 7, -1, 2]);
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        let what = format!("remainders at u0 = {n}");
        let (_, host_steps) = emulated::compare(&what, &mut dev, &exe, &g, &inputs, &b);
        assert_eq!(host_steps, 0, "{what}");
    }
    // A zero divisor.
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("u0").unwrap(), 2);
    let mut inputs = random_inputs(&g, &b, 4, (-9, 9));
    inputs[4] = HostTensor::from_i64(DType::I32, &[5], &[3, 0, 7, -1, 2]);
    let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
    assert!(reference::run(&g, &inputs, &b).is_err());
    let err = run(&mut dev, &exe, Inputs::Host(&inputs), &b)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("division by zero") && err.contains("(f)"),
        "{err}"
    );
}

/// A model of identical layers (three Llama decoder layers, each with its own weights and position
/// ids) runs every layer with the functions of one: as many functions as two layers have, each
/// launch with its own layer's buffers; the result matches the reference, and an index out of
/// range in the last layer is reported as that layer's node (its own error messages, counted from
/// its own `gl_err_base`).
#[test]
fn identical_layers_share_functions_with_their_own_buffers_and_errors() {
    use differential::assert_accurate;
    use differential::layers::stacked;
    let path = format!(
        "{}/../examples/graphs/llama_decoder_layer.unbacked.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let one: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let model = |layers| {
        let g = Graph::from_json(&stacked(&one, layers, "x", &["cos_sin_cache"]).to_string());
        let g = g.unwrap();
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        (g, exe)
    };
    let (_, two) = model(2);
    let (g, exe) = model(3);
    assert_eq!(exe.module.functions.len(), two.module.functions.len());
    assert!(exe.module.entries.len() > two.module.entries.len());
    let mut dev = Emu::new("three_decoder_layers", &exe);
    for (seed, n) in [(1, 1), (2, 17)] {
        let (mut inputs, b) = inputs_at(&g, n, seed);
        // Weights at the scale of a trained model, so three layers stay finite.
        differential::layers::at_trained_scale(&g, &mut inputs);
        let want = reference::run(&g, &inputs, &b).unwrap();
        let (got, _, _) = run(&mut dev, &exe, Inputs::Host(&inputs), &b).unwrap();
        let ideal = || reference::run_unrounded(&g, &inputs, &b).unwrap();
        assert_accurate(&format!("three layers at n = {n}"), &got, &want, &ideal);

        // Layer 2's position ids out of range: layer 2's rotary lookup says so.
        differential::layers::with_last_position(&g, &mut inputs, "l2_positions", n as usize, 2048);
        let err = run(&mut dev, &exe, Inputs::Host(&inputs), &b)
            .expect_err("an index out of range")
            .to_string();
        assert!(
            err.contains("node 'l2_") && err.contains("an index is out of range"),
            "{err}"
        );
    }
}
