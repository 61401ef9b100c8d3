//! Benchmark inputs: the tests' random inputs for a graph with its symbol `n` at a given
//! value, and the bindings their shapes give.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;

use guardless::ir::graph::Graph;
use guardless::ir::sym::Bindings;
use guardless::ir::tensor::HostTensor;

pub fn inputs_at(g: &Graph, n: i64) -> (Vec<HostTensor>, Bindings) {
    differential::inputs_at(g, n, 0)
}
