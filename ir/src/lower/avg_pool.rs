//! `avg_pool2d`: per output position, the sum of the window's taps inside the input (unrolled,
//! padding reads masked to zero) over a divisor — ATen's: the override if given, else the
//! window's extent clipped to the padded input (`count_include_pad`) or to the input itself. The
//! divisor is an index expression (a constant unless padding or ceil mode clip some windows), so
//! it costs nothing per tap.

use super::ops::{map, msg, opt_int, tensor};
use super::pool::{pooled_sizes, window, Window};
use super::promote::compute_dtype;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode};
use crate::loop_ir::{BinaryOp, Constant};
use crate::sym::Expr;
use std::rc::Rc;

type R<T> = Result<T, NodeError>;

/// `avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
/// divisor_override)` over the last two dimensions of a 3-D or 4-D float input.
pub(super) fn avg_pool2d(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let x = tensor(l, n, "self")?;
    let rank = x.sizes.len();
    if !(3..=4).contains(&rank) || !x.dtype.is_float() {
        return msg(format!(
            "expects a float input of 3 or 4 dimensions, found {} of rank {rank}",
            x.dtype
        ));
    }
    let w = window(l, n, false)?;
    // ATen's default is to count the padding.
    let include_pad = !matches!(n.arg("count_include_pad"), Some(Arg::Bool(false)));
    let divisor = match opt_int(n, "divisor_override")? {
        None => None,
        Some(e) => match l.env.pool().as_const(e) {
            Some(0) => return msg("divisor_override must not be zero"),
            Some(v) => Some(v),
            None => return msg("divisor_override must be a constant"),
        },
    };
    let ins = [x.sizes[rank - 2], x.sizes[rank - 1]];
    let outs = pooled_sizes(l, ins, &w)?;
    let Window {
        kernel,
        stride,
        padding,
        ceil,
        ..
    } = w;
    let mut sizes = x.sizes[..rank - 2].to_vec();
    sizes.extend(outs);
    let (dtype, cd) = (x.dtype, compute_dtype(x.dtype));
    let xl = x.loader.clone();
    let mean: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        // Per dimension: each tap's position, and how many taps the divisor counts.
        let mut taps: [Vec<(Expr, Option<Expr>)>; 2] = [Vec::new(), Vec::new()];
        let mut counts = Vec::with_capacity(2);
        for i in 0..2 {
            let p = c.env.pool_mut();
            let start = p.scale(idx[rank - 2 + i], stride[i]);
            // Without ceil mode every window ends inside the padded input; without padding too,
            // inside the input: the count is the kernel's extent.
            let whole = !ceil && (include_pad || padding[i] == 0);
            let mut count = if whole {
                p.constant(kernel[i])
            } else {
                p.zero()
            };
            for t in 0..kernel[i] {
                let off = p.constant(t - padding[i]);
                let q = p.add(start, off);
                let zero = p.zero();
                let (lo, hi) = (p.le(zero, q), p.lt(q, ins[i]));
                let inside = p.and(&[lo, hi]);
                let counted = if include_pad {
                    // Inside the padded input: only ceil mode's last window reaches past it.
                    let pad = p.constant(padding[i]);
                    let end = p.add(ins[i], pad);
                    p.lt(q, end)
                } else {
                    inside
                };
                if !whole {
                    let (one, zero) = (p.one(), p.zero());
                    let term = p.where_(counted, one, zero);
                    count = p.add(count, term);
                }
                let masked = padding[i] > 0 || ceil;
                taps[i].push((q, masked.then_some(inside)));
            }
            counts.push(count);
        }
        let mut acc = c.body.constant(Constant::float(0.0), cd);
        for (qh, mh) in &taps[0] {
            for (qw, mw) in &taps[1] {
                let mut src = idx[..rank - 2].to_vec();
                src.extend([*qh, *qw]);
                let masks: Vec<Expr> = [mh, mw].into_iter().flatten().copied().collect();
                let v = if masks.is_empty() {
                    let v = xl(c, &src);
                    c.body.cast(v, cd)
                } else {
                    let e = c.env.pool_mut().and(&masks);
                    let m = c.body.index(e);
                    let m = c.body.cast(m, DType::Bool);
                    let outer = c.body.enter_mask(m);
                    let v = xl(c, &src);
                    let v = c.body.cast(v, cd);
                    c.body.exit_mask(outer);
                    let z = c.body.constant(Constant::float(0.0), cd);
                    c.body.where_(m, v, z)
                };
                acc = c.body.binary(BinaryOp::Add, acc, v);
            }
        }
        // The product in the body: the symbolic engine would distribute it over the terms.
        let d = match divisor {
            Some(v) => {
                let e = c.env.pool_mut().constant(v);
                c.body.index(e)
            }
            None => {
                let (h, w) = (c.body.index(counts[0]), c.body.index(counts[1]));
                c.body.binary(BinaryOp::Mul, h, w)
            }
        };
        let d = c.body.cast(d, cd);
        c.body.binary(BinaryOp::Div, acc, d)
    });
    let out = LTensor::lazy(cd, sizes, mean);
    Ok(vec![map(l, &[out], cd, dtype, |_, v| v[0])?])
}
