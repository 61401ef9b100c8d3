//! Scans along a dimension, one line at a time and in order, as ATen's CPU kernels walk them:
//! `cumsum`, `cumprod` and `logcumsumexp` (kept in f64 or i64, rounded once per element), and
//! `cummax`/`cummin` with the position of each running extreme.

use super::{build, elem, fail, to, wrap, Node, E, R};
use crate::graph::DType;

/// The lines of a tensor of `shape` along `dim`: (first flat index, stride) of each, and the
/// length.
fn lines(shape: &[usize], dim: usize) -> (Vec<(usize, usize)>, usize) {
    let inner: usize = shape[dim + 1..].iter().product();
    let outer: usize = shape[..dim].iter().product();
    let len = shape[dim];
    let starts = (0..outer)
        .flat_map(|o| (0..inner).map(move |i| (o * len * inner + i, inner)))
        .collect();
    (starts, len)
}

fn log_add_exp(a: f64, b: f64) -> f64 {
    let (lo, hi) = (a.min(b), a.max(b));
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if lo == hi && lo.is_infinite() {
        lo
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}

/// `cumsum`, `cumprod`, `logcumsumexp` (with `dtype`, integers to i64 by default).
pub(super) fn running(n: &Node, name: &str) -> R<Vec<crate::tensor::HostTensor>> {
    let x = n.tensor("self")?;
    let d = n.dtype("dtype").unwrap_or(if x.dtype.is_float() {
        x.dtype
    } else if name == "logcumsumexp" {
        return fail(format!(
            "{name} of {} is not defined: it takes floats",
            x.dtype.name()
        ));
    } else {
        DType::I64
    });
    let mut vals: Vec<E> = (0..x.numel()).map(|i| to(d, elem(&x, i))).collect();
    if !x.shape.is_empty() {
        let dim = wrap(n.int("dim")?, x.shape.len())?;
        let (starts, len) = lines(&x.shape, dim);
        for (s, step) in starts {
            // ATen starts a log-sum-exp from −inf: a first −0.0 comes out +0.0.
            if name == "logcumsumexp" && len > 0 {
                vals[s] = E::F(log_add_exp(f64::NEG_INFINITY, vals[s].f()));
            }
            for j in 1..len {
                let (k, prev) = (s + j * step, vals[s + (j - 1) * step]);
                vals[k] = match (name, prev, vals[k]) {
                    ("cumsum", E::F(a), E::F(b)) => E::F(a + b),
                    ("cumsum", a, b) => E::I(a.i().wrapping_add(b.i())),
                    ("cumprod", E::F(a), E::F(b)) => E::F(a * b),
                    ("cumprod", a, b) => E::I(a.i().wrapping_mul(b.i())),
                    (_, a, b) => E::F(log_add_exp(a.f(), b.f())),
                };
            }
        }
    }
    Ok(vec![build(d, x.shape.clone(), vals)])
}

/// `cummax` (`max`) or `cummin`: the running extreme and where it was last reached — a later
/// equal value or any NaN takes over, as in ATen.
pub(super) fn running_extreme(n: &Node, max: bool) -> R<Vec<crate::tensor::HostTensor>> {
    let x = n.tensor("self")?;
    let mut vals: Vec<E> = (0..x.numel()).map(|i| elem(&x, i)).collect();
    let mut idxs = vec![E::I(0); vals.len()];
    if !x.shape.is_empty() {
        let dim = wrap(n.int("dim")?, x.shape.len())?;
        let (starts, len) = lines(&x.shape, dim);
        for (s, step) in starts {
            let (mut best, mut at) = (vals.get(s).copied().unwrap_or(E::I(0)), 0);
            for j in 0..len {
                let k = s + j * step;
                let v = vals[k];
                let takes = match (v, best) {
                    (E::F(a), E::F(b)) => {
                        a.is_nan() || (!b.is_nan() && if max { a >= b } else { a <= b })
                    }
                    (a, b) => {
                        if max {
                            a.i() >= b.i()
                        } else {
                            a.i() <= b.i()
                        }
                    }
                };
                if takes {
                    (best, at) = (v, j as i64);
                }
                vals[k] = best;
                idxs[k] = E::I(at);
            }
        }
    }
    Ok(vec![
        build(x.dtype, x.shape.clone(), vals),
        build(DType::I64, x.shape.clone(), idxs),
    ])
}
