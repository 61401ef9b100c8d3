//! The per-channel and windowed ops of convolutional networks: inference batch norm,
//! `max_pool2d_with_indices` and nearest upsampling, each pointwise over its outputs (a pooling
//! window is a few taps, unrolled; an upsampling a computed gather). Spatial sizes may be
//! symbolic.

use std::rc::Rc;

use super::args::{const_ints, msg, tensor};
use super::pointwise::map;
use super::promote::compute_dtype;
use super::views::view;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode};
use crate::loop_ir::{BinaryOp, Constant, UnaryOp};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// A float argument, or an integer constant read as one.
pub(super) fn float(l: &Lowerer, n: &GraphNode, name: &str) -> R<f64> {
    match n.arg(name) {
        Some(Arg::Float(f)) => Ok(*f),
        Some(Arg::Int(e)) => match l.env.pool().as_const(*e) {
            Some(v) => Ok(v as f64),
            None => msg(format!("argument '{name}': expected a constant")),
        },
        other => msg(format!(
            "argument '{name}': expected a float, found {other:?}"
        )),
    }
}

/// `_native_batch_norm_legit_no_training`: `(x − mean[c]) · rsqrt(var[c] + eps) · w[c] + b[c]`
/// over channel dimension 1, in the compute dtype, rounded once; the saved mean and rstd are
/// empty, as ATen returns them in inference.
pub(super) fn batch_norm(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let x = tensor(l, n, "input")?;
    let rank = x.sizes.len();
    if rank < 2 || !x.dtype.is_float() {
        return msg(format!(
            "expects a float input with a channel dimension, found {} of rank {rank}",
            x.dtype
        ));
    }
    let (dtype, cd) = (x.dtype, compute_dtype(x.dtype));
    let eps = float(l, n, "eps")?;
    // Per-channel tensors as [C, 1, …] against [N, C, *spatial].
    let mut shape = vec![x.sizes[1]];
    shape.extend(std::iter::repeat_n(l.env.pool_mut().one(), rank - 2));
    let channel = |l: &mut Lowerer, name: &str| -> R<Option<LTensor>> {
        match n.arg(name) {
            Some(Arg::Tensor(_)) => {
                let t = tensor(l, n, name)?;
                if t.sizes.len() != 1 {
                    return msg(format!("{name} must have one dimension"));
                }
                Ok(Some(view(l, t, &shape)?))
            }
            _ => Ok(None),
        }
    };
    let (Some(mean), Some(var)) = (channel(l, "running_mean")?, channel(l, "running_var")?) else {
        return msg("running_mean and running_var are required");
    };
    let (weight, bias) = (channel(l, "weight")?, channel(l, "bias")?);
    let rstd = map(l, &[var], cd, cd, move |c, v| {
        let e = c.body.constant(Constant::float(eps), cd);
        let s = c.body.binary(BinaryOp::Add, v[0], e);
        c.body.unary(UnaryOp::Rsqrt, s)
    })?;
    let mut out = map(l, &[x, mean, rstd], cd, cd, |c, v| {
        let d = c.body.binary(BinaryOp::Sub, v[0], v[1]);
        c.body.binary(BinaryOp::Mul, d, v[2])
    })?;
    for (t, op) in [(weight, BinaryOp::Mul), (bias, BinaryOp::Add)] {
        if let Some(t) = t {
            out = map(l, &[out, t], cd, cd, move |c, v| {
                c.body.binary(op, v[0], v[1])
            })?;
        }
    }
    let out = map(l, &[out], cd, dtype, |_, v| v[0])?;
    let zero = l.env.pool_mut().zero();
    let empty = || {
        let loader: Loader =
            Rc::new(move |c: &mut Ctx, _: &[Expr]| c.body.constant(Constant::float(0.0), cd));
        LTensor::lazy(dtype, vec![zero], loader)
    };
    Ok(vec![out, empty(), empty()])
}

/// A 2-D pooling window's constant arguments (one value or two each).
pub(super) struct Window {
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
    pub ceil: bool,
}

