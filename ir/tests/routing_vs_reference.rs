//! The ops of MoE routing and cache writes — boolean masks in `index`, `index_put`,
//! `repeat_interleave`, `histc`, `_grouped_mm`, `empty_permuted`, `sym_constrain_range_for_size` —
//! lowered and run by the interpreter against the reference, at every test size, plus their
//! data-dependent errors and bad input.

mod differential;

use differential::*;
use guardless_ir::graph::{DType, Graph};
use guardless_ir::lower::lower;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;

/// `one_op` with a stated shape and an extra unbacked symbol `c` (at most 2000).
fn counted(op: &str, args: &str, shape: &str) -> Graph {
    let text = one_op_text(op, args)
        .replace(r#""args": "#, &format!(r#""shape": {shape}, "args": "#))
        .replace(
            r#""symbols": ["#,
            r#""symbols": [{"name": "c", "kind": "unbacked", "max": 2000}, "#,
        );
    Graph::from_json(&text).unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// Compares at every test size; returns how many sizes both sides accepted. The graphs' sizes are
/// unbacked: lowering them records no guard.
fn at_all_sizes(what: &str, g: &Graph, ints: (i64, i64)) -> usize {
    let p = lower(g).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        p.env.guards().is_empty(),
        "{what}: guards on an unbacked graph"
    );
    SIZES
        .iter()
        .enumerate()
        .filter(|&(s, &u0)| differential_ints(what, g, &[("u0", u0)], s as u64 + 3, false, ints))
        .count()
}

#[test]
fn histc_matches_the_reference() {
    for args in [
        r#"{"self": {"tensor": "x"}, "bins": 4, "min": -1.5, "max": 1}"#,
        r#"{"self": {"tensor": "x"}, "bins": 7}"#,
        r#"{"self": {"tensor": "h"}, "bins": 3, "min": 0.5, "max": 0.5}"#,
        r#"{"self": {"tensor": "z"}, "bins": 1, "min": 0, "max": 2.0}"#,
    ] {
        let g = one_op("aten.histc.default", args);
        assert_eq!(at_all_sizes(args, &g, (0, 1)), SIZES.len(), "{args}");
    }
}

#[test]
fn histc_of_non_finite_data_is_a_runtime_error() {
    let g = one_op(
        "aten.histc.default",
        r#"{"self": {"tensor": "x"}, "bins": 3}"#,
    );
    let p = lower(&g).unwrap();
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("u0").unwrap(), 2);
    let mut inputs: Vec<HostTensor> = g
        .inputs
        .iter()
        .map(|i| {
            let shape: Vec<usize> = i
                .shape
                .iter()
                .map(|&d| g.env.evaluate(d, &b).unwrap() as usize)
                .collect();
            HostTensor::zeros(i.dtype, &shape)
        })
        .collect();
    inputs[0] = HostTensor::from_f64(
        DType::F32,
        &[2, 5],
        &[0.0, 1.0, f64::NAN, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    );
    let err = p.run(&inputs, &b).unwrap_err().to_string();
    assert!(err.contains("histc") && err.contains("not finite"), "{err}");
    assert!(guardless_ir::reference::run(&g, &inputs, &b).is_err());
}

#[test]
fn index_put_matches_the_reference() {
    let cases = [
        // Rows picked by `ids` (duplicates: the last write wins, or all are added).
        r#"{"self": {"tensor": "x"}, "indices": [{"tensor": "ids"}], "values": {"tensor": "x"}}"#,
        r#"{"self": {"tensor": "x"}, "indices": [{"tensor": "ids"}], "values": {"tensor": "y"}, "accumulate": true}"#,
        r#"{"self": {"tensor": "z"}, "indices": [null, {"tensor": "ids"}], "values": {"tensor": "z"}, "accumulate": true}"#,
        r#"{"self": {"tensor": "i"}, "indices": [{"tensor": "ids"}, {"tensor": "ids"}], "values": 7}"#,
        // A boolean mask: a count nobody states, bound at run time.
        r#"{"self": {"tensor": "x"}, "indices": [{"tensor": "m"}], "values": 2.5}"#,
        r#"{"self": {"tensor": "h"}, "indices": [{"tensor": "m"}], "values": -1, "accumulate": true}"#,
    ];
    for args in cases {
        let g = one_op("aten.index_put.default", args);
        // Indices drawn from [0, 2): out of range only when u0 < 2 (and never for masks).
        let ok = at_all_sizes(args, &g, (0, 2));
        assert!(ok >= SIZES.len() - 2, "{args}: compared at {ok} sizes");
        // Indices up to 9 and negative ones: both sides refuse the same inputs.
        at_all_sizes(args, &g, (-9, 9));
    }
}

#[test]
fn boolean_index_matches_the_reference() {
    let g = counted(
        "aten.index.Tensor",
        r#"{"self": {"tensor": "x"}, "indices": [{"tensor": "m"}]}"#,
        r#"["c"]"#,
    );
    assert_eq!(at_all_sizes("x[m]", &g, (0, 1)), SIZES.len());
    // x[:, y > 0]: the count is the second dimension.
    let text = r#"{"format": "guardless-graph", "version": 1, "name": "mask_cols",
        "symbols": [{"name": "u0", "kind": "unbacked", "max": 1000}, {"name": "c", "kind": "unbacked", "max": 5}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["u0", 5]}, {"name": "y", "dtype": "f32", "shape": [5]}],
        "nodes": [{"name": "mk", "op": "aten.gt.Scalar", "args": {"self": {"tensor": "y"}, "other": 0.0}},
                  {"name": "out", "op": "aten.index.Tensor", "shape": ["u0", "c"],
                   "args": {"self": {"tensor": "x"}, "indices": [null, {"tensor": "mk"}]}}],
        "outputs": [{"tensor": "out"}]}"#;
    let g = Graph::from_json(text).unwrap();
    assert_eq!(at_all_sizes("x[:, y > 0]", &g, (0, 1)), SIZES.len());
    // A 0-d mask adds a dimension of its count (0 or 1): y[2][y[2] > 0] and x[:, 0-d mask].
    let text = r#"{"format": "guardless-graph", "version": 1, "name": "mask_0d",
        "symbols": [{"name": "u0", "kind": "unbacked", "max": 1000}, {"name": "c", "kind": "unbacked", "max": 1},
                    {"name": "d", "kind": "unbacked", "max": 1}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["u0", 5]}, {"name": "y", "dtype": "f32", "shape": [5]}],
        "nodes": [{"name": "y2", "op": "aten.select.int", "args": {"self": {"tensor": "y"}, "dim": 0, "index": 2}},
                  {"name": "mk", "op": "aten.gt.Scalar", "args": {"self": {"tensor": "y2"}, "other": 0.0}},
                  {"name": "out", "op": "aten.index.Tensor", "shape": ["c"],
                   "args": {"self": {"tensor": "y2"}, "indices": [{"tensor": "mk"}]}},
                  {"name": "cols", "op": "aten.index.Tensor", "shape": ["u0", "d", 5],
                   "args": {"self": {"tensor": "x"}, "indices": [null, {"tensor": "mk"}]}}],
        "outputs": [{"tensor": "out"}, {"tensor": "cols"}]}"#;
    let g = Graph::from_json(text).unwrap();
    assert_eq!(at_all_sizes("y[2][y[2] > 0]", &g, (-1, 2)), SIZES.len());
}

