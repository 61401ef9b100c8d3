//! Benchmark inputs: random tensors for a graph with its symbol `n` at a given value (the tests'
//! `random_inputs`), and the bindings their shapes give.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;

use guardless::ir::graph::Graph;
use guardless::ir::reference;
use guardless::ir::sym::Bindings;
use guardless::ir::tensor::HostTensor;

pub fn inputs_at(g: &Graph, n: i64) -> (Vec<HostTensor>, Bindings) {
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("n").unwrap(), n);
    let inputs = differential::random_inputs(g, &b, 0, (0, 4));
    let b = reference::bind_inputs(g, &inputs, &b).unwrap();
    (inputs, b)
}