/// The window arguments of `n`: `kernel_size`, `stride` (the kernel when empty), `padding`,
/// `dilation` (when the op has it) and `ceil_mode`.
pub(super) fn window(l: &Lowerer, n: &GraphNode, dilated: bool) -> R<Window> {
    let two = |v: Vec<i64>, name: &str| -> R<[i64; 2]> {
        match v[..] {
            [a] => Ok([a, a]),
            [a, b] => Ok([a, b]),
            _ => msg(format!("{name}: expected 1 or 2 values, found {}", v.len())),
        }
    };
    let kernel = two(const_ints(l, n, "kernel_size")?, "kernel_size")?;
    let stride = match const_ints(l, n, "stride")? {
        v if v.is_empty() => kernel,
        v => two(v, "stride")?,
    };
    let padding = two(const_ints(l, n, "padding")?, "padding")?;
    let dilation = if dilated {
        two(const_ints(l, n, "dilation")?, "dilation")?
    } else {
        [1, 1]
    };
    let ceil = matches!(n.arg("ceil_mode"), Some(Arg::Bool(true)));
    if kernel
        .iter()
        .chain(&stride)
        .chain(&dilation)
        .any(|&v| v < 1)
        || (0..2).any(|i| padding[i] < 0 || 2 * padding[i] as i128 > kernel[i] as i128)
    {
        return msg(
            "kernel, stride and dilation must be positive, padding at most half the kernel",
        );
    }
    // The window's extent, d·(k − 1) + 1, must be a size (it is compared with the input).
    if (0..2).any(|i| dilation[i] as i128 * (kernel[i] as i128 - 1) + 1 > i32::MAX as i128) {
        return msg("the pooling window (dilation × (kernel − 1) + 1) is larger than any input");
    }
    Ok(Window {
        kernel,
        stride,
        padding,
        dilation,
        ceil,
    })
}

/// ATen's pooled sizes of the spatial sizes `ins`; an empty output is an error.
pub(super) fn pooled_sizes(l: &mut Lowerer, ins: [Expr; 2], w: &Window) -> R<[Expr; 2]> {
    let mut outs = ins;
    for i in 0..2 {
        // (in + 2p − d(k − 1) − 1 [+ s − 1]) // s + 1, less one when ceil's last window starts
        // past the padded input.
        let p = l.env.pool_mut();
        let span = p.constant(2 * w.padding[i] - w.dilation[i] * (w.kernel[i] - 1) - 1);
        let mut top = p.add(ins[i], span);
        if w.ceil {
            let extra = p.constant(w.stride[i] - 1);
            top = p.add(top, extra);
        }
        let s = p.constant(w.stride[i]);
        let steps = p.floordiv(top, s);
        let one = p.one();
        let mut o = p.add(steps, one);
        if w.ceil {
            let last = p.scale(steps, w.stride[i]);
            let pad = p.constant(w.padding[i]);
            let limit = p.add(ins[i], pad);
            let past = p.ge(last, limit);
            let less = p.sub(o, one);
            o = p.where_(past, less, o);
        }
        let o = l.env.simplify(o);
        let ok = l.env.pool_mut().ge(o, one);
        l.require(ok, |env| {
            format!(
                "the output's size {} can be empty (input {})",
                env.text(o),
                env.text(ins[i])
            )
        })?;
        outs[i] = o;
    }
    Ok(outs)
}

/// A 2-D pooling op's `self`: a float tensor of 3 or 4 dimensions, pooled over the last two.
pub(super) fn pooling_input(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let rank = x.sizes.len();
    if !(3..=4).contains(&rank) || !x.dtype.is_float() {
        return msg(format!(
            "expects a float input of 3 or 4 dimensions, found {} of rank {rank}",
            x.dtype
        ));
    }
    Ok(x)
}

/// ATen's shape check of `max_pool2d` and `avg_pool2d`: no dimension may be empty but a 4-d
/// input's batch (proved, or asserted at run time).
pub(super) fn planes_nonempty(l: &mut Lowerer, x: &LTensor) -> R<()> {
    let rank = x.sizes.len();
    for k in rank - 3..rank {
        let one = l.env.pool().one();
        let ok = l.env.pool_mut().ge(x.sizes[k], one);
        let size = x.sizes[k];
        l.require(ok, |env| {
            format!(
                "the input's dimension {k} (size {}) is empty: only a 4-d input's batch may be",
                env.text(size)
            )
        })?;
    }
    Ok(())
}

