//! The reference executor: each ATen op implemented directly and plainly on host tensors, the
//! oracle the lowering is checked against. It shares no indexing or lowering code with `lower` (not
//! even type promotion), so a differential test does not check code against itself. f16/bf16 are
//! computed in f32 and rounded at every op's output, as ATen does.

mod bind;
pub mod compare;
mod ops;
mod sequences;

use thiserror::Error;

use crate::graph::{Arg, Graph, Producer, TensorRef};
use crate::sym::Bindings;
use crate::tensor::HostTensor;

pub use bind::{bind_inputs, bind_shapes};
pub use sequences::valid_sequences;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum RefError {
    #[error("node '{node}' ({op}): {message}")]
    Node {
        node: String,
        op: String,
        message: String,
    },
    #[error("node '{node}' ({op}) has no reference implementation yet")]
    Unsupported { node: String, op: String },
    #[error("input '{input}': {message}")]
    Input { input: String, message: String },
    #[error("output {index}: {message}")]
    Output { index: usize, message: String },
    #[error("{0}")]
    Symbols(String),
}

/// Runs `graph` on `inputs` with no rounding: every float kept as an f64 whatever its dtype (see
/// [`crate::tensor::unrounded`]). How close the rounded run comes to it is the error rounding
/// alone makes, which a backend's error is measured against.
pub fn run_unrounded(
    graph: &Graph,
    inputs: &[HostTensor],
    bindings: &Bindings,
) -> Result<Vec<HostTensor>, RefError> {
    crate::tensor::unrounded(|| run(graph, inputs, bindings))
}

/// Runs `graph` on `inputs`; `bindings` holds every symbol's value (see [`bind_inputs`]).
pub fn run(
    graph: &Graph,
    inputs: &[HostTensor],
    bindings: &Bindings,
) -> Result<Vec<HostTensor>, RefError> {
    let mut values: Vec<Vec<HostTensor>> = Vec::with_capacity(graph.nodes.len());
    let mut bindings = bindings.clone();
    for node in &graph.nodes {
        let get = |r: &TensorRef| -> HostTensor {
            match r.producer {
                Producer::Input(i) => inputs[i].clone(),
                Producer::Node(n) => values[n][r.index.unwrap_or(0)].clone(),
            }
        };
        let err = |message: String| RefError::Node {
            node: node.name.clone(),
            op: node.op.clone(),
            message,
        };
        for r in node.args.iter().flat_map(Arg::tensor_refs) {
            check_exists(graph, &values, r).map_err(err)?;
        }
        let outs = ops::run_node(graph, node, &get, &bindings).map_err(|e| match e {
            None => RefError::Unsupported {
                node: node.name.clone(),
                op: node.op.clone(),
            },
            Some(message) => err(message),
        })?;
        // Within the memory limit (ops that make tensors larger than their inputs check before
        // allocating; this bounds the rest by the same limit).
        for t in &outs {
            crate::memory::checked_numel(&t.shape, 8, &|| {
                format!("a result of shape {:?}", t.shape)
            })
            .map_err(err)?;
        }
        // `.item()`: the value becomes its symbol's, checked against its range and the asserts.
        if let (Some(sym), Some(t)) = (node.symbol, outs.first()) {
            if t.numel() != 1 {
                return Err(err(format!("item() of a tensor of {} elements", t.numel())));
            }
            bindings.set(sym, t.get_f64(0) as i64);
            graph
                .env
                .check_bindings(&bindings)
                .map_err(|e| err(e.to_string()))?;
        }
        // A data-dependent size (nonzero, masked_select, a boolean index, repeat_interleave) is
        // the unbacked symbol the node states at that dimension.
        if let (Some(stated), Some(t)) = (node.shape.as_ref(), outs.first()) {
            let data_dependent = matches!(
                node.op.as_str(),
                "aten.nonzero.default"
                    | "aten.masked_select.default"
                    | "aten.index.Tensor"
                    | "aten.repeat_interleave.Tensor"
            );
            for (&e, &have) in stated.iter().zip(&t.shape).filter(|_| data_dependent) {
                match graph.env.pool().as_symbol(e) {
                    Some(sym) if bindings.get(sym).is_none() => {
                        bindings.set(sym, have as i64);
                        graph
                            .env
                            .check_bindings(&bindings)
                            .map_err(|e| err(e.to_string()))?;
                    }
                    Some(sym) if bindings.get(sym) != Some(have as i64) => {
                        return Err(err(format!(
                            "produced {have} elements where '{}' is {}",
                            graph.env.symbol_name(sym),
                            bindings.get(sym).unwrap_or_default()
                        )));
                    }
                    _ => {}
                }
            }
        }
        // A stated shape and dtype are what the node computes (as lowering checks them).
        if let Some(t) = outs.first() {
            if let Some(stated) = &node.shape {
                let dims: Option<Vec<i64>> = stated
                    .iter()
                    .map(|&e| graph.env.evaluate(e, &bindings).ok())
                    .collect();
                let have: Vec<i64> = t.shape.iter().map(|&s| s as i64).collect();
                if dims.as_ref().is_some_and(|d| *d != have) {
                    return Err(err(format!(
                        "states shape {:?}, computes {have:?}",
                        dims.unwrap_or_default()
                    )));
                }
            }
            if node.dtype.is_some_and(|d| d != t.dtype) {
                return Err(err(format!(
                    "states dtype {}, computes {}",
                    node.dtype.expect("some"),
                    t.dtype
                )));
            }
        }
        values.push(if node.symbol.is_some() {
            Vec::new()
        } else {
            outs
        });
    }
    for (i, o) in graph.outputs.iter().enumerate() {
        check_exists(graph, &values, &o.tensor)
            .map_err(|message| RefError::Output { index: i, message })?;
    }
    let outs: Vec<HostTensor> = graph
        .outputs
        .iter()
        .map(|o| match o.tensor.producer {
            Producer::Input(i) => inputs[i].clone(),
            Producer::Node(n) => values[n][o.tensor.index.unwrap_or(0)].clone(),
        })
        .collect();
    // An output written back into an input (a cache update) has the input's dtype and shape.
    for (i, (o, t)) in graph.outputs.iter().zip(&outs).enumerate() {
        if let Some(k) = o.mutates {
            let inp = &inputs[k];
            if t.dtype != inp.dtype || t.shape != inp.shape {
                return Err(RefError::Output {
                    index: i,
                    message: format!(
                        "written back into input '{}': {}{:?}, the input is {}{:?}",
                        graph.inputs[k].name, t.dtype, t.shape, inp.dtype, inp.shape
                    ),
                });
            }
        }
    }
    Ok(outs)
}

/// How many outputs a node of a list (`split`, `unbind`) gives depends on sizes: one it did not
/// give at these sizes is an error, as indexing the list is in torch.
fn check_exists(graph: &Graph, values: &[Vec<HostTensor>], r: &TensorRef) -> Result<(), String> {
    match r.producer {
        Producer::Node(n) if r.index.unwrap_or(0) >= values[n].len() => Err(format!(
            "'{}' gave {} outputs at these sizes; output {} does not exist",
            graph.nodes[n].name,
            values[n].len(),
            r.index.unwrap_or(0)
        )),
        _ => Ok(()),
    }
}
