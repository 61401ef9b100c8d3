//! Views: the same elements read in another order or shape, materialized.

use super::{build, elem, fail, gather_view, out, unflatten, wrap, Node, R};
use crate::tensor::HostTensor;

pub(super) fn view(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let mut sizes = n.ints(if name == "reshape" { "shape" } else { "size" })?;
    let total = x.numel() as i64;
    let invalid = |sizes: &[i64]| format!("shape {sizes:?} is invalid for input of size {total}");
    if sizes.iter().filter(|&&s| s == -1).count() > 1 || sizes.iter().any(|&s| s < -1) {
        return fail(invalid(&sizes));
    }
    // Products in i128: sizes near 2^63 multiply past i64.
    let known: i128 = sizes
        .iter()
        .filter(|&&s| s != -1)
        .map(|&s| s as i128)
        .try_fold(1i128, |a, s| a.checked_mul(s))
        .unwrap_or(i128::MAX);
    if let Some(k) = sizes.iter().position(|&s| s == -1) {
        if known == 0 {
            return fail("cannot infer -1 with other sizes 0");
        }
        sizes[k] = (total as i128 / known) as i64;
    }
    let product = sizes
        .iter()
        .try_fold(1i128, |a, &s| a.checked_mul(s as i128))
        .unwrap_or(i128::MAX);
    if sizes.iter().any(|&s| s < 0) || product != total as i128 {
        return fail(format!(
            "shape {sizes:?} is invalid for input of size {total}"
        ));
    }
    let shape: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
    out(HostTensor {
        dtype: x.dtype,
        shape,
        data: x.data,
    })
}

/// `permute`, `transpose`, `t`.
pub(super) fn permute(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let rank = x.shape.len();
    let perm: Vec<usize> = match name {
        "permute" => {
            let p: Vec<usize> = n
                .ints("dims")?
                .iter()
                .map(|&d| wrap(d, rank))
                .collect::<R<_>>()?;
            let mut sorted = p.clone();
            sorted.sort_unstable();
            if sorted != (0..rank).collect::<Vec<_>>() {
                return fail(format!(
                    "permute: dims {p:?} are not a permutation of the {rank} dimensions"
                ));
            }
            p
        }
        _ => {
            if name == "t" && rank > 2 {
                return fail(format!(
                    "t() expects a tensor with <= 2 dimensions, but self is {rank}D"
                ));
            }
            let (a, c) = if name == "t" {
                (0, rank.saturating_sub(1))
            } else {
                (wrap(n.int("dim0")?, rank)?, wrap(n.int("dim1")?, rank)?)
            };
            let mut p: Vec<usize> = (0..rank).collect();
            p.swap(a, c);
            p
        }
    };
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    out(gather_view(&x, shape, |idx| {
        let mut src = vec![0; rank];
        for (k, &p) in perm.iter().enumerate() {
            src[p] = idx[k];
        }
        src
    })?)
}

pub(super) fn unsqueeze(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let dim = wrap(n.int("dim")?, x.shape.len() + 1)?;
    let mut shape = x.shape.clone();
    shape.insert(dim, 1);
    out(HostTensor {
        dtype: x.dtype,
        shape,
        data: x.data,
    })
}

pub(super) fn squeeze(n: &Node, overload: &str) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let rank = x.shape.len();
    let dims: Vec<usize> = match overload {
        "dim" => vec![wrap(n.int("dim")?, rank)?],
        "dims" => n
            .ints("dim")?
            .iter()
            .map(|&d| wrap(d, rank))
            .collect::<R<_>>()?,
        _ => (0..rank).collect(),
    };
    let shape: Vec<usize> = x
        .shape
        .iter()
        .enumerate()
        .filter(|(k, &s)| !(dims.contains(k) && s == 1))
        .map(|(_, &s)| s)
        .collect();
    out(HostTensor {
        dtype: x.dtype,
        shape,
        data: x.data,
    })
}

pub(super) fn expand(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let sizes = n.ints("size")?;
    let off = sizes
        .len()
        .checked_sub(x.shape.len())
        .ok_or_else(|| Some("expand to fewer dimensions".to_string()))?;
    let mut shape = Vec::with_capacity(sizes.len());
    for (k, &s) in sizes.iter().enumerate() {
        if s < -1 || (s == -1 && k < off) {
            return fail(format!(
                "expand: the expanded size {s} must be non-negative (or -1 for a dimension kept)"
            ));
        }
        if k < off {
            shape.push(s as usize);
            continue;
        }
        let own = x.shape[k - off];
        shape.push(if s == -1 || s as usize == own {
            own
        } else if own == 1 {
            s as usize
        } else {
            return fail(format!("expand: size {own} cannot become {s}"));
        });
    }
    let xs = x.shape.clone();
    out(gather_view(&x, shape, |idx| {
        xs.iter()
            .enumerate()
            .map(|(k, &s)| if s == 1 { 0 } else { idx[off + k] })
            .collect()
    })?)
}

