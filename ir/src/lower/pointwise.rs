//! Elementwise ops: each is a loader combining its operands' loaders (broadcast, cast to the
//! compute dtype, one expression), fused into whatever reads it.

use std::rc::Rc;

use super::args::{msg, scalar_arg, scalar_value, tensor};
use super::promote::{compute_dtype, float_of, result_type};
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::loop_ir::{BinaryOp, Constant, UnaryOp, ValueId};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// Broadcasts operands to one shape (guard-free) and applies `f` elementwise. Operands are cast to
/// the compute dtype of `operand_dtype` before `f`; the result has dtype `out`.
pub(super) fn map(
    l: &mut Lowerer,
    operands: &[LTensor],
    operand_dtype: DType,
    out: DType,
    f: impl Fn(&mut Ctx, &[ValueId]) -> ValueId + 'static,
) -> R<LTensor> {
    let (sizes, expanded) = super::views::broadcast(l, operands)?;
    let cd = compute_dtype(operand_dtype);
    let out_cd = compute_dtype(out);
    let loaders: Vec<Loader> = expanded.into_iter().map(|t| t.loader).collect();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let vals: Vec<ValueId> = loaders
            .iter()
            .map(|ld| {
                let v = ld(c, idx);
                c.body.cast(v, cd)
            })
            .collect();
        let r = f(c, &vals);
        c.body.cast(r, out_cd)
    });
    Ok(LTensor::lazy(out, sizes, loader))
}

/// `neg`, `abs`, `relu`: the result keeps the input's dtype.
pub(super) fn unary_same_dtype(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let u = match name {
        "neg" => UnaryOp::Neg,
        "abs" => UnaryOp::Abs,
        _ => UnaryOp::Relu,
    };
    let dtype = x.dtype;
    map(l, &[x], dtype, dtype, move |c, v| c.body.unary(u, v[0]))
}

/// Transcendental functions: integer inputs compute in f32.
pub(super) fn unary_float(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let u = match name {
        "exp" => UnaryOp::Exp,
        "log" => UnaryOp::Log,
        "log1p" => UnaryOp::Log1p,
        "sqrt" => UnaryOp::Sqrt,
        "rsqrt" => UnaryOp::Rsqrt,
        "sin" => UnaryOp::Sin,
        "cos" => UnaryOp::Cos,
        "tanh" => UnaryOp::Tanh,
        "sigmoid" => UnaryOp::Sigmoid,
        "erf" => UnaryOp::Erf,
        _ => UnaryOp::Reciprocal,
    };
    let dtype = float_of(x.dtype);
    map(l, &[x], dtype, dtype, move |c, v| c.body.unary(u, v[0]))
}

pub(super) fn silu(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let dtype = float_of(x.dtype);
    map(l, &[x], dtype, dtype, |c, v| {
        let s = c.body.unary(UnaryOp::Sigmoid, v[0]);
        c.body.binary(BinaryOp::Mul, v[0], s)
    })
}

pub(super) fn gelu(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let tanh = match n.arg("approximate") {
        Some(Arg::Str(s)) if s == "tanh" => true,
        Some(Arg::Str(s)) if s == "none" => false,
        other => {
            return msg(format!(
                "approximate must be 'none' or 'tanh', found {other:?}"
            ))
        }
    };
    let dtype = float_of(x.dtype);
    map(l, &[x], dtype, dtype, move |c, v| gelu_value(c, v[0], tanh))
}

pub(super) fn bitwise_not(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    if x.dtype.is_float() {
        return msg("bitwise_not needs an integer or bool tensor");
    }
    let dtype = x.dtype;
    map(l, &[x], dtype, dtype, |c, v| {
        c.body.unary(UnaryOp::BitNot, v[0])
    })
}

pub(super) fn logical_not(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let dtype = x.dtype;
    map(l, &[x], dtype, DType::Bool, |c, v| {
        c.body.unary(UnaryOp::LogicalNot, v[0])
    })
}

