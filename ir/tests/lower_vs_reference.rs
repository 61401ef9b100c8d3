//! Differential tests: the lowered loop-level program, run by the interpreter, against the op-level
//! reference executor — for every lowered op and every example graph, at sizes including 0, 1, 2,
//! primes and values far from the optimization hint, with torch.testing.assert_close's per-dtype
//! tolerances.

mod differential;

use differential::cases::{CASES, CONV_CASES, SCATTER_CASES};
use differential::*;
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::SymError;
use guardless_ir::tensor::HostTensor;

#[test]
fn every_lowered_op_matches_the_reference() {
    for (k, &(op, args)) in CASES.iter().enumerate() {
        let g = one_op(op, args);
        let mut compared = 0;
        for (s, &u0) in SIZES.iter().enumerate() {
            let assert_ok = op.starts_with("aten.squeeze");
            compared += usize::from(differential(
                &format!("{op} {args}"),
                &g,
                &[("u0", u0)],
                (k * 16 + s) as u64,
                assert_ok,
            ));
        }
        // Only empty reductions without an identity may fail, and only at u0 = 0.
        assert!(
            compared >= SIZES.len() - 1,
            "{op} {args}: compared at only {compared} sizes"
        );
    }
}

#[test]
fn ops_with_several_outputs_match_the_reference() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "aten.split_with_sizes.default",
            r#"{"self": {"tensor": "x"}, "split_sizes": [2, 3], "dim": 1}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.split_with_sizes.default",
            r#"{"self": {"tensor": "z"}, "split_sizes": [1, "u0 - 1"], "dim": 1}"#,
            r#"{"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.split.Tensor",
            r#"{"self": {"tensor": "x"}, "split_size": 2, "dim": -1}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 2}"#,
        ),
        (
            "aten.unbind.int",
            r#"{"self": {"tensor": "z"}, "dim": 0}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 2}"#,
        ),
        (
            "aten.flip.default",
            r#"{"self": {"tensor": "z"}, "dims": [0, -1]}"#,
            r#"{"tensor": "out"}"#,
        ),
        (
            "aten.max.dim",
            r#"{"self": {"tensor": "x"}, "dim": 1}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.sort.default",
            r#"{"self": {"tensor": "x"}, "dim": 1}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.cummax.default",
            r#"{"self": {"tensor": "i"}, "dim": 0}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.cummin.default",
            r#"{"self": {"tensor": "h"}, "dim": -1}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.sort.default",
            r#"{"self": {"tensor": "i"}, "dim": 0, "descending": true}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.sort.stable",
            r#"{"self": {"tensor": "h"}, "stable": true}"#,
            r#"{"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.topk.default",
            r#"{"self": {"tensor": "x"}, "k": 3}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.topk.default",
            r#"{"self": {"tensor": "z"}, "k": 1, "dim": 1, "largest": false}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.max.dim",
            r#"{"self": {"tensor": "i"}, "dim": 0, "keepdim": true}"#,
            r#"{"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.native_group_norm.default",
            r#"{"input": {"tensor": "x"}, "weight": {"tensor": "y"}, "bias": {"tensor": "y"}, "N": "u0", "C": 5, "HxW": 1, "group": 1, "eps": 1e-05}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}, {"tensor": "out", "index": 2}"#,
        ),
        (
            "aten.native_group_norm.default",
            r#"{"input": {"tensor": "h"}, "weight": null, "bias": null, "N": "u0", "C": 5, "HxW": 1, "group": 5, "eps": 0.5}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 2}"#,
        ),
        (
            "aten._native_batch_norm_legit.no_stats",
            r#"{"input": {"tensor": "x"}, "weight": {"tensor": "y"}, "bias": null, "training": true, "momentum": 0.1, "eps": 1e-05}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}, {"tensor": "out", "index": 2}"#,
        ),
        (
            "aten._native_batch_norm_legit.no_stats",
            r#"{"input": {"tensor": "z"}, "weight": null, "bias": null, "training": true, "momentum": 0.1, "eps": 1e-05}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 2}"#,
        ),
        (
            "aten.min.dim",
            r#"{"self": {"tensor": "h"}, "dim": -1}"#,
            r#"{"tensor": "out", "index": 0}, {"tensor": "out", "index": 1}"#,
        ),
        (
            "aten.argmax.default",
            r#"{"self": {"tensor": "z"}, "dim": -1}"#,
            r#"{"tensor": "out"}"#,
        ),
        (
            "aten.argmax.default",
            r#"{"self": {"tensor": "h"}}"#,
            r#"{"tensor": "out"}"#,
        ),
        (
            "aten.argmax.default",
            r#"{"self": {"tensor": "x"}, "keepdim": true}"#,
            r#"{"tensor": "out"}"#,
        ),
        (
            "aten.cat.default",
            r#"{"tensors": [{"tensor": "x"}, {"tensor": "i"}, {"tensor": "x"}], "dim": 0}"#,
            r#"{"tensor": "out"}"#,
        ),
        (
            "aten.cat.default",
            r#"{"tensors": [{"tensor": "x"}, {"tensor": "h"}], "dim": -1}"#,
            r#"{"tensor": "out"}"#,
        ),
        (
            "aten.constant_pad_nd.default",
            r#"{"self": {"tensor": "x"}, "pad": [1, 2, 0, 1], "value": -1.5}"#,
            r#"{"tensor": "out"}"#,
        ),
        (
            "aten.constant_pad_nd.default",
            r#"{"self": {"tensor": "z"}, "pad": [-1, 1]}"#,
            r#"{"tensor": "out"}"#,
        ),
    ];
    for (k, &(op, args, outs)) in cases.iter().enumerate() {
        let g = one_op_outputs(op, args, outs);
        let mut compared = 0;
        for (s, &u0) in SIZES.iter().enumerate() {
            compared += usize::from(differential(
                &format!("{op} {args}"),
                &g,
                &[("u0", u0)],
                (k * 16 + s) as u64,
                false,
            ));
        }
        // `u0 - 1` is a negative piece at u0 = 0: both sides refuse it.
        assert!(
            compared >= SIZES.len() - 1,
            "{op} {args}: compared at only {compared} sizes"
        );
    }
}