#[test]
fn repeat_interleave_matches_the_reference() {
    let g = counted(
        "aten.repeat_interleave.Tensor",
        r#"{"repeats": {"tensor": "ids"}}"#,
        r#"["c"]"#,
    );
    assert_eq!(at_all_sizes("repeat_interleave", &g, (0, 4)), SIZES.len());
    // Negative repeats: both refuse, with ATen's message on the lowered side.
    let p = lower(&g).unwrap();
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("u0").unwrap(), 3);
    let inputs: Vec<HostTensor> = g
        .inputs
        .iter()
        .map(|i| {
            let shape: Vec<usize> = i
                .shape
                .iter()
                .map(|&d| g.env.evaluate(d, &b).unwrap() as usize)
                .collect();
            let n = shape.iter().product::<usize>();
            match i.dtype {
                DType::I64 => HostTensor::from_i64(i.dtype, &shape, &vec![-1; n]),
                d => HostTensor::zeros(d, &shape),
            }
        })
        .collect();
    let err = p.run(&inputs, &b).unwrap_err().to_string();
    assert!(err.contains("repeats can not be negative"), "{err}");
    // With output_size: a fresh count asserted equal to it.
    let text = r#"{"format": "guardless-graph", "version": 1, "name": "ri",
        "symbols": [{"name": "u0", "kind": "unbacked", "max": 1000}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["u0"]}],
        "nodes": [{"name": "r", "op": "aten.full.default", "args": {"size": ["u0"], "fill_value": 2, "dtype": {"dtype": "i64"}}},
                  {"name": "out", "op": "aten.repeat_interleave.Tensor", "args": {"repeats": {"tensor": "r"}, "output_size": "2*u0"}},
                  {"name": "bad", "op": "aten.repeat_interleave.Tensor", "args": {"repeats": {"tensor": "r"}, "output_size": "u0 + 1"}}],
        "outputs": [{"tensor": "out"}]}"#;
    let g = Graph::from_json(text).unwrap();
    for u0 in [0, 1, 5] {
        let compared = differential("output_size", &g, &[("u0", u0)], 1, true);
        // 2·u0 = u0 + 1 only at u0 = 1; elsewhere the second node's assert fails on both sides.
        assert_eq!(compared, u0 == 1, "u0 = {u0}");
    }
}

