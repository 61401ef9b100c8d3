//! Data-dependent selections (`nonzero`, `masked_select`) and sorting (`sort`, `topk`).

use super::{
    at, broadcast_shape, build, elem, fail, out, result_type, unflatten, wrap, Node, Operand, E, R,
};
use crate::graph::DType;
use crate::tensor::HostTensor;

pub(super) fn nonzero_or_masked_select(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.operand("self")?;
    if name == "nonzero" {
        let Operand::Tensor(x) = x else {
            return fail("nonzero of a number");
        };
        let rank = x.shape.len();
        let picked: Vec<usize> = (0..x.numel()).filter(|&k| elem(&x, k).f() != 0.0).collect();
        let vals = picked
            .iter()
            .flat_map(|&k| unflatten(k, &x.shape))
            .map(|i| E::I(i as i64))
            .collect();
        return out(build(DType::I64, vec![picked.len(), rank], vals));
    }
    let mask = n.operand("mask")?;
    let d = result_type(&[&x])?;
    let shape = broadcast_shape(&[&x, &mask])?;
    let mut vals = Vec::new();
    for i in 0..shape.iter().product::<usize>() {
        let idx = unflatten(i, &shape);
        if at(&mask, &idx).i() != 0 {
            vals.push(at(&x, &idx));
        }
    }
    let count = vals.len();
    out(build(d, vec![count], vals))
}

/// `sort` and `topk`: stable, NaN largest, as ATen.
pub(super) fn sort(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let rank = x.shape.len();
    if rank == 0 {
        return Ok(vec![x, build(DType::I64, vec![], vec![E::I(0)])]);
    }
    let dim = wrap(n.int("dim")?, rank)?;
    let descending = n.flag(if name == "topk" {
        "largest"
    } else {
        "descending"
    });
    let len = x.shape[dim];
    let keep = if name == "topk" {
        n.int("k")?
    } else {
        len as i64
    };
    if keep < 0 || keep as usize > len {
        return fail(format!("k = {keep} is out of range for size {len}"));
    }
    let keep = keep as usize;
    let inner: usize = x.shape[dim + 1..].iter().product();
    let outer: usize = x.shape[..dim].iter().product();
    let mut shape = x.shape.clone();
    shape[dim] = keep;
    let total = outer * keep * inner;
    let (mut vals, mut idxs) = (vec![E::I(0); total], vec![E::I(0); total]);
    for o in 0..outer {
        for i in 0..inner {
            let mut line: Vec<(f64, usize)> = (0..len)
                .map(|j| (elem(&x, (o * len + j) * inner + i).f(), j))
                .collect();
            // Stable; NaN above every number.
            line.sort_by(|a, b| {
                let ord = match (a.0.is_nan(), b.0.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ => a.0.partial_cmp(&b.0).unwrap(),
                };
                if descending {
                    ord.reverse()
                } else {
                    ord
                }
            });
            for (j, &(v, at)) in line.iter().take(keep).enumerate() {
                let slot = (o * keep + j) * inner + i;
                vals[slot] = if x.dtype.is_float() {
                    E::F(v)
                } else {
                    E::I(v as i64)
                };
                idxs[slot] = E::I(at as i64);
            }
        }
    }
    Ok(vec![
        build(x.dtype, shape.clone(), vals),
        build(DType::I64, shape, idxs),
    ])
}