#[test]
fn data_dependent_indexing_matches_the_reference_and_checks_bounds() {
    let cases: &[(&str, &str)] = &[
        (
            "aten.embedding.default",
            r#"{"weight": {"tensor": "w"}, "indices": {"tensor": "i"}}"#,
        ),
        (
            "aten.index_select.default",
            r#"{"self": {"tensor": "z"}, "dim": 2, "index": {"tensor": "ids"}}"#,
        ),
        (
            "aten.gather.default",
            r#"{"self": {"tensor": "x"}, "dim": 1, "index": {"tensor": "i"}}"#,
        ),
        (
            "aten.index.Tensor",
            r#"{"self": {"tensor": "z"}, "indices": [null, {"tensor": "ids"}]}"#,
        ),
        (
            "aten.index.Tensor",
            r#"{"self": {"tensor": "z"}, "indices": [{"tensor": "i"}, null, {"tensor": "i"}]}"#,
        ),
        (
            "aten.index.Tensor",
            r#"{"self": {"tensor": "w"}, "indices": [{"tensor": "i"}]}"#,
        ),
    ];
    let cases = [cases, SCATTER_CASES].concat();
    for (k, &(op, args)) in cases.iter().enumerate() {
        let g = one_op(op, args);
        for (s, &u0) in SIZES.iter().enumerate() {
            let seed = (k * 16 + s) as u64;
            // Indices in [0, 2): in range once every indexed dimension has 2 elements; both agree.
            let compared = differential_ints(
                &format!("{op} {args}"),
                &g,
                &[("u0", u0)],
                seed,
                false,
                (0, 2),
            );
            assert!(compared || u0 < 2, "{op} {args} at u0 = {u0}: refused");
            // Out of range (some index is 5 or more, or negative): both refuse, neither reads out of bounds.
            differential_ints(
                &format!("{op} {args}"),
                &g,
                &[("u0", u0)],
                seed,
                false,
                (-2, 9),
            );
        }
    }
}

