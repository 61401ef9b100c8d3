//! Slices, selections, splits, concatenation, padding and tiling.

use super::{
    build, elem, fail, flat, gather_view, out, result_type, slice_bounds, strides, to, unflatten,
    wrap, Node, Operand, R,
};
use crate::graph::Arg;
use crate::tensor::HostTensor;

pub(super) fn repeat(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let reps = n.ints("repeats")?;
    let off = match reps.len().checked_sub(x.shape.len()) {
        Some(off) if reps.iter().all(|&r| r >= 0) => off,
        _ => return fail(format!("repeat {reps:?} of shape {:?}", x.shape)),
    };
    let shape: Vec<usize> = (0..reps.len())
        .map(|k| match k.checked_sub(off) {
            Some(d) => x.shape[d] * reps[k] as usize,
            None => reps[k] as usize,
        })
        .collect();
    let xs = x.shape.clone();
    out(gather_view(&x, shape, |idx| {
        xs.iter()
            .enumerate()
            .map(|(d, &s)| idx[off + d] % s)
            .collect()
    })?)
}

pub(super) fn slice(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let (dim, start, _, step, len) = slice_bounds(n, &x)?;
    let mut shape = x.shape.clone();
    shape[dim] = len;
    out(gather_view(&x, shape, |idx| {
        let mut s = idx.to_vec();
        s[dim] = (start + idx[dim] as i64 * step) as usize;
        s
    })?)
}

pub(super) fn select(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let dim = wrap(n.int("dim")?, x.shape.len())?;
    let size = x.shape[dim] as i64;
    let i = n.int("index")?;
    if i < -size || i >= size {
        return fail(format!("index {i} is out of range for size {size}"));
    }
    let i = if i < 0 { i + size } else { i } as usize;
    let mut shape = x.shape.clone();
    shape.remove(dim);
    out(gather_view(&x, shape, |idx| {
        let mut s = idx.to_vec();
        s.insert(dim, i);
        s
    })?)
}

pub(super) fn cat(n: &Node) -> R<Vec<HostTensor>> {
    let ts: Vec<HostTensor> = match n.node.arg("tensors") {
        Some(Arg::Tensors(v)) => v.iter().flatten().map(n.get).collect(),
        _ => return fail("cat needs tensors"),
    };
    let rank = ts.iter().map(|t| t.shape.len()).max().unwrap_or(0);
    let ts: Vec<HostTensor> = ts
        .into_iter()
        .filter(|t| !(rank > 1 && t.shape == [0]))
        .collect();
    if ts.is_empty() {
        return fail("cat of no tensors");
    }
    let dim = wrap(n.int("dim")?, rank)?;
    for t in &ts {
        let same =
            t.shape.len() == rank && (0..rank).all(|k| k == dim || t.shape[k] == ts[0].shape[k]);
        if !same {
            return fail(format!(
                "cat: shape {:?} does not match {:?}",
                t.shape, ts[0].shape
            ));
        }
    }
    let ops: Vec<Operand> = ts.iter().cloned().map(Operand::Tensor).collect();
    let d = result_type(&ops.iter().collect::<Vec<_>>())?;
    let mut shape = ts[0].shape.clone();
    shape[dim] = ts.iter().map(|t| t.shape[dim]).sum();
    let total: usize = shape.iter().product();
    let mut vals = Vec::with_capacity(total);
    for i in 0..total {
        let mut idx = unflatten(i, &shape);
        let mut j = 0;
        while idx[dim] >= ts[j].shape[dim] {
            idx[dim] -= ts[j].shape[dim];
            j += 1;
        }
        vals.push(to(d, elem(&ts[j], flat(&idx, &strides(&ts[j].shape)))));
    }
    out(build(d, shape, vals))
}

/// `constant_pad_nd`.
pub(super) fn pad(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let pad = n.ints("pad")?;
    let rank = x.shape.len();
    if pad.len() % 2 != 0 || pad.len() / 2 > rank {
        return fail("bad pad length");
    }
    let mut before = vec![0i64; rank];
    let mut shape: Vec<i64> = x.shape.iter().map(|&s| s as i64).collect();
    for (k, pair) in pad.chunks(2).enumerate() {
        let d = rank - 1 - k;
        before[d] = pair[0];
        shape[d] += pair[0] + pair[1];
        if shape[d] < 0 {
            return fail("padded size is negative");
        }
    }
    let shape: Vec<usize> = shape.iter().map(|&s| s as usize).collect();
    let fill = match n.number(n.scalar("value")?)? {
        Operand::Number(v, _) => v,
        Operand::Tensor(_) => unreachable!(),
    };
    let st = strides(&x.shape);
    let total: usize = shape.iter().product();
    let mut vals = Vec::with_capacity(total);
    for i in 0..total {
        let idx = unflatten(i, &shape);
        let src: Vec<i64> = idx
            .iter()
            .zip(&before)
            .map(|(&a, &b)| a as i64 - b)
            .collect();
        let inside = src
            .iter()
            .zip(&x.shape)
            .all(|(&s, &n)| s >= 0 && (s as usize) < n);
        vals.push(if inside {
            elem(&x, src.iter().zip(&st).map(|(&s, &t)| s as usize * t).sum())
        } else {
            fill
        });
    }
    out(build(x.dtype, shape, vals))
}

/// `split`, `split_with_sizes`, `unbind`.
pub(super) fn split(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let rank = x.shape.len();
    let dim = wrap(n.int("dim")?, rank)?;
    let size = x.shape[dim];
    let lens: Vec<usize> = match name {
        "split_with_sizes" => {
            let v = n.ints("split_sizes")?;
            if v.iter().any(|&s| s < 0) || v.iter().sum::<i64>() != size as i64 {
                return fail(format!("split sizes {v:?} do not add up to {size}"));
            }
            v.iter().map(|&s| s as usize).collect()
        }
        "split" => {
            let c = n.int("split_size")?;
            if c <= 0 {
                return fail("split_size must be positive");
            }
            let c = c as usize;
            let count = size.div_ceil(c).max(1);
            (0..count)
                .map(|k| c.min(size.saturating_sub(k * c)))
                .collect()
        }
        _ => vec![1; size],
    };
    let mut outs = Vec::new();
    let mut start = 0;
    for len in lens {
        let mut shape = x.shape.clone();
        shape[dim] = len;
        let mut t = gather_view(&x, shape, |idx| {
            let mut s = idx.to_vec();
            s[dim] += start;
            s
        })?;
        if name == "unbind" {
            t.shape.remove(dim);
        }
        outs.push(t);
        start += len;
    }
    Ok(outs)
}
