//! Reading the graph format: what it accepts, and every bad input it rejects, each error naming
//! where.

use guardless_ir::graph::{
    schema, Arg, DType, Graph, GraphError, InputKind, Producer, Scalar, TensorRef,
};
use guardless_ir::sym::Expr;

/// A graph with `symbols`, `inputs`, `nodes`, `outputs` and `asserts` given as JSON fragments.
fn graph(symbols: &str, inputs: &str, nodes: &str, outputs: &str, asserts: &str) -> String {
    format!(
        r#"{{"format": "guardless-graph", "version": 1, "name": "t",
            "symbols": [{symbols}], "inputs": [{inputs}], "nodes": [{nodes}],
            "outputs": [{outputs}], "asserts": [{asserts}]}}"#
    )
}

const U0: &str = r#"{"name": "u0", "kind": "unbacked", "max": 1000, "optimization_hint": 64}"#;
const X: &str = r#"{"name": "x", "dtype": "f32", "shape": ["u0", 8]}"#;

fn err(text: &str) -> GraphError {
    match Graph::from_json(text) {
        Err(e) => e,
        Ok(_) => panic!("expected an error for {text}"),
    }
}

fn node_err(node_json: &str) -> (String, String, String) {
    match err(&graph(U0, X, node_json, r#"{"tensor": "x"}"#, "")) {
        GraphError::Node { node, op, message } => (node, op, message),
        other => panic!("expected a node error, got {other:?}"),
    }
}

#[test]
fn reads_symbols_inputs_nodes_outputs_and_asserts() {
    let text = graph(
        r#"{"name": "s0", "kind": "backed", "hint": 512, "min": 1, "max": null}, {"name": "u0", "kind": "unbacked", "optimization_hint": 4096},
           {"name": "u1", "kind": "unbacked"}, {"name": "u2", "kind": "unbacked"}"#,
        r#"{"name": "x", "dtype": "bf16", "shape": ["s0", 4096]}, {"name": "w", "dtype": "f32", "shape": [4096], "kind": "parameter"},
           {"name": "ids", "dtype": "i64", "shape": ["u0"], "strides": [1]}"#,
        r#"{"name": "nz", "op": "aten.nonzero.default", "args": {"self": {"tensor": "x"}}, "shape": ["u1", 2]},
           {"name": "v", "op": "aten._local_scalar_dense.default", "args": {"self": {"tensor": "ids"}}, "symbol": "u2"},
           {"name": "a", "op": "aten.add.Tensor", "args": {"self": {"tensor": "x"}, "other": 1e-06, "alpha": 2}},
           {"name": "sp", "op": "aten.split_with_sizes.default", "args": {"self": {"tensor": "x"}, "split_sizes": ["s0 - 1", 1]}},
           {"name": "m", "op": "aten.masked_fill.Scalar", "args": {"self": {"tensor": "sp", "index": 1}, "mask": {"tensor": "x"}, "value": {"float": "-inf"}}},
           {"name": "c", "op": "aten._to_copy.default", "args": {"self": {"tensor": "a"}, "dtype": {"dtype": "f16"}, "device": "cuda:0", "layout": "strided"}},
           {"name": "chk", "op": "aten._assert_scalar.default", "args": {"self": {"symbool": "u0 <= s0"}, "assert_msg": "u0 <= s0"}},
           {"name": "idx", "op": "aten.index.Tensor", "args": {"self": {"tensor": "x"}, "indices": [null, {"tensor": "ids"}]}},
           {"name": "g", "op": "aten.gelu.default", "args": {"self": {"tensor": "x"}}},
           {"name": "s", "op": "aten.sum.dim_IntList", "args": {"self": {"tensor": "x"}, "dim": -1}},
           {"name": "b", "op": "aten.add.Tensor", "args": {"self": {"tensor": "x"}, "other": "u0 + 1"}}"#,
        r#"{"tensor": "sp", "index": 0}, {"tensor": "w", "mutates": "w"}"#,
        r#""u0 <= 2*s0""#,
    );
    let g = Graph::from_json(&text).unwrap();
    assert_eq!(g.inputs.len(), 3);
    assert_eq!(g.inputs[0].dtype, DType::BF16);
    assert_eq!(g.env.text(g.inputs[0].shape[0]), "s0");
    assert_eq!(g.inputs[1].kind, InputKind::Parameter);
    assert!(g.inputs[2].strides.is_some());
    assert_eq!(g.nodes.len(), 11);
    let node = |name: &str| g.nodes.iter().find(|n| n.name == name).unwrap();
    let text = |e: Expr| g.env.text(e);
    // 2 is an integer, 1e-06 a float: the spelling decides, as in Python. A number stands for a
    // tensor as a wrapped number.
    assert!(matches!(node("a").arg("alpha"), Some(Arg::Scalar(Scalar::Int(e))) if text(*e) == "2"));
    assert_eq!(
        node("a").arg("other"),
        Some(&Arg::Number(Scalar::Float(1e-06)))
    );
    assert!(
        matches!(node("b").arg("other"), Some(Arg::Number(Scalar::Int(e))) if text(*e) == "u0 + 1")
    );
    match node("sp").arg("split_sizes") {
        Some(Arg::Ints(v)) => assert_eq!(
            v.iter().map(|&e| text(e)).collect::<Vec<_>>(),
            ["s0 - 1", "1"]
        ),
        other => panic!("{other:?}"),
    }
    // Defaults from the schema.
    assert!(matches!(node("sp").arg("dim"), Some(Arg::Int(e)) if text(*e) == "0"));
    assert_eq!(node("g").arg("approximate"), Some(&Arg::Str("none".into())));
    assert_eq!(node("c").arg("memory_format"), Some(&Arg::None));
    assert!(
        matches!(node("s").arg("dim"), Some(Arg::Ints(v)) if v.len() == 1 && text(v[0]) == "-1")
    );
    assert_eq!(
        node("m").arg("value"),
        Some(&Arg::Scalar(Scalar::Float(f64::NEG_INFINITY)))
    );
    assert_eq!(
        node("m").arg("self"),
        Some(&Arg::Tensor(TensorRef {
            producer: Producer::Node(3),
            index: Some(1)
        }))
    );
    assert_eq!(node("c").arg("dtype"), Some(&Arg::DType(DType::F16)));
    assert!(matches!(node("chk").arg("self"), Some(Arg::SymBool(_))));
    assert_eq!(
        node("idx").arg("indices"),
        Some(&Arg::Tensors(vec![
            None,
            Some(TensorRef {
                producer: Producer::Input(2),
                index: None
            })
        ]))
    );
    // The .item() symbol is a value (any sign); nonzero's count is a size.
    let u2 = g.env.symbol_id("u2").unwrap();
    assert!(g.env.symbol_range(u2).lo < 0);
    let u1 = g.env.symbol_id("u1").unwrap();
    assert_eq!(g.env.symbol_range(u1).lo, 0);
    assert_eq!(g.outputs[1].mutates, Some(1));
    assert_eq!(g.env.runtime_asserts().len(), 1);
}

#[test]
fn every_schema_parses() {
    let ops = schema::all_ops();
    assert!(ops.len() > 120, "{}", ops.len());
    for op in ops {
        let s = schema::lookup(op).unwrap();
        assert_eq!(s.op, op);
    }
    let s = schema::lookup("aten.native_layer_norm.default").unwrap();
    assert_eq!(s.returns, schema::Returns::Fixed(3));
    assert_eq!(s.params.len(), 5);
    assert_eq!(
        schema::lookup("aten.split.Tensor").unwrap().returns,
        schema::Returns::List
    );
    assert_eq!(
        schema::lookup("aten._assert_scalar.default")
            .unwrap()
            .returns,
        schema::Returns::Nothing
    );
    assert!(
        schema::lookup("aten.index.Tensor").unwrap().params[1]
            .ty
            .elem_optional
    );
}

#[test]
fn unknown_ops_are_all_listed() {
    let nodes = r#"{"name": "a", "op": "aten.frobnicate.default", "args": {}},
                   {"name": "b", "op": "aten.add.Tensor", "args": {"self": {"tensor": "x"}, "other": 1}},
                   {"name": "c", "op": "aten.sinc.default", "args": {"self": {"tensor": "b"}}}"#;
    match err(&graph(U0, X, nodes, r#"{"tensor": "x"}"#, "")) {
        GraphError::UnknownOps { ops } => assert_eq!(
            ops,
            [
                ("a".to_string(), "aten.frobnicate.default".to_string()),
                ("c".to_string(), "aten.sinc.default".to_string())
            ]
        ),
        other => panic!("{other:?}"),
    }
    let message = err(&graph(U0, X, nodes, r#"{"tensor": "x"}"#, "")).to_string();
    assert!(
        message.contains("aten.frobnicate.default (node 'a')")
            && message.contains("aten.sinc.default (node 'c')"),
        "{message}"
    );
}

#[test]
fn arguments_are_checked_against_the_schema() {
    let (n, op, m) =
        node_err(r#"{"name": "y", "op": "aten.mm.default", "args": {"self": {"tensor": "x"}}}"#);
    assert!(
        n == "y"
            && op == "aten.mm.default"
            && m.contains("argument 'mat2'")
            && m.contains("missing"),
        "{m}"
    );
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.mm.default", "args": {"self": {"tensor": "x"}, "mat2": {"tensor": "x"}, "beta": 1}}"#,
    );
    assert!(
        m.contains("unknown argument 'beta'") && m.contains("self, mat2"),
        "{m}"
    );
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.permute.default", "args": {"self": {"tensor": "x"}, "dims": {"tensor": "x"}}}"#,
    );
    assert!(
        m.contains("argument 'dims' (int[])") && m.contains("found a tensor"),
        "{m}"
    );
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.view.default", "args": {"self": {"tensor": "x"}, "size": ["u0", "u9"]}}"#,
    );
    assert!(
        m.contains("argument 'size'") && m.contains("unknown symbol 'u9'"),
        "{m}"
    );
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.mm.default", "args": {"self": null, "mat2": {"tensor": "x"}}}"#,
    );
    assert!(
        m.contains("argument 'self' (Tensor)") && m.contains("null where a value is required"),
        "{m}"
    );
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.cat.default", "args": {"tensors": [{"tensor": "x"}, null]}}"#,
    );
    assert!(
        m.contains("argument 'tensors' (Tensor[])") && m.contains("found null"),
        "{m}"
    );
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.gelu.default", "args": {"self": {"tensor": "x"}, "approximate": 1}}"#,
    );
    assert!(
        m.contains("argument 'approximate' (str)") && m.contains("found an integer"),
        "{m}"
    );
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.slice.Tensor", "args": {"self": {"tensor": "x"}, "end": "u0 > 2"}}"#,
    );
    assert!(m.contains("is a condition"), "{m}");
}

