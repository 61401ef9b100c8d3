//! `nonzero` and `masked_select` on the device (`codegen::cuda::select`), run on the CPU
//! emulation of CUDA and compared with the reference executor: dtypes (NaN and −0.0 among the
//! floats), ranks, sizes across block and tile boundaries, empty inputs, a mask read through
//! strides, and a count outside its declared range.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use emulated::{run, Emu};
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::launch::{Executable, Inputs};

/// `nonzero(x)` of a `[n, cols]` (or `[n]`) tensor of `dtype`; the count `c` is at most
/// `max_count`.
fn nonzero(dtype: &str, cols: Option<i64>, max_count: i64) -> Graph {
    let (shape, rank) = match cols {
        Some(c) => (format!(r#"["n", {c}]"#), 2),
        None => (r#"["n"]"#.to_string(), 1),
    };
    Graph::from_json(&format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "nonzero_{dtype}",
        "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}},
                    {{"name": "c", "kind": "unbacked", "max": {max_count}}}],
        "inputs": [{{"name": "x", "dtype": "{dtype}", "shape": {shape}}}],
        "nodes": [{{"name": "nz", "op": "aten.nonzero.default", "args": {{"self": {{"tensor": "x"}}}}, "shape": ["c", {rank}]}}],
        "outputs": [{{"tensor": "nz"}}]}}"#
    ))
    .unwrap()
}

/// `x[i]` made zero unless `keep(i)`; floats that are kept are NaN, −0.0 is dropped (it is zero).
fn sparse(dtype: DType, shape: &[usize], keep: impl Fn(usize) -> bool) -> HostTensor {
    let n: usize = shape.iter().product();
    if dtype.is_float() {
        let v: Vec<f64> = (0..n)
            .map(|i| match (keep(i), i % 7) {
                (true, 0) => f64::NAN,
                (true, _) => 1.5 + i as f64,
                (false, 3) => -0.0,
                (false, _) => 0.0,
            })
            .collect();
        HostTensor::from_f64(dtype, shape, &v)
    } else {
        let v: Vec<i64> = (0..n)
            .map(|i| i64::from(keep(i)) * (1 + (i % 3) as i64))
            .collect();
        HostTensor::from_i64(dtype, shape, &v)
    }
}

/// [`emulated::compare`] at the sizes `inputs` give; nothing may run on the host.
fn compare(what: &str, dev: &mut Emu, exe: &Executable, g: &Graph, inputs: &[HostTensor]) {
    let b = reference::bind_inputs(g, inputs, &Bindings::new()).unwrap();
    let (_, host_steps) = emulated::compare(what, dev, exe, g, inputs, &b);
    assert_eq!(host_steps, 0, "{what}: ran on the host");
}

#[test]
fn nonzero_matches_the_reference_across_blocks() {
    // 4096 elements a block, 256 a tile: sizes on both sides of each boundary.
    for (dtype, cols) in [
        ("f32", None),
        ("bf16", Some(3)),
        ("i64", Some(2)),
        ("bool", None),
    ] {
        let g = nonzero(dtype, cols, 1 << 20);
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new(&format!("nonzero_{dtype}"), &exe);
        let d = g.inputs[0].dtype;
        for n in [0usize, 1, 257, 4097] {
            let shape: Vec<usize> = std::iter::once(n).chain(cols.map(|c| c as usize)).collect();
            for (k, keep) in [
                |i: usize| i % 3 == 1,
                |_| true,
                |_| false,
                |i: usize| i == 4095 || i == 4096 || i % 1000 == 999,
            ]
            .iter()
            .enumerate()
            {
                let x = sparse(d, &shape, keep);
                compare(
                    &format!("nonzero {dtype} {shape:?} pattern {k}"),
                    &mut dev,
                    &exe,
                    &g,
                    &[x],
                );
            }
        }
    }
}

#[test]
fn masked_select_matches_the_reference() {
    // A mask read through strides: `m` is a transposed view.
    let g = Graph::from_json(
        r#"{"format": "guardless-graph", "version": 1, "name": "masked_select",
        "symbols": [{"name": "n", "kind": "unbacked", "min": 0, "max": 100000},
                    {"name": "c", "kind": "unbacked", "max": 1000000}],
        "inputs": [{"name": "x", "dtype": "f16", "shape": ["n", 6]},
                   {"name": "m", "dtype": "bool", "shape": ["n", 6], "strides": [1, "n"]}],
        "nodes": [{"name": "s", "op": "aten.masked_select.default",
                   "args": {"self": {"tensor": "x"}, "mask": {"tensor": "m"}}, "shape": ["c"]}],
        "outputs": [{"tensor": "s"}]}"#,
    )
    .unwrap();
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("masked_select", &exe);
    for n in [0usize, 3, 700, 1000] {
        let values: Vec<f64> = (0..n * 6).map(|i| i as f64 * 0.25 - 3.0).collect();
        let x = HostTensor::from_f64(DType::F16, &[n, 6], &values);
        let m = sparse(DType::Bool, &[n, 6], |i| (i * 7) % 5 < 2);
        compare(
            &format!("masked_select n = {n}"),
            &mut dev,
            &exe,
            &g,
            &[x, m],
        );
    }
}

#[test]
fn a_count_outside_its_range_is_a_clean_error() {
    let g = nonzero("i32", None, 3);
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("nonzero_range", &exe);
    let x = sparse(DType::I32, &[10], |i| i < 5);
    let b = reference::bind_inputs(&g, std::slice::from_ref(&x), &Bindings::new()).unwrap();
    let e = run(&mut dev, &exe, Inputs::Host(&[x]), &b)
        .unwrap_err()
        .to_string();
    assert!(e.contains("c = 5 is outside its range"), "{e}");
    assert!(e.contains("(nz)"), "{e}");
}