#[test]
fn data_dependent_counts_match_the_reference() {
    for (op, args, shape) in [
        (
            "aten.nonzero.default",
            r#"{"self": {"tensor": "i"}}"#,
            r#"["c", 2]"#,
        ),
        (
            "aten.masked_select.default",
            r#"{"self": {"tensor": "x"}, "mask": {"tensor": "m"}}"#,
            r#"["c"]"#,
        ),
        (
            "aten.masked_select.default",
            r#"{"self": {"tensor": "y"}, "mask": {"tensor": "m"}}"#,
            r#"["c"]"#,
        ),
    ] {
        let text = one_op_text(op, args)
            .replace(r#""args": "#, &format!(r#""shape": {shape}, "args": "#))
            .replace(
                r#""symbols": ["#,
                r#""symbols": [{"name": "c", "kind": "unbacked", "max": 20}, "#,
            );
        let g = Graph::from_json(&text).unwrap_or_else(|e| panic!("{op}: {e}"));
        let mut compared = 0;
        for (s, &u0) in SIZES.iter().enumerate() {
            compared += usize::from(differential(
                &format!("{op} {args}"),
                &g,
                &[("u0", u0)],
                s as u64,
                false,
            ));
        }
        // c is at most 20: at u0 = 257 the count exceeds it and both refuse.
        assert!(compared >= 4, "{op}: compared at only {compared} sizes");
    }
}

#[test]
fn tensor_metadata_asserts_are_checked() {
    let text = one_op_text(
        "aten._assert_tensor_metadata.default",
        r#"{"a": {"tensor": "x"}, "size": ["u0", 5], "dtype": {"dtype": "f32"}}"#,
    )
    .replace(
        r#""outputs": [{"tensor": "out"}]"#,
        r#""outputs": [{"tensor": "x"}]"#,
    );
    let g2 = Graph::from_json(&text).unwrap();
    assert!(lower(&g2).is_ok());
    let bad = one_op_text(
        "aten._assert_tensor_metadata.default",
        r#"{"a": {"tensor": "x"}, "dtype": {"dtype": "bf16"}}"#,
    )
    .replace(
        r#""outputs": [{"tensor": "out"}]"#,
        r#""outputs": [{"tensor": "x"}]"#,
    );
    let err = lower(&Graph::from_json(&bad).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the tensor is f32, the metadata says bf16"),
        "{err}"
    );
    let sized = one_op_text(
        "aten._assert_tensor_metadata.default",
        r#"{"a": {"tensor": "x"}, "size": [3, 5]}"#,
    )
    .replace(
        r#""outputs": [{"tensor": "out"}]"#,
        r#""outputs": [{"tensor": "x"}]"#,
    );
    let gs = Graph::from_json(&sized).unwrap();
    // u0 must be 3 at run time: a runtime assert, refused at other sizes by both.
    assert!(differential("metadata", &gs, &[("u0", 3)], 1, false));
    assert!(!differential("metadata", &gs, &[("u0", 4)], 1, false));
}

#[test]
fn a_strided_view_past_its_storage_is_a_runtime_assert() {
    // u0 elements of a 5-element storage: read up to u0 = 5, refused by both sides past it.
    let g = one_op(
        "aten.as_strided.default",
        r#"{"self": {"tensor": "y"}, "size": ["u0"], "stride": [1]}"#,
    );
    for u0 in [0, 1, 5] {
        assert!(differential("as_strided", &g, &[("u0", u0)], 1, false));
    }
    // The assert bounds u0's range: a larger value is refused when bound.
    let mut b = guardless_ir::sym::Bindings::new();
    b.set(g.env.symbol_id("u0").unwrap(), 6);
    let inputs = random_inputs(&g, &bindings_of("as_strided", &g, &[("u0", 5)]), 1, (0, 4));
    let err = lower(&g).unwrap().run(&inputs, &b).unwrap_err().to_string();
    assert!(err.contains("u0 = 6"), "{err}");
}

#[test]
fn a_masked_scatter_short_of_source_is_a_clean_error() {
    // 5 source elements for up to 5·u0 true positions: both refuse once the mask has more.
    let g = one_op(
        "aten.masked_scatter.default",
        r#"{"self": {"tensor": "x"}, "mask": {"tensor": "m"}, "source": {"tensor": "y"}}"#,
    );
    let b = bindings_of("masked_scatter", &g, &[("u0", 40)]);
    let inputs = random_inputs(&g, &b, 3, (0, 2));
    let err = lower(&g).unwrap().run(&inputs, &b).unwrap_err().to_string();
    // Named by the node the user wrote, not the kernel the scatter was fused into.
    assert!(
        err.starts_with("node 'out' (aten.masked_scatter.default): index ")
            && err.contains("is out of range for size 5"),
        "{err}"
    );
    assert!(!differential("masked_scatter", &g, &[("u0", 40)], 3, false));
    assert!(differential("masked_scatter", &g, &[("u0", 0)], 3, false));
}

#[test]
fn attention_matches_the_reference() {
    for (dtype, causal, gqa, mask) in [
        ("f32", true, true, false),
        ("f32", false, false, true),
        ("bf16", true, true, false),
        ("f32", false, true, false),
    ] {
        let hk = if gqa { 2 } else { 4 };
        let mask_input = if mask {
            r#", {"name": "m", "dtype": "bool", "shape": ["u0", "u0"]}"#
        } else {
            ""
        };
        let mask_arg = if mask {
            r#", "attn_mask": {"tensor": "m"}"#
        } else {
            ""
        };
        let text = format!(
            r#"{{"format": "guardless-graph", "version": 1,
                "symbols": [{{"name": "u0", "kind": "unbacked", "max": 4096}}],
                "inputs": [{{"name": "q", "dtype": "{dtype}", "shape": [2, 4, "u0", 8]}},
                           {{"name": "k", "dtype": "{dtype}", "shape": [2, {hk}, "u0", 8]}},
                           {{"name": "v", "dtype": "{dtype}", "shape": [2, {hk}, "u0", 8]}}{mask_input}],
                "nodes": [{{"name": "out", "op": "aten.scaled_dot_product_attention.default",
                            "args": {{"query": {{"tensor": "q"}}, "key": {{"tensor": "k"}}, "value": {{"tensor": "v"}},
                                     "is_causal": {causal}, "enable_gqa": {gqa}{mask_arg}}}}}],
                "outputs": [{{"tensor": "out"}}]}}"#
        );
        let g = Graph::from_json(&text).unwrap();
        for (s, &u0) in [0i64, 1, 2, 3, 7, 13, 61].iter().enumerate() {
            // A random boolean mask may hide a whole row: both sides give NaN there.
            differential(
                &format!("sdpa {dtype} causal={causal} gqa={gqa} mask={mask}"),
                &g,
                &[("u0", u0)],
                s as u64,
                false,
            );
        }
    }
}

/// Attention over 3-D (batch, length, head dim) and 2-D inputs (leading sizes of 1), causal, with
/// an explicit scale and a symbolic head dim (the default scale computed at run time).
#[test]
fn attention_of_fewer_dimensions_matches_the_reference() {
    let cases = [
        r#"{"query": {"tensor": "z"}, "key": {"tensor": "z"}, "value": {"tensor": "z"}, "is_causal": true}"#,
        r#"{"query": {"tensor": "s2"}, "key": {"tensor": "s2"}, "value": {"tensor": "x"}, "scale": 0.25}"#,
        r#"{"query": {"tensor": "x"}, "key": {"tensor": "x"}, "value": {"tensor": "s2"}}"#,
    ];
    for args in cases {
        let g = one_op("aten.scaled_dot_product_attention.default", args);
        for (s, &u0) in SIZES.iter().enumerate() {
            differential(&format!("sdpa {args}"), &g, &[("u0", u0)], s as u64, false);
        }
    }
    // A symbolic head dim: x is [u0, 5], so xᵀ's rows are 5 queries of u0 features.
    let text = r#"{"format": "guardless-graph", "version": 1,
        "symbols": [{"name": "u0", "kind": "unbacked", "max": 4096}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": [5, "u0"]}],
        "nodes": [{"name": "out", "op": "aten.scaled_dot_product_attention.default",
                   "args": {"query": {"tensor": "x"}, "key": {"tensor": "x"}, "value": {"tensor": "x"}}}],
        "outputs": [{"tensor": "out"}]}"#;
    let g = Graph::from_json(text).unwrap();
    for (s, &u0) in SIZES.iter().enumerate() {
        differential(
            "sdpa with a symbolic head dim",
            &g,
            &[("u0", u0)],
            s as u64,
            false,
        );
    }
}

