//! Reads at positions held in integer tensors.

use super::{build, elem, fail, flat, out, strides, unflatten, wrap, Node, R};
use crate::graph::DType;
use crate::tensor::HostTensor;

/// `embedding`, `index_select`, `gather`: an index out of range is an error.
pub(super) fn indexed(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let (src, index) = if name == "embedding" {
        (n.tensor("weight")?, n.tensor("indices")?)
    } else {
        (n.tensor("self")?, n.tensor("index")?)
    };
    if index.dtype.is_float() || index.dtype == DType::Bool {
        return fail("indices must be integers");
    }
    let rank = src.shape.len();
    if name == "embedding" && rank != 2 {
        return fail(format!("'weight' must be 2-D, found {rank} dimensions"));
    }
    let dim = if name == "embedding" {
        0
    } else {
        wrap(n.int("dim")?, rank)?
    };
    let size = src.shape[dim];
    let shape: Vec<usize> = match name {
        "embedding" => index.shape.iter().chain(&src.shape[1..]).copied().collect(),
        "index_select" => {
            let mut s = src.shape.clone();
            s[dim] = index.numel();
            s
        }
        _ => {
            if index.shape.len() != rank
                || (0..rank).any(|k| k != dim && index.shape[k] > src.shape[k])
            {
                return fail("gather: index shape does not fit the input");
            }
            index.shape.clone()
        }
    };
    let sst = strides(&src.shape);
    let ist = strides(&index.shape);
    let total: usize = shape.iter().product();
    let mut vals = Vec::with_capacity(total);
    for i in 0..total {
        let idx = unflatten(i, &shape);
        let (at_index, mut at_src): (Vec<usize>, Vec<usize>) = match name {
            "embedding" => (
                idx[..index.shape.len()].to_vec(),
                std::iter::once(0)
                    .chain(idx[index.shape.len()..].iter().copied())
                    .collect(),
            ),
            "index_select" => (
                if index.shape.is_empty() {
                    vec![]
                } else {
                    vec![idx[dim]]
                },
                idx.clone(),
            ),
            _ => (idx.clone(), idx.clone()),
        };
        let v = elem(&index, flat(&at_index, &ist)).i();
        if v < 0 || v as usize >= size {
            return fail(format!("index {v} is out of range for size {size}"));
        }
        at_src[dim] = v as usize;
        vals.push(elem(&src, flat(&at_src, &sst)));
    }
    out(build(src.dtype, shape, vals))
}