/// `max_pool2d_with_indices` over the last two dimensions: per output position, the largest of
/// the window's taps inside the input (padding never wins) and its index `h·W + w` in the input
/// plane — ATen's order: a later tap replaces only a smaller value, and a NaN always (so the
/// value is NaN if any is, at the last NaN).
pub(super) fn max_pool2d(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let x = pooling_input(l, n)?;
    planes_nonempty(l, &x)?;
    let rank = x.sizes.len();
    let w = window(l, n, true)?;
    let ins = [x.sizes[rank - 2], x.sizes[rank - 1]];
    let outs = pooled_sizes(l, ins, &w)?;
    let Window {
        kernel,
        stride,
        padding,
        dilation,
        ceil,
    } = w;
    let mut sizes = x.sizes[..rank - 2].to_vec();
    sizes.extend(outs);
    let (dtype, cd) = (x.dtype, compute_dtype(x.dtype));
    // Both outputs run the same window; each is its own pointwise tensor.
    let window = move |c: &mut Ctx,
                       xl: &Loader,
                       idx: &[Expr]|
          -> (crate::loop_ir::ValueId, crate::loop_ir::ValueId) {
        let mut acc = c.body.constant(Constant::float(f64::NEG_INFINITY), cd);
        let mut at = c.body.constant(Constant::Int(-1), DType::I64);
        let mut seen = c.body.constant(Constant::Int(0), DType::Bool);
        for th in 0..kernel[0] {
            for tw in 0..kernel[1] {
                let mut src = idx[..rank - 2].to_vec();
                let mut inside = Vec::new();
                let mut pos = Vec::new();
                for (i, t) in [th, tw].into_iter().enumerate() {
                    let p = c.env.pool_mut();
                    let base = p.scale(idx[rank - 2 + i], stride[i]);
                    let off = p.constant(t * dilation[i] - padding[i]);
                    let q = p.add(base, off);
                    // Padding, and ceil mode's last window, reach past the input.
                    if padding[i] > 0 || ceil {
                        let zero = p.zero();
                        inside.push(p.le(zero, q));
                        inside.push(p.lt(q, ins[i]));
                    }
                    pos.push(q);
                    src.push(q);
                }
                let flat = {
                    let p = c.env.pool_mut();
                    let row = p.mul(pos[0], ins[1]);
                    p.add(row, pos[1])
                };
                let m = if inside.is_empty() {
                    None
                } else {
                    let e = c.env.pool_mut().and(&inside);
                    let m = c.body.index(e);
                    Some(c.body.cast(m, DType::Bool))
                };
                let outer = m.map(|m| c.body.enter_mask(m));
                let v = xl(c, &src);
                let v = c.body.cast(v, cd);
                if let Some(o) = outer {
                    c.body.exit_mask(o);
                }
                let gt = c.body.binary(BinaryOp::Gt, v, acc);
                let nan = c.body.binary(BinaryOp::Ne, v, v);
                let fresh = c.body.unary(UnaryOp::LogicalNot, seen);
                let better = c.body.binary(BinaryOp::LogicalOr, gt, nan);
                let mut take = c.body.binary(BinaryOp::LogicalOr, better, fresh);
                if let Some(m) = m {
                    take = c.body.binary(BinaryOp::LogicalAnd, take, m);
                    seen = c.body.binary(BinaryOp::LogicalOr, seen, m);
                } else {
                    seen = c.body.constant(Constant::Int(1), DType::Bool);
                }
                acc = c.body.where_(take, v, acc);
                let here = c.body.index(flat);
                at = c.body.where_(take, here, at);
            }
        }
        (acc, at)
    };
    let window = Rc::new(window);
    let (xl, w2) = (x.loader.clone(), window.clone());
    let values: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| window(c, &xl, idx).0);
    let xl = x.loader.clone();
    let indices: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| w2(c, &xl, idx).1);
    Ok(vec![
        LTensor::lazy(dtype, sizes.clone(), values),
        LTensor::lazy(DType::I64, sizes, indices),
    ])
}

/// An upsampling's input and the spatial sizes: the input's last two, the output's (given, or
/// the input's times the factors), and the factors if given.
struct Upsampling {
    x: LTensor,
    ins: [Expr; 2],
    outs: [Expr; 2],
    factors: Option<[f64; 2]>,
}