#[test]
fn the_example_graphs_match_the_reference() {
    let dir = format!("{}/../examples/graphs", env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let g = Graph::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let sym = g
            .env
            .pool()
            .symbol(guardless_ir::sym::SymbolId::from_index(0))
            .name
            .to_string();
        // Sizes 0, 1, 2, primes and one far from the hint (37: past a warp; 61 took twice the time,
        // the interpreter at the decoder layers' sizes); integers (positions, ids) in [0, 4).
        let range = g.env.symbol_range(g.env.symbol_id(&sym).unwrap());
        for (s, v) in [0i64, 1, 2, 3, 7, 37]
            .into_iter()
            .enumerate()
            .filter(|(_, v)| range.contains(*v))
        {
            let what = path.display().to_string();
            // Any other size of an input (the sequences of a paged batch) at 2.
            let values = with_input_sizes(&g, &[(&sym, v)], 2);
            let values: Vec<(&str, i64)> = values.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            assert!(
                differential_ints(&what, &g, &values, s as u64, false, (0, 4)),
                "{what} at {values:?}: refused"
            );
        }
    }
}

/// Every op lowers with its size unbacked without a guard or a data-dependent error; the same graph
/// with the size backed may guard, and every guard holds for the hint.
#[test]
fn unbacked_lowering_never_guards_and_backed_guards_hold() {
    for &(op, args) in CASES {
        let g = one_op(op, args);
        let p = lower(&g).unwrap_or_else(|e| panic!("{op} {args}: {e}"));
        assert!(
            p.env.guards().is_empty(),
            "{op} {args}: guards on an unbacked graph"
        );
        let text = one_op_text(op, args).replace(
            r#"{"name": "u0", "kind": "unbacked", "max": 100000, "optimization_hint": 4096}"#,
            r#"{"name": "u0", "kind": "backed", "hint": 7, "max": 100000}"#,
        );
        let gb = Graph::from_json(&text).unwrap();
        let pb = lower(&gb).unwrap_or_else(|e| panic!("{op} {args} (backed): {e}"));
        let mut env = pb.env.clone();
        for guard in pb.env.guards() {
            assert_eq!(
                env.guarding_hint(guard.cond),
                Ok(1),
                "{op}: guard {} fails for the hint",
                pb.env.text(guard.cond)
            );
        }
    }
}

#[test]
fn long_running_sums_are_rounded_once() {
    // A bf16 sum rounded after every addition stops growing once its terms fall below half its
    // last place (it ended near 256 where the exact sum is near 2000): each output is the wide
    // sum rounded once, on every backend.
    for dtype in ["bf16", "f16", "f32"] {
        let g = Graph::from_json(&format!(
            r#"{{"format": "guardless-graph", "version": 1, "name": "running_sum",
            "symbols": [{{"name": "n", "kind": "unbacked", "min": 0, "max": 100000}}],
            "inputs": [{{"name": "x", "dtype": "{dtype}", "shape": [2, "n"]}}],
            "nodes": [{{"name": "a", "op": "aten.abs.default", "args": {{"self": {{"tensor": "x"}}}}}},
                      {{"name": "c", "op": "aten.cumsum.default", "args": {{"self": {{"tensor": "a"}}, "dim": 1}}}}],
            "outputs": [{{"tensor": "c"}}]}}"#
        ))
        .unwrap();
        let what = format!("cumsum of 3000 {dtype}");
        let b = bindings_of(&what, &g, &[("n", 3000)]);
        let inputs = random_inputs(&g, &b, 7, (0, 1));
        let x = &inputs[0];
        let exact: f64 = (0..3000).map(|i| x.get_f64(i).abs()).sum();
        let want = guardless_ir::reference::run(&g, &inputs, &b).unwrap();
        let last = want[0].get_f64(2999);
        assert!(
            (last - exact).abs() <= exact * 1e-2,
            "{what}: {last} vs {exact}"
        );
        assert!(compare_on(&what, &g, &inputs, &b, &[("n", 3000)], true));
    }
}

