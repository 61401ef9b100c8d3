//! Ops that take a dimension, on 0-d tensors, as ATen treats them: some refuse a 0-d tensor
//! (`slice`, `select`, their scatters, `cat`), the others take dimension 0 or -1 of it as a
//! dimension of size 1 — the op runs on the tensor viewed as `[1]`, and its result is viewed back
//! (`softmax`, `transpose`, `gather`, `index_select`, `scatter`, `flip`, …).

use super::args::msg;
use super::{views, LTensor, Lowerer, NodeError};
use crate::graph::{Arg, GraphNode, TensorRef};

type R<T> = Result<T, NodeError>;

/// How an op treats a 0-d `self`: refused with ATen's message, or as a vector of one element
/// (the tensor arguments named promoted when 0-d; the result's shape that of `result_like`'s
/// original argument).
pub(crate) enum ZeroDim {
    Refused(&'static str),
    AsVector {
        promote: &'static [&'static str],
        result_like: &'static str,
    },
}

/// The rule of an op (by its name, without `aten.` and the overload) for a 0-d `self`.
pub(crate) fn rule(name: &str) -> Option<ZeroDim> {
    use ZeroDim::*;
    Some(match name {
        "slice" | "slice_scatter" => Refused("slice() cannot be applied to a 0-dim tensor."),
        "select" | "select_scatter" => Refused("select() cannot be applied to a 0-dim tensor."),
        "_softmax" | "_log_softmax" | "transpose" | "t" | "flip" | "cumsum" | "cumprod"
        | "logcumsumexp" | "cummax" | "cummin" => AsVector {
            promote: &["self"],
            result_like: "self",
        },
        "index_select" => AsVector {
            promote: &["self", "index"],
            result_like: "self",
        },
        "gather" => AsVector {
            promote: &["self", "index"],
            result_like: "index",
        },
        "scatter" | "scatter_add" | "scatter_reduce" => AsVector {
            promote: &["self", "index", "src"],
            result_like: "self",
        },
        _ => return None,
    })
}

/// Lowers `n` by its 0-d rule when its `self` is 0-d (`None`: it is not, or the op has none).
/// `lower` lowers the node with the promoted tensors in place of the originals.
pub(crate) fn lower(
    l: &mut Lowerer,
    n: &GraphNode,
    name: &str,
    lower: &dyn Fn(&mut Lowerer, &GraphNode) -> R<Vec<LTensor>>,
) -> Option<R<Vec<LTensor>>> {
    if name == "cat" {
        return cat(l, n).err().map(Err);
    }
    let rule = rule(name)?;
    let self_ref = match n.arg("self") {
        Some(Arg::Tensor(r)) => r,
        // A number where the op takes a dimension of a tensor.
        Some(Arg::Number(_)) => {
            return Some(msg("argument 'self': expected a tensor, found a number"));
        }
        _ => return None,
    };
    let x = l.tensor(self_ref).ok()?;
    if !x.sizes.is_empty() {
        return None;
    }
    if name == "index_select" {
        if let Some(Err(e)) = one_index(l, n) {
            return Some(Err(e));
        }
    }
    Some(match rule {
        ZeroDim::Refused(m) => msg(m.to_string()),
        ZeroDim::AsVector {
            promote,
            result_like,
        } => as_vector(l, n, promote, result_like, lower),
    })
}

fn as_vector(
    l: &mut Lowerer,
    n: &GraphNode,
    promote: &[&str],
    result_like: &str,
    lower: &dyn Fn(&mut Lowerer, &GraphNode) -> R<Vec<LTensor>>,
) -> R<Vec<LTensor>> {
    let mut overrides: Vec<(TensorRef, LTensor)> = Vec::new();
    let mut result_sizes = Vec::new();
    for &arg in promote {
        let Some(Arg::Tensor(r)) = n.arg(arg) else {
            continue;
        };
        let t = l.tensor(r).map_err(NodeError::Message)?;
        if arg == result_like {
            result_sizes = t.sizes.clone();
        }
        if t.sizes.is_empty() {
            let v = views::unsqueeze(l, t, 0);
            overrides.push((*r, v));
        }
    }
    l.substitutes = overrides;
    let outs = lower(l, n);
    l.substitutes.clear();
    outs?
        .into_iter()
        .map(|t| {
            if t.sizes == result_sizes {
                Ok(t)
            } else {
                views::view(l, t, &result_sizes)
            }
        })
        .collect()
}

/// `index_select` of a 0-d tensor takes one index: proved, or asserted at run time.
fn one_index(l: &mut Lowerer, n: &GraphNode) -> Option<R<()>> {
    let Some(Arg::Tensor(r)) = n.arg("index") else {
        return None;
    };
    let index = l.tensor(r).ok()?;
    let k = views::numel(l, &index.sizes);
    let one = l.env.pool_mut().one();
    let c = l.env.pool_mut().eq(k, one);
    Some(l.require(c, |env| {
        format!(
            "index_select(): Index to scalar can have only 1 value, got {} value(s)",
            env.text(k)
        )
    }))
}

/// `cat` refuses 0-d tensors.
fn cat(l: &Lowerer, n: &GraphNode) -> R<()> {
    if let Some(Arg::Tensors(v)) = n.arg("tensors") {
        for (i, r) in v.iter().enumerate() {
            if let Some(t) = r.as_ref().and_then(|r| l.tensor(r).ok()) {
                if t.sizes.is_empty() {
                    return msg(format!(
                        "zero-dimensional tensor (at position {i}) cannot be concatenated"
                    ));
                }
            }
        }
    }
    Ok(())
}