/// Experts chosen per token, tokens sorted by expert, counts by `histc`, offsets by `cumsum`, then
/// one grouped matmul over all experts — the MoE path of transformers' grouped-mm experts.
#[test]
fn grouped_mm_matches_the_reference() {
    let text = r#"{"format": "guardless-graph", "version": 1, "name": "moe_grouped_mm",
        "symbols": [{"name": "u0", "kind": "unbacked", "max": 100000, "optimization_hint": 64}],
        "inputs": [{"name": "x", "dtype": "f32", "shape": ["u0", 5]}, {"name": "eid", "dtype": "i64", "shape": ["u0"]},
                   {"name": "w", "dtype": "f32", "shape": [3, 5, 4], "kind": "parameter"}],
        "nodes": [{"name": "srt", "op": "aten.sort.default", "args": {"self": {"tensor": "eid"}}},
                  {"name": "xs", "op": "aten.index.Tensor", "args": {"self": {"tensor": "x"}, "indices": [{"tensor": "srt", "index": 1}]}},
                  {"name": "ef", "op": "aten._to_copy.default", "args": {"self": {"tensor": "eid"}, "dtype": {"dtype": "f32"}}},
                  {"name": "cnt", "op": "aten.histc.default", "args": {"self": {"tensor": "ef"}, "bins": 3, "min": 0, "max": 2}},
                  {"name": "ends", "op": "aten.cumsum.default", "args": {"self": {"tensor": "cnt"}, "dim": 0}},
                  {"name": "offs", "op": "aten._to_copy.default", "args": {"self": {"tensor": "ends"}, "dtype": {"dtype": "i32"}}},
                  {"name": "out", "op": "aten._grouped_mm.default", "args": {"self": {"tensor": "xs"}, "mat2": {"tensor": "w"}, "offs": {"tensor": "offs"}}}],
        "outputs": [{"tensor": "out"}]}"#;
    let g = Graph::from_json(text).unwrap();
    assert_eq!(at_all_sizes("moe", &g, (0, 3)), SIZES.len());
    // Batched (3-D × 3-D), no offsets.
    let g = one_op(
        "aten._grouped_mm.default",
        r#"{"self": {"tensor": "z"}, "mat2": {"tensor": "bw"}}"#,
    );
    assert_eq!(at_all_sizes("batched", &g, (0, 1)), SIZES.len());
    // Groups of the inner dimension (2-D × 2-D) and of the columns (3-D × 2-D), offsets given.
    let g = test_graph("grouped_mm_forms.json");
    for (u0, offs, ok) in GROUPED_MM_FORMS_CASES {
        let inputs = grouped_mm_forms_inputs(u0, offs);
        let compared = compare_on("gmm", &g, &inputs, &Bindings::new(), &[], false);
        assert_eq!(compared, ok, "u0 = {u0}, offs = {offs:?}");
    }
}

