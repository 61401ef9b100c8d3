//! Normalizations with statistics from the data, element by element in f64: `native_group_norm`
//! (per sample and group of channels) and `_native_batch_norm_legit.no_stats` (per channel over
//! the batch and space). Biased variance; `rstd = 1 / sqrt(var + eps)`.

use super::{
    build, elem, fail, flat, out, reduce, reduced_shape, strides, unflatten, wrap, Node, Operand,
    E, R,
};
use crate::graph::{Arg, DType};
use crate::tensor::HostTensor;

/// `eps`: a float, or an integer read as one.
pub(super) fn eps(n: &Node) -> R<f64> {
    match n.node.arg("eps") {
        Some(Arg::Float(f)) => Ok(*f),
        Some(Arg::Int(_)) => Ok(n.int("eps")? as f64),
        _ => fail("eps must be a number"),
    }
}

/// A per-channel tensor argument, when given: it must have `c` elements.
pub(super) fn channel(n: &Node, name: &str, c: usize) -> R<Option<HostTensor>> {
    match n.node.arg(name) {
        Some(Arg::Tensor(_)) => {
            let t = n.tensor(name)?;
            if t.shape != [c] {
                return fail(format!("{name} of shape {:?} for {c} channels", t.shape));
            }
            Ok(Some(t))
        }
        _ => Ok(None),
    }
}

/// `weight` and `bias`, when given, each of `c` elements.
fn affine(n: &Node, c: usize) -> R<[Option<HostTensor>; 2]> {
    Ok([channel(n, "weight", c)?, channel(n, "bias", c)?])
}

/// Normalizes `x` (shape `[N, C, …]`) where `set(i)` names the statistics set of flat element
/// `i` (`sets` of them); returns (out, mean per set, rstd per set).
fn normalize(
    n: &Node,
    x: &HostTensor,
    sets: usize,
    set: impl Fn(usize) -> usize,
) -> R<(Vec<E>, Vec<E>, Vec<E>)> {
    if x.shape.len() < 2 || !x.dtype.is_float() {
        return fail("normalization of a non-float or channel-less input");
    }
    let eps = eps(n)?;
    let c = x.shape[1];
    let inner: usize = x.shape[2..].iter().product();
    let [w, b] = affine(n, c)?;
    let (mut sum, mut count) = (vec![0.0; sets], vec![0usize; sets]);
    for i in 0..x.numel() {
        sum[set(i)] += elem(x, i).f();
        count[set(i)] += 1;
    }
    let mean: Vec<f64> = sum.iter().zip(&count).map(|(s, &k)| s / k as f64).collect();
    let mut ss = vec![0.0; sets];
    for i in 0..x.numel() {
        let d = elem(x, i).f() - mean[set(i)];
        ss[set(i)] += d * d;
    }
    let rstd: Vec<f64> = ss
        .iter()
        .zip(&count)
        .map(|(s, &k)| 1.0 / (s / k as f64 + eps).sqrt())
        .collect();
    let out = (0..x.numel())
        .map(|i| {
            let ch = (i / inner.max(1)) % c;
            let mut v = (elem(x, i).f() - mean[set(i)]) * rstd[set(i)];
            if let Some(w) = &w {
                v *= elem(w, ch).f();
            }
            if let Some(b) = &b {
                v += elem(b, ch).f();
            }
            E::F(v)
        })
        .collect();
    let wrap = |v: Vec<f64>| v.into_iter().map(E::F).collect();
    Ok((out, wrap(mean), wrap(rstd)))
}

pub(super) fn group_norm(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("input")?;
    let g = n.int("group")?;
    if x.shape.len() < 2 || g <= 0 || x.shape[1] % g as usize != 0 {
        return fail(format!("{g} groups for the input's shape {:?}", x.shape));
    }
    let (batch, c, g) = (x.shape[0], x.shape[1], g as usize);
    let inner: usize = x.shape[2..].iter().product();
    // Element i is in sample i / (C·inner), channel (i / inner) % C, group channel / (C / g).
    let set = |i: usize| (i / (c * inner.max(1))) * g + ((i / inner.max(1)) % c) / (c / g);
    let (out, mean, rstd) = normalize(n, &x, batch * g, set)?;
    Ok(vec![
        build(x.dtype, x.shape.clone(), out),
        build(x.dtype, vec![batch, g], mean),
        build(x.dtype, vec![batch, g], rstd),
    ])
}

pub(super) fn batch_norm_batch_stats(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("input")?;
    if !n.flag("training") {
        return fail("batch norm without running statistics needs training=True");
    }
    if x.shape.len() < 2 {
        return fail("batch norm of a channel-less input");
    }
    let c = x.shape[1];
    let inner: usize = x.shape[2..].iter().product();
    let (out, mean, rstd) = normalize(n, &x, c, |i| (i / inner.max(1)) % c)?;
    Ok(vec![
        build(x.dtype, x.shape.clone(), out),
        build(x.dtype, vec![c], mean),
        build(x.dtype, vec![c], rstd),
    ])
}