/// `add`, `sub`, `rsub` with their `alpha` factor on the second operand.
pub(super) fn add_sub(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let (mut a, mut b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
    if name == "rsub" {
        std::mem::swap(&mut a, &mut b);
    }
    let alpha = scalar_arg(n, "alpha")?;
    let t = result_type(&[&a, &b])?;
    let bin = if name == "add" {
        BinaryOp::Add
    } else {
        BinaryOp::Sub
    };
    let cd = compute_dtype(t);
    map(l, &[a, b], t, t, move |c, v| {
        let other = match alpha {
            Scalar::Int(e) if c.env.pool().as_const(e) == Some(1) => v[1],
            Scalar::Float(1.0) => v[1],
            s => {
                let k = scalar_value(c, s, cd);
                c.body.binary(BinaryOp::Mul, v[1], k)
            }
        };
        c.body.binary(bin, v[0], other)
    })
}

pub(super) fn fmax_fmin(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    // maximum/minimum ignoring NaN: NaN only where both are.
    let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
    let t = result_type(&[&a, &b])?;
    let bin = if name == "fmax" {
        BinaryOp::Max
    } else {
        BinaryOp::Min
    };
    map(l, &[a, b], t, t, move |c, v| {
        let m = c.body.binary(bin, v[0], v[1]);
        if !c.body.dtype(v[0]).is_float() {
            return m;
        }
        let a_nan = c.body.binary(BinaryOp::Ne, v[0], v[0]);
        let b_nan = c.body.binary(BinaryOp::Ne, v[1], v[1]);
        let m = c.body.where_(b_nan, v[0], m);
        c.body.where_(a_nan, v[1], m)
    })
}

/// `mul`, `maximum`, `minimum`, `bitwise_and`, `bitwise_or`: one binary op in the promoted dtype.
pub(super) fn binary(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
    let t = result_type(&[&a, &b])?;
    let bin = match name {
        "mul" => BinaryOp::Mul,
        "maximum" => BinaryOp::Max,
        "minimum" => BinaryOp::Min,
        "bitwise_and" => BinaryOp::BitAnd,
        _ => BinaryOp::BitOr,
    };
    if matches!(bin, BinaryOp::BitAnd | BinaryOp::BitOr) && t.is_float() {
        return msg("bitwise ops need integer or bool tensors");
    }
    map(l, &[a, b], t, t, move |c, v| c.body.binary(bin, v[0], v[1]))
}

/// `div`, true or with a `floor`/`trunc` rounding mode.
pub(super) fn div(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
    let t = result_type(&[&a, &b])?;
    let mode = match n.arg("rounding_mode") {
        None | Some(Arg::None) => None,
        Some(Arg::Str(s)) if s == "floor" || s == "trunc" => Some(s.clone()),
        other => {
            return msg(format!(
                "rounding_mode must be null, 'floor' or 'trunc', found {other:?}"
            ))
        }
    };
    let (t, bin) = match mode.as_deref() {
        None => (float_of(t), BinaryOp::Div),
        Some("floor") => (t, BinaryOp::FloorDiv),
        _ => (t, BinaryOp::TruncDiv),
    };
    map(l, &[a, b], t, t, move |c, v| c.body.binary(bin, v[0], v[1]))
}

/// `fmod` (the dividend's sign) and `remainder` (the divisor's, as Python).
pub(super) fn remainder(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
    let t = result_type(&[&a, &b])?;
    if t == DType::Bool {
        return msg(format!("{name} needs numbers, found bool tensors"));
    }
    let cd = compute_dtype(t);
    let python = name == "remainder";
    map(l, &[a, b], t, t, move |c, v| {
        let r = c.body.binary(BinaryOp::Rem, v[0], v[1]);
        if !python {
            return r;
        }
        // The divisor's sign, as ATen: a non-zero remainder of the other sign gains b.
        let zero = if cd.is_float() {
            Constant::float(0.0)
        } else {
            Constant::Int(0)
        };
        let zero = c.body.constant(zero, cd);
        let nonzero = c.body.binary(BinaryOp::Ne, r, zero);
        let r_neg = c.body.binary(BinaryOp::Lt, r, zero);
        let b_neg = c.body.binary(BinaryOp::Lt, v[1], zero);
        let signs = c.body.binary(BinaryOp::Ne, r_neg, b_neg);
        let fix = c.body.binary(BinaryOp::LogicalAnd, nonzero, signs);
        let moved = c.body.binary(BinaryOp::Add, r, v[1]);
        c.body.where_(fix, moved, r)
    })
}

pub(super) fn pow(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "exponent")?);
    let t = result_type(&[&a, &b])?;
    map(l, &[a, b], t, t, |c, v| {
        c.body.binary(BinaryOp::Pow, v[0], v[1])
    })
}

