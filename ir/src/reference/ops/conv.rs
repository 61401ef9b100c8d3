//! `convolution` by its definition: every output element a sum over its group's input channels
//! and the kernel's taps (reads outside the input are zero), accumulated exactly (f64), the bias
//! added, rounded once; transposed, every input element scattered through the kernel. Inference
//! batch norm, max pooling (with indices) and nearest upsampling likewise.

use super::norms::{channel, eps};
use super::{build, elem, fail, flat, strides, unflatten, Node, E, R};
use crate::graph::Arg;
use crate::tensor::HostTensor;

fn per_dim(n: &Node, name: &str, d: usize) -> R<Vec<i64>> {
    let v = n.ints(name)?;
    match v.len() {
        1 => Ok(vec![v[0]; d]),
        k if k == d => Ok(v),
        k => fail(format!("{name}: {k} values for {d} spatial dimensions")),
    }
}

pub(super) fn convolution(n: &Node) -> R<Vec<HostTensor>> {
    let (x, w) = (n.tensor("input")?, n.tensor("weight")?);
    if n.flag("transposed") {
        return transposed(n, &x, &w);
    }
    let rank = x.shape.len();
    if !(3..=5).contains(&rank) || w.shape.len() != rank || x.dtype != w.dtype {
        return fail(format!("convolution of {:?} by {:?}", x.shape, w.shape));
    }
    let d = rank - 2;
    let (stride, pad, dil) = (
        per_dim(n, "stride", d)?,
        per_dim(n, "padding", d)?,
        per_dim(n, "dilation", d)?,
    );
    let groups = n.int("groups")?;
    let (batch, ch, oc, gc) = (x.shape[0], x.shape[1], w.shape[0], w.shape[1]);
    if groups < 1 || ch != gc * groups as usize || oc % groups as usize != 0 {
        return fail(format!(
            "{ch} input channels, {oc} output channels, {groups} groups, weight {:?}",
            w.shape
        ));
    }
    let og = oc / groups as usize;
    let (ins, ks) = (&x.shape[2..], &w.shape[2..]);
    let mut outs = Vec::with_capacity(d);
    for i in 0..d {
        let span = ins[i] as i64 + 2 * pad[i] - dil[i] * (ks[i] as i64 - 1) - 1;
        if span < 0 {
            return fail(format!("input {:?} is smaller than the kernel {ks:?}", ins));
        }
        outs.push((span / stride[i] + 1) as usize);
    }
    let bias = match n.node.arg("bias") {
        Some(Arg::Tensor(_)) => Some(n.tensor("bias")?),
        _ => None,
    };
    let (xs, ws) = (strides(&x.shape), strides(&w.shape));
    let taps: usize = ks.iter().product();
    let mut shape = vec![batch, oc];
    shape.extend(&outs);
    let total: usize = shape.iter().product();
    let mut vals = Vec::with_capacity(total);
    for e in 0..total {
        let idx = unflatten(e, &shape);
        let (nb, o) = (idx[0], idx[1]);
        let g = o / og;
        let mut acc = bias.as_ref().map_or(0.0, |b| elem(b, o).f());
        for c in 0..gc {
            for t in 0..taps {
                let tap = unflatten(t, ks);
                let mut xi = vec![nb, g * gc + c];
                let mut inside = true;
                for i in 0..d {
                    let at = idx[2 + i] as i64 * stride[i] + tap[i] as i64 * dil[i] - pad[i];
                    inside &= at >= 0 && at < ins[i] as i64;
                    xi.push(at.max(0) as usize);
                }
                if !inside {
                    continue;
                }
                let mut wi = vec![o, c];
                wi.extend(&tap);
                acc += elem(&x, flat(&xi, &xs)).f() * elem(&w, flat(&wi, &ws)).f();
            }
        }
        vals.push(E::F(acc));
    }
    Ok(vec![build(x.dtype, shape, vals)])
}

/// Inference batch norm over channel dimension 1, in f64, rounded once; empty saved statistics.
pub(super) fn batch_norm(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("input")?;
    if x.shape.len() < 2 || !x.dtype.is_float() {
        return fail("batch norm of a non-float or channel-less input");
    }
    let c = x.shape[1];
    let eps = eps(n)?;
    let channel = |name: &str| channel(n, name, c);
    let (Some(mean), Some(var)) = (channel("running_mean")?, channel("running_var")?) else {
        return fail("running statistics are required");
    };
    let (w, b) = (channel("weight")?, channel("bias")?);
    let inner: usize = x.shape[2..].iter().product();
    let vals = (0..x.numel())
        .map(|i| {
            let ch = (i / inner.max(1)) % c;
            let mut v = (elem(&x, i).f() - elem(&mean, ch).f()) / (elem(&var, ch).f() + eps).sqrt();
            if let Some(w) = &w {
                v *= elem(w, ch).f();
            }
            if let Some(b) = &b {
                v += elem(b, ch).f();
            }
            E::F(v)
        })
        .collect();
    let empty = || build(x.dtype, vec![0], Vec::new());
    Ok(vec![
        build(x.dtype, x.shape.clone(), vals),
        empty(),
        empty(),
    ])
}

