//! Builds PyTorch's compile-time benchmark for unbacked-heavy traces in the graph format:
//! `iterations` times, a 128-element size tensor is converted to int64, unbound, each element read
//! with `.item()` (an unbacked symbol, asserted `>= 0`), then a data tensor is split by those sizes
//! (`split_with_sizes` asserts they add up to its length), every piece flipped, and the pieces
//! concatenated. 40 iterations: 5 120 unbacked symbols.

use serde_json::{json, Value};

pub const PIECES: usize = 128;

/// The graph's JSON text.
pub fn split_flip_cat(iterations: usize) -> String {
    let mut symbols = vec![json!({"name": "s0", "kind": "backed", "hint": 4096, "min": 0})];
    let mut inputs = vec![json!({"name": "x", "dtype": "f32", "shape": ["s0"]})];
    let mut nodes: Vec<Value> = Vec::new();
    let mut outputs = Vec::new();
    for i in 0..iterations {
        inputs.push(json!({"name": format!("sizes{i}"), "dtype": "i32", "shape": [PIECES]}));
        nodes.push(json!({"name": format!("sz{i}"), "op": "aten._to_copy.default",
                          "args": {"self": {"tensor": format!("sizes{i}")}, "dtype": {"dtype": "i64"}}}));
        nodes.push(json!({"name": format!("ub{i}"), "op": "aten.unbind.int", "args": {"self": {"tensor": format!("sz{i}")}}}));
        let mut names = Vec::with_capacity(PIECES);
        for j in 0..PIECES {
            let u = format!("u{}", i * PIECES + j);
            symbols.push(json!({"name": u, "kind": "unbacked"}));
            nodes.push(json!({"name": format!("item{i}_{j}"), "op": "aten._local_scalar_dense.default",
                              "args": {"self": {"tensor": format!("ub{i}"), "index": j}}, "symbol": u}));
            nodes.push(json!({"name": format!("ge{i}_{j}"), "op": "aten._assert_scalar.default",
                              "args": {"self": {"symbool": format!("{u} >= 0")}, "assert_msg": format!("{u} >= 0")}}));
            names.push(u);
        }
        nodes.push(
            json!({"name": format!("sp{i}"), "op": "aten.split_with_sizes.default",
                          "args": {"self": {"tensor": "x"}, "split_sizes": names}}),
        );
        let mut pieces = Vec::with_capacity(PIECES);
        for j in 0..PIECES {
            nodes.push(json!({"name": format!("fl{i}_{j}"), "op": "aten.flip.default",
                              "args": {"self": {"tensor": format!("sp{i}"), "index": j}, "dims": [0]}}));
            pieces.push(json!({"tensor": format!("fl{i}_{j}")}));
        }
        nodes.push(json!({"name": format!("cat{i}"), "op": "aten.cat.default", "args": {"tensors": pieces}}));
        outputs.push(json!({"tensor": format!("cat{i}")}));
    }
    json!({"format": "guardless-graph", "version": 1, "name": "split_flip_cat",
           "symbols": symbols, "inputs": inputs, "nodes": nodes, "outputs": outputs})
    .to_string()
}
