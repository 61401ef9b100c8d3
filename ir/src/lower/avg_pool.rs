//! `avg_pool2d`: per output position, the sum of the window's taps inside the input (unrolled,
//! padding reads masked to zero) over a divisor — ATen's: the override if given, else the
//! window's extent clipped to the padded input (`count_include_pad`) or to the input itself. The
//! divisor is an index expression (a constant unless padding or ceil mode clip some windows), so
//! it costs nothing per tap.

use super::args::{msg, opt_int};
use super::pointwise::map;
use super::pool::{planes_nonempty, pooled_sizes, pooling_input, window, Window};
use super::promote::compute_dtype;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode};
use crate::loop_ir::{BinaryOp, Constant, ValueId};
use crate::sym::Expr;
use std::rc::Rc;

type R<T> = Result<T, NodeError>;

/// A tap's position along one dimension, and the condition that it reads the input (if any).
type Tap = (Expr, Option<Expr>);

/// `avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
/// divisor_override)` over the last two dimensions of a 3-D or 4-D float input.
pub(super) fn avg_pool2d(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let x = pooling_input(l, n)?;
    planes_nonempty(l, &x)?;
    let rank = x.sizes.len();
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
        let mut taps: [Vec<Tap>; 2] = [Vec::new(), Vec::new()];
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
                let v = masked_load(c, &xl, &src, &masks, cd);
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

/// The most taps an adaptive window may unroll (both dimensions together). Unrolling keeps every
/// output one pointwise read of its window; pooling a large symbolic plane to a few outputs would
/// need a reduction over variable windows (or an integral image) instead.
const MAX_ADAPTIVE_TAPS: i64 = 256;

/// `_adaptive_avg_pool2d(self, output_size)`: output position `o` of `O` averages input rows
/// `floor(o·I/O) .. ceil((o+1)·I/O)`. The windows' lengths vary, so the taps are unrolled up to
/// the longest window the input size's range allows (`ceil(I/O) + 1`), each masked to its
/// window; the divisor is the window's length. Windows of more than [`MAX_ADAPTIVE_TAPS`] taps
/// are refused with the sizes that need them.
pub(super) fn adaptive_avg_pool2d(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let x = pooling_input(l, n)?;
    let rank = x.sizes.len();
    let outs = match super::args::const_ints(l, n, "output_size")?[..] {
        [h, w] if h > 0 && w > 0 => [h, w],
        ref v => {
            return msg(format!(
                "output_size: expected 2 positive constants, found {v:?}"
            ))
        }
    };
    let ins = [x.sizes[rank - 2], x.sizes[rank - 1]];
    let mut taps = [0i64; 2];
    let mut uniform = [false; 2];
    let mut limits = [ins[0], ins[1]].map(|e| l.env.text(e));
    for i in 0..2 {
        let o = outs[i];
        taps[i] = match l.env.pool().as_const(ins[i]) {
            Some(v) => {
                uniform[i] = v % o == 0;
                (0..o)
                    .map(|k| (((k + 1) * v + o - 1) / o) - (k * v) / o)
                    .max()
                    .unwrap_or(0)
            }
            None => {
                let hi = l.env.bound(ins[i]).hi;
                let len =
                    i64::try_from((hi + i128::from(o) - 1) / i128::from(o) + 1).unwrap_or(i64::MAX);
                limits[i] = if hi >= crate::sym::INF {
                    format!("{} (unbounded)", l.env.text(ins[i]))
                } else {
                    format!("{} (at most {hi})", l.env.text(ins[i]))
                };
                len
            }
        };
    }
    let count = |t: i64| {
        if t == i64::MAX {
            "unboundedly many".to_string()
        } else {
            t.to_string()
        }
    };
    if taps[0].saturating_mul(taps[1]) > MAX_ADAPTIVE_TAPS {
        return msg(format!(
            "pooling {} × {} to {} × {} takes windows of up to {} × {} taps, more than the \
             {MAX_ADAPTIVE_TAPS} this lowering unrolls",
            limits[0],
            limits[1],
            outs[0],
            outs[1],
            count(taps[0]),
            count(taps[1])
        ));
    }
    // ATen refuses an empty plane (its windows would be empty): a runtime check, as there.
    for size in ins {
        let zero = l.env.pool_mut().zero();
        let ok = l.env.pool_mut().lt(zero, size);
        l.require(ok, |env| {
            format!("the input's size {} can be zero", env.text(size))
        })?;
    }
    let mut sizes = x.sizes[..rank - 2].to_vec();
    for o in outs {
        sizes.push(l.env.pool_mut().constant(o));
    }
    let (dtype, cd) = (x.dtype, compute_dtype(x.dtype));
    let xl = x.loader.clone();
    let mean: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut dims: Vec<(Vec<Tap>, Expr)> = Vec::with_capacity(2);
        for i in 0..2 {
            let p = c.env.pool_mut();
            let o = p.constant(outs[i]);
            let at = p.mul(idx[rank - 2 + i], ins[i]);
            let start = p.floordiv(at, o);
            let next = p.add(at, ins[i]);
            let round = p.constant(outs[i] - 1);
            let next = p.add(next, round);
            let end = p.floordiv(next, o);
            let len = p.sub(end, start);
            let list = (0..taps[i])
                .map(|t| {
                    let off = p.constant(t);
                    let q = p.add(start, off);
                    (q, (!uniform[i]).then(|| p.lt(q, end)))
                })
                .collect();
            dims.push((list, len));
        }
        let mut acc = c.body.constant(Constant::float(0.0), cd);
        for (qh, mh) in &dims[0].0 {
            for (qw, mw) in &dims[1].0 {
                let mut src = idx[..rank - 2].to_vec();
                src.extend([*qh, *qw]);
                let masks: Vec<Expr> = [mh, mw].into_iter().flatten().copied().collect();
                let v = masked_load(c, &xl, &src, &masks, cd);
                acc = c.body.binary(BinaryOp::Add, acc, v);
            }
        }
        let (h, w) = (c.body.index(dims[0].1), c.body.index(dims[1].1));
        let d = c.body.binary(BinaryOp::Mul, h, w);
        let d = c.body.cast(d, cd);
        c.body.binary(BinaryOp::Div, acc, d)
    });
    let out = LTensor::lazy(cd, sizes, mean);
    Ok(vec![map(l, &[out], cd, dtype, |_, v| v[0])?])
}

/// `x[src]` in `cd`, or 0 where one of `masks` is false (the load itself masked).
fn masked_load(c: &mut Ctx, xl: &Loader, src: &[Expr], masks: &[Expr], cd: DType) -> ValueId {
    if masks.is_empty() {
        let v = xl(c, src);
        return c.body.cast(v, cd);
    }
    let e = c.env.pool_mut().and(masks);
    let m = c.body.index(e);
    let m = c.body.cast(m, DType::Bool);
    let outer = c.body.enter_mask(m);
    let v = xl(c, src);
    let v = c.body.cast(v, cd);
    c.body.exit_mask(outer);
    let z = c.body.constant(Constant::float(0.0), cd);
    c.body.where_(m, v, z)
}
