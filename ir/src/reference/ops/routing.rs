//! Reference ops of MoE routing and cache writes: advanced indexing (with boolean masks),
//! `index_put`, `repeat_interleave`, `histc`, `_grouped_mm`, `empty_permuted`.

use super::{
    at, broadcast_shape, build, elem, fail, flat, strides, to, unflatten, Node, Operand, E, R,
};
use crate::graph::{Arg, DType, Scalar};
use crate::tensor::{round_to, HostTensor};

/// The index list of `index`/`index_put`, masks replaced by the columns of their `nonzero`. A 0-d
/// mask indexes a new dimension of size 1 at its place: `x` gains it.
fn indices(n: &Node, x: &mut HostTensor) -> R<Vec<Option<HostTensor>>> {
    let list: Vec<Option<HostTensor>> = match n.node.arg("indices") {
        Some(Arg::Tensors(v)) => v.iter().map(|r| r.map(|r| (n.get)(&r))).collect(),
        _ => return fail("indices must be tensors"),
    };
    let mut out = Vec::new();
    for t in list {
        match t {
            Some(m) if m.dtype.is_float() => {
                return fail(format!(
                    "tensors used as indices must be long, int, byte or bool tensors, found {}",
                    m.dtype
                ))
            }
            Some(mut m) if m.dtype == DType::Bool || m.dtype == DType::U8 => {
                if m.shape.is_empty() {
                    x.shape.insert(out.len().min(x.shape.len()), 1);
                    m.shape = vec![1];
                }
                let (p, k) = (out.len(), m.shape.len());
                if p + k > x.shape.len() || m.shape[..] != x.shape[p..p + k] {
                    return fail(format!(
                        "mask of shape {:?} does not match the indexed shape {:?} at dimension {p}",
                        m.shape, x.shape
                    ));
                }
                let hits: Vec<Vec<usize>> = (0..m.numel())
                    .filter(|&i| elem(&m, i).i() != 0)
                    .map(|i| unflatten(i, &m.shape))
                    .collect();
                for j in 0..k {
                    let col = hits.iter().map(|h| E::I(h[j] as i64)).collect();
                    out.push(Some(build(DType::I64, vec![hits.len()], col)));
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// The shape of `x[indices]` and, for each of its elements in order, the flat position in `x`.
fn positions(x: &HostTensor, idx: Vec<Option<HostTensor>>) -> R<(Vec<usize>, Vec<usize>)> {
    let rank = x.shape.len();
    if idx.len() > rank {
        return fail("too many indices");
    }
    let indexed: Vec<usize> = (0..idx.len()).filter(|&k| idx[k].is_some()).collect();
    let ts: Vec<Operand> = idx.into_iter().flatten().map(Operand::Tensor).collect();
    if ts.is_empty() {
        return Ok((x.shape.clone(), (0..x.numel()).collect()));
    }
    let bshape = broadcast_shape(&ts.iter().collect::<Vec<_>>())?;
    let adjacent = indexed.windows(2).all(|w| w[1] == w[0] + 1);
    let rest: Vec<usize> = (0..rank).filter(|k| !indexed.contains(k)).collect();
    let before: Vec<usize> = if adjacent {
        rest.iter().copied().filter(|&k| k < indexed[0]).collect()
    } else {
        vec![]
    };
    let after: Vec<usize> = rest
        .iter()
        .copied()
        .filter(|k| !before.contains(k))
        .collect();
    let mut shape: Vec<usize> = before.iter().map(|&k| x.shape[k]).collect();
    shape.extend(&bshape);
    shape.extend(after.iter().map(|&k| x.shape[k]));
    let st = strides(&x.shape);
    let total: usize = shape.iter().product();
    let mut out = Vec::with_capacity(total);
    for i in 0..total {
        let o = unflatten(i, &shape);
        let b = &o[before.len()..before.len() + bshape.len()];
        let mut src = vec![0usize; rank];
        for (a, &k) in before.iter().enumerate() {
            src[k] = o[a];
        }
        for (a, &k) in after.iter().enumerate() {
            src[k] = o[before.len() + bshape.len() + a];
        }
        for (op, &p) in ts.iter().zip(&indexed) {
            if let Operand::Tensor(t) = op {
                if t.dtype.is_float() {
                    return fail("indices must be integers or boolean masks");
                }
            }
            let mut v = at(op, b).i();
            let size = x.shape[p] as i64;
            if v < 0 {
                v += size;
            }
            if v < 0 || v >= size {
                return fail(format!("index {v} is out of range for size {size}"));
            }
            src[p] = v as usize;
        }
        out.push(flat(&src, &st));
    }
    Ok((shape, out))
}

pub(super) fn index(n: &Node) -> R<Vec<HostTensor>> {
    let mut x = n.tensor("self")?;
    // A boolean mask selects a data-dependent count: the node states it (the format's rule).
    if let Some(Arg::Tensors(v)) = n.node.arg("indices") {
        let mask = v.iter().flatten().any(|r| (n.get)(r).dtype == DType::Bool);
        if mask && n.node.shape.is_none() {
            return fail(
                "a boolean mask: the node must state its \"shape\" with the unbacked count symbol",
            );
        }
    }
    let idx = indices(n, &mut x)?;
    let (shape, at) = positions(&x, idx)?;
    let vals = at.iter().map(|&k| elem(&x, k)).collect();
    Ok(vec![build(x.dtype, shape, vals)])
}

pub(super) fn index_put(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let values = n.operand("values")?;
    if let Operand::Tensor(v) = &values {
        if v.dtype != x.dtype {
            return fail(format!("values are {}, self is {}", v.dtype, x.dtype));
        }
    }
    let accumulate = n.flag("accumulate");
    let mut shaped = x.clone();
    let idx = indices(n, &mut shaped)?;
    if shaped.shape != x.shape {
        return fail("a 0-dimensional mask in index_put is not supported");
    }
    let (shape, at_pos) = positions(&x, idx)?;
    // values broadcast to the indexed shape (right-aligned; sizes equal or 1).
    let vshape = match &values {
        Operand::Tensor(t) => t.shape.clone(),
        Operand::Number(..) => vec![],
    };
    let fits = vshape.len() <= shape.len()
        && vshape
            .iter()
            .rev()
            .zip(shape.iter().rev())
            .all(|(&v, &s)| v == s || v == 1);
    if !fits {
        return fail(format!(
            "values of shape {vshape:?} do not broadcast to {shape:?}"
        ));
    }
    let d = x.dtype;
    let mut out: Vec<E> = (0..x.numel()).map(|i| elem(&x, i)).collect();
    let lead = shape.len() - vshape.len();
    for (i, &p) in at_pos.iter().enumerate() {
        let o = unflatten(i, &shape);
        let vi: Vec<usize> = o[lead..]
            .iter()
            .zip(&vshape)
            .map(|(&a, &s)| if s == 1 { 0 } else { a })
            .collect();
        let v = to(d, at(&values, &vi));
        out[p] = if accumulate {
            match (out[p], v) {
                (E::F(a), E::F(b)) => E::F(round_to(d, a + b)),
                (a, b) => to(d, E::I(a.i().wrapping_add(b.i()))),
            }
        } else {
            v
        };
    }
    Ok(vec![build(d, x.shape.clone(), out)])
}

pub(super) fn repeat_interleave(n: &Node) -> R<Vec<HostTensor>> {
    let r = n.tensor("repeats")?;
    if r.shape.len() != 1 || r.dtype.is_float() || r.dtype == DType::Bool {
        return fail("repeats must be a one-dimensional integer tensor");
    }
    let reps: Vec<i64> = (0..r.numel()).map(|i| elem(&r, i).i()).collect();
    if reps.iter().any(|&k| k < 0) {
        return fail("repeats can not be negative");
    }
    let total: i64 = reps.iter().sum();
    if let Some(size) = n.opt_int("output_size")? {
        if size != total {
            return fail(format!(
                "output_size {size} differs from the sum of repeats {total}"
            ));
        }
    }
    let vals: Vec<E> = reps
        .iter()
        .enumerate()
        .flat_map(|(i, &k)| std::iter::repeat_n(E::I(i as i64), k as usize))
        .collect();
    Ok(vec![build(r.dtype, vec![vals.len()], vals)])
}

fn number(n: &Node, name: &str) -> R<f64> {
    Ok(match n.scalar(name)? {
        Scalar::Float(f) => f,
        Scalar::Bool(b) => f64::from(u8::from(b)),
        Scalar::Int(e) => n.eval(e)? as f64,
    })
}

/// As ATen's histc: edges in the input dtype, arithmetic rounded to it at every step.
pub(super) fn histc(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let d = x.dtype;
    if !d.is_float() {
        return fail("histc needs a floating-point input");
    }
    let bins = n.int("bins")?;
    if bins <= 0 {
        return fail(format!("bins must be positive, found {bins}"));
    }
    let xs: Vec<f64> = (0..x.numel()).map(|i| elem(&x, i).f()).collect();
    let r = |v: f64| round_to(d, v);
    let (mut lo, mut hi) = (r(number(n, "min")?), r(number(n, "max")?));
    if lo == hi && !xs.is_empty() {
        // NaN propagates through the extremes, as in aminmax.
        let pick = |f: fn(f64, f64) -> f64| {
            xs.iter().copied().reduce(|a, b| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    f(a, b)
                }
            })
        };
        lo = pick(f64::min).expect("non-empty");
        hi = pick(f64::max).expect("non-empty");
    }
    if lo == hi {
        lo = r(lo - 1.0);
        hi = r(hi + 1.0);
    }
    if !(lo.is_finite() && hi.is_finite()) {
        return fail(format!("range of [{lo}, {hi}] is not finite"));
    }
    if lo > hi {
        return fail("max must be larger than min");
    }
    let mut counts = vec![0.0; bins as usize];
    for &e in &xs {
        if !(e >= lo && e <= hi) {
            continue;
        }
        let t = r(r(r(e - lo) * bins as f64) / r(hi - lo));
        let pos = (t as i64).min(bins - 1);
        counts[pos as usize] += 1.0;
    }
    let vals = counts.into_iter().map(E::F).collect();
    Ok(vec![build(d, vec![bins as usize], vals)])
}

/// `_grouped_mm`: the four operand layouts, products accumulated exactly and rounded once; rows
/// or columns past the last offset are zero.
pub(super) fn grouped_mm(n: &Node) -> R<Vec<HostTensor>> {
    let (a, b) = (n.tensor("self")?, n.tensor("mat2")?);
    if a.dtype != b.dtype {
        return fail("operands have different dtypes");
    }
    let offs: Option<Vec<i64>> = match n.node.arg("offs") {
        None | Some(Arg::None) => None,
        Some(_) => {
            let o = n.tensor("offs")?;
            Some((0..o.numel()).map(|i| elem(&o, i).i()).collect())
        }
    };
    let out_dtype = n.dtype("out_dtype").unwrap_or(a.dtype);
    let (sa, sb) = (a.shape.clone(), b.shape.clone());
    let ga = |idx: &[usize]| elem(&a, flat(idx, &strides(&sa))).f();
    let gb = |idx: &[usize]| elem(&b, flat(idx, &strides(&sb))).f();
    let groups = |limit: usize| -> R<Vec<(usize, usize)>> {
        let mut start = 0i64;
        let mut gs = Vec::new();
        for &end in offs.as_deref().unwrap_or(&[]) {
            if end < start || end > limit as i64 {
                return fail(format!(
                    "offsets must be non-decreasing and at most {limit}"
                ));
            }
            gs.push((start as usize, end as usize));
            start = end;
        }
        Ok(gs)
    };
    let (shape, vals): (Vec<usize>, Vec<f64>) = match (sa.len(), sb.len(), offs.is_some()) {
        (2, 3, true) => {
            let (m, k, g, nn) = (sa[0], sa[1], sb[0], sb[2]);
            if sb[1] != k || offs.as_ref().map(Vec::len) != Some(g) {
                return fail("shapes do not match");
            }
            let gs = groups(m)?;
            let mut v = vec![0.0; m * nn];
            for (gi, &(s, e)) in gs.iter().enumerate() {
                for r in s..e {
                    for c in 0..nn {
                        v[r * nn + c] = (0..k).map(|q| ga(&[r, q]) * gb(&[gi, q, c])).sum();
                    }
                }
            }
            (vec![m, nn], v)
        }
        (3, 3, false) => {
            let (g, m, k, nn) = (sa[0], sa[1], sa[2], sb[2]);
            if sb[0] != g || sb[1] != k {
                return fail("shapes do not match");
            }
            let mut v = Vec::with_capacity(g * m * nn);
            for gi in 0..g {
                for r in 0..m {
                    for c in 0..nn {
                        v.push((0..k).map(|q| ga(&[gi, r, q]) * gb(&[gi, q, c])).sum());
                    }
                }
            }
            (vec![g, m, nn], v)
        }
        (2, 2, true) => {
            let (m, k, nn) = (sa[0], sa[1], sb[1]);
            if sb[0] != k {
                return fail("shapes do not match");
            }
            let gs = groups(k)?;
            let mut v = Vec::with_capacity(gs.len() * m * nn);
            for &(s, e) in &gs {
                for r in 0..m {
                    for c in 0..nn {
                        v.push((s..e).map(|q| ga(&[r, q]) * gb(&[q, c])).sum());
                    }
                }
            }
            (vec![gs.len(), m, nn], v)
        }
        (3, 2, true) => {
            let (g, m, k, nn) = (sa[0], sa[1], sa[2], sb[1]);
            if sb[0] != k || offs.as_ref().map(Vec::len) != Some(g) {
                return fail("shapes do not match");
            }
            let gs = groups(nn)?;
            let mut v = vec![0.0; m * nn];
            for (gi, &(s, e)) in gs.iter().enumerate() {
                for r in 0..m {
                    for c in s..e {
                        v[r * nn + c] = (0..k).map(|q| ga(&[gi, r, q]) * gb(&[q, c])).sum();
                    }
                }
            }
            (vec![m, nn], v)
        }
        _ => return fail("unsupported operand ranks for _grouped_mm"),
    };
    Ok(vec![build(
        out_dtype,
        shape,
        vals.into_iter().map(E::F).collect(),
    )])
}

/// `empty` and `empty_permuted`: zeros (ATen leaves the memory uninitialized).
pub(super) fn empty(n: &Node) -> R<Vec<HostTensor>> {
    let sizes = super::factories::sizes(&n.ints("size")?)?;
    if n.node.arg("physical_layout").is_some() {
        let mut layout = n.ints("physical_layout")?;
        layout.sort_unstable();
        if layout != (0..sizes.len() as i64).collect::<Vec<_>>() {
            return fail("physical_layout must be a permutation of the dimensions");
        }
    }
    let d = n.dtype("dtype").unwrap_or(DType::F32);
    let total = super::checked_numel(&sizes)?;
    Ok(vec![build(d, sizes, vec![E::I(0); total])])
}

pub(super) fn constrain_range(n: &Node) -> R<Vec<HostTensor>> {
    let size = match n.scalar("size")? {
        Scalar::Int(e) => n.eval(e)?,
        _ => return fail("size must be an integer"),
    };
    let lo = n.opt_int("min")?.unwrap_or(0);
    let hi = n.opt_int("max")?.unwrap_or(i64::MAX);
    if size < lo || size > hi {
        return fail(format!("{size} is outside [{lo}, {hi}]"));
    }
    Ok(Vec::new())
}
