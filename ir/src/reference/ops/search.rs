//! `searchsorted` and `bucketize` by ATen's binary search, value by value: the first position
//! whose element is not below the value (`>=`; `>` to the right), the predicate kept as ATen
//! writes it so that NaN lands where ATen puts it.

use super::{build, elem, fail, result_type, Node, Operand, E, R};
use crate::graph::DType;
use crate::tensor::HostTensor;

pub(super) fn search_sorted(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let (seq, values) = if name == "bucketize" {
        (n.tensor("boundaries")?, n.operand("self")?)
    } else {
        (n.tensor("sorted_sequence")?, n.operand("self")?)
    };
    if name == "bucketize" && seq.shape.len() != 1 {
        return fail(format!(
            "boundaries tensor must be 1 dimension, but got dim({})",
            seq.shape.len()
        ));
    }
    let right = match n.node.arg("side") {
        None | Some(crate::graph::Arg::None) => n.flag("right"),
        Some(crate::graph::Arg::Str(s)) if s == "right" => true,
        Some(crate::graph::Arg::Str(s)) if s == "left" && !n.flag("right") => false,
        Some(crate::graph::Arg::Str(s)) if s == "left" => {
            return fail("side 'left' contradicts right=True")
        }
        other => return fail(format!("side must be 'left' or 'right', found {other:?}")),
    };
    let out = if n.flag("out_int32") {
        DType::I32
    } else {
        DType::I64
    };
    let sorter = match n.node.arg("sorter") {
        Some(crate::graph::Arg::Tensor(_)) => {
            let s = n.tensor("sorter")?;
            if s.dtype != DType::I64 || s.shape != seq.shape {
                return fail("sorter must be an i64 tensor of the sequence's shape");
            }
            Some(s)
        }
        _ => None,
    };
    let float = result_type(&[&Operand::Tensor(seq.clone()), &values])?.is_float();
    let (vshape, vals): (Vec<usize>, Vec<E>) = match &values {
        Operand::Tensor(t) => (
            t.shape.clone(),
            (0..t.numel()).map(|i| elem(t, i)).collect(),
        ),
        Operand::Number(v, _) => (Vec::new(), vec![*v]),
    };
    let Some((&len, lead)) = seq.shape.split_last() else {
        return fail("the sorted sequence must have at least one dimension");
    };
    if !lead.is_empty() && (vshape.len() != seq.shape.len() || vshape[..lead.len()] != *lead) {
        return fail("the values must have the sequence's leading dimensions");
    }
    let row_len = vshape.last().copied().unwrap_or(1);
    let mut found = Vec::with_capacity(vals.len());
    for (i, &v) in vals.iter().enumerate() {
        let row = if lead.is_empty() {
            0
        } else {
            i / row_len.max(1)
        };
        let at = |j: usize| -> R<E> {
            let j = match &sorter {
                Some(s) => {
                    let k = elem(s, row * len + j).i();
                    if k < 0 || k as usize >= len {
                        return fail(format!("sorter index {k} is out of range for {len}"));
                    }
                    k as usize
                }
                None => j,
            };
            Ok(elem(&seq, row * len + j))
        };
        let (mut lo, mut hi) = (0usize, len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let s = at(mid)?;
            let stop = if float {
                let (s, v) = (s.f(), v.f());
                if right {
                    s > v
                } else {
                    s >= v
                }
            } else if right {
                s.i() > v.i()
            } else {
                s.i() >= v.i()
            };
            if stop {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        found.push(E::I(lo as i64));
    }
    Ok(vec![build(out, vshape, found)])
}
