//! `slice_scatter`, `select_scatter`, `copy` and `scatter` element by element: the base's values,
//! with the written region's taken from the source (converted to the base's dtype).

use super::{build, elem, fail, flat, strides, to, unflatten, wrap, Node, E, R};
use crate::tensor::{round_to, HostTensor};

/// The base with the positions `region(index along dim)` says replaced: `Some(j)` reads the
/// source with that index at `j` (`keep_dim`) or removed (not `keep_dim`).
fn replace_region(
    x: &HostTensor,
    src: &HostTensor,
    dim: usize,
    keep_dim: bool,
    region: impl Fn(usize) -> Option<usize>,
) -> R<Vec<HostTensor>> {
    let st = strides(&src.shape);
    let n: usize = x.shape.iter().product();
    let vals = (0..n)
        .map(|i| {
            let mut idx = unflatten(i, &x.shape);
            match region(idx[dim]) {
                Some(j) => {
                    if keep_dim {
                        idx[dim] = j;
                    } else {
                        idx.remove(dim);
                    }
                    to(x.dtype, elem(src, flat(&idx, &st)))
                }
                None => elem(x, i),
            }
        })
        .collect();
    Ok(vec![build(x.dtype, x.shape.clone(), vals)])
}

fn check_shape(op: &str, want: &[usize], src: &HostTensor) -> R<()> {
    if src.shape != want {
        return fail(format!(
            "{op}: a source of shape {:?} for a region of {want:?}",
            src.shape
        ));
    }
    Ok(())
}

pub(super) fn slice_scatter(n: &Node) -> R<Vec<HostTensor>> {
    let (x, src) = (n.tensor("self")?, n.tensor("src")?);
    let (dim, start, end, step, len) = super::slice_bounds(n, &x)?;
    let mut region = x.shape.clone();
    region[dim] = len;
    check_shape("slice_scatter", &region, &src)?;
    replace_region(&x, &src, dim, true, |i| {
        let i = i as i64;
        (i >= start && i < end && (i - start) % step == 0).then(|| ((i - start) / step) as usize)
    })
}

pub(super) fn select_scatter(n: &Node) -> R<Vec<HostTensor>> {
    let (x, src) = (n.tensor("self")?, n.tensor("src")?);
    let dim = wrap(n.int("dim")?, x.shape.len())?;
    let size = x.shape[dim] as i64;
    let i = n.int("index")?;
    if i < -size || i >= size {
        return fail(format!("index {i} is out of range for size {size}"));
    }
    let at = if i < 0 { i + size } else { i } as usize;
    let mut region = x.shape.clone();
    region.remove(dim);
    check_shape("select_scatter", &region, &src)?;
    replace_region(&x, &src, dim, false, |i| (i == at).then_some(0))
}

/// `src` broadcast (right-aligned) to `self`'s shape, in `self`'s dtype.
pub(super) fn copy(n: &Node) -> R<Vec<HostTensor>> {
    let (x, src) = (n.tensor("self")?, n.tensor("src")?);
    let off = match x.shape.len().checked_sub(src.shape.len()) {
        Some(off) => off,
        None => return fail("copy: a source of more dimensions than the tensor"),
    };
    for (k, &s) in src.shape.iter().enumerate() {
        if s != 1 && s != x.shape[off + k] {
            return fail(format!(
                "copy: a source of shape {:?} into {:?}",
                src.shape, x.shape
            ));
        }
    }
    let st = strides(&src.shape);
    let n: usize = x.shape.iter().product();
    let vals = (0..n)
        .map(|i| {
            let idx = unflatten(i, &x.shape);
            let at: Vec<usize> = src
                .shape
                .iter()
                .enumerate()
                .map(|(k, &s)| if s == 1 { 0 } else { idx[off + k] })
                .collect();
            to(x.dtype, elem(&src, flat(&at, &st)))
        })
        .collect::<Vec<E>>();
    Ok(vec![build(x.dtype, x.shape.clone(), vals)])
}

