//! Benchmark inputs: random tensors for a graph with its symbol `n` at a given value, and the
//! bindings their shapes give.

use guardless::ir::graph::Graph;
use guardless::ir::reference;
use guardless::ir::sym::Bindings;
use guardless::ir::tensor::HostTensor;

pub fn inputs_at(g: &Graph, n: i64) -> (Vec<HostTensor>, Bindings) {
    let mut b = Bindings::new();
    b.set(g.env.symbol_id("n").unwrap(), n);
    let inputs: Vec<HostTensor> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(k, i)| {
            let shape: Vec<usize> = i
                .shape
                .iter()
                .map(|&d| g.env.evaluate(d, &b).unwrap() as usize)
                .collect();
            HostTensor::random(i.dtype, &shape, k as u64, (0, 4))
        })
        .collect();
    let b = reference::bind_inputs(g, &inputs, &b).unwrap();
    (inputs, b)
}