#[test]
fn empty_permuted_and_constrain_range() {
    let g = one_op(
        "aten.empty_permuted.default",
        r#"{"size": ["u0", 3], "physical_layout": [1, 0], "dtype": {"dtype": "bf16"}}"#,
    );
    assert_eq!(at_all_sizes("empty_permuted", &g, (0, 1)), SIZES.len());
    // `.item()` then a size constraint: the range is learned, and checked at run time.
    let text = r#"{"format": "guardless-graph", "version": 1, "name": "constrain",
        "symbols": [{"name": "u0", "kind": "unbacked", "max": 1000}, {"name": "u1", "kind": "unbacked"}],
        "inputs": [{"name": "n", "dtype": "i64", "shape": []}, {"name": "x", "dtype": "f32", "shape": ["u0"]}],
        "nodes": [{"name": "v", "op": "aten._local_scalar_dense.default", "symbol": "u1", "args": {"self": {"tensor": "n"}}},
                  {"name": "c", "op": "aten.sym_constrain_range_for_size.default", "args": {"size": "u1", "min": 2, "max": 7}},
                  {"name": "out", "op": "aten.full.default", "args": {"size": ["u1"], "fill_value": 1.0}}],
        "outputs": [{"tensor": "out"}]}"#;
    let g = Graph::from_json(text).unwrap();
    let p = lower(&g).unwrap();
    let mut env = p.env.clone();
    let u1 = env.symbol("u1").unwrap();
    let r = env.bound(u1);
    assert_eq!((r.lo_i64(), r.hi_i64()), (Some(2), Some(7)), "{r}");
    for (v, ok) in [(2, true), (7, true), (1, false), (8, false)] {
        let inputs = [
            HostTensor::from_i64(DType::I64, &[], &[v]),
            HostTensor::zeros(DType::F32, &[3]),
        ];
        assert_eq!(
            compare_on("constrain", &g, &inputs, &Bindings::new(), &[], false),
            ok,
            "u1 = {v}"
        );
    }
}

