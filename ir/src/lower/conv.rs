//! `convolution` (1, 2 or 3 spatial dimensions; strides, zero padding, dilation, groups; and
//! transposed) as a matmul: the input unfolded into columns (im2col) by a gather whose reads
//! outside the input are masked to zero, one product per group through the library matmul, then
//! the result read back as `[N, O, *spatial]` with the bias added. A transposed convolution is the
//! direct one over its input spread by the stride (the gather reads only the multiples) with the
//! kernel flipped. Sizes stay symbolic: an output extent that could be empty is asserted positive
//! at run time, as ATen refuses it.

use std::rc::Rc;

use super::args::{const_ints, int, msg, tensor};
use super::matmul::matmul;
use super::pointwise::map;
use super::promote::compute_dtype;
use super::views::{assert_equal, numel, permute, view};
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode};
use crate::loop_ir::{BinaryOp, Constant};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// One value per spatial dimension: a single one stands for all.
fn per_dim(l: &Lowerer, n: &GraphNode, name: &str, d: usize) -> R<Vec<i64>> {
    let v = const_ints(l, n, name)?;
    match v.len() {
        1 => Ok(vec![v[0]; d]),
        k if k == d => Ok(v),
        k => msg(format!("{name}: {k} values for {d} spatial dimensions")),
    }
}

/// Row-major multi-index of `flat` in `sizes`.
fn unflatten(c: &mut Ctx, flat: Expr, sizes: &[Expr]) -> Vec<Expr> {
    let mut out = vec![flat; sizes.len()];
    let mut rest = flat;
    for k in (0..sizes.len()).rev() {
        let p = c.env.pool_mut();
        out[k] = if k == 0 {
            rest
        } else {
            p.modulo(rest, sizes[k])
        };
        if k > 0 {
            rest = p.floordiv(rest, sizes[k]);
        }
    }
    out
}

fn flatten(c: &mut Ctx, idx: &[Expr], sizes: &[Expr]) -> Expr {
    let p = c.env.pool_mut();
    let mut acc = p.zero();
    for (&i, &s) in idx.iter().zip(sizes) {
        let scaled = p.mul(acc, s);
        acc = p.add(scaled, i);
    }
    acc
}