#[test]
fn references_respect_how_many_outputs_a_node_has() {
    let two =
        r#"{"name": "mx", "op": "aten.max.dim", "args": {"self": {"tensor": "x"}, "dim": 1}}"#;
    let use_ = |r: &str| {
        format!(r#"{two}, {{"name": "y", "op": "aten.neg.default", "args": {{"self": {r}}}}}"#)
    };
    let (_, _, m) = node_err(&use_(r#"{"tensor": "mx"}"#));
    assert!(m.contains("'mx' has 2 outputs: give an \"index\""), "{m}");
    let (_, _, m) = node_err(&use_(r#"{"tensor": "mx", "index": 2}"#));
    assert!(m.contains("index 2 is out of range"), "{m}");
    let g = Graph::from_json(&graph(
        U0,
        X,
        &use_(r#"{"tensor": "mx", "index": 1}"#),
        r#"{"tensor": "x"}"#,
        "",
    ))
    .unwrap();
    assert_eq!(g.nodes.len(), 2);
    let one = r#"{"name": "n", "op": "aten.neg.default", "args": {"self": {"tensor": "x"}}}, {"name": "y", "op": "aten.neg.default", "args": {"self": {"tensor": "n", "index": 0}}}"#;
    let (_, _, m) = node_err(one);
    assert!(m.contains("'n' has one output"), "{m}");
    let none = r#"{"name": "k", "op": "aten._assert_scalar.default", "args": {"self": {"symbool": "u0 >= 0"}, "assert_msg": "ok"}}, {"name": "y", "op": "aten.neg.default", "args": {"self": {"tensor": "k"}}}"#;
    let (_, _, m) = node_err(none);
    assert!(m.contains("'k' has no output"), "{m}");
    let split = r#"{"name": "sp", "op": "aten.split.Tensor", "args": {"self": {"tensor": "x"}, "split_size": 2}}, {"name": "y", "op": "aten.neg.default", "args": {"self": {"tensor": "sp"}}}"#;
    let (_, _, m) = node_err(split);
    assert!(m.contains("a list of outputs"), "{m}");
}

#[test]
fn the_example_graphs_read() {
    for name in ["rms_norm.backed.json", "rms_norm.unbacked.json"] {
        let path = format!("{}/../examples/graphs/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let g = Graph::from_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(g.name, "rms_norm");
        assert_eq!(g.nodes.len(), 8);
    }
}

#[test]
fn malformed_json_gives_line_and_column() {
    match err("{\n  \"format\": \"guardless-graph\",\n  \"version\": 1,\n  \"inputs\": [,]\n}") {
        GraphError::Json { line, column, .. } => assert_eq!((line, column), (4, 14)),
        other => panic!("{other:?}"),
    }
    match err(
        r#"{"format": "guardless-graph", "version": 1, "inputs": [], "outputs": [], "extra": 1}"#,
    ) {
        GraphError::Json { message, .. } => {
            assert!(message.contains("unknown field `extra`"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match err(
        r#"{"format": "guardless-graph", "version": 1, "inputs": [{"name": "x", "dtype": "f32"}], "outputs": []}"#,
    ) {
        GraphError::Json { message, .. } => {
            assert!(message.contains("missing field `shape`"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn wrong_format_or_version() {
    assert_eq!(
        err(r#"{"format": "onnx", "version": 1, "inputs": [], "outputs": []}"#),
        GraphError::Format {
            found: "onnx".into()
        }
    );
    assert_eq!(
        err(r#"{"format": "guardless-graph", "version": 2, "inputs": [], "outputs": []}"#),
        GraphError::Version { found: 2 }
    );
}

#[test]
fn symbol_errors_name_the_symbol() {
    let sym = |s: &str| match err(&graph(s, "", "", "", "")) {
        GraphError::Symbol { name, message } => (name, message),
        other => panic!("{other:?}"),
    };
    let (n, m) = sym(r#"{"name": "s0", "kind": "backed"}"#);
    assert!(n == "s0" && m.contains("needs a \"hint\""), "{m}");
    let (_, m) = sym(r#"{"name": "u0", "kind": "unbacked", "hint": 3}"#);
    assert!(m.contains("optimization_hint"), "{m}");
    let (_, m) = sym(r#"{"name": "u0", "kind": "dynamic"}"#);
    assert!(m.contains("'dynamic'"), "{m}");
    let (_, m) = sym(r#"{"name": "s0", "kind": "backed", "hint": 5000, "max": 10}"#);
    assert!(m.contains("outside its range"), "{m}");
    let (_, m) = sym(r#"{"name": "u0", "kind": "unbacked"}, {"name": "u0", "kind": "unbacked"}"#);
    assert!(m.contains("already declared"), "{m}");
    let (_, m) = sym(r#"{"name": "u 0", "kind": "unbacked"}"#);
    assert!(m.contains("not a valid symbol name"), "{m}");
}

#[test]
fn input_errors_name_the_input() {
    let input = |i: &str| match err(&graph(U0, i, "", "", "")) {
        GraphError::Input { input, message } => (input, message),
        other => panic!("{other:?}"),
    };
    let (n, m) = input(r#"{"name": "x", "dtype": "f32", "shape": ["u9", 8]}"#);
    assert!(
        n == "x" && m.contains("unknown symbol 'u9'") && m.contains("shape[0]"),
        "{m}"
    );
    let (_, m) = input(r#"{"name": "x", "dtype": "float", "shape": [8]}"#);
    assert!(m.contains("unknown dtype 'float'"), "{m}");
    let (_, m) = input(r#"{"name": "x", "dtype": "f32", "shape": [-1]}"#);
    assert!(m.contains("not a non-negative"), "{m}");
    let (_, m) = input(r#"{"name": "x", "dtype": "f32", "shape": ["u0 > 1"]}"#);
    assert!(m.contains("is a condition"), "{m}");
    let (_, m) = input(r#"{"name": "x", "dtype": "f32", "shape": ["u0", 2], "strides": [1]}"#);
    assert!(m.contains("1 strides for 2 dimensions"), "{m}");
    let (_, m) = input(r#"{"name": "x", "dtype": "f32", "shape": ["u0"], "kind": "weight"}"#);
    assert!(m.contains("'weight'"), "{m}");
    let (_, m) = input(
        r#"{"name": "x", "dtype": "f32", "shape": ["u0"]}, {"name": "x", "dtype": "f32", "shape": [1]}"#,
    );
    assert!(m.contains("already used"), "{m}");
}

#[test]
fn node_errors_name_the_node_and_op() {
    let (n, op, m) =
        node_err(r#"{"name": "y", "op": "aten.add.Tensor", "args": {"self": {"tensor": "z"}}}"#);
    assert!(
        n == "y"
            && op == "aten.add.Tensor"
            && m.contains("'z' is neither an input nor an earlier node"),
        "{m}"
    );
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.add.Tensor", "args": {"self": {"tensor": "x", "index": 1}}}"#,
    );
    assert!(
        m.contains("'x' has one output, but index 1 is given"),
        "{m}"
    );
    let (_, op, m) = node_err(r#"{"name": "y", "op": "torch.ops.higher_order.cond", "args": {}}"#);
    assert!(op.contains("cond") && m.contains("higher-order"), "{m}");
    let (_, _, m) =
        node_err(r#"{"name": "y", "op": "aten.full.default", "args": {"device": "tpu"}}"#);
    assert!(m.contains("device 'tpu'"), "{m}");
    let (_, _, m) =
        node_err(r#"{"name": "y", "op": "aten.full.default", "args": {"layout": "sparse_coo"}}"#);
    assert!(m.contains("layout 'sparse_coo'"), "{m}");
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten._assert_scalar.default", "args": {"self": {"symbool": "u0 + 1"}}}"#,
    );
    assert!(m.contains("not a condition"), "{m}");
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten._assert_scalar.default", "args": {"self": {"symbool": "u0 >"}}}"#,
    );
    assert!(
        m.contains("argument 'self'") && m.contains("at byte"),
        "{m}"
    );
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.add.Tensor", "args": {"other": {"float": "infinity"}}}"#,
    );
    assert!(m.contains("expected \"inf\""), "{m}");
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten.slice.Tensor", "args": {"end": 18446744073709551615}}"#,
    );
    assert!(m.contains("does not fit in 64 bits"), "{m}");
    let (_, _, m) =
        node_err(r#"{"name": "y", "op": "aten.add.Tensor", "args": {"other": {"what": 1}}}"#);
    assert!(m.contains("unrecognized value"), "{m}");
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten._to_copy.default", "args": {"dtype": {"dtype": "f128"}}}"#,
    );
    assert!(m.contains("unknown dtype 'f128'"), "{m}");
    let (_, _, m) = node_err(
        r#"{"name": "y", "op": "aten._local_scalar_dense.default", "args": {}, "symbol": "u7"}"#,
    );
    assert!(m.contains("'u7' is not declared"), "{m}");
    let (_, _, m) =
        node_err(r#"{"name": "x", "op": "aten.clone.default", "args": {"self": {"tensor": "x"}}}"#);
    assert!(m.contains("already used"), "{m}");
    let (_, _, m) =
        node_err(r#"{"name": "y", "op": "aten.clone.default", "args": {}, "shape": ["u0", "q"]}"#);
    assert!(
        m.contains("shape[1]") && m.contains("unknown symbol 'q'"),
        "{m}"
    );
}

#[test]
fn a_backed_symbol_cannot_be_produced_by_item() {
    let text = graph(
        r#"{"name": "u0", "kind": "unbacked"}, {"name": "s0", "kind": "backed", "hint": 3}"#,
        r#"{"name": "x", "dtype": "i64", "shape": ["u0", "s0"]}"#,
        r#"{"name": "v", "op": "aten._local_scalar_dense.default", "args": {"self": {"tensor": "x"}}, "symbol": "s0"}"#,
        "",
        "",
    );
    assert!(
        matches!(err(&text), GraphError::Node { message, .. } if message.contains("must be declared unbacked"))
    );
}

#[test]
fn an_unbacked_symbol_nothing_binds_is_an_error() {
    let text = graph(
        r#"{"name": "u0", "kind": "unbacked"}, {"name": "u1", "kind": "unbacked"}"#,
        r#"{"name": "x", "dtype": "f32", "shape": ["u0", "2*u1"]}"#,
        "",
        "",
        "",
    );
    assert_eq!(err(&text), GraphError::Unbound { name: "u1".into() });
    // A stated shape of an ordinary op binds nothing: only data-dependent ops produce sizes.
    let text = graph(
        r#"{"name": "u0", "kind": "unbacked"}, {"name": "u1", "kind": "unbacked"}"#,
        r#"{"name": "x", "dtype": "f32", "shape": ["u0"]}"#,
        r#"{"name": "y", "op": "aten.clone.default", "args": {"self": {"tensor": "x"}}, "shape": ["u1"]}"#,
        "",
        "",
    );
    assert_eq!(err(&text), GraphError::Unbound { name: "u1".into() });
}

#[test]
fn output_and_assert_errors() {
    match err(&graph(U0, X, "", r#"{"tensor": "nope"}"#, "")) {
        GraphError::Output { index, message } => {
            assert!(index == 0 && message.contains("'nope'"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match err(&graph(U0, X, "", r#"{"tensor": "x", "mutates": "w"}"#, "")) {
        GraphError::Output { message, .. } => {
            assert!(message.contains("'w' is not an input"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match err(&graph(U0, X, "", "", r#""u0 < 0""#)) {
        GraphError::Assert { assert, message } => assert!(
            assert == "u0 < 0" && message.contains("always false"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    match err(&graph(U0, X, "", "", r#""u0 <""#)) {
        GraphError::Assert { message, .. } => assert!(message.contains("at byte"), "{message}"),
        other => panic!("{other:?}"),
    }
}

/// A control character anywhere (a name, an op, a reference, an argument key or value, a size,
/// an assert) is refused, the error naming where and showing the text escaped (no raw control
/// character in the message).
#[test]
fn control_characters_in_any_text_are_refused_where_they_are() {
    let relu = |name: &str, arg: &str| {
        format!(
            r#"{{"name": "{name}", "op": "aten.relu.default", "args": {{"self": {{"tensor": "{arg}"}}}}}}"#
        )
    };
    let out = r#"{"tensor": "a"}"#;
    let cases: Vec<(String, &str)> = vec![
        (
            graph(
                U0,
                X,
                &relu("a\\n#include \\\"/etc/hostname\\\"", "x"),
                out,
                "",
            ),
            "nodes[0].name",
        ),
        (
            graph(U0, X, &relu("a", "x\\u0000"), out, ""),
            "nodes[0].args.self.tensor",
        ),
        (
            graph(
                U0,
                r#"{"name": "x\r", "dtype": "f32", "shape": ["u0", 8]}"#,
                &relu("a", "x"),
                out,
                "",
            ),
            "inputs[0].name",
        ),
        (
            graph(
                r#"{"name": "u\t0", "kind": "unbacked"}"#,
                X,
                &relu("a", "x"),
                out,
                "",
            ),
            "symbols[0].name",
        ),
        (
            graph(U0, X, &relu("a", "x"), r#"{"tensor": "a\u001b[2J"}"#, ""),
            "outputs[0].tensor",
        ),
        (
            graph(U0, X, &relu("a", "x"), out, r#""u0 >= 0\n""#),
            "asserts[0]",
        ),
        (
            graph(
                U0,
                r#"{"name": "x", "dtype": "f32", "shape": ["u0\u0085", 8]}"#,
                &relu("a", "x"),
                out,
                "",
            ),
            "inputs[0].shape[0]",
        ),
        (
            graph(
                U0,
                X,
                r#"{"name": "a", "op": "aten.relu.default", "args": {"self": {"tensor": "x"}, "k\u0007": 1}}"#,
                out,
                "",
            ),
            "nodes[0].args (a key)",
        ),
        (
            graph(
                U0,
                X,
                r#"{"name": "a", "op": "aten.relu\n.default", "args": {"self": {"tensor": "x"}}}"#,
                out,
                "",
            ),
            "nodes[0].op",
        ),
    ];
    for (text, at) in cases {
        let e = err(&text);
        let message = e.to_string();
        assert!(
            matches!(&e, GraphError::ControlCharacter { at: a, .. } if a == at),
            "{at}: {message}"
        );
        assert!(
            !message.chars().any(|c| c.is_control()),
            "{at}: raw control character in {message:?}"
        );
    }
}

/// A key given twice in a node's arguments (or in an object inside them) is an error, as the
/// graph's own duplicate keys are: never silently the last one.
#[test]
fn duplicate_argument_keys_are_refused() {
    for args in [
        r#"{"self": {"tensor": "x"}, "self": {"tensor": "x"}}"#,
        r#"{"self": {"tensor": "x", "tensor": "y"}}"#,
    ] {
        let text = graph(
            U0,
            X,
            &format!(r#"{{"name": "a", "op": "aten.relu.default", "args": {args}}}"#),
            r#"{"tensor": "a"}"#,
            "",
        );
        let e = err(&text);
        assert!(
            matches!(&e, GraphError::Json { .. }) && e.to_string().contains("appears twice"),
            "{e}"
        );
    }
}
