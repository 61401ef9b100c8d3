//! Binding symbols from the real shapes of input tensors.

use super::RefError;
use crate::graph::{DType, Graph};
use crate::sym::Bindings;
use crate::tensor::HostTensor;

/// Binds every symbol that stands alone as an input dimension to that dimension's real size, then
/// checks every input's shape and dtype against the graph, every symbol against its range and
/// every runtime assert. Errors name the input, the dimension, the symbol or the assert.
pub fn bind_inputs(
    graph: &Graph,
    inputs: &[HostTensor],
    extra: &Bindings,
) -> Result<Bindings, RefError> {
    let shapes: Vec<(DType, &[usize])> = inputs.iter().map(|t| (t.dtype, &t.shape[..])).collect();
    bind_shapes(graph, &shapes, extra)
}

/// [`bind_inputs`] from each input's dtype and shape alone.
pub fn bind_shapes(
    graph: &Graph,
    inputs: &[(DType, &[usize])],
    extra: &Bindings,
) -> Result<Bindings, RefError> {
    if inputs.len() != graph.inputs.len() {
        return Err(RefError::Symbols(format!(
            "{} inputs given, the graph takes {}",
            inputs.len(),
            graph.inputs.len()
        )));
    }
    let env = &graph.env;
    let mut b = extra.clone();
    for (decl, &(dtype, shape)) in graph.inputs.iter().zip(inputs) {
        let err = |message: String| RefError::Input {
            input: decl.name.clone(),
            message,
        };
        if decl.dtype != dtype {
            return Err(err(format!(
                "dtype {}, the graph says {}",
                dtype, decl.dtype
            )));
        }
        if decl.shape.len() != shape.len() {
            return Err(err(format!(
                "{} dimensions, the graph says {}",
                shape.len(),
                decl.shape.len()
            )));
        }
        for (&d, &n) in decl.shape.iter().zip(shape) {
            if let Some(id) = env.pool().as_symbol(d) {
                match b.get(id) {
                    Some(v) if v != n as i64 => {
                        return Err(err(format!(
                            "{} is {v} elsewhere but {n} here",
                            env.symbol_name(id)
                        )))
                    }
                    _ => {
                        b.set(id, n as i64);
                    }
                }
            }
        }
    }
    for (decl, &(_, shape)) in graph.inputs.iter().zip(inputs) {
        for (k, (&d, &n)) in decl.shape.iter().zip(shape).enumerate() {
            let want = env.evaluate(d, &b).map_err(|e| RefError::Input {
                input: decl.name.clone(),
                message: e.to_string(),
            })?;
            if want != n as i64 {
                return Err(RefError::Input {
                    input: decl.name.clone(),
                    message: format!("dimension {k} is {n}, but '{}' = {want}", env.text(d)),
                });
            }
        }
    }
    env.check_bindings(&b)
        .map_err(|e| RefError::Symbols(e.to_string()))?;
    Ok(b)
}