#[test]
fn convolutions_match_the_reference() {
    for dtype in ["f32", "bf16"] {
        for (k, &case) in CONV_CASES.iter().enumerate() {
            let g = conv_graph(dtype, &[case]);
            let mut compared = 0;
            for (s, &sizes) in CONV_SIZES.iter().enumerate() {
                let what = format!("conv {dtype} {case:?}");
                let values = conv_values(&g, sizes);
                compared +=
                    usize::from(differential(&what, &g, &values, (k * 16 + s) as u64, false));
            }
            // Only inputs smaller than an unpadded kernel (h = 1, or w = 3 for 4×4) are refused.
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
        let mut compared = 0;
        for (s, &(n, h, w)) in [(1, 5, 7), (2, 8, 8), (0, 4, 4), (1, 9, 3), (1, 2, 9)]
            .iter()
            .enumerate()
        {
            let values = [("n", n), ("h", h), ("w", w)];
            compared += usize::from(differential(
                &format!("pooling {dtype}"),
                &g,
                &values,
                s as u64,
                false,
            ));
        }
        // h = 2 is too short for the dilated window: refused both ways.
        assert_eq!(compared, 4, "{dtype}");
    }
}

#[test]
fn max_pooling_takes_the_first_maximum_and_any_nan_as_aten() {
    let g = pooling_graph("f32");
    // One 4×4 plane per channel: ties (the first wins), -inf everywhere (the first tap inside),
    // and a NaN (it wins, and the last NaN of a window is its index).
    let plane: [[f64; 16]; 3] = [
        [
            1., 3., 3., 0., 2., 3., 0., 0., 3., 1., 1., 3., 0., 0., 3., 3.,
        ],
        [f64::NEG_INFINITY; 16],
        [
            0.,
            f64::NAN,
            5.,
            f64::NAN,
            9.,
            2.,
            f64::NAN,
            0.,
            1.,
            1.,
            1.,
            1.,
            7.,
            0.,
            0.,
            1.,
        ],
    ];
    let x: Vec<f64> = plane.iter().flatten().copied().collect();
    let inputs = [
        HostTensor::from_f64(DType::F32, &[1, 3, 4, 4], &x),
        HostTensor::from_f64(DType::F32, &[3], &[1.0, 2.0, 0.5]),
        HostTensor::from_f64(DType::F32, &[3], &[0.0, 1.0, -1.0]),
        HostTensor::from_f64(DType::F32, &[3], &[0.5, 0.0, 1.0]),
        HostTensor::from_f64(DType::F32, &[3], &[4.0, 1.0, 0.25]),
    ];
    let b = guardless_ir::reference::bind_inputs(&g, &inputs, &guardless_ir::sym::Bindings::new())
        .unwrap();
    assert!(compare_on(
        "pooling special values",
        &g,
        &inputs,
        &b,
        &[],
        false
    ));
    let want = guardless_ir::reference::run(&g, &inputs, &b).unwrap();
    // 2×2 windows (output 3, p2): channel 0's first window ties 3 at (0, 1) and (1, 1).
    assert_eq!(want[4].get_f64(0), 1.0);
    assert_eq!(
        want[4].get_f64(4),
        0.0,
        "the first tap of an all -inf window"
    );
    assert!(want[3].get_f64(8).is_nan() && want[4].get_f64(8) == 1.0);
    assert!(
        want[3].get_f64(9).is_nan() && want[4].get_f64(9) == 6.0,
        "the last NaN"
    );
}

/// How many pieces `unbind` of a backed size gives is guarded at its hint; at other sizes a piece
/// the graph reads may not exist: the reference says so by name (it used to panic), and the
/// lowering for the new sizes refuses the graph.
#[test]
fn a_piece_a_split_does_not_give_at_these_sizes_is_an_error() {
    let text = one_op_text_with(
        "aten.unbind.int",
        r#"{"self": {"tensor": "z"}, "dim": 1}"#,
        r#"{"tensor": "out", "index": 2}"#,
    )
    .replace(
        r#"{"name": "u0", "kind": "unbacked", "max": 100000, "optimization_hint": 4096}"#,
        r#"{"name": "u0", "kind": "backed", "hint": 3, "max": 100000}"#,
    );
    let g = Graph::from_json(&text).unwrap();
    let at_hint = lower(&g).unwrap();
    assert_eq!(at_hint.env.guards().len(), 1);
    let at = |n: i64| {
        let b = bindings_of("unbind", &g, &[("u0", n)]);
        let inputs = random_inputs(&g, &b, 7, (0, 4));
        let b = reference::bind_inputs(&g, &inputs, &b).unwrap();
        (inputs, b)
    };
    for n in [0, 1, 2] {
        let (inputs, b) = at(n);
        let err = reference::run(&g, &inputs, &b).unwrap_err().to_string();
        assert!(
            err.contains("'out' gave") && err.contains("output 2 does not exist"),
            "u0 = {n}: {err}"
        );
        assert!(at_hint.env.check_bindings(&b).is_err(), "u0 = {n}");
        let mut again = g.clone();
        again.env.rehint_backed(&b).unwrap();
        let err = lower(&again).unwrap_err().to_string();
        assert!(err.contains("out") && err.contains("2"), "u0 = {n}: {err}");
    }
    let (inputs, b) = at(3);
    assert!(compare_on(
        "unbind at its hint",
        &g,
        &inputs,
        &b,
        &[("u0", 3)],
        true
    ));
}

/// Grouped-query attention with symbolic head counts: `2·u` query heads over `u` key/value heads
/// (a constant ratio, proved), and query heads `u` that a broadcast asserts equal to the key's 5
/// (found by backed random graphs: the ratio was only read from constants).
#[test]
fn attention_with_symbolic_head_counts_matches_the_reference() {
    let text = r#"{"format": "guardless-graph", "version": 1,
        "symbols": [{"name": "u", "kind": "unbacked", "min": 1, "max": 64}],
        "inputs": [{"name": "q", "dtype": "f32", "shape": [1, "2*u", 3, 4]},
                   {"name": "kv", "dtype": "f32", "shape": [1, "u", 5, 4]},
                   {"name": "x", "dtype": "f32", "shape": [1, "u", 3, 4]},
                   {"name": "y", "dtype": "f32", "shape": [1, 5, 3, 4]}],
        "nodes": [{"name": "gqa", "op": "aten.scaled_dot_product_attention.default",
                   "args": {"query": {"tensor": "q"}, "key": {"tensor": "kv"}, "value": {"tensor": "kv"}}},
                  {"name": "xy", "op": "aten.sub.Tensor", "args": {"self": {"tensor": "x"}, "other": {"tensor": "y"}}},
                  {"name": "asserted", "op": "aten.scaled_dot_product_attention.default",
                   "args": {"query": {"tensor": "xy"}, "key": {"tensor": "y"}, "value": {"tensor": "y"}, "is_causal": true}}],
        "outputs": [{"tensor": "gqa"}, {"tensor": "asserted"}]}"#;
    let g = Graph::from_json(text).unwrap();
    // Only u = 5 broadcasts; elsewhere both refuse (the lowered program by its assert).
    let compared: Vec<bool> = [1, 3, 5]
        .iter()
        .map(|&u| differential("sdpa with symbolic heads", &g, &[("u", u)], u as u64, true))
        .collect();
    assert_eq!(compared, [false, false, true]);
}