/// A 2-D pooling window (kernel, stride, padding, dilation) and the pooled sizes of `ins`.
pub(super) struct Window {
    pub k: [i64; 2],
    pub s: [i64; 2],
    pub p: [i64; 2],
    pub d: [i64; 2],
    pub outs: [usize; 2],
}

/// The window arguments of a pooling node (`dilation` 1 where the op has none) and ATen's pooled
/// sizes, ceil mode's last window dropped when it starts past the padded input.
/// A 2-d pooling's `self`: a float tensor of rank 3 or 4 in which, as ATen's shape check, no
/// dimension but a 4-d tensor's batch is empty.
pub(super) fn pooling_input(n: &Node, name: &str) -> R<HostTensor> {
    let x = n.tensor("self")?;
    let rank = x.shape.len();
    if !(3..=4).contains(&rank) || !x.dtype.is_float() {
        return fail(format!(
            "{name} of a non-float input or a rank other than 3 or 4"
        ));
    }
    if x.shape[rank - 3..].contains(&0) {
        return fail(format!(
            "{name} of {:?}: only a batch may be empty",
            x.shape
        ));
    }
    Ok(x)
}

pub(super) fn window(n: &Node, ins: [i64; 2]) -> R<Window> {
    let two = |name: &str, default: Option<[i64; 2]>| -> R<[i64; 2]> {
        let v = n.ints(name)?;
        match (&v[..], default) {
            ([], Some(d)) => Ok(d),
            ([a], _) => Ok([*a, *a]),
            ([a, b], _) => Ok([*a, *b]),
            _ => fail(format!("{name}: {v:?}")),
        }
    };
    let k = two("kernel_size", None)?;
    let s = two("stride", Some(k))?;
    let p = two("padding", Some([0, 0]))?;
    let d = two("dilation", Some([1, 1]))?;
    // ATen's checks; then every product below fits in i64.
    if k.iter().chain(&s).chain(&d).any(|&v| v < 1)
        || (0..2).any(|i| p[i] < 0 || 2 * p[i] as i128 > k[i] as i128)
    {
        return fail(
            "kernel, stride and dilation must be positive, padding at most half the kernel",
        );
    }
    if (0..2).any(|i| d[i] as i128 * (k[i] as i128 - 1) + 1 > i32::MAX as i128) {
        return fail("the pooling window (dilation × (kernel − 1) + 1) is larger than any input");
    }
    let ceil = n.flag("ceil_mode");
    let mut outs = [0usize; 2];
    for i in 0..2 {
        let mut top = ins[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1;
        if ceil {
            top += s[i] - 1;
        }
        let mut o = top.div_euclid(s[i]) + 1;
        if ceil && (o - 1) * s[i] >= ins[i] + p[i] {
            o -= 1;
        }
        if o < 1 {
            return fail(format!("pooling output size {o} is too small"));
        }
        outs[i] = o as usize;
    }
    Ok(Window { k, s, p, d, outs })
}

/// `max_pool2d_with_indices` as ATen's CPU kernel: over each window's taps inside the input (row
/// by row), the value replaces the running maximum when larger or NaN; the index is `h·W + w`.
pub(super) fn max_pool2d(n: &Node) -> R<Vec<HostTensor>> {
    let x = pooling_input(n, "max_pool2d")?;
    let rank = x.shape.len();
    let ins = [x.shape[rank - 2] as i64, x.shape[rank - 1] as i64];
    let Window { k, s, p, d, outs } = window(n, ins)?;
    let mut shape = x.shape[..rank - 2].to_vec();
    shape.extend(outs);
    let plane = (ins[0] * ins[1]) as usize;
    let (mut vals, mut idxs) = (Vec::new(), Vec::new());
    for e in 0..shape.iter().product::<usize>() {
        let idx = unflatten(e, &shape);
        let base = (e / (outs[0] * outs[1])) * plane;
        let (oh, ow) = (idx[rank - 2] as i64, idx[rank - 1] as i64);
        let (mut best, mut at, mut seen) = (f64::NEG_INFINITY, -1i64, false);
        for th in 0..k[0] {
            for tw in 0..k[1] {
                let (h, w) = (oh * s[0] + th * d[0] - p[0], ow * s[1] + tw * d[1] - p[1]);
                if h < 0 || h >= ins[0] || w < 0 || w >= ins[1] {
                    continue;
                }
                let v = elem(&x, base + (h * ins[1] + w) as usize).f();
                if !seen || v > best || v.is_nan() {
                    (best, at, seen) = (v, h * ins[1] + w, true);
                }
            }
        }
        vals.push(E::F(best));
        idxs.push(E::I(at));
    }
    Ok(vec![
        build(x.dtype, shape.clone(), vals),
        build(crate::graph::DType::I64, shape, idxs),
    ])
}

/// An upsampling's input, its last two sizes, the output's (given, or floor(I · factor)) and the
/// factors if given.
type Upsampling = (HostTensor, [usize; 2], [usize; 2], Option<[f64; 2]>);

fn upsampling(n: &Node) -> R<Upsampling> {
    let x = n.tensor("input")?;
    let rank = x.shape.len();
    if rank < 3 {
        return fail("upsampling needs 3 or more dimensions");
    }
    let ins = [x.shape[rank - 2], x.shape[rank - 1]];
    let factors = match n.node.arg("scale_factors") {
        Some(Arg::Floats(f)) if f.len() == 2 => Some([f[0], f[1]]),
        _ => None,
    };
    if factors.is_some_and(|f| f.iter().any(|&v| v.is_nan() || v <= 0.0)) {
        return fail(format!(
            "scale_factors: expected 2 positive values, found {:?}",
            factors.unwrap_or_default()
        ));
    }
    let outs = match (n.ints("output_size")?.as_slice(), factors) {
        ([a, b], _) if *a < 0 || *b < 0 => {
            return fail(format!("output_size: negative sizes [{a}, {b}]"))
        }
        ([a, b], _) => [*a as usize, *b as usize],
        (_, Some(f)) => [
            (ins[0] as f64 * f[0]).floor() as usize,
            (ins[1] as f64 * f[1]).floor() as usize,
        ],
        _ => return fail("needs output_size or scale_factors"),
    };
    let mut shape = x.shape[..rank - 2].to_vec();
    shape.extend(outs);
    super::checked_numel(&shape)?;
    Ok((x, ins, outs, factors))
}

/// Nearest upsampling as ATen's `nearest_idx` (and `nearest_neighbor_exact_compute_source_index`):
/// the same size reads straight through, twice the size halves (not exact), else the f32 scale.
pub(super) fn upsample_nearest2d(n: &Node, exact: bool) -> R<Vec<HostTensor>> {
    let (x, ins, outs, factors) = upsampling(n)?;
    let rank = x.shape.len();
    let source = |o: usize, i: usize| -> usize {
        let (inp, out) = (ins[i], outs[i]);
        if !exact && out == inp {
            return o;
        }
        if !exact && out == 2 * inp {
            return o >> 1;
        }
        let scale = match factors {
            Some(f) => (1.0 / f[i]) as f32,
            None => inp as f32 / out as f32,
        };
        let at = if exact { o as f32 + 0.5 } else { o as f32 };
        ((at * scale).floor() as usize).min(inp - 1)
    };
    let mut shape = x.shape[..rank - 2].to_vec();
    shape.extend(outs);
    let st = strides(&x.shape);
    let vals = (0..shape.iter().product::<usize>())
        .map(|e| {
            let mut idx = unflatten(e, &shape);
            idx[rank - 2] = source(idx[rank - 2], 0);
            idx[rank - 1] = source(idx[rank - 1], 1);
            elem(&x, flat(&idx, &st))
        })
        .collect();
    Ok(vec![build(x.dtype, shape, vals)])
}

/// A transposed convolution by its definition: every input element, times each kernel tap, added
/// into the output at `i·stride − pad + tap·dil` (when inside), the bias added, rounded once.
fn transposed(n: &Node, x: &HostTensor, w: &HostTensor) -> R<Vec<HostTensor>> {
    let rank = x.shape.len();
    if !(3..=5).contains(&rank) || w.shape.len() != rank || x.dtype != w.dtype {
        return fail(format!(
            "transposed convolution of {:?} by {:?}",
            x.shape, w.shape
        ));
    }
    let d = rank - 2;
    let (stride, pad, dil) = (
        per_dim(n, "stride", d)?,
        per_dim(n, "padding", d)?,
        per_dim(n, "dilation", d)?,
    );
    let extra = match n.ints("output_padding")?.as_slice() {
        [] => vec![0; d],
        [v] => vec![*v; d],
        v if v.len() == d => v.to_vec(),
        v => return fail(format!("output_padding {v:?}")),
    };
    let groups = n.int("groups")? as usize;
    let (batch, ch, og) = (x.shape[0], x.shape[1], w.shape[1]);
    if groups < 1 || w.shape[0] != ch || ch % groups != 0 {
        return fail(format!(
            "{ch} input channels, weight {:?}, {groups} groups",
            w.shape
        ));
    }
    let (cg, oc) = (ch / groups, og * groups);
    let (ins, ks) = (&x.shape[2..], &w.shape[2..]);
    let mut outs = Vec::with_capacity(d);
    for i in 0..d {
        let o = (ins[i] as i64 - 1) * stride[i] - 2 * pad[i]
            + dil[i] * (ks[i] as i64 - 1)
            + extra[i]
            + 1;
        if o < 1 {
            return fail(format!("transposed convolution output size {o}"));
        }
        outs.push(o as usize);
    }
    let mut shape = vec![batch, oc];
    shape.extend(&outs);
    let os = strides(&shape);
    let mut acc = vec![0.0f64; shape.iter().product()];
    let taps: usize = ks.iter().product();
    let ws = strides(&w.shape);
    for e in 0..x.numel() {
        let xi = unflatten(e, &x.shape);
        let (nb, c) = (xi[0], xi[1]);
        let gi = c / cg;
        let v = elem(x, e).f();
        for o in 0..og {
            for t in 0..taps {
                let tap = unflatten(t, ks);
                let mut at = vec![nb, gi * og + o];
                let mut inside = true;
                for i in 0..d {
                    let q = xi[2 + i] as i64 * stride[i] - pad[i] + tap[i] as i64 * dil[i];
                    inside &= q >= 0 && q < outs[i] as i64;
                    at.push(q.max(0) as usize);
                }
                if inside {
                    let mut wi = vec![c, o];
                    wi.extend(&tap);
                    acc[flat(&at, &os)] += v * elem(w, flat(&wi, &ws)).f();
                }
            }
        }
    }
    if let Some(Arg::Tensor(_)) = n.node.arg("bias") {
        let b = n.tensor("bias")?;
        let inner: usize = outs.iter().product();
        for (k, a) in acc.iter_mut().enumerate() {
            *a += elem(&b, (k / inner) % oc).f();
        }
    }
    Ok(vec![build(
        x.dtype,
        shape,
        acc.into_iter().map(E::F).collect(),
    )])
}

/// Bilinear upsampling as ATen's CPU kernel: source coordinates in the opmath type (f32, f64 for
/// f64), `i0 = min(floor(src), I − 1)`, `i1` the next row inside, weights `1 − λ` and `λ`.
pub(super) fn upsample_bilinear2d(n: &Node) -> R<Vec<HostTensor>> {
    let (x, ins, outs, factors) = upsampling(n)?;
    if !x.dtype.is_float() {
        return fail("bilinear upsampling needs a float input");
    }
    let rank = x.shape.len();
    let align = n.flag("align_corners");
    let wide = x.dtype == crate::graph::DType::F64;
    // Rounds to the opmath type.
    let op = |v: f64| if wide { v } else { v as f32 as f64 };
    let taps = |o: usize, i: usize| -> [(usize, f64); 2] {
        let (inp, out) = (ins[i] as f64, outs[i] as f64);
        let scale = if align {
            if outs[i] > 1 {
                op(op(inp - 1.0) / op(out - 1.0))
            } else {
                0.0
            }
        } else {
            match factors {
                Some(f) => op(1.0 / f[i]),
                None => op(inp / out),
            }
        };
        let src = if align {
            op(scale * o as f64)
        } else {
            op(op(scale * op(o as f64 + 0.5)) - 0.5).max(0.0)
        };
        let i0 = (src.floor() as usize).min(ins[i] - 1);
        let lam = op(src - i0 as f64).clamp(0.0, 1.0);
        let i1 = i0 + usize::from(i0 < ins[i] - 1);
        [(i0, op(1.0 - lam)), (i1, lam)]
    };
    let mut shape = x.shape[..rank - 2].to_vec();
    shape.extend(outs);
    let st = strides(&x.shape);
    let vals = (0..shape.iter().product::<usize>())
        .map(|e| {
            let mut idx = unflatten(e, &shape);
            let (hs, ws) = (taps(idx[rank - 2], 0), taps(idx[rank - 1], 1));
            let mut acc = 0.0;
            for &(h, wh) in &hs {
                for &(w, ww) in &ws {
                    idx[rank - 2] = h;
                    idx[rank - 1] = w;
                    acc += wh * ww * elem(&x, flat(&idx, &st)).f();
                }
            }
            E::F(acc)
        })
        .collect();
    Ok(vec![build(x.dtype, shape, vals)])
}
