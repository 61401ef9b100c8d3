//! Normalizations. Their statistics over the data ([`standardize`]: the mean, then the biased
//! variance of the deviations in a second pass, `rstd = rsqrt(var + eps)`) serve the layer and
//! RMS norms over trailing dimensions, and `native_group_norm` (per sample and group of channels) and
//! `_native_batch_norm_legit.no_stats` in training mode (per channel over the batch and space:
//! what `InstanceNorm` exports as, on a `[1, N·C, …]` view), whose per-channel affine is rounded
//! once to the input's dtype.

use super::args::{ints, msg, number, tensor};
use super::pointwise::map;
use super::pool::float;
use super::promote::compute_dtype;
use super::views::view;
use super::{LTensor, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::loop_ir::{BinaryOp, Constant, ReductionKind, UnaryOp};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// `(x − mean) · rstd` in the compute dtype, with the mean and `rstd = rsqrt(var + eps)` (kept
/// dimensions) over `dims`; without `center`, RMS statistics: `x · rsqrt(mean(x²) + eps)` and no
/// mean. Shared by the layer, RMS, group and instance norms.
pub(super) fn standardize(
    l: &mut Lowerer,
    n: &GraphNode,
    x: &LTensor,
    dims: &[usize],
    eps: f64,
    center: bool,
) -> R<(LTensor, Option<LTensor>, LTensor)> {
    let cd = compute_dtype(x.dtype);
    let count = dims.iter().fold(l.env.pool_mut().one(), |acc, &d| {
        l.env.pool_mut().mul(acc, x.sizes[d])
    });
    let (centered, mean) = if center {
        let sum = l.reduction(x, dims, true, ReductionKind::Sum, cd, &n.name);
        let mean = map(l, &[sum, number(Scalar::Int(count))], cd, cd, |c, v| {
            c.body.binary(BinaryOp::Div, v[0], v[1])
        })?;
        let mean = l.realize(mean, &n.name);
        let centered = map(l, &[x.clone(), mean.clone()], cd, cd, |c, v| {
            c.body.binary(BinaryOp::Sub, v[0], v[1])
        })?;
        (centered, Some(mean))
    } else {
        (x.clone(), None)
    };
    let sq = map(l, std::slice::from_ref(&centered), cd, cd, |c, v| {
        c.body.binary(BinaryOp::Mul, v[0], v[0])
    })?;
    let ss = l.reduction(&sq, dims, true, ReductionKind::Sum, cd, &n.name);
    let rstd = map(l, &[ss, number(Scalar::Int(count))], cd, cd, move |c, v| {
        let d = c.body.cast(v[1], c.body.dtype(v[0]));
        let var = c.body.binary(BinaryOp::Div, v[0], d);
        let e = c.body.constant(Constant::float(eps), c.body.dtype(v[0]));
        let s = c.body.binary(BinaryOp::Add, var, e);
        c.body.unary(UnaryOp::Rsqrt, s)
    })?;
    let rstd = l.realize(rstd, &n.name);
    let out = map(l, &[centered, rstd.clone()], cd, cd, |c, v| {
        c.body.binary(BinaryOp::Mul, v[0], v[1])
    })?;
    Ok((out, mean, rstd))
}

/// `out · weight[c] + bias[c]` over channel dimension 1 of `out` (rank `rank`), rounded to `dtype`.
fn affine(l: &mut Lowerer, n: &GraphNode, mut out: LTensor, dtype: DType) -> R<LTensor> {
    let cd = compute_dtype(dtype);
    let rank = out.sizes.len();
    let mut shape = vec![out.sizes[1]];
    shape.extend(std::iter::repeat_n(l.env.pool_mut().one(), rank - 2));
    for (arg, op) in [("weight", BinaryOp::Mul), ("bias", BinaryOp::Add)] {
        if let Some(Arg::Tensor(_)) = n.arg(arg) {
            let t = tensor(l, n, arg)?;
            if t.sizes.len() != 1 {
                return msg(format!(
                    "{arg} must have one dimension, found {}",
                    t.sizes.len()
                ));
            }
            let t = view(l, t, &shape)?;
            out = map(l, &[out, t], cd, cd, move |c, v| {
                c.body.binary(op, v[0], v[1])
            })?;
        }
    }
    map(l, &[out], cd, dtype, |_, v| v[0])
}

fn float_input(n: &GraphNode, x: &LTensor) -> R<()> {
    if x.sizes.len() < 2 || !x.dtype.is_float() {
        return msg(format!(
            "{} expects a float input with a channel dimension, found {} of rank {}",
            n.op,
            x.dtype,
            x.sizes.len()
        ));
    }
    Ok(())
}

/// `native_group_norm(input, weight, bias, N, C, HxW, group, eps)` → (out, mean, rstd), the
/// statistics `[N, group]` in the input's dtype.
pub(super) fn group_norm(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let x = tensor(l, n, "input")?;
    float_input(n, &x)?;
    let dtype = x.dtype;
    let groups = match n.arg("group") {
        Some(Arg::Int(e)) => l.env.pool().as_const(*e),
        _ => None,
    }
    .filter(|&g| g > 0)
    .ok_or_else(|| NodeError::Message("argument 'group' must be a positive constant".into()))?;
    let eps = float(l, n, "eps")?;
    let (batch, channels) = (x.sizes[0], x.sizes[1]);
    let per_group = match l.env.pool().as_const(channels) {
        Some(c) if c % groups == 0 => c / groups,
        Some(c) => return msg(format!("{c} channels do not divide into {groups} groups")),
        None => return msg("the channel count must be a constant"),
    };
    let pool = l.env.pool_mut();
    let mut rest = pool.constant(per_group);
    for &s in &x.sizes[2..] {
        rest = pool.mul(rest, s);
    }
    let g = pool.constant(groups);
    let sizes = x.sizes.clone();
    let grouped = view(l, x, &[batch, g, rest])?;
    let (out, mean, rstd) = standardize(l, n, &grouped, &[2], eps, true)?;
    let mean = mean.expect("centered statistics have a mean");
    let out = view(l, out, &sizes)?;
    let out = affine(l, n, out, dtype)?;
    let cd = compute_dtype(dtype);
    let stat = |l: &mut Lowerer, t: LTensor| -> R<LTensor> {
        let t = view(l, t, &[batch, g])?;
        map(l, &[t], cd, dtype, |_, v| v[0])
    };
    Ok(vec![out, stat(l, mean)?, stat(l, rstd)?])
}

/// `_native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)`: statistics
/// of the input itself per channel (dimension 1) → (out, mean `[C]`, rstd `[C]`). There are no
/// running statistics to update, so momentum does not matter.
pub(super) fn batch_norm_batch_stats(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let x = tensor(l, n, "input")?;
    float_input(n, &x)?;
    if let Some(Arg::Bool(false)) = n.arg("training") {
        return msg("without running statistics, batch norm needs training=True");
    }
    let dtype = x.dtype;
    let eps = float(l, n, "eps")?;
    let dims: Vec<usize> = (0..x.sizes.len()).filter(|&d| d != 1).collect();
    let channels: Expr = x.sizes[1];
    let (out, mean, rstd) = standardize(l, n, &x, &dims, eps, true)?;
    let mean = mean.expect("centered statistics have a mean");
    let out = affine(l, n, out, dtype)?;
    let cd = compute_dtype(dtype);
    let stat = |l: &mut Lowerer, t: LTensor| -> R<LTensor> {
        let t = view(l, t, &[channels])?;
        map(l, &[t], cd, dtype, |_, v| v[0])
    };
    Ok(vec![out, stat(l, mean)?, stat(l, rstd)?])
}

/// `native_layer_norm` and `rms_norm` over the trailing `normalized_shape`.
pub(super) fn layer_norm(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<Vec<LTensor>> {
    let x = tensor(l, n, "input")?;
    let normalized = ints(n, "normalized_shape")?;
    norm(l, n, x, normalized.len(), name == "rms_norm")
}

/// `native_layer_norm` (outputs: normalized, mean, rstd) and `rms_norm` over the last `k` dims.
fn norm(l: &mut Lowerer, n: &GraphNode, x: LTensor, k: usize, rms: bool) -> R<Vec<LTensor>> {
    let dtype = x.dtype;
    if !dtype.is_float() {
        return msg(format!(
            "normalization needs a floating dtype, found {dtype}"
        ));
    }
    let rank = x.sizes.len();
    if k == 0 || k > rank {
        return msg(format!(
            "normalized_shape has {k} dimensions, the input {rank}"
        ));
    }
    let dims: Vec<usize> = (rank - k..rank).collect();
    let cd = compute_dtype(dtype);
    let eps = match n.arg("eps") {
        Some(Arg::Float(f)) => *f,
        // rms_norm's default: the dtype's machine epsilon.
        _ => match dtype {
            DType::F64 => f64::EPSILON,
            DType::F16 => 0.0009765625,
            DType::BF16 => 0.0078125,
            _ => f32::EPSILON as f64,
        },
    };
    let (mut out, mean, rstd) = super::norms::standardize(l, n, &x, &dims, eps, !rms)?;
    for (arg, bin) in [("weight", BinaryOp::Mul), ("bias", BinaryOp::Add)] {
        if let Some(Arg::Tensor(_)) = n.arg(arg) {
            let w = tensor(l, n, arg)?;
            out = map(l, &[out, w], cd, cd, move |c, v| {
                c.body.binary(bin, v[0], v[1])
            })?;
        }
    }
    let out = map(l, &[out], cd, dtype, |_, v| v[0])?;
    if rms {
        return Ok(vec![out]);
    }
    // mean and rstd in the input's dtype, as ATen's CPU kernel returns them.
    let mean = map(
        l,
        &[mean.expect("layer norm has a mean")],
        cd,
        dtype,
        |_, v| v[0],
    )?;
    let rstd = map(l, &[rstd], cd, dtype, |_, v| v[0])?;
    Ok(vec![out, mean, rstd])
}
