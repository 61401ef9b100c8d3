//! `_grouped_mm` on the device (`codegen::cuda::grouped_mm`), run on the CPU emulation of CUDA
//! and compared with the reference: the MoE path (sort by expert, histc counts, cumsum offsets,
//! one grouped matmul — every step on the device), the batched form, inner-dimension and
//! column groups, and offsets that decrease or pass the size (clean errors); the tiled kernel
//! (row groups, batches) across tile, step and group boundaries in every float dtype (bf16 and
//! f16 on the emulated tensor cores).

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::{one_op, random_inputs};
use emulated::{run, Emu};
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::launch::{Executable, Inputs};

/// [`emulated::compare`] at the sizes `inputs` give; the host steps.
fn compare(what: &str, dev: &mut Emu, exe: &Executable, g: &Graph, inputs: &[HostTensor]) -> usize {
    let b = reference::bind_inputs(g, inputs, &Bindings::new()).unwrap();
    emulated::compare(what, dev, exe, g, inputs, &b).1
}

#[test]
fn the_moe_path_runs_on_the_device() {
    let g = differential::test_graph("moe_grouped_mm.json");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("moe_grouped_mm", &exe);
    for (seed, n) in [(1, 0), (2, 1), (3, 13), (4, 300)] {
        let mut b = Bindings::new();
        b.set(g.env.symbol_id("u0").unwrap(), n);
        let inputs = random_inputs(&g, &b, seed, (0, 3));
        let host = compare(&format!("moe n = {n}"), &mut dev, &exe, &g, &inputs);
        assert_eq!(host, 0, "moe n = {n}: host steps");
    }
    // Sorting 300 expert ids (values and positions) is too long for a thread per line: radix.
    for part in ["grouped_mm_", "_block"] {
        assert!(
            dev.launched.iter().any(|f| f.contains(part)),
            "{part}: {:?}",
            dev.launched
        );
    }
}

#[test]
fn grouped_forms_match_the_reference_and_bad_offsets_are_errors() {
    // Batched (3-D × 3-D), no offsets.
    let g = one_op(
        "aten._grouped_mm.default",
        r#"{"self": {"tensor": "z"}, "mat2": {"tensor": "bw"}}"#,
    );
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("grouped_batched", &exe);
    for (seed, n) in [(5, 0), (6, 2), (7, 9)] {
        let mut b = Bindings::new();
        b.set(g.env.symbol_id("u0").unwrap(), n);
        let inputs = random_inputs(&g, &b, seed, (0, 1));
        assert_eq!(
            compare(&format!("batched n = {n}"), &mut dev, &exe, &g, &inputs),
            0
        );
    }
    // Groups of the inner dimension (2-D × 2-D) and of the columns (3-D × 2-D).
    let g = differential::test_graph("grouped_mm_forms.json");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("grouped_inner_columns", &exe);
    for (u0, offs, ok) in differential::GROUPED_MM_FORMS_CASES {
        let inputs = differential::grouped_mm_forms_inputs(u0, offs);
        let what = format!("u0 = {u0}, offs = {offs:?}");
        if ok {
            assert_eq!(compare(&what, &mut dev, &exe, &g, &inputs), 0, "{what}");
        } else {
            let b = reference::bind_inputs(&g, &inputs, &Bindings::new()).unwrap();
            let e = run(&mut dev, &exe, Inputs::Host(&inputs), &b)
                .unwrap_err()
                .to_string();
            assert!(e.contains("offsets must be non-decreasing"), "{what}: {e}");
        }
    }
}

