//! `_cdist_forward` in f64, pair by pair: `(Σ |a − b|^p)^(1/p)` over the features (the count of
//! differences for p = 0, the largest difference for p = ∞), batch dimensions broadcast.

use super::{build, elem, fail, Node, E, R};
use crate::graph::Arg;
use crate::tensor::HostTensor;

pub(super) fn cdist(n: &Node) -> R<Vec<HostTensor>> {
    let (a, b) = (n.tensor("x1")?, n.tensor("x2")?);
    let p = match n.node.arg("p") {
        Some(Arg::Float(f)) => *f,
        Some(Arg::Int(_)) => n.int("p")? as f64,
        _ => return fail("p must be a number"),
    };
    if a.dtype != b.dtype || !a.dtype.is_float() {
        return fail(format!(
            "cdist takes two tensors of one float dtype, found {} and {}",
            a.dtype, b.dtype
        ));
    }
    let (ra, rb) = (a.shape.len(), b.shape.len());
    if ra < 2 || rb < 2 || a.shape[ra - 1] != b.shape[rb - 1] || p.is_nan() || p < 0.0 {
        return fail("cdist: mismatched shapes or a negative p");
    }
    let (ba, bb) = (&a.shape[..ra - 2], &b.shape[..rb - 2]);
    let rank = ba.len().max(bb.len());
    let dim = |s: &[usize], k: usize| {
        let off = rank - s.len();
        if k < off {
            1
        } else {
            s[k - off]
        }
    };
    let mut batch = Vec::with_capacity(rank);
    for k in 0..rank {
        let (x, y) = (dim(ba, k), dim(bb, k));
        if x != y && x != 1 && y != 1 {
            return fail("cdist: batch dimensions do not broadcast");
        }
        batch.push(if x == 1 { y } else { x });
    }
    let (pa, pb, m) = (a.shape[ra - 2], b.shape[rb - 2], a.shape[ra - 1]);
    // The flat index of batch position `at` in an operand with batch sizes `s`.
    let flat = |s: &[usize], at: &[usize]| {
        let off = rank - s.len();
        s.iter().enumerate().fold(0, |acc, (k, &size)| {
            acc * size + if size == 1 { 0 } else { at[k + off] }
        })
    };
    let nb: usize = batch.iter().product();
    let mut vals = Vec::with_capacity(nb * pa * pb);
    let mut at = vec![0usize; rank];
    for _ in 0..nb {
        let (oa, ob) = (flat(ba, &at), flat(bb, &at));
        for i in 0..pa {
            for j in 0..pb {
                let mut acc = 0.0f64;
                for f in 0..m {
                    let x = elem(&a, (oa * pa + i) * m + f).f();
                    let y = elem(&b, (ob * pb + j) * m + f).f();
                    let d = (x - y).abs();
                    acc = if p == 0.0 {
                        acc + f64::from(u8::from(d != 0.0))
                    } else if p.is_infinite() {
                        if d.is_nan() || acc.is_nan() {
                            f64::NAN
                        } else {
                            acc.max(d)
                        }
                    } else {
                        acc + d.powf(p)
                    };
                }
                let v = if p == 0.0 || p == 1.0 || p.is_infinite() {
                    acc
                } else {
                    acc.powf(1.0 / p)
                };
                vals.push(E::F(v));
            }
        }
        for k in (0..rank).rev() {
            at[k] += 1;
            if at[k] < batch[k] {
                break;
            }
            at[k] = 0;
        }
    }
    let mut shape = batch;
    shape.extend([pa, pb]);
    Ok(vec![build(a.dtype, shape, vals)])
}