/// Backed head counts whose ratio only the hints give (one query head over `s` key/value heads,
/// `s` at hint 1): taken from the hints and guarded, as any backed decision.
#[test]
fn attention_with_backed_head_counts_guards_their_ratio() {
    let text = r#"{"format": "guardless-graph", "version": 1,
        "symbols": [{"name": "s", "kind": "backed", "hint": 1, "min": 1, "max": 64}],
        "inputs": [{"name": "q", "dtype": "f32", "shape": [1, 1, 3, 4]},
                   {"name": "kv", "dtype": "f32", "shape": [1, "s", 5, 4]}],
        "nodes": [{"name": "out", "op": "aten.scaled_dot_product_attention.default",
                   "args": {"query": {"tensor": "q"}, "key": {"tensor": "kv"}, "value": {"tensor": "kv"}}}],
        "outputs": [{"tensor": "out"}]}"#;
    let g = Graph::from_json(text).unwrap();
    let p = lower(&g).unwrap();
    let guards: Vec<String> = p.env.guards().iter().map(|x| p.env.text(x.cond)).collect();
    assert_eq!(guards, ["1 == s"]);
    assert!(differential(
        "sdpa with backed heads",
        &g,
        &[("s", 1)],
        1,
        false
    ));
    // Other sizes fail the guard (a recompile), not the range its asserts narrowed to [1, 1].
    let err = p.env.check_bindings(&bindings_of("s", &g, &[("s", 2)]));
    assert!(matches!(err, Err(SymError::GuardFailed { .. })), "{err:?}");
    // Two key/value heads for one query head: no ratio, at the hint or anywhere.
    let mut at_two = g.clone();
    at_two
        .env
        .rehint_backed(&bindings_of("s", &g, &[("s", 2)]))
        .unwrap();
    let err = lower(&at_two).unwrap_err().to_string();
    assert!(err.contains("constant multiple"), "{err}");
}

/// Inputs declared transposed: the interpreter places a host tensor's elements in the declared
/// layout (it took them as storage in order), and lowering gives library steps a row-major copy
/// (masked_select read a transposed input in storage order). Found by random graphs with strided
/// inputs.
#[test]
fn transposed_inputs_match_the_reference() {
    let g = test_graph("transposed_inputs.json");
    for (s, &u0) in SIZES.iter().enumerate() {
        assert!(differential(
            "transposed inputs",
            &g,
            &[("u0", u0)],
            s as u64,
            false
        ));
    }
}

/// 2-d pooling refuses an empty dimension other than a batch, as ATen's shape check does (found
/// by random graphs: a window lying wholly in the padding of an empty plane averaged 0/0 = NaN,
/// where the reference gave 0).
#[test]
fn pooling_an_empty_plane_is_refused_as_aten_does() {
    for (op, args, output) in [
        (
            "aten.avg_pool2d.default",
            r#"{"self": {"tensor": "z"}, "kernel_size": [2, 1], "padding": [1, 0], "count_include_pad": false}"#,
            r#"{"tensor": "out"}"#,
        ),
        (
            "aten.max_pool2d_with_indices.default",
            r#"{"self": {"tensor": "z"}, "kernel_size": [2, 1], "padding": [1, 0]}"#,
            r#"{"tensor": "out", "index": 0}"#,
        ),
    ] {
        let g = Graph::from_json(&one_op_text_with(op, args, output)).unwrap();
        // z: [3, u0, 2]; at u0 = 0 the output still has a row (the padded window).
        assert!(!differential(op, &g, &[("u0", 0)], 1, false), "{op}");
        let b = bindings_of(op, &g, &[("u0", 0)]);
        let inputs = random_inputs(&g, &b, 1, (0, 4));
        let err = lower(&g).unwrap().run(&inputs, &b).unwrap_err().to_string();
        assert!(err.contains("u0"), "{op}: {err}");
        for u0 in [1, 5] {
            assert!(
                differential(op, &g, &[("u0", u0)], 2, false),
                "{op} at {u0}"
            );
        }
    }
}

/// A one-node graph over the 0-d inputs `s: f32[]`, `v: f32[]`, `i: i64[]`, `i1: i64[1]`,
/// `i2: i64[2]`, `w: f32[5, 3]`.
fn zero_d_graph(op: &str, args: &str) -> String {
    format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "zero_d",
            "inputs": [{{"name": "s", "dtype": "f32", "shape": []}}, {{"name": "v", "dtype": "f32", "shape": []}},
                       {{"name": "i", "dtype": "i64", "shape": []}}, {{"name": "i1", "dtype": "i64", "shape": [1]}},
                       {{"name": "i2", "dtype": "i64", "shape": [2]}}, {{"name": "w", "dtype": "f32", "shape": [5, 3]}}],
            "nodes": [{{"name": "out", "op": "{op}", "args": {args}}}],
            "outputs": [{{"tensor": "out"}}]}}"#
    )
}