#[test]
fn tiles_cover_groups_of_any_size_in_every_float_dtype() {
    // K = 40 (three steps of 16, the last partial), N = 70 (two column tiles, the last
    // partial); row groups of 0, 100 (two row tiles), 0 and 50 rows, then 20 rows past the last
    // offset (zeros); a batch of 3 × 70 rows; and the row groups again with both operands
    // transposed (a weight passed as `w.permute(0, 2, 1)`: tiles loaded along the other
    // dimension).
    for dtype in ["f32", "bf16", "f16", "f64"] {
        let g = Graph::from_json(&format!(
            r#"{{"format": "guardless-graph", "version": 1, "name": "tiles_{dtype}",
            "symbols": [{{"name": "u0", "kind": "unbacked", "max": 100000}}],
            "inputs": [{{"name": "x", "dtype": "{dtype}", "shape": ["u0", 40]}},
                       {{"name": "w", "dtype": "{dtype}", "shape": [4, 40, 70]}},
                       {{"name": "offs", "dtype": "i32", "shape": [4]}},
                       {{"name": "a3", "dtype": "{dtype}", "shape": [3, 70, 40]}},
                       {{"name": "b3", "dtype": "{dtype}", "shape": [3, 40, 70]}},
                       {{"name": "xt", "dtype": "{dtype}", "shape": [40, "u0"]}},
                       {{"name": "wt", "dtype": "{dtype}", "shape": [4, 70, 40]}}],
            "nodes": [{{"name": "rows", "op": "aten._grouped_mm.default", "args": {{"self": {{"tensor": "x"}}, "mat2": {{"tensor": "w"}}, "offs": {{"tensor": "offs"}}}}}},
                      {{"name": "batched", "op": "aten._grouped_mm.default", "args": {{"self": {{"tensor": "a3"}}, "mat2": {{"tensor": "b3"}}}}}},
                      {{"name": "x_t", "op": "aten.permute.default", "args": {{"self": {{"tensor": "xt"}}, "dims": [1, 0]}}}},
                      {{"name": "w_t", "op": "aten.permute.default", "args": {{"self": {{"tensor": "wt"}}, "dims": [0, 2, 1]}}}},
                      {{"name": "rows_t", "op": "aten._grouped_mm.default", "args": {{"self": {{"tensor": "x_t"}}, "mat2": {{"tensor": "w_t"}}, "offs": {{"tensor": "offs"}}}}}}],
            "outputs": [{{"tensor": "rows"}}, {{"tensor": "batched"}}, {{"tensor": "rows_t"}}]}}"#
        ))
        .unwrap();
        let exe = Executable::new(lower(&g).unwrap()).unwrap();
        let mut dev = Emu::new(&format!("tiles_{dtype}"), &exe);
        let mut b = Bindings::new();
        b.set(g.env.symbol_id("u0").unwrap(), 170);
        let mut inputs = random_inputs(&g, &b, 11, (0, 3));
        inputs[2] = HostTensor::from_i64(DType::I32, &[4], &[0, 100, 100, 150]);
        let host = compare(&format!("tiles {dtype}"), &mut dev, &exe, &g, &inputs);
        assert_eq!(host, 0, "{dtype}");
        let tiled = dev
            .launched
            .iter()
            .filter(|f| f.ends_with("_tiled"))
            .count();
        assert_eq!(tiled, 3, "{dtype}: {:?}", dev.launched);
    }
}

#[test]
fn an_exported_bf16_mixtral_layer_runs_on_the_device() {
    // Hugging Face's Mixtral (one layer, 4 experts, top 2) in bf16 as torch.export gives it:
    // experts by `_grouped_mm` (tensor cores), routing by sort, histc and cumsum — no host step.
    let g = differential::test_graph("mixtral_bf16_grouped_mm.json");
    let exe = Executable::new(lower(&g).unwrap()).unwrap();
    let mut dev = Emu::new("mixtral_bf16", &exe);
    for (seed, batch, seq) in [(21, 2, 9), (22, 3, 2)] {
        let what = format!("mixtral at {batch} x {seq}");
        let b = differential::bindings_of(&what, &g, &[("u0", batch), ("u1", seq)]);
        let inputs = random_inputs(&g, &b, seed, (0, 256));
        assert_eq!(compare(&what, &mut dev, &exe, &g, &inputs), 0, "{what}");
    }
    let tiled = dev
        .launched
        .iter()
        .filter(|f| f.starts_with("grouped_mm") && f.ends_with("_tiled"));
    assert_eq!(tiled.count(), 2 * 2, "{:?}", dev.launched);
}
