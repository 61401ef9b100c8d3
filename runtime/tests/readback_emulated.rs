//! Data-dependent values produced on the device (`.item()`, a select's count) and read back
//! lazily, on the CPU emulation of CUDA: the values of independent selects and items come back
//! in one download, after the functions that do not need them have been queued; `.item()` reads
//! its element on the device in integer and float dtypes, with no host step; a value
//! outside its range is an error naming the symbol and the node; a call that reads values back
//! cannot be recorded.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::two_selects_and_an_item;
use emulated::Emu;
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::launch::{Executable, Inputs, Session, SessionOptions};

/// Inputs of [`two_selects_and_an_item`]: `x` kept every third element, `y` every fifth,
/// `k[2] = item`.
fn inputs(n: usize, dtype: DType, item: f64) -> Vec<HostTensor> {
    let x: Vec<f64> = (0..n).map(|i| f64::from(u8::from(i % 3 == 0))).collect();
    let y: Vec<i64> = (0..n).map(|i| i64::from(i % 5 == 1) * 7).collect();
    let k = [9.0, 8.0, item, 6.0];
    vec![
        HostTensor::from_f64(DType::F32, &[n], &x),
        HostTensor::from_i64(DType::I32, &[n], &y),
        match dtype.is_float() {
            true => HostTensor::from_f64(dtype, &[4], &k),
            false => HostTensor::from_i64(dtype, &[4], &k.map(|v| v as i64)),
        },
    ]
}

#[test]
fn independent_values_come_back_in_one_download_after_the_work_before_them() {
    for (dtype, item, want_u) in [
        (DType::I64, 37.0, 37),
        (DType::I32, 0.0, 0),
        (DType::F32, 5.75, 5),
        (DType::BF16, 12.0, 12),
    ] {
        let g = two_selects_and_an_item(dtype.name());
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new(&format!("readback_{}", dtype.name()), &exe);
        for n in [0usize, 1, 4097, 10000] {
            let what = format!("{} n = {n}", dtype.name());
            let inputs = inputs(n, dtype, item);
            let b = reference::bind_inputs(&g, &inputs, &Bindings::new()).unwrap();
            let want = reference::run(&g, &inputs, &b).unwrap();
            assert_eq!(want[2].shape, [want_u], "{what}");
            let options = SessionOptions { poison: true };
            let mut s = Session::new(&mut dev, &exe, Inputs::Host(&inputs), &b, &options).unwrap();
            dev.downloads.clear();
            dev.launched.clear();
            s.execute(&mut dev).unwrap();
            assert_eq!(s.host_steps, 0, "{what}: a host step");
            assert_eq!(s.readbacks, 1, "{what}: downloads of values");
            assert_eq!(dev.downloads.len(), 1, "{what}: waits for the device");
            // Both selects wrote their elements before the wait (none when empty).
            let writes = dev.launched.iter().filter(|f| f.ends_with("_write"));
            assert_eq!(
                writes.count(),
                2 * usize::from(n > 0),
                "{what}: {:?}",
                dev.launched
            );
            let last_write = dev.launched.iter().rposition(|f| f.ends_with("_write"));
            assert!(
                last_write < Some(dev.downloads[0]),
                "{what}: {:?}",
                dev.launched
            );
            let got = s.outputs(&mut dev).unwrap();
            for (gt, w) in got.iter().zip(&want) {
                differential::assert_close(&what, gt, w);
            }
        }
    }
}

#[test]
fn an_item_outside_its_range_is_an_error_naming_the_symbol_and_the_node() {
    let g = two_selects_and_an_item("i64");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("readback_range", &exe);
    for (item, want) in [
        (5000.0, "u = 5000 is outside its range [0, 1000]"),
        (-3.0, "u = -3 is outside its range [0, 1000]"),
    ] {
        let inputs = inputs(10, DType::I64, item);
        let b = reference::bind_inputs(&g, &inputs, &Bindings::new()).unwrap();
        let reference = reference::run(&g, &inputs, &b).unwrap_err().to_string();
        assert!(reference.contains(want), "{reference}");
        let options = SessionOptions { poison: true };
        let mut s = Session::new(&mut dev, &exe, Inputs::Host(&inputs), &b, &options).unwrap();
        let e = s.execute(&mut dev).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("(v)"), "{e}");
    }
}

