//! Reductions over dimensions (`sum` … `any`, `argmax`/`max.dim`), softmax and variance: each
//! a reduction buffer whose consumers fuse into the kernel that reads it.

use super::args::{const_ints, dim_arg, int, msg, number, scalar_arg, tensor, wrap_dim};
use super::pointwise::map;
use super::promote::compute_dtype;
use super::{LTensor, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::loop_ir::{BinaryOp, Constant, ReductionKind, UnaryOp};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// The reduced dimensions: `dim` (None or [] means all), normalized, sorted, distinct.
fn reduce_dims(l: &Lowerer, n: &GraphNode, rank: usize) -> R<Vec<usize>> {
    let dims: Vec<i64> = match n.arg("dim") {
        None | Some(Arg::None) => Vec::new(),
        Some(Arg::Int(_)) => vec![l
            .env
            .pool()
            .as_const(int(n, "dim")?)
            .ok_or_else(|| NodeError::Message("a dimension must be a constant".into()))?],
        Some(Arg::Ints(_)) => const_ints(l, n, "dim")?,
        other => {
            return msg(format!(
                "argument 'dim': expected dimensions, found {other:?}"
            ))
        }
    };
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out: Vec<usize> = dims
        .iter()
        .map(|&d| wrap_dim(d, rank))
        .collect::<Result<_, _>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return msg("a dimension appears twice in 'dim'");
    }
    // A zero-dimensional tensor reduces over nothing.
    out.retain(|&d| d < rank);
    Ok(out)
}

/// `sum`, `prod`, `mean`, `amax`, `amin`, `any` over `dim` (all when absent).
pub(super) fn reduce(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let rank = x.sizes.len();
    let dims = reduce_dims(l, n, rank)?;
    let keepdim = matches!(n.arg("keepdim"), Some(Arg::Bool(true)));
    let stated = match n.arg("dtype") {
        Some(Arg::DType(d)) => Some(*d),
        _ => None,
    };
    let (kind, acc) = match name {
        "sum" | "prod" => (
            if name == "sum" {
                ReductionKind::Sum
            } else {
                ReductionKind::Prod
            },
            stated.unwrap_or(if x.dtype.is_float() {
                x.dtype
            } else {
                DType::I64
            }),
        ),
        "mean" => {
            let d = stated.unwrap_or(x.dtype);
            if !d.is_float() {
                return msg(format!("mean needs a floating dtype, found {d}"));
            }
            (ReductionKind::Sum, d)
        }
        "amax" => (ReductionKind::Max, x.dtype),
        "amin" => (ReductionKind::Min, x.dtype),
        _ => (ReductionKind::Any, DType::Bool),
    };
    let src = if kind == ReductionKind::Any {
        let d = x.dtype;
        map(l, &[x], d, DType::Bool, |c, v| {
            let z = c.body.constant(Constant::Int(0), c.body.dtype(v[0]));
            let z = c.body.cast(z, c.body.dtype(v[0]));
            c.body.binary(BinaryOp::Ne, v[0], z)
        })?
    } else {
        x
    };
    if matches!(kind, ReductionKind::Max | ReductionKind::Min) {
        nonempty(l, &src, &dims, name)?;
    }
    let sizes: Vec<Expr> = dims.iter().map(|&d| src.sizes[d]).collect();
    let r = l.reduction(&src, &dims, keepdim, kind, acc, &n.name);
    if name != "mean" {
        return Ok(r);
    }
    // mean = sum / number of reduced elements (0/0 = NaN for an empty reduction, as in ATen).
    let count = sizes.iter().fold(l.env.pool_mut().one(), |acc, &s| {
        l.env.pool_mut().mul(acc, s)
    });
    let count = number(Scalar::Int(count));
    map(l, &[r, count], acc, acc, |c, v| {
        c.body.binary(BinaryOp::Div, v[0], v[1])
    })
}