/// Ops that take a dimension, on 0-d tensors, as ATen does op by op (checked against torch 2.15):
/// dimension 0 or -1 of a 0-d tensor is one of size 1 for softmax, transpose, t, gather,
/// index_select, scatter, scatter_add and flip; slice, select, their scatters and cat refuse a
/// 0-d tensor; another dimension is out of range. Lowering (run by the interpreter) and the
/// reference agree on each, and neither panics.
#[test]
fn zero_d_tensors_follow_aten_op_by_op() {
    let s = r#"{"tensor": "s"}"#;
    // (op, args, the result's shape and value from s = 1.5, v = 2.5, i = 0; or the error).
    let ok: &[(&str, String, &[usize], f64)] = &[
        (
            "aten._softmax.default",
            format!(r#"{{"self": {s}, "dim": 0, "half_to_float": false}}"#),
            &[],
            1.0,
        ),
        (
            "aten._softmax.default",
            format!(r#"{{"self": {s}, "dim": -1, "half_to_float": false}}"#),
            &[],
            1.0,
        ),
        (
            "aten._log_softmax.default",
            format!(r#"{{"self": {s}, "dim": 0, "half_to_float": false}}"#),
            &[],
            0.0,
        ),
        ("aten.t.default", format!(r#"{{"self": {s}}}"#), &[], 1.5),
        (
            "aten.transpose.int",
            format!(r#"{{"self": {s}, "dim0": 0, "dim1": -1}}"#),
            &[],
            1.5,
        ),
        (
            "aten.flip.default",
            format!(r#"{{"self": {s}, "dims": [-1]}}"#),
            &[],
            1.5,
        ),
        (
            "aten.gather.default",
            format!(r#"{{"self": {s}, "dim": 0, "index": {{"tensor": "i"}}}}"#),
            &[],
            1.5,
        ),
        (
            "aten.gather.default",
            format!(r#"{{"self": {s}, "dim": -1, "index": {{"tensor": "i1"}}}}"#),
            &[1],
            1.5,
        ),
        (
            "aten.index_select.default",
            format!(r#"{{"self": {s}, "dim": 0, "index": {{"tensor": "i"}}}}"#),
            &[],
            1.5,
        ),
        (
            "aten.index_select.default",
            format!(r#"{{"self": {s}, "dim": 0, "index": {{"tensor": "i1"}}}}"#),
            &[],
            1.5,
        ),
        (
            "aten.scatter.value",
            format!(r#"{{"self": {s}, "dim": 0, "index": {{"tensor": "i"}}, "value": 1.0}}"#),
            &[],
            1.0,
        ),
        (
            "aten.scatter.src",
            format!(
                r#"{{"self": {s}, "dim": 0, "index": {{"tensor": "i"}}, "src": {{"tensor": "v"}}}}"#
            ),
            &[],
            2.5,
        ),
        (
            "aten.scatter_add.default",
            format!(
                r#"{{"self": {s}, "dim": 0, "index": {{"tensor": "i"}}, "src": {{"tensor": "v"}}}}"#
            ),
            &[],
            4.0,
        ),
        (
            "aten.embedding.default",
            r#"{"weight": {"tensor": "w"}, "indices": {"tensor": "i"}}"#.to_string(),
            &[3],
            f64::NAN,
        ),
    ];
    let refused: &[(&str, String, &str)] = &[
        (
            "aten.slice.Tensor",
            format!(r#"{{"self": {s}, "dim": 0, "start": 0, "end": 1}}"#),
            "slice() cannot be applied to a 0-dim tensor",
        ),
        (
            "aten.slice_scatter.default",
            format!(r#"{{"self": {s}, "src": {{"tensor": "v"}}, "dim": 0}}"#),
            "slice() cannot be applied to a 0-dim tensor",
        ),
        (
            "aten.select.int",
            format!(r#"{{"self": {s}, "dim": 0, "index": 0}}"#),
            "select() cannot be applied to a 0-dim tensor",
        ),
        (
            "aten.select_scatter.default",
            format!(r#"{{"self": {s}, "src": {{"tensor": "v"}}, "dim": 0, "index": 0}}"#),
            "select() cannot be applied to a 0-dim tensor",
        ),
        (
            "aten.cat.default",
            format!(r#"{{"tensors": [{s}, {s}], "dim": 0}}"#),
            "zero-dimensional tensor (at position 0) cannot be concatenated",
        ),
        (
            "aten._softmax.default",
            format!(r#"{{"self": {s}, "dim": 1, "half_to_float": false}}"#),
            "out of range",
        ),
        (
            "aten.transpose.int",
            format!(r#"{{"self": {s}, "dim0": 0, "dim1": 1}}"#),
            "out of range",
        ),
        (
            "aten.flip.default",
            format!(r#"{{"self": {s}, "dims": [1]}}"#),
            "out of range",
        ),
        (
            "aten.gather.default",
            format!(r#"{{"self": {s}, "dim": 1, "index": {{"tensor": "i"}}}}"#),
            "out of range",
        ),
    ];
    let inputs = vec![
        HostTensor::from_f64(DType::F32, &[], &[1.5]),
        HostTensor::from_f64(DType::F32, &[], &[2.5]),
        HostTensor::from_i64(DType::I64, &[], &[0]),
        HostTensor::from_i64(DType::I64, &[1], &[0]),
        HostTensor::from_i64(DType::I64, &[2], &[0, 0]),
        HostTensor::from_f64(
            DType::F32,
            &[5, 3],
            &(0..15).map(f64::from).collect::<Vec<_>>(),
        ),
    ];
    let b = guardless_ir::sym::Bindings::new();
    for (op, args, shape, value) in ok {
        let what = format!("{op} {args}");
        let g = Graph::from_json(&zero_d_graph(op, args)).unwrap();
        let want = reference::run(&g, &inputs, &b).unwrap_or_else(|e| panic!("{what}: {e}"));
        let got = lower(&g)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .run(&inputs, &b)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(want[0].shape, *shape, "{what}");
        if !value.is_nan() {
            assert_eq!(want[0].get_f64(0), *value, "{what}");
        }
        assert_close(&what, &got[0], &want[0]);
    }
    for (op, args, message) in refused {
        let what = format!("{op} {args}");
        let g = Graph::from_json(&zero_d_graph(op, args)).unwrap();
        let r = reference::run(&g, &inputs, &b)
            .expect_err(&what)
            .to_string();
        let l = lower(&g).expect_err(&what).to_string();
        assert!(
            r.contains(message) && l.contains(message),
            "{what}: reference: {r}; lowering: {l}"
        );
    }
    // index_select of a 0-d tensor takes one index.
    let g = Graph::from_json(&zero_d_graph(
        "aten.index_select.default",
        &format!(r#"{{"self": {s}, "dim": 0, "index": {{"tensor": "i2"}}}}"#),
    ))
    .unwrap();
    assert!(reference::run(&g, &inputs, &b).is_err());
    assert!(lower(&g).map_or(true, |p| p.run(&inputs, &b).is_err()));
}

/// A negative size of a tensor a factory makes: refused at lowering when constant (ATen's
/// message), asserted at run time when symbolic, and the reference refuses both.
#[test]
fn negative_factory_sizes_are_refused() {
    for (op, args) in [
        (
            "aten.full.default",
            r#"{"size": [4, -1], "fill_value": 1.0}"#,
        ),
        ("aten.empty.memory_format", r#"{"size": [-1]}"#),
        (
            "aten.empty_strided.default",
            r#"{"size": [-3], "stride": [1]}"#,
        ),
    ] {
        let g = Graph::from_json(&zero_d_graph(op, args)).unwrap();
        let l = lower(&g).expect_err(op).to_string();
        assert!(
            l.contains("Trying to create tensor with negative dimension"),
            "{op}: {l}"
        );
        let inputs = vec![
            HostTensor::from_f64(DType::F32, &[], &[1.5]),
            HostTensor::from_f64(DType::F32, &[], &[2.5]),
            HostTensor::from_i64(DType::I64, &[], &[0]),
            HostTensor::from_i64(DType::I64, &[1], &[0]),
            HostTensor::from_i64(DType::I64, &[2], &[0, 0]),
            HostTensor::zeros(DType::F32, &[5, 3]),
        ];
        let r = reference::run(&g, &inputs, &guardless_ir::sym::Bindings::new())
            .expect_err(op)
            .to_string();
        assert!(
            r.contains("Trying to create tensor with negative dimension"),
            "{op}: {r}"
        );
    }
    let text = r#"{"format": "guardless-graph", "version": 1, "name": "neg",
        "symbols": [{"name": "u", "kind": "unbacked", "min": 0, "max": 100}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["u"]}],
        "nodes": [{"name": "out", "op": "aten.full.default", "args": {"size": ["u - 5"], "fill_value": 1.0}}],
        "outputs": [{"tensor": "out"}]}"#;
    let g = Graph::from_json(text).unwrap();
    let p = lower(&g).unwrap();
    for (u, valid) in [(3, false), (5, true), (9, true)] {
        let x = HostTensor::zeros(DType::F32, &[u as usize]);
        let b = reference::bind_inputs(
            &g,
            std::slice::from_ref(&x),
            &guardless_ir::sym::Bindings::new(),
        )
        .unwrap();
        let want = reference::run(&g, std::slice::from_ref(&x), &b);
        let got = p.run(std::slice::from_ref(&x), &b);
        assert_eq!(want.is_ok(), valid, "u = {u}: {want:?}");
        assert_eq!(got.is_ok(), valid, "u = {u}: {got:?}");
    }
}

/// A size from `.item()` with no upper bound, at 2^40 and 2^62, used as a tensor's size: an
/// error naming the node and the size, from the reference and from the interpreter — not a
/// `capacity overflow` panic or an aborted allocation.
#[test]
fn impossible_sizes_are_errors_before_allocating() {
    let g = Graph::from_json(ITEM_SIZED).unwrap();
    let p = lower(&g).unwrap();
    for v in [1i64 << 40, 1 << 62] {
        let x = HostTensor::from_i64(DType::I64, &[], &[v]);
        let b = guardless_ir::sym::Bindings::new();
        let r = reference::run(&g, std::slice::from_ref(&x), &b)
            .expect_err("refused")
            .to_string();
        assert!(
            r.contains("node 'f'") && r.contains(&format!("{}", v as u128 * 2)),
            "{r}"
        );
        let l = p
            .run(std::slice::from_ref(&x), &b)
            .expect_err("refused")
            .to_string();
        assert!(
            l.contains("(f)") && (l.contains("exceed") || l.contains("overflow")),
            "{l}"
        );
    }
    let x = HostTensor::from_i64(DType::I64, &[], &[3]);
    let b = guardless_ir::sym::Bindings::new();
    assert_eq!(
        p.run(std::slice::from_ref(&x), &b).unwrap()[0].shape,
        [3, 2]
    );
}