/// `scatter` (`.src`, `.value`) and `scatter_add`: `self` with, for every position `p` of the
/// index in row-major order, `out[p with dim = index[p]] = src[p]` (or the value; added).
pub(super) fn scatter(n: &Node, accumulate: bool) -> R<Vec<HostTensor>> {
    let (x, index) = (n.tensor("self")?, n.tensor("index")?);
    let rank = x.shape.len();
    let dim = wrap(n.int("dim")?, rank)?;
    if index.dtype.is_float() || index.dtype == crate::graph::DType::Bool {
        return fail("scatter indices must be integers");
    }
    let src = match n.node.arg("src") {
        Some(_) => Some(n.tensor("src")?),
        None => None,
    };
    let value = match &src {
        Some(_) => None,
        None => Some(n.number(n.scalar("value")?)?),
    };
    let fits = index.shape.len() == rank
        && (0..rank).all(|k| {
            (k == dim || index.shape[k] <= x.shape[k])
                && src
                    .as_ref()
                    .is_none_or(|s| s.shape.len() == rank && index.shape[k] <= s.shape[k])
        });
    if !fits {
        return fail(format!(
            "scatter: an index of shape {:?} into {:?}",
            index.shape, x.shape
        ));
    }
    let d = x.dtype;
    let xs = strides(&x.shape);
    let mut out: Vec<E> = (0..x.numel()).map(|i| elem(&x, i)).collect();
    for i in 0..index.numel() {
        let mut p = unflatten(i, &index.shape);
        let v = match (&src, &value) {
            (Some(s), _) => to(d, elem(s, flat(&p, &strides(&s.shape)))),
            (None, Some(v)) => to(d, super::at(v, &[])),
            (None, None) => unreachable!("a source or a value"),
        };
        let o = target(&index, i, &mut p, dim, &x.shape, &xs)?;
        out[o] = if accumulate {
            match (out[o], v) {
                (E::F(a), E::F(b)) => E::F(round_to(d, a + b)),
                (a, b) => to(d, E::I(a.i().wrapping_add(b.i()))),
            }
        } else {
            v
        };
    }
    Ok(vec![build(d, x.shape.clone(), out)])
}

/// Where the value at index position `p` (flat `i`) of a scatter lands in the result (of `shape`,
/// `strides`): `p` with `dim` replaced by the index there, checked against the dimension.
fn target(
    index: &HostTensor,
    i: usize,
    p: &mut [usize],
    dim: usize,
    shape: &[usize],
    strides: &[usize],
) -> R<usize> {
    let t = elem(index, i).i();
    if t < 0 || t >= shape[dim] as i64 {
        return fail(format!(
            "index {t} is out of bounds for dimension {dim} with size {}",
            shape[dim]
        ));
    }
    p[dim] = t as usize;
    Ok(flat(p, strides))
}