/// Comparisons and `logical_and`/`logical_or`: bool results.
pub(super) fn compare(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
    let t = if name.starts_with("logical") {
        DType::Bool
    } else {
        result_type(&[&a, &b])?
    };
    let bin = match name {
        "eq" => BinaryOp::Eq,
        "ne" => BinaryOp::Ne,
        "lt" => BinaryOp::Lt,
        "le" => BinaryOp::Le,
        "gt" => BinaryOp::Gt,
        "ge" => BinaryOp::Ge,
        "logical_and" => BinaryOp::LogicalAnd,
        _ => BinaryOp::LogicalOr,
    };
    map(l, &[a, b], t, DType::Bool, move |c, v| {
        c.body.binary(bin, v[0], v[1])
    })
}

pub(super) fn where_(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let cond = tensor(l, n, "condition")?;
    let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
    select(l, cond, a, b)
}

pub(super) fn masked_fill(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let mask = tensor(l, n, "mask")?;
    let mut value = tensor(l, n, "value")?;
    // The fill value takes the tensor's dtype.
    value.wrapped = true;
    value.dtype = x.dtype;
    select(l, mask, value, x)
}

/// `clamp`, `clamp_min`, `clamp_max`: a bound that is absent or null is skipped.
pub(super) fn clamp(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let mut out = x;
    for (arg, bin) in [("min", BinaryOp::Max), ("max", BinaryOp::Min)] {
        let bound = match n.arg(arg) {
            None | Some(Arg::None) => continue,
            Some(_) => tensor(l, n, arg)?,
        };
        let t = result_type(&[&out, &bound])?;
        out = map(l, &[out, bound], t, t, move |c, v| {
            c.body.binary(bin, v[0], v[1])
        })?;
    }
    Ok(out)
}

/// `_to_copy`: a cast to the stated dtype (layout and device arguments do not change values).
pub(super) fn to_copy(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let dtype = match n.arg("dtype") {
        Some(Arg::DType(d)) => *d,
        _ => x.dtype,
    };
    let from = x.dtype;
    map(l, &[x], from, dtype, |_, v| v[0])
}

fn select(l: &mut Lowerer, cond: LTensor, a: LTensor, b: LTensor) -> R<LTensor> {
    let t = result_type(&[&a, &b])?;
    let (sizes, ex) = super::views::broadcast(l, &[cond, a, b])?;
    let cd = compute_dtype(t);
    let (lc, la, lb) = (
        ex[0].loader.clone(),
        ex[1].loader.clone(),
        ex[2].loader.clone(),
    );
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let cv = lc(c, idx);
        let cv = c.body.cast(cv, DType::Bool);
        let av = la(c, idx);
        let av = c.body.cast(av, cd);
        let bv = lb(c, idx);
        let bv = c.body.cast(bv, cd);
        c.body.where_(cv, av, bv)
    });
    Ok(LTensor::lazy(t, sizes, loader))
}

fn gelu_value(c: &mut Ctx, x: ValueId, tanh: bool) -> ValueId {
    let d = c.body.dtype(x);
    let k = |c: &mut Ctx, v: f64| c.body.constant(Constant::float(v), d);
    let half = k(c, 0.5);
    let one = k(c, 1.0);
    let inner = if tanh {
        // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        let x3 = c.body.binary(BinaryOp::Mul, x, x);
        let x3 = c.body.binary(BinaryOp::Mul, x3, x);
        let a = k(c, 0.044715);
        let ax3 = c.body.binary(BinaryOp::Mul, a, x3);
        let s = c.body.binary(BinaryOp::Add, x, ax3);
        let b = k(c, (2.0 / std::f64::consts::PI).sqrt());
        let t = c.body.binary(BinaryOp::Mul, b, s);
        c.body.unary(UnaryOp::Tanh, t)
    } else {
        // 0.5·x·(1 + erf(x/√2))
        let r = k(c, std::f64::consts::FRAC_1_SQRT_2);
        let t = c.body.binary(BinaryOp::Mul, x, r);
        c.body.unary(UnaryOp::Erf, t)
    };
    let s = c.body.binary(BinaryOp::Add, one, inner);
    let hx = c.body.binary(BinaryOp::Mul, half, x);
    c.body.binary(BinaryOp::Mul, hx, s)
}