fn upsampling(l: &mut Lowerer, n: &GraphNode) -> R<Upsampling> {
    let x = tensor(l, n, "input")?;
    let rank = x.sizes.len();
    if rank < 3 {
        return msg(format!(
            "expects an input of 3 or more dimensions, found {rank}"
        ));
    }
    let ins = [x.sizes[rank - 2], x.sizes[rank - 1]];
    let factors = match n.arg("scale_factors") {
        Some(Arg::Floats(f)) if f.len() == 2 && f.iter().all(|&v| v > 0.0) => Some([f[0], f[1]]),
        Some(Arg::Floats(f)) => {
            return msg(format!(
                "scale_factors: expected 2 positive values, found {f:?}"
            ))
        }
        _ => None,
    };
    let outs: [Expr; 2] = match (n.arg("output_size"), factors) {
        (Some(Arg::Ints(v)), _) if v.len() == 2 => [v[0], v[1]],
        (Some(Arg::Ints(v)), _) => {
            return msg(format!("output_size: expected 2 sizes, found {}", v.len()))
        }
        (_, Some(f)) => {
            let mut o = ins;
            for i in 0..2 {
                // floor(I · factor): a constant, or for a symbolic size (I · m) // 2^e with the
                // factor m / 2^e exactly (a binary fraction of few bits: the product ATen
                // takes in f64 is exact).
                let dyadic = (0..=20).find_map(|e| {
                    let m = f[i] * f64::from(1u32 << e);
                    (m.fract() == 0.0 && m < f64::from(1u32 << 20)).then_some((m as i64, 1i64 << e))
                });
                o[i] = match (l.env.pool().as_const(ins[i]), dyadic) {
                    (Some(v), _) => l.env.pool_mut().constant((v as f64 * f[i]).floor() as i64),
                    (None, Some((m, d))) => {
                        let p = l.env.pool_mut();
                        let scaled = p.scale(ins[i], m);
                        let d = p.constant(d);
                        let o = p.floordiv(scaled, d);
                        l.env.simplify(o)
                    }
                    (None, None) => {
                        return msg(format!(
                            "the scale factor {} of the symbolic size {} is not a binary \
                             fraction of 20 bits or fewer",
                            f[i],
                            l.env.text(ins[i])
                        ))
                    }
                };
            }
            o
        }
        _ => return msg("needs output_size or scale_factors"),
    };
    Ok(Upsampling {
        x,
        ins,
        outs,
        factors,
    })
}

/// `upsample_nearest2d.vec` (`exact`: `_upsample_nearest_exact2d.vec`) over the last two
/// dimensions: output position `o` reads the input at `min(floor(o · scale), I − 1)` (exact:
/// `floor((o + ½) · scale)`), the scale `1 / factor` when factors are given, else `I / O` — in
/// f32, as ATen computes it, so every size picks ATen's source rows.
pub(super) fn upsample_nearest2d(l: &mut Lowerer, n: &GraphNode, exact: bool) -> R<LTensor> {
    let Upsampling {
        x,
        ins,
        outs,
        factors,
    } = upsampling(l, n)?;
    let rank = x.sizes.len();
    let mut sizes = x.sizes[..rank - 2].to_vec();
    sizes.extend(outs);
    let xl = x.loader.clone();
    let origin = l.origin();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx[..rank - 2].to_vec();
        for i in 0..2 {
            let scale = match factors {
                Some(f) => c
                    .body
                    .constant(Constant::float((1.0 / f[i]) as f32 as f64), DType::F32),
                None => {
                    let (a, b) = (c.body.index(ins[i]), c.body.index(outs[i]));
                    let (a, b) = (c.body.cast(a, DType::F32), c.body.cast(b, DType::F32));
                    c.body.binary(BinaryOp::Div, a, b)
                }
            };
            let o = c.body.index(idx[rank - 2 + i]);
            let mut o = c.body.cast(o, DType::F32);
            if exact {
                let half = c.body.constant(Constant::float(0.5), DType::F32);
                o = c.body.binary(BinaryOp::Add, o, half);
            }
            // Non-negative: the conversion's truncation is the floor.
            let p = c.body.binary(BinaryOp::Mul, o, scale);
            let p = c.body.cast(p, DType::I64);
            let last = {
                let p = c.env.pool_mut();
                let minus_one = p.constant(-1);
                p.add(ins[i], minus_one)
            };
            let last = c.body.index(last);
            let p = c.body.binary(BinaryOp::Min, p, last);
            let var = c.bind_index(p, ins[i], &origin);
            src.push(var);
        }
        xl(c, &src)
    });
    Ok(LTensor::lazy(x.dtype, sizes, loader))
}