#[test]
fn a_call_that_reads_an_item_back_cannot_be_recorded() {
    let g = two_selects_and_an_item("i64");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("readback_capture", &exe);
    let inputs = inputs(100, DType::I64, 3.0);
    let b = reference::bind_inputs(&g, &inputs, &Bindings::new()).unwrap();
    let options = SessionOptions { poison: true };
    let mut s = Session::new(&mut dev, &exe, Inputs::Host(&inputs), &b, &options).unwrap();
    let e = s.capture(&mut dev).unwrap_err().to_string();
    assert!(
        e.starts_with("cannot record the call: it reads data-dependent sizes back: ")
            && ["(a)", "(b)", "(v)"].iter().all(|n| e.contains(n)),
        "{e}"
    );
    assert!(dev.recording.is_none() && dev.recordings.is_empty());
}

#[test]
fn a_value_a_step_needs_is_read_back_before_it() {
    // The second select's input is sized by the first one's count: two downloads, in order.
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "chained_selects",
        "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 100000},
                    {"name": "c1", "kind": "unbacked", "max": 100000},
                    {"name": "c2", "kind": "unbacked", "max": 100000}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]}, {"name": "m", "dtype": "bool", "shape": ["n"]}],
        "nodes": [{"name": "kept", "op": "aten.masked_select.default", "args": {"self": {"tensor": "x"}, "mask": {"tensor": "m"}}, "shape": ["c1"]},
                  {"name": "nz", "op": "aten.nonzero.default", "args": {"self": {"tensor": "kept"}}, "shape": ["c2", 1]}],
        "outputs": [{"tensor": "nz"}]}"#,
    )
    .unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("chained_selects", &exe);
    for n in [0usize, 7, 5000] {
        let x: Vec<f64> = (0..n).map(|i| (i % 4) as f64).collect();
        let m: Vec<i64> = (0..n).map(|i| i64::from(i % 3 != 0)).collect();
        let inputs = [
            HostTensor::from_f64(DType::F32, &[n], &x),
            HostTensor::from_i64(DType::Bool, &[n], &m),
        ];
        let b = reference::bind_inputs(&g, &inputs, &Bindings::new()).unwrap();
        let want = reference::run(&g, &inputs, &b).unwrap();
        let options = SessionOptions { poison: true };
        let mut s = Session::new(&mut dev, &exe, Inputs::Host(&inputs), &b, &options).unwrap();
        s.execute(&mut dev).unwrap();
        assert_eq!((s.host_steps, s.readbacks), (0, 2), "n = {n}");
        let got = s.outputs(&mut dev).unwrap();
        differential::assert_close(&format!("n = {n}"), &got[0], &want[0]);
    }
}

#[test]
fn a_kernel_using_a_count_runs_after_the_select_even_when_it_could_fuse_before_it() {
    // `x + c` reads what the mask's kernel reads, at the same size: fused with it, it would run
    // before the count exists. It runs after the select instead, in a kernel of its own.
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "count_as_a_value",
        "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 100000},
                    {"name": "c", "kind": "unbacked", "max": 100000}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]}],
        "nodes": [{"name": "m", "op": "aten.gt.Scalar", "args": {"self": {"tensor": "x"}, "other": 1.5}},
                  {"name": "nz", "op": "aten.nonzero.default", "args": {"self": {"tensor": "m"}}, "shape": ["c", 1]},
                  {"name": "y", "op": "aten.add.Tensor", "args": {"self": {"tensor": "x"}, "other": "c"}}],
        "outputs": [{"tensor": "nz"}, {"tensor": "y"}]}"#,
    )
    .unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let text = exe.schedule.to_text(&exe.program);
    let at = |what: &str| text.find(what).unwrap_or_else(|| panic!("{what}: {text}"));
    assert!(at("nonzero →") < at("nodes: y"), "{text}");
    let mut dev = Emu::new("count_as_a_value", &exe);
    for n in [0usize, 5, 4100] {
        let x: Vec<f64> = (0..n).map(|i| (i % 4) as f64).collect();
        let inputs = [HostTensor::from_f64(DType::F32, &[n], &x)];
        let b = reference::bind_inputs(&g, &inputs, &Bindings::new()).unwrap();
        let (_, host_steps) =
            emulated::compare(&format!("n = {n}"), &mut dev, &exe, &g, &inputs, &b);
        assert_eq!(host_steps, 0);
    }
}