pub(super) fn convolution(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "input")?;
    let w = tensor(l, n, "weight")?;
    let transposed = matches!(n.arg("transposed"), Some(Arg::Bool(true)));
    let rank = x.sizes.len();
    if !(3..=5).contains(&rank) || w.sizes.len() != rank {
        return msg(format!(
            "expects an input of 1 to 3 spatial dimensions and a weight of the same rank, found \
             ranks {rank} and {}",
            w.sizes.len()
        ));
    }
    if x.dtype != w.dtype || !x.dtype.is_float() {
        return msg(format!(
            "input and weight must share a float dtype, found {} and {}",
            x.dtype, w.dtype
        ));
    }
    let d = rank - 2;
    let (stride, padding, dilation) = (
        per_dim(l, n, "stride", d)?,
        per_dim(l, n, "padding", d)?,
        per_dim(l, n, "dilation", d)?,
    );
    if stride.iter().chain(&dilation).any(|&v| v < 1) || padding.iter().any(|&v| v < 0) {
        return msg("strides and dilations must be positive, padding non-negative");
    }
    let extra = if transposed {
        let v = const_ints(l, n, "output_padding")?;
        let v = match v.len() {
            0 => vec![0; d],
            1 => vec![v[0]; d],
            k if k == d => v,
            k => {
                return msg(format!(
                    "output_padding: {k} values for {d} spatial dimensions"
                ))
            }
        };
        if (0..d).any(|i| v[i] < 0 || v[i] >= stride[i].max(dilation[i])) {
            return msg("output_padding must be smaller than the stride or the dilation");
        }
        v
    } else {
        vec![0; d]
    };
    let groups = match l.env.pool().as_const(int(n, "groups")?) {
        Some(g) if g >= 1 => g,
        _ => return msg("groups must be a positive constant"),
    };
    let (batch, channels) = (x.sizes[0], x.sizes[1]);
    let g = l.env.pool_mut().constant(groups);
    // Weights [O, C/g, *k]; transposed [C, O/g, *k].
    let (out_channels, group_channels) = if transposed {
        let p = l.env.pool_mut();
        let o = p.mul(w.sizes[1], g);
        let cg = p.floordiv(w.sizes[0], g);
        assert_equal(l, channels, w.sizes[0], "convolution: input channels")?;
        (o, cg)
    } else {
        (w.sizes[0], w.sizes[1])
    };
    let want_channels = l.env.pool_mut().mul(group_channels, g);
    assert_equal(l, channels, want_channels, "convolution: input channels")?;
    let og = {
        let p = l.env.pool_mut();
        let og = p.floordiv(out_channels, g);
        let back = p.mul(og, g);
        assert_equal(
            l,
            out_channels,
            back,
            "convolution: output channels divisible by groups",
        )?;
        og
    };
    let (inputs, kernel): (Vec<Expr>, Vec<Expr>) = (x.sizes[2..].to_vec(), w.sizes[2..].to_vec());
    // out = (in + 2·pad − dil·(k − 1) − 1) // stride + 1; transposed, the inverse:
    // (in − 1)·stride − 2·pad + dil·(k − 1) + output_padding + 1. At least 1.
    let mut outs = Vec::with_capacity(d);
    for i in 0..d {
        let p = l.env.pool_mut();
        let one = p.one();
        let k1 = p.sub(kernel[i], one);
        let reach = p.scale(k1, dilation[i]);
        let o = if transposed {
            let in1 = p.sub(inputs[i], one);
            let spread = p.scale(in1, stride[i]);
            let rest = p.constant(1 + extra[i] - 2 * padding[i]);
            p.add_all(&[spread, reach, rest])
        } else {
            let pad2 = p.constant(2 * padding[i]);
            let padded = p.add(inputs[i], pad2);
            let span = p.sub(padded, reach);
            let span = p.sub(span, one);
            let s = p.constant(stride[i]);
            let steps = p.floordiv(span, s);
            p.add(steps, one)
        };
        let o = l.env.simplify(o);
        let ok = l.env.pool_mut().ge(o, one);
        l.require(ok, |env| {
            format!(
                "the output's spatial size {} can be empty (input {}, kernel {})",
                env.text(o),
                env.text(inputs[i]),
                env.text(kernel[i])
            )
        })?;
        outs.push(o);
    }
    let positions = numel(l, &outs);
    let taps = numel(l, &kernel);
    let cols_k = l.env.pool_mut().mul(group_channels, taps);
    let rows = l.env.pool_mut().mul(batch, positions);
    let (dtype, cd) = (x.dtype, compute_dtype(x.dtype));
    // Columns [groups, N·P, Cg·K]: row (n, p), column (c, k) reads x[n, g·Cg + c, p·s − pad + k·dil];
    // transposed, the input spread by the stride and padded by dil·(k − 1) − pad on each side:
    // q = p + k·dil − (dil·(k − 1) − pad) reads x at q / stride when q is a multiple of it.
    let cols = {
        let (xl, outs, kernel, inputs) = (
            x.loader.clone(),
            outs.clone(),
            kernel.clone(),
            inputs.clone(),
        );
        let (stride, padding, dilation) = (stride.clone(), padding.clone(), dilation.clone());
        let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
            let (gi, r, col) = (idx[0], idx[1], idx[2]);
            let p = c.env.pool_mut();
            let nb = p.floordiv(r, positions);
            let pos = p.modulo(r, positions);
            let ch = p.floordiv(col, taps);
            let tap = p.modulo(col, taps);
            let first = p.mul(gi, group_channels);
            let ch = p.add(first, ch);
            let at_out = unflatten(c, pos, &outs);
            let at_tap = unflatten(c, tap, &kernel);
            let mut src = vec![nb, ch];
            let mut inside = Vec::new();
            for i in 0..outs.len() {
                let p = c.env.pool_mut();
                let off = p.scale(at_tap[i], dilation[i]);
                if transposed {
                    let k1 = p.sub(kernel[i], p.one());
                    let reach = p.scale(k1, dilation[i]);
                    let pad = p.constant(padding[i]);
                    let q = p.add_all(&[at_out[i], off, pad]);
                    let q = p.sub(q, reach);
                    let zero = p.zero();
                    inside.push(p.le(zero, q));
                    let at = if stride[i] > 1 {
                        let s = p.constant(stride[i]);
                        let r = p.modulo(q, s);
                        inside.push(p.eq(r, zero));
                        p.floordiv(q, s)
                    } else {
                        q
                    };
                    inside.push(p.lt(at, inputs[i]));
                    src.push(at);
                    continue;
                }
                let base = p.scale(at_out[i], stride[i]);
                let pad = p.constant(-padding[i]);
                let at = p.add_all(&[base, off, pad]);
                if padding[i] > 0 {
                    let zero = p.zero();
                    inside.push(p.le(zero, at));
                    inside.push(p.lt(at, inputs[i]));
                }
                src.push(at);
            }
            if inside.is_empty() {
                let v = xl(c, &src);
                return c.body.cast(v, cd);
            }
            let inside = c.env.pool_mut().and(&inside);
            let m = c.body.index(inside);
            let m = c.body.cast(m, DType::Bool);
            let outer = c.body.enter_mask(m);
            let v = xl(c, &src);
            let v = c.body.cast(v, cd);
            c.body.exit_mask(outer);
            let zero = c.body.constant(Constant::float(0.0), cd);
            c.body.where_(m, v, zero)
        });
        LTensor::lazy(dtype, vec![g, rows, cols_k], loader)
    };
    // Weights [O, Cg, *k] as [groups, Cg·K, O/groups]; transposed, [C, O/g, *k] read at
    // (g·Cg + c, o, k − 1 − tap): each group's channels swapped, the kernel flipped.
    let wm = if transposed {
        let (wl, kernel) = (w.loader.clone(), kernel.clone());
        let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
            let (gi, col, o) = (idx[0], idx[1], idx[2]);
            let p = c.env.pool_mut();
            let ch = p.floordiv(col, taps);
            let tap = p.modulo(col, taps);
            let first = p.mul(gi, group_channels);
            let ch = p.add(first, ch);
            let at_tap = unflatten(c, tap, &kernel);
            let mut src = vec![ch, o];
            for (i, &t) in at_tap.iter().enumerate() {
                let p = c.env.pool_mut();
                let last = p.sub(kernel[i], p.one());
                src.push(p.sub(last, t));
            }
            let v = wl(c, &src);
            c.body.cast(v, cd)
        });
        LTensor::lazy(dtype, vec![g, cols_k, og], loader)
    } else {
        let wm = view(l, w, &[g, og, cols_k])?;
        permute(wm, &[0, 2, 1])?
    };
    // f32 products for 16-bit dtypes when a bias follows: the result rounds once.
    let bias = match n.arg("bias") {
        Some(Arg::Tensor(_)) => Some(tensor(l, n, "bias")?),
        _ => None,
    };
    let product = matmul(l, n, cols, wm, true, None, bias.is_some())?;
    // Back to [N, O, *out]: element (n, o, p) is product[o / Og, n·P + p, o mod Og].
    let mut sizes = vec![batch, out_channels];
    sizes.extend(&outs);
    let (pl, outs2) = (product.loader.clone(), outs.clone());
    let pd = compute_dtype(product.dtype);
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let pos = flatten(c, &idx[2..], &outs2);
        let p = c.env.pool_mut();
        let gi = p.floordiv(idx[1], og);
        let o = p.modulo(idx[1], og);
        let first = p.mul(idx[0], positions);
        let r = p.add(first, pos);
        let v = pl(c, &[gi, r, o]);
        c.body.cast(v, pd)
    });
    let out = LTensor::lazy(product.dtype, sizes, loader);
    let Some(bias) = bias else {
        return Ok(out);
    };
    // The bias [O] as [O, 1, …] against [N, O, *out].
    let mut bshape = vec![out_channels];
    bshape.extend(std::iter::repeat_n(l.env.pool_mut().one(), d));
    let bias = view(l, bias, &bshape)?;
    map(l, &[out, bias], dtype, dtype, |c, v| {
        c.body.binary(BinaryOp::Add, v[0], v[1])
    })
}
