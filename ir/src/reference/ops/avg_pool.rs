//! `avg_pool2d` and `_adaptive_avg_pool2d` as ATen's CPU kernels write them. Average pooling: the window clipped to the padded input (its size
//! the `count_include_pad` divisor), then to the input; the sum over the clipped window, row by
//! row, in f64; an empty window gives 0.

use super::conv::{pooling_input, window, Window};
use super::{build, elem, fail, unflatten, Node, E, R};
use crate::tensor::HostTensor;

pub(super) fn avg_pool2d(n: &Node) -> R<Vec<HostTensor>> {
    let x = pooling_input(n, "avg_pool2d")?;
    let rank = x.shape.len();
    let ins = [x.shape[rank - 2] as i64, x.shape[rank - 1] as i64];
    let Window { k, s, p, outs, .. } = window(n, ins)?;
    let include_pad = !matches!(
        n.node.arg("count_include_pad"),
        Some(crate::graph::Arg::Bool(false))
    );
    let divisor = n.opt_int("divisor_override")?;
    if divisor == Some(0) {
        return fail("divisor_override must not be zero");
    }
    let mut shape = x.shape[..rank - 2].to_vec();
    shape.extend(outs);
    let plane = (ins[0] * ins[1]) as usize;
    let vals = (0..shape.iter().product::<usize>())
        .map(|e| {
            let idx = unflatten(e, &shape);
            let base = (e / (outs[0] * outs[1])) * plane;
            let (mut h0, mut w0) = (
                idx[rank - 2] as i64 * s[0] - p[0],
                idx[rank - 1] as i64 * s[1] - p[1],
            );
            let (mut h1, mut w1) = (
                (h0 + k[0]).min(ins[0] + p[0]),
                (w0 + k[1]).min(ins[1] + p[1]),
            );
            let pool_size = (h1 - h0) * (w1 - w0);
            (h0, w0, h1, w1) = (h0.max(0), w0.max(0), h1.min(ins[0]), w1.min(ins[1]));
            if h0 >= h1 || w0 >= w1 {
                return E::F(0.0);
            }
            let mut sum = 0.0;
            for h in h0..h1 {
                for w in w0..w1 {
                    sum += elem(&x, base + (h * ins[1] + w) as usize).f();
                }
            }
            let d = divisor.unwrap_or(if include_pad {
                pool_size
            } else {
                (h1 - h0) * (w1 - w0)
            });
            E::F(sum / d as f64)
        })
        .collect();
    Ok(vec![build(x.dtype, shape, vals)])
}

/// `_adaptive_avg_pool2d` as ATen's CPU kernel: output `o` of `O` averages input rows
/// `floor(o·I/O) .. ceil((o+1)·I/O)` (and columns likewise).
pub(super) fn adaptive_avg_pool2d(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let rank = x.shape.len();
    if !(3..=4).contains(&rank) || !x.dtype.is_float() {
        return fail("adaptive_avg_pool2d of a non-float input or a rank other than 3 or 4");
    }
    let outs = match n.ints("output_size")?[..] {
        [h, w] if h > 0 && w > 0 => [h as usize, w as usize],
        ref v => return fail(format!("output_size: {v:?}")),
    };
    let ins = [x.shape[rank - 2], x.shape[rank - 1]];
    if ins.contains(&0) {
        return fail("adaptive_avg_pool2d of an empty plane");
    }
    let range = |o: usize, i: usize| (o * ins[i] / outs[i], ((o + 1) * ins[i]).div_ceil(outs[i]));
    let mut shape = x.shape[..rank - 2].to_vec();
    shape.extend(outs);
    let plane = ins[0] * ins[1];
    let vals = (0..shape.iter().product::<usize>())
        .map(|e| {
            let idx = unflatten(e, &shape);
            let base = (e / (outs[0] * outs[1])) * plane;
            let ((h0, h1), (w0, w1)) = (range(idx[rank - 2], 0), range(idx[rank - 1], 1));
            let mut sum = 0.0;
            for h in h0..h1 {
                for w in w0..w1 {
                    sum += elem(&x, base + h * ins[1] + w).f();
                }
            }
            E::F(sum / ((h1 - h0) * (w1 - w0)) as f64)
        })
        .collect();
    Ok(vec![build(x.dtype, shape, vals)])
}