/// `scatter_reduce.two`, value by value in the index's row-major order: each target starts from
/// `self` (or, without `include_self`, from the combination's identity when first met), takes each
/// value by `sum`, `prod`, `amax`, `amin` (NaN propagating) rounded per step, and `mean` divides
/// the sum by the values met (plus one for `self`; integers by floor division).
pub(super) fn scatter_reduce(n: &Node) -> R<Vec<HostTensor>> {
    let (x, index, src) = (n.tensor("self")?, n.tensor("index")?, n.tensor("src")?);
    let reduce = match n.node.arg("reduce") {
        Some(crate::graph::Arg::Str(s)) => s.clone(),
        _ => return fail("reduce must be a string"),
    };
    let include_self = !matches!(
        n.node.arg("include_self"),
        Some(crate::graph::Arg::Bool(false))
    );
    let rank = x.shape.len();
    let dim = wrap(n.int("dim")?, rank)?;
    let fits = index.shape.len() == rank
        && src.shape.len() == rank
        && (0..rank)
            .all(|k| (k == dim || index.shape[k] <= x.shape[k]) && index.shape[k] <= src.shape[k]);
    if !fits || index.dtype.is_float() {
        return fail("scatter_reduce: the index does not fit the tensor and the source");
    }
    let d = x.dtype;
    let float = d.is_float();
    let step = |a: E, b: E| -> R<E> {
        Ok(match (reduce.as_str(), float) {
            ("sum" | "mean", true) => E::F(round_to(d, a.f() + b.f())),
            ("sum" | "mean", false) => to(d, E::I(a.i().wrapping_add(b.i()))),
            ("prod", true) => E::F(round_to(d, a.f() * b.f())),
            ("prod", false) => to(d, E::I(a.i().wrapping_mul(b.i()))),
            ("amax", _) => super::nan_max(a, b),
            ("amin", _) => super::nan_min(a, b),
            (other, _) => return fail(format!("reduce '{other}' is not one of ATen's")),
        })
    };
    let identity = match (reduce.as_str(), float) {
        ("prod", true) => E::F(1.0),
        ("prod", false) => E::I(1),
        ("amax", true) => E::F(f64::NEG_INFINITY),
        ("amin", true) => E::F(f64::INFINITY),
        ("amax", false) => E::I(d.int_range().map_or(0, |r| r.0)),
        ("amin", false) => E::I(d.int_range().map_or(0, |r| r.1)),
        (_, true) => E::F(0.0),
        (_, false) => E::I(0),
    };
    let xs = strides(&x.shape);
    let mut out: Vec<E> = (0..x.numel()).map(|i| elem(&x, i)).collect();
    let mut met = vec![0i64; out.len()];
    for i in 0..index.numel() {
        let mut p = unflatten(i, &index.shape);
        let v = to(d, elem(&src, flat(&p, &strides(&src.shape))));
        let o = target(&index, i, &mut p, dim, &x.shape, &xs)?;
        if met[o] == 0 && !include_self {
            out[o] = identity;
        }
        out[o] = step(out[o], v)?;
        met[o] += 1;
    }
    if reduce == "mean" {
        for (o, &m) in met.iter().enumerate() {
            let count = m + i64::from(include_self);
            if m == 0 {
                continue;
            }
            out[o] = if float {
                E::F(out[o].f() / count as f64)
            } else {
                E::I(out[o].i().div_euclid(count))
            };
        }
    }
    Ok(vec![build(d, x.shape.clone(), out)])
}

/// `masked_scatter`: the mask broadcast with `self`; its true positions, in row-major order,
/// take the source's elements in row-major order.
pub(super) fn masked_scatter(n: &Node) -> R<Vec<HostTensor>> {
    let (x, mask, src) = (n.operand("self")?, n.operand("mask")?, n.tensor("source")?);
    let mask_dtype = match &mask {
        super::Operand::Tensor(t) => t.dtype,
        super::Operand::Number(_, d) => *d,
    };
    let self_dtype = match &x {
        super::Operand::Tensor(t) => t.dtype,
        super::Operand::Number(_, d) => *d,
    };
    if src.dtype != self_dtype {
        return fail(format!(
            "masked_scatter: expected self and source to have same dtypes but got {self_dtype} and {}",
            src.dtype
        ));
    }
    if mask_dtype != crate::graph::DType::Bool {
        return fail(format!(
            "masked_scatter_ only supports boolean masks, but got mask with dtype {mask_dtype}"
        ));
    }
    let shape = super::broadcast_shape(&[&x, &mask])?;
    let d = match &x {
        super::Operand::Tensor(t) => t.dtype,
        super::Operand::Number(_, d) => *d,
    };
    let numel: usize = shape.iter().product();
    let mut next = 0usize;
    let mut out = Vec::with_capacity(numel);
    for i in 0..numel {
        let idx = unflatten(i, &shape);
        if super::at(&mask, &idx).i() != 0 {
            if next >= src.numel() {
                return fail(format!(
                    "masked_scatter: the source has {} elements, fewer than the mask's true ones",
                    src.numel()
                ));
            }
            out.push(elem(&src, next));
            next += 1;
        } else {
            out.push(to(d, super::at(&x, &idx)));
        }
    }
    Ok(vec![build(d, shape, out)])
}