#[test]
fn bad_routing_or_scatter_input_is_an_error_naming_the_node() {
    for (op, args, want) in [
        (
            "aten.histc.default",
            r#"{"self": {"tensor": "x"}, "bins": 4, "min": 3, "max": 1}"#,
            "max must be larger than min",
        ),
        (
            "aten.histc.default",
            r#"{"self": {"tensor": "i"}, "bins": 4}"#,
            "floating-point",
        ),
        (
            "aten.histc.default",
            r#"{"self": {"tensor": "x"}, "bins": 0}"#,
            "bins must be a positive constant",
        ),
        (
            "aten.index_put.default",
            r#"{"self": {"tensor": "x"}, "indices": [{"tensor": "ids"}], "values": {"tensor": "h"}}"#,
            "one dtype",
        ),
        (
            "aten.index_put.default",
            r#"{"self": {"tensor": "x"}, "indices": [{"tensor": "m"}, {"tensor": "m"}], "values": 1.0}"#,
            "at most one boolean mask",
        ),
        (
            "aten.index.Tensor",
            r#"{"self": {"tensor": "x"}, "indices": [{"tensor": "m"}]}"#,
            "unbacked count symbol at dimension 0",
        ),
        (
            "aten.repeat_interleave.Tensor",
            r#"{"repeats": {"tensor": "i"}, "output_size": 4}"#,
            "one-dimensional integer tensor",
        ),
        (
            "aten._grouped_mm.default",
            r#"{"self": {"tensor": "x"}, "mat2": {"tensor": "bw"}, "bias": {"tensor": "b4"}}"#,
            "bias is not supported",
        ),
        (
            "aten._grouped_mm.default",
            r#"{"self": {"tensor": "x"}, "mat2": {"tensor": "w"}}"#,
            "without offsets are not supported",
        ),
        (
            "aten.empty_permuted.default",
            r#"{"size": [2, 3], "physical_layout": [0, 0]}"#,
            "permutation",
        ),
        (
            "aten.slice_scatter.default",
            r#"{"self": {"tensor": "x"}, "src": {"tensor": "x"}, "dim": 1, "start": 1, "end": 3}"#,
            "slice_scatter: sizes 2 and 5 differ",
        ),
        (
            "aten.slice_scatter.default",
            r#"{"self": {"tensor": "x"}, "src": {"tensor": "y"}, "dim": 0}"#,
            "a source of 1 dimensions for a region of 2",
        ),
        (
            "aten.select_scatter.default",
            r#"{"self": {"tensor": "x"}, "src": {"tensor": "s2"}, "dim": 0, "index": 0}"#,
            "a source of 2 dimensions for a region of 1",
        ),
        (
            "aten.select_scatter.default",
            r#"{"self": {"tensor": "x"}, "src": {"tensor": "x"}, "dim": 1, "index": 5}"#,
            "out of range",
        ),
        (
            "aten.copy.default",
            r#"{"self": {"tensor": "y"}, "src": {"tensor": "x"}}"#,
            "a source of 2 dimensions into a tensor of 1",
        ),
        (
            "aten.scatter.src",
            r#"{"self": {"tensor": "x"}, "dim": 1, "index": {"tensor": "x"}, "src": {"tensor": "x"}}"#,
            "indices must be integers",
        ),
        (
            "aten.scatter.value",
            r#"{"self": {"tensor": "x"}, "dim": 0, "index": {"tensor": "ids"}, "value": 1}"#,
            "an index of 1 dimensions for a tensor of 2",
        ),
        (
            "aten.scatter_add.default",
            r#"{"self": {"tensor": "s2"}, "dim": 0, "index": {"tensor": "i"}, "src": {"tensor": "x"}}"#,
            "the index exceeds the tensor in dimension 1 (5 > 2)",
        ),
        (
            "aten.repeat.default",
            r#"{"self": {"tensor": "x"}, "repeats": [2]}"#,
            "1 repeats for a tensor of 2 dimensions",
        ),
        (
            "aten.as_strided.default",
            r#"{"self": {"tensor": "x"}, "size": [2], "stride": [-1]}"#,
            "stride -1 can be negative",
        ),
        (
            "aten.as_strided.default",
            r#"{"self": {"tensor": "i"}, "size": ["u0", 2, 3], "stride": [5, 1, 1], "storage_offset": 2}"#,
            "the view reaches element 5*u0 of a storage of 5*u0",
        ),
        (
            "aten._cdist_forward.default",
            r#"{"x1": {"tensor": "x"}, "x2": {"tensor": "y"}, "p": 2.0, "compute_mode": null}"#,
            "cdist takes tensors of at least two dimensions",
        ),
        (
            "aten._cdist_forward.default",
            r#"{"x1": {"tensor": "x"}, "x2": {"tensor": "x"}, "p": -1.0, "compute_mode": null}"#,
            "p must be a non-negative number, found -1",
        ),
        (
            "aten.bucketize.Tensor",
            r#"{"self": {"tensor": "x"}, "boundaries": {"tensor": "x"}}"#,
            "the boundaries must have exactly one dimension, not 2",
        ),
        (
            "aten.searchsorted.Tensor",
            r#"{"sorted_sequence": {"tensor": "s2"}, "self": {"tensor": "z"}}"#,
            "a sequence of 2 dimensions takes values of as many, not 3",
        ),
        (
            "aten.searchsorted.Tensor",
            r#"{"sorted_sequence": {"tensor": "y"}, "self": {"tensor": "x"}, "right": true, "side": "left"}"#,
            "side 'left' contradicts right=True",
        ),
        (
            "aten.searchsorted.Tensor",
            r#"{"sorted_sequence": {"tensor": "ids"}, "self": {"tensor": "x"}, "sorter": {"tensor": "y"}}"#,
            "sorter must be an i64 tensor of the sequence's shape",
        ),
        (
            "aten.logcumsumexp.default",
            r#"{"self": {"tensor": "i"}, "dim": 0}"#,
            "logcumsumexp of i64 is not defined: it takes floats",
        ),
        (
            "aten.convolution.default",
            r#"{"input": {"tensor": "x"}, "weight": {"tensor": "w"}, "bias": null, "stride": [1], "padding": [0], "dilation": [1], "transposed": false, "output_padding": [0], "groups": 1}"#,
            "expects an input of 1 to 3 spatial dimensions",
        ),
        (
            "aten.convolution.default",
            r#"{"input": {"tensor": "z"}, "weight": {"tensor": "bw"}, "bias": null, "stride": [1], "padding": [0], "dilation": [1], "transposed": true, "output_padding": [1], "groups": 1}"#,
            "output_padding must be smaller than the stride or the dilation",
        ),
        (
            "aten.convolution.default",
            r#"{"input": {"tensor": "z"}, "weight": {"tensor": "bw"}, "bias": null, "stride": [1], "padding": [0], "dilation": [1], "transposed": false, "output_padding": [0], "groups": 0}"#,
            "groups must be a positive constant",
        ),
        (
            "aten.convolution.default",
            r#"{"input": {"tensor": "z"}, "weight": {"tensor": "bw"}, "bias": null, "stride": [1], "padding": [0], "dilation": [1], "transposed": false, "output_padding": [0], "groups": 1}"#,
            "can be empty",
        ),
        (
            "aten.max_pool2d_with_indices.default",
            r#"{"self": {"tensor": "x"}, "kernel_size": [2, 2]}"#,
            "expects a float input of 3 or 4 dimensions",
        ),
        (
            "aten.max_pool2d_with_indices.default",
            r#"{"self": {"tensor": "z"}, "kernel_size": [2, 2], "padding": [2, 2]}"#,
            "padding at most half the kernel",
        ),
        (
            "aten.avg_pool2d.default",
            r#"{"self": {"tensor": "z"}, "kernel_size": [3], "divisor_override": 0}"#,
            "divisor_override must not be zero",
        ),
        (
            "aten.avg_pool2d.default",
            r#"{"self": {"tensor": "z"}, "kernel_size": [3, 2], "padding": [1, 2]}"#,
            "padding at most half the kernel",
        ),
        (
            "aten.avg_pool2d.default",
            r#"{"self": {"tensor": "z"}, "kernel_size": [2, 2, 2]}"#,
            "kernel_size: expected 1 or 2 values",
        ),
        (
            "aten.unfold.default",
            r#"{"self": {"tensor": "x"}, "dimension": 1, "size": 2, "step": 0}"#,
            "step positive, found size 2 and step 0",
        ),
        (
            "aten.unfold.default",
            r#"{"self": {"tensor": "x"}, "dimension": 1, "size": 6, "step": 1}"#,
            "a window of 6 can be longer than dimension 1 (size 5)",
        ),
        (
            "aten.diagonal.default",
            r#"{"self": {"tensor": "x"}, "dim1": 1, "dim2": -1}"#,
            "dim1 and dim2 are both dimension 1",
        ),
        (
            "aten.diagonal.default",
            r#"{"self": {"tensor": "y"}}"#,
            "diagonal needs 2 or more dimensions, found 1",
        ),
        (
            "aten._adaptive_avg_pool2d.default",
            r#"{"self": {"tensor": "z"}, "output_size": [2, 1]}"#,
            "pooling u0 (at most 100000) × 2 to 2 × 1 takes windows of up to 50001 × 2 taps",
        ),
        (
            "aten._adaptive_avg_pool2d.default",
            r#"{"self": {"tensor": "z"}, "output_size": [0, 1]}"#,
            "output_size: expected 2 positive constants",
        ),
        (
            "aten.upsample_bilinear2d.vec",
            r#"{"input": {"tensor": "z"}, "output_size": null, "align_corners": false, "scale_factors": [0.1, 2]}"#,
            "is not a binary fraction",
        ),
        (
            "aten._native_batch_norm_legit_no_training.default",
            r#"{"input": {"tensor": "i"}, "weight": null, "bias": null, "running_mean": {"tensor": "y"}, "running_var": {"tensor": "y"}, "momentum": 0.1, "eps": 1e-5}"#,
            "expects a float input",
        ),
    ] {
        // Ops of several outputs name their first.
        let g = if op.contains("max_pool") || op.contains("batch_norm") {
            one_op_outputs(op, args, r#"{"tensor": "out", "index": 0}"#)
        } else {
            one_op(op, args)
        };
        let err = lower(&g)
            .err()
            .unwrap_or_else(|| panic!("{args}: lowered"))
            .to_string();
        assert!(
            err.contains("node 'out'") && err.contains(op) && err.contains(want),
            "{args}: {err}"
        );
    }
}