/// Layer and RMS norms, `var` and `var_mean`: mean and variance over dimensions in f64.
pub(super) fn moments(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.tensor(if name.starts_with("var") {
        "self"
    } else {
        "input"
    })?;
    if !x.dtype.is_float() {
        return fail("needs a floating dtype");
    }
    let rank = x.shape.len();
    let dims: Vec<usize> = if name.starts_with("var") {
        let d = n.ints("dim")?;
        let mut d: Vec<usize> = if d.is_empty() {
            (0..rank).collect()
        } else {
            d.iter().map(|&k| wrap(k, rank)).collect::<R<_>>()?
        };
        d.sort_unstable();
        d
    } else {
        let shape = n.ints("normalized_shape")?;
        let k = shape.len();
        if k == 0 || k > rank {
            return fail("bad normalized_shape");
        }
        // normalized_shape is the input's trailing shape, and the weight's and bias's shape.
        let trailing: Vec<i64> = x.shape[rank - k..].iter().map(|&s| s as i64).collect();
        if shape != trailing {
            return fail(format!(
                "normalized_shape {shape:?} is not the input's trailing shape {trailing:?}"
            ));
        }
        for p in ["weight", "bias"] {
            if let Some(Arg::Tensor(r)) = n.node.arg(p) {
                let t = (n.get)(r);
                if t.shape.iter().map(|&s| s as i64).collect::<Vec<_>>() != shape {
                    return fail(format!(
                        "{p} of shape {:?} where normalized_shape is {shape:?}",
                        t.shape
                    ));
                }
            }
        }
        (rank - k..rank).collect()
    };
    let count: usize = dims.iter().map(|&d| x.shape[d]).product();
    let sum = reduce(&x, &dims, true, DType::F64, Some(E::F(0.0)), |a, v| {
        E::F(a.f() + v.f())
    })?;
    let st = strides(&x.shape);
    let rst = strides(&sum.shape);
    let reduced_at = |i: usize| -> usize {
        let mut idx = unflatten(i, &x.shape);
        for &d in &dims {
            idx[d] = 0;
        }
        flat(&idx, &rst)
    };
    let rms = name == "rms_norm";
    let mean: Vec<f64> = (0..sum.numel())
        .map(|i| {
            if rms {
                0.0
            } else {
                elem(&sum, i).f() / count as f64
            }
        })
        .collect();
    let mut ss = vec![0.0; sum.numel()];
    for i in 0..x.numel() {
        let d = elem(&x, flat(&unflatten(i, &x.shape), &st)).f() - mean[reduced_at(i)];
        ss[reduced_at(i)] += d * d;
    }
    if name.starts_with("var") {
        let correction = match n.node.arg("correction") {
            Some(Arg::Scalar(s)) => match n.number(*s)? {
                Operand::Number(v, _) => v.f(),
                Operand::Tensor(_) => unreachable!(),
            },
            _ => 1.0,
        };
        let denom = (count as f64 - correction).max(0.0);
        let keep = n.flag("keepdim");
        let shape = reduced_shape(&x.shape, &dims, keep);
        let var = build(
            x.dtype,
            shape.clone(),
            ss.iter().map(|&s| E::F(s / denom)).collect(),
        );
        if name == "var" {
            return out(var);
        }
        return Ok(vec![
            var,
            build(x.dtype, shape, mean.iter().map(|&m| E::F(m)).collect()),
        ]);
    }
    let eps = match n.node.arg("eps") {
        Some(Arg::Float(f)) => *f,
        _ => match x.dtype {
            DType::F64 => f64::EPSILON,
            DType::F16 => 0.0009765625,
            DType::BF16 => 0.0078125,
            _ => f32::EPSILON as f64,
        },
    };
    let rstd: Vec<f64> = ss
        .iter()
        .map(|&s| 1.0 / (s / count as f64 + eps).sqrt())
        .collect();
    let opt = |arg: &str| -> R<Option<HostTensor>> {
        match n.node.arg(arg) {
            Some(Arg::Tensor(r)) => Ok(Some((n.get)(r))),
            _ => Ok(None),
        }
    };
    let (w, bias) = (opt("weight")?, opt("bias")?);
    let norm_shape: Vec<usize> = dims.iter().map(|&d| x.shape[d]).collect();
    let inner: usize = norm_shape.iter().product();
    let vals: Vec<E> = (0..x.numel())
        .map(|i| {
            let r = reduced_at(i);
            let mut v = (elem(&x, i).f() - mean[r]) * rstd[r];
            if let Some(w) = &w {
                v *= elem(w, i % inner.max(1)).f();
            }
            if let Some(b) = &bias {
                v += elem(b, i % inner.max(1)).f();
            }
            E::F(v)
        })
        .collect();
    let y = build(x.dtype, x.shape.clone(), vals);
    if rms {
        return out(y);
    }
    let stats = |v: &[f64]| {
        build(
            x.dtype,
            sum.shape.clone(),
            v.iter().map(|&m| E::F(m)).collect(),
        )
    };
    Ok(vec![y, stats(&mean), stats(&rstd)])
}