pub(super) fn unfold(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let d = wrap(n.int("dimension")?, x.shape.len())?;
    let (size, step) = (n.int("size")?, n.int("step")?);
    if x.shape.is_empty() || size < 0 || step < 1 || size as usize > x.shape[d] {
        return fail(format!(
            "unfold of size {size}, step {step} over {:?}",
            x.shape
        ));
    }
    let mut shape = x.shape.clone();
    shape[d] = (x.shape[d] - size as usize) / step as usize + 1;
    shape.push(size as usize);
    out(gather_view(&x, shape, |idx| {
        let mut src = idx[..idx.len() - 1].to_vec();
        src[d] = src[d] * step as usize + idx[idx.len() - 1];
        src
    })?)
}

pub(super) fn as_strided(n: &Node) -> R<Vec<HostTensor>> {
    // `self` read as its own row-major storage.
    let x = n.tensor("self")?;
    let (shape, positions) = strided_positions(n, &x)?;
    let vals = positions.into_iter().map(|at| elem(&x, at)).collect();
    out(build(x.dtype, shape, vals))
}

/// `as_strided_scatter`: `self` (as its own row-major storage) with the positions of that view
/// holding `src`, in the view's row-major order.
pub(super) fn as_strided_scatter(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let src = n.tensor("src")?;
    if src.dtype != x.dtype {
        return fail(format!(
            "as_strided_scatter: a {} source for a {} tensor",
            src.dtype, x.dtype
        ));
    }
    let (shape, positions) = strided_positions(n, &x)?;
    if src.shape != shape {
        return fail(format!(
            "as_strided_scatter: a source of shape {:?} for a view of {shape:?}",
            src.shape
        ));
    }
    let mut vals: Vec<_> = (0..x.numel()).map(|i| elem(&x, i)).collect();
    for (k, at) in positions.into_iter().enumerate() {
        vals[at] = elem(&src, k);
    }
    out(build(x.dtype, x.shape.clone(), vals))
}

/// The view's shape and, in its row-major order, the storage position of each element.
fn strided_positions(n: &Node, x: &HostTensor) -> R<(Vec<usize>, Vec<usize>)> {
    let (sizes, strides) = (n.ints("size")?, n.ints("stride")?);
    let offset = n.opt_int("storage_offset")?.unwrap_or(0);
    if sizes.len() != strides.len() || strides.iter().chain([&offset]).any(|&s| s < 0) {
        return fail("as_strided: mismatched or negative sizes and strides");
    }
    if sizes.iter().any(|&s| s < 0) {
        return fail("as_strided: a negative size");
    }
    let shape: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
    let numel = super::checked_numel(&shape)?;
    // In i128: sizes and strides near 2^63 multiply past i64.
    let last = offset as i128
        + sizes
            .iter()
            .zip(&strides)
            .map(|(&s, &st)| (s as i128 - 1) * st as i128)
            .sum::<i128>();
    if numel > 0 && last >= x.numel() as i128 {
        return fail(format!(
            "as_strided reaches element {last} of {}",
            x.numel()
        ));
    }
    let positions = (0..numel)
        .map(|i| {
            let idx = unflatten(i, &shape);
            offset as usize
                + idx
                    .iter()
                    .zip(&strides)
                    .map(|(&k, &st)| k * st as usize)
                    .sum::<usize>()
        })
        .collect();
    Ok((shape, positions))
}

pub(super) fn diagonal(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let rank = x.shape.len();
    let (d1, d2) = (wrap(n.int("dim1")?, rank)?, wrap(n.int("dim2")?, rank)?);
    let offset = n.int("offset")?;
    if d1 == d2 {
        return fail("diagonal of one dimension twice");
    }
    let (s1, s2) = ((-offset).max(0) as usize, offset.max(0) as usize);
    let len = x.shape[d1]
        .saturating_sub(s1)
        .min(x.shape[d2].saturating_sub(s2));
    let mut shape: Vec<usize> = (0..rank)
        .filter(|&k| k != d1 && k != d2)
        .map(|k| x.shape[k])
        .collect();
    shape.push(len);
    out(gather_view(&x, shape, |idx| {
        let k = idx[idx.len() - 1];
        let mut kept = idx[..idx.len() - 1].iter();
        (0..rank)
            .map(|j| {
                if j == d1 {
                    k + s1
                } else if j == d2 {
                    k + s2
                } else {
                    *kept.next().unwrap_or(&0)
                }
            })
            .collect()
    })?)
}

pub(super) fn flip(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let rank = x.shape.len();
    let dims: Vec<usize> = n
        .ints("dims")?
        .iter()
        .map(|&d| wrap(d, rank))
        .collect::<R<_>>()?;
    let shape = x.shape.clone();
    out(gather_view(&x, x.shape.clone(), |idx| {
        idx.iter()
            .enumerate()
            .map(|(k, &i)| {
                if dims.contains(&k) {
                    shape[k] - 1 - i
                } else {
                    i
                }
            })
            .collect()
    })?)
}