/// `upsample_bilinear2d.vec` over the last two dimensions, as ATen's linear interpolation: the
/// source coordinate `scale · o` (`align_corners`, scale `(I − 1)/(O − 1)`) or
/// `max(scale · (o + ½) − ½, 0)` (scale `1 / factor`, else `I / O`), its floor `i0` (at most
/// `I − 1`), `i1 = i0 + 1` inside the input, weights `1 − λ` and `λ`; in the compute dtype.
pub(super) fn upsample_bilinear2d(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let Upsampling {
        x,
        ins,
        outs,
        factors,
    } = upsampling(l, n)?;
    if !x.dtype.is_float() {
        return msg(format!("expects a float input, found {}", x.dtype));
    }
    let align = matches!(n.arg("align_corners"), Some(Arg::Bool(true)));
    let rank = x.sizes.len();
    let (dtype, cd) = (x.dtype, compute_dtype(x.dtype));
    let mut sizes = x.sizes[..rank - 2].to_vec();
    sizes.extend(outs);
    let xl = x.loader.clone();
    let origin = l.origin();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let float = |c: &mut Ctx, v: f64| c.body.constant(Constant::float(v), cd);
        // Per dimension: the two source indices (bound variables) and their weights.
        let mut taps = Vec::with_capacity(2);
        for i in 0..2 {
            let (one, zero) = (float(c, 1.0), float(c, 0.0));
            let input = c.body.index(ins[i]);
            let input = c.body.cast(input, cd);
            let output = c.body.index(outs[i]);
            let output = c.body.cast(output, cd);
            let scale = if align {
                let (a, b) = (
                    c.body.binary(BinaryOp::Sub, input, one),
                    c.body.binary(BinaryOp::Sub, output, one),
                );
                let q = c.body.binary(BinaryOp::Div, a, b);
                let more = c.body.binary(BinaryOp::Gt, b, zero);
                c.body.where_(more, q, zero)
            } else {
                match factors {
                    Some(f) => float(c, (1.0 / f[i]) as f32 as f64),
                    None => c.body.binary(BinaryOp::Div, input, output),
                }
            };
            let o = c.body.index(idx[rank - 2 + i]);
            let o = c.body.cast(o, cd);
            let src = if align {
                c.body.binary(BinaryOp::Mul, scale, o)
            } else {
                let half = float(c, 0.5);
                let centre = c.body.binary(BinaryOp::Add, o, half);
                let s = c.body.binary(BinaryOp::Mul, scale, centre);
                let s = c.body.binary(BinaryOp::Sub, s, half);
                c.body.binary(BinaryOp::Max, s, zero)
            };
            let last = {
                let p = c.env.pool_mut();
                let minus_one = p.constant(-1);
                p.add(ins[i], minus_one)
            };
            let last = c.body.index(last);
            // Non-negative: the conversion's truncation is the floor.
            let i0 = c.body.cast(src, DType::I64);
            let i0 = c.body.binary(BinaryOp::Min, i0, last);
            let lam = c.body.cast(i0, cd);
            let lam = c.body.binary(BinaryOp::Sub, src, lam);
            let lam = c.body.binary(BinaryOp::Max, lam, zero);
            let lam = c.body.binary(BinaryOp::Min, lam, one);
            let inside = c.body.binary(BinaryOp::Lt, i0, last);
            let step = c.body.cast(inside, DType::I64);
            let i1 = c.body.binary(BinaryOp::Add, i0, step);
            let v0 = c.bind_index(i0, ins[i], &origin);
            let v1 = c.bind_index(i1, ins[i], &origin);
            let lam0 = c.body.binary(BinaryOp::Sub, one, lam);
            taps.push([(v0, lam0), (v1, lam)]);
        }
        let mut acc = None;
        for &(h, wh) in &taps[0] {
            let mut row = None;
            for &(w, ww) in &taps[1] {
                let mut src = idx[..rank - 2].to_vec();
                src.extend([h, w]);
                let v = xl(c, &src);
                let v = c.body.cast(v, cd);
                let t = c.body.binary(BinaryOp::Mul, ww, v);
                row = Some(match row {
                    None => t,
                    Some(r) => c.body.binary(BinaryOp::Add, r, t),
                });
            }
            let t = c.body.binary(BinaryOp::Mul, wh, row.expect("two taps"));
            acc = Some(match acc {
                None => t,
                Some(a) => c.body.binary(BinaryOp::Add, a, t),
            });
        }
        acc.expect("two taps")
    });
    Ok(LTensor::lazy(dtype, sizes, loader))
}
