//! Reductions over dimensions, `argmax`/`max.dim` and softmax, accumulated in f64 or i64.

use super::{
    build, elem, fail, nan_max, nan_min, out, reduce, reduced_shape, reduction_offsets, wrap, Node,
    E, R,
};
use crate::graph::{Arg, DType};
use crate::tensor::HostTensor;

/// `sum`, `prod`, `mean`, `amax`, `amin`, `any` over `dim` (all when absent).
pub(super) fn reduction(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let rank = x.shape.len();
    let dims = n.ints("dim")?;
    let mut dims: Vec<usize> = if dims.is_empty() {
        (0..rank).collect()
    } else {
        dims.iter().map(|&d| wrap(d, rank)).collect::<R<_>>()?
    };
    dims.sort_unstable();
    if let Some(w) = dims.windows(2).find(|w| w[0] == w[1]) {
        return fail(format!(
            "dim {} appears multiple times in the list of dims",
            w[0]
        ));
    }
    dims.retain(|&d| d < rank);
    let keep = n.flag("keepdim");
    match name {
        "sum" => {
            let d = n.dtype("dtype").unwrap_or(if x.dtype.is_float() {
                x.dtype
            } else {
                DType::I64
            });
            let init = if d.is_float() { E::F(0.0) } else { E::I(0) };
            out(reduce(&x, &dims, keep, d, Some(init), |a, v| {
                match (a, v) {
                    (E::F(a), v) => E::F(a + v.f()),
                    (E::I(a), v) => E::I(a.wrapping_add(v.i())),
                }
            })?)
        }
        "prod" => {
            let d = n.dtype("dtype").unwrap_or(if x.dtype.is_float() {
                x.dtype
            } else {
                DType::I64
            });
            let init = if d.is_float() { E::F(1.0) } else { E::I(1) };
            out(reduce(&x, &dims, keep, d, Some(init), |a, v| {
                match (a, v) {
                    (E::F(a), v) => E::F(a * v.f()),
                    (E::I(a), v) => E::I(a.wrapping_mul(v.i())),
                }
            })?)
        }
        "mean" => {
            let d = n.dtype("dtype").unwrap_or(x.dtype);
            if !d.is_float() {
                return fail(format!("mean needs a floating dtype, found {d}"));
            }
            let count: usize = dims.iter().map(|&k| x.shape[k]).product();
            let s = reduce(&x, &dims, keep, DType::F64, Some(E::F(0.0)), |a, v| {
                E::F(a.f() + v.f())
            })?;
            let vals = (0..s.numel())
                .map(|i| E::F(elem(&s, i).f() / count as f64))
                .collect();
            out(build(d, s.shape.clone(), vals))
        }
        "amax" => out(reduce(&x, &dims, keep, x.dtype, None, nan_max)?),
        "amin" => out(reduce(&x, &dims, keep, x.dtype, None, nan_min)?),
        _ => out(reduce(
            &x,
            &dims,
            keep,
            DType::Bool,
            Some(E::I(0)),
            |a, v| E::I(i64::from(a.i() != 0 || v.f() != 0.0)),
        )?),
    }
}

/// `argmax`/`argmin`, and `max.dim`/`min.dim` (values and indices).
pub(super) fn arg_reduce(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let is_max = name.ends_with("max");
    let rank = x.shape.len();
    let all = matches!(n.node.arg("dim"), None | Some(Arg::None));
    let dims: Vec<usize> = if all {
        (0..rank).collect()
    } else {
        vec![wrap(n.int("dim")?, rank)?]
    };
    let dims: Vec<usize> = dims.into_iter().filter(|&d| d < rank).collect();
    let keep = n.flag("keepdim");
    let red: Vec<usize> = dims.iter().map(|&d| x.shape[d]).collect();
    let count: usize = red.iter().product();
    if count == 0 {
        return fail(format!("{name} over an empty dimension"));
    }
    let (kept_at, red_at) = reduction_offsets(&x.shape, &dims);
    let (mut idxs, mut vals) = (Vec::new(), Vec::new());
    for &base in &kept_at {
        let mut best: Option<(f64, usize)> = None;
        for (j, &at) in red_at.iter().enumerate() {
            let v = elem(&x, base + at).f();
            best = match best {
                None => Some((v, j)),
                Some((b, _))
                    if !b.is_nan() && (v.is_nan() || if is_max { v > b } else { v < b }) =>
                {
                    Some((v, j))
                }
                keep_best => keep_best,
            };
        }
        let (v, j) = best.expect("non-empty");
        idxs.push(E::I(j as i64));
        vals.push(if x.dtype.is_float() {
            E::F(v)
        } else {
            E::I(v as i64)
        });
    }
    let shape = reduced_shape(&x.shape, &dims, keep);
    let indices = build(DType::I64, shape.clone(), idxs);
    if name.starts_with("arg") {
        return out(indices);
    }
    Ok(vec![build(x.dtype, shape, vals), indices])
}

pub(super) fn softmax(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    if !x.dtype.is_float() {
        return fail("softmax needs a floating dtype");
    }
    let rank = x.shape.len();
    let dim = wrap(n.int("dim")?, rank)?;
    // Empty along `dim` means empty: no row to normalize, nothing to fail on.
    if x.numel() == 0 {
        return out(build(x.dtype, x.shape.clone(), Vec::new()));
    }
    let dims = if rank == 0 { vec![] } else { vec![dim] };
    let m = reduce(&x, &dims, true, DType::F64, None, nan_max)?;
    // Element i's position in the reduced tensors (`dim` kept as 1): x is row-major, so the
    // elements after `dim` (inner) repeat for each of its `len` positions.
    let (len, inner) = if rank == 0 {
        (1, 1)
    } else {
        (x.shape[dim], x.shape[dim + 1..].iter().product::<usize>())
    };
    let reduced_at = |i: usize| (i / (len * inner)) * inner + i % inner;
    let shifted: Vec<f64> = (0..x.numel())
        .map(|i| elem(&x, i).f() - elem(&m, reduced_at(i)).f())
        .collect();
    let e = build(
        DType::F64,
        x.shape.clone(),
        shifted.iter().map(|&v| E::F(v.exp())).collect(),
    );
    let s = reduce(&e, &dims, true, DType::F64, Some(E::F(0.0)), |a, v| {
        E::F(a.f() + v.f())
    })?;
    let vals = (0..x.numel())
        .map(|i| {
            let total = elem(&s, reduced_at(i)).f();
            E::F(if name == "_log_softmax" {
                shifted[i] - total.ln()
            } else {
                shifted[i].exp() / total
            })
        })
        .collect();
    out(build(x.dtype, x.shape.clone(), vals))
}