/// `argmax`/`argmin`, and `max.dim`/`min.dim` (values and indices).
pub(super) fn arg_reduce(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<Vec<LTensor>> {
    let (arg_kind, kind) = if name.ends_with("max") {
        (ReductionKind::ArgMax, ReductionKind::Max)
    } else {
        (ReductionKind::ArgMin, ReductionKind::Min)
    };
    let x = tensor(l, n, "self")?;
    let rank = x.sizes.len();
    let keepdim = matches!(n.arg("keepdim"), Some(Arg::Bool(true)));
    let dims: Vec<usize> = match n.arg("dim") {
        None | Some(Arg::None) => (0..rank).collect(),
        _ => vec![dim_arg(l, n, "dim", rank)?],
    };
    let dims: Vec<usize> = dims.into_iter().filter(|&d| d < rank).collect();
    nonempty(l, &x, &dims, name)?;
    let idx = l.reduction(&x, &dims, keepdim, arg_kind, DType::I64, &n.name);
    if name.starts_with("arg") {
        return Ok(vec![idx]);
    }
    let values = l.reduction(&x, &dims, keepdim, kind, x.dtype, &n.name);
    Ok(vec![values, idx])
}

/// `var` and `var_mean` with their `correction`.
pub(super) fn var(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<Vec<LTensor>> {
    let x = tensor(l, n, "self")?;
    let dims = reduce_dims(l, n, x.sizes.len())?;
    let keepdim = matches!(n.arg("keepdim"), Some(Arg::Bool(true)));
    let correction = match n.arg("correction") {
        None | Some(Arg::None) => Scalar::Int(l.env.pool_mut().one()),
        Some(_) => scalar_arg(n, "correction")?,
    };
    let (var, mean) = variance(l, n, &x, &dims, keepdim, correction)?;
    Ok(if name == "var" {
        vec![var]
    } else {
        vec![var, mean]
    })
}

/// An extremum has no identity: as ATen, each dimension it reduces must be non-empty — proved
/// from ranges, else a runtime assert (the reduction itself yields the identity, ±inf, which
/// softmax relies on for an empty row no output reads).
fn nonempty(l: &mut Lowerer, x: &LTensor, dims: &[usize], name: &str) -> R<()> {
    for &d in dims {
        let one = l.env.pool().one();
        let c = l.env.pool_mut().ge(x.sizes[d], one);
        l.require(c, |_| format!("{name} over dimension {d}, which is empty"))?;
    }
    Ok(())
}

/// Softmax (or log-softmax) along `dim`: the row maximum, then the sum of shifted exponentials.
pub(super) fn softmax(
    l: &mut Lowerer,
    n: &GraphNode,
    x: LTensor,
    dim: usize,
    log: bool,
) -> R<LTensor> {
    let dtype = x.dtype;
    if !dtype.is_float() {
        return msg(format!("softmax needs a floating dtype, found {dtype}"));
    }
    let cd = compute_dtype(dtype);
    let max = l.reduction(&x, &[dim], true, ReductionKind::Max, cd, &n.name);
    let shifted = map(l, &[x, max], cd, cd, |c, v| {
        c.body.binary(BinaryOp::Sub, v[0], v[1])
    })?;
    let e = map(l, std::slice::from_ref(&shifted), cd, cd, |c, v| {
        c.body.unary(UnaryOp::Exp, v[0])
    })?;
    let sum = l.reduction(&e, &[dim], true, ReductionKind::Sum, cd, &n.name);
    if log {
        map(l, &[shifted, sum], cd, dtype, |c, v| {
            let lg = c.body.unary(UnaryOp::Log, v[1]);
            c.body.binary(BinaryOp::Sub, v[0], lg)
        })
    } else {
        // A product with the row's reciprocal, as ATen's vectorized CPU kernel computes it: one
        // division per row instead of one per element.
        map(l, &[e, sum], cd, dtype, |c, v| {
            let r = c.body.unary(UnaryOp::Reciprocal, v[1]);
            c.body.binary(BinaryOp::Mul, v[0], r)
        })
    }
}

/// Mean and variance over `dims` (two passes: the mean, then the squared deviations), in the
/// compute dtype, returned in the input's dtype.
fn variance(
    l: &mut Lowerer,
    n: &GraphNode,
    x: &LTensor,
    dims: &[usize],
    keepdim: bool,
    correction: Scalar,
) -> R<(LTensor, LTensor)> {
    let dtype = x.dtype;
    if !dtype.is_float() {
        return msg(format!("var needs a floating dtype, found {dtype}"));
    }
    let cd = compute_dtype(dtype);
    let count = dims.iter().fold(l.env.pool_mut().one(), |acc, &d| {
        l.env.pool_mut().mul(acc, x.sizes[d])
    });
    let sum = l.reduction(x, dims, true, ReductionKind::Sum, cd, &n.name);
    let mean = map(l, &[sum, number(Scalar::Int(count))], cd, cd, |c, v| {
        c.body.binary(BinaryOp::Div, v[0], v[1])
    })?;
    let mean = l.realize(mean, &n.name);
    let dev = map(l, &[x.clone(), mean.clone()], cd, cd, |c, v| {
        let d = c.body.binary(BinaryOp::Sub, v[0], v[1]);
        c.body.binary(BinaryOp::Mul, d, d)
    })?;
    let ss = l.reduction(&dev, dims, keepdim, ReductionKind::Sum, cd, &n.name);
    let denom = match correction {
        Scalar::Int(k) => {
            let d = l.env.pool_mut().sub(count, k);
            number(Scalar::Int(d))
        }
        Scalar::Float(f) => {
            let cnt = number(Scalar::Int(count));
            map(l, &[cnt], DType::F64, DType::F64, move |c, v| {
                let k = c.body.constant(Constant::float(f), DType::F64);
                c.body.binary(BinaryOp::Sub, v[0], k)
            })?
        }
        Scalar::Bool(_) => return msg("correction must be a number"),
    };
    // max(0, N - correction), as ATen divides by it.
    let var = map(l, &[ss, denom], cd, dtype, |c, v| {
        let d = c.body.cast(v[1], c.body.dtype(v[0]));
        let zero = c.body.constant(Constant::float(0.0), c.body.dtype(v[0]));
        let d = c.body.binary(BinaryOp::Max, d, zero);
        c.body.binary(BinaryOp::Div, v[0], d)
    })?;
    let mean_out = if keepdim {
        map(l, &[mean], cd, dtype, |_, v| v[0])?
    } else {
        let kept: Vec<Expr> = (0..x.sizes.len())
            .filter(|k| !dims.contains(k))
            .map(|k| x.sizes[k])
            .collect();
        let squeezed = super::views::view(l, mean, &kept)?;
        map(l, &[squeezed], cd, dtype, |_, v| v[0])?
    };
    Ok((var, mean_out))
}
