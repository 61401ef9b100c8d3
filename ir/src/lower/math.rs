//! Elementwise math beyond the common ops: the remaining transcendental functions, rounding,
//! signs, NaN/infinity tests, bitwise xor and shifts, `atan2`, and the activations ATen keeps
//! whole (`hardtanh`, `leaky_relu`, `elu`). Each op is a row of a table where it maps onto one
//! loop-IR op; the rest are short compositions.

use super::args::{msg, scalar_arg, scalar_value, tensor};
use super::pointwise::map;
use super::promote::float_of;
use super::promote::result_type;
use super::{LTensor, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::loop_ir::{BinaryOp, Constant, UnaryOp};

type R<T> = Result<T, NodeError>;

/// Functions of floats; integer and bool inputs are computed in f32, as ATen promotes them.
const TRANSCENDENTAL: &[(&str, UnaryOp)] = &[
    ("expm1", UnaryOp::Expm1),
    ("log2", UnaryOp::Log2),
    ("log10", UnaryOp::Log10),
    ("exp2", UnaryOp::Exp2),
    ("tan", UnaryOp::Tan),
    ("atan", UnaryOp::Atan),
    ("asin", UnaryOp::Asin),
    ("acos", UnaryOp::Acos),
    ("sinh", UnaryOp::Sinh),
    ("cosh", UnaryOp::Cosh),
    ("asinh", UnaryOp::Asinh),
    ("acosh", UnaryOp::Acosh),
    ("atanh", UnaryOp::Atanh),
];

/// Rounding keeps the dtype and leaves integers as they are.
const ROUNDING: &[(&str, UnaryOp)] = &[
    ("floor", UnaryOp::Floor),
    ("ceil", UnaryOp::Ceil),
    ("round", UnaryOp::Round),
    ("trunc", UnaryOp::Trunc),
];

/// Bitwise ops of integers and bools (`and` and `or` are lowered with `mul`'s kin).
const BITWISE: &[(&str, BinaryOp)] = &[
    ("bitwise_xor", BinaryOp::BitXor),
    ("__lshift__", BinaryOp::Shl),
    ("bitwise_left_shift", BinaryOp::Shl),
    ("__rshift__", BinaryOp::Shr),
    ("bitwise_right_shift", BinaryOp::Shr),
];

fn lookup<T: Copy>(table: &[(&str, T)], name: &str) -> Option<T> {
    table.iter().find(|(n, _)| *n == name).map(|&(_, t)| t)
}

/// Lowers `name.overload` if it is one of this module's ops; `Unsupported` otherwise.
pub(super) fn lower(l: &mut Lowerer, n: &GraphNode, name: &str, overload: &str) -> R<LTensor> {
    if let Some(u) = lookup(TRANSCENDENTAL, name) {
        let x = tensor(l, n, "self")?;
        let d = float_of(x.dtype);
        return map(l, &[x], d, d, move |c, v| c.body.unary(u, v[0]));
    }
    if let Some(u) = lookup(ROUNDING, name) {
        let x = tensor(l, n, "self")?;
        if !x.dtype.is_float() {
            return Ok(x);
        }
        let d = x.dtype;
        if overload == "decimals" {
            return round_decimals(l, n, x);
        }
        return map(l, &[x], d, d, move |c, v| c.body.unary(u, v[0]));
    }
    if let Some(op) = lookup(BITWISE, name) {
        return bitwise(l, n, op);
    }
    match name {
        "sign" | "sgn" => {
            let x = tensor(l, n, "self")?;
            if x.dtype == DType::Bool {
                return Ok(x);
            }
            let d = x.dtype;
            map(l, &[x], d, d, |c, v| c.body.unary(UnaryOp::Sign, v[0]))
        }
        "isnan" | "isinf" => {
            let x = tensor(l, n, "self")?;
            let d = x.dtype;
            let nan = name == "isnan";
            map(l, &[x], d, DType::Bool, move |c, v| {
                if !d.is_float() {
                    return c.body.constant(Constant::Int(0), DType::Bool);
                }
                if nan {
                    c.body.binary(BinaryOp::Ne, v[0], v[0])
                } else {
                    let a = c.body.unary(UnaryOp::Abs, v[0]);
                    let dt = c.body.dtype(a);
                    let inf = c.body.constant(Constant::float(f64::INFINITY), dt);
                    c.body.binary(BinaryOp::Eq, a, inf)
                }
            })
        }
        "logical_xor" => {
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
            let t = result_type(&[&a, &b])?;
            map(l, &[a, b], t, DType::Bool, |c, v| {
                let (x, y) = (
                    c.body.cast(v[0], DType::Bool),
                    c.body.cast(v[1], DType::Bool),
                );
                c.body.binary(BinaryOp::Ne, x, y)
            })
        }
        "atan2" | "hypot" | "copysign" => {
            let op = match name {
                "atan2" => BinaryOp::Atan2,
                "hypot" => BinaryOp::Hypot,
                _ => BinaryOp::Copysign,
            };
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
            let t = float_of(result_type(&[&a, &b])?);
            map(l, &[a, b], t, t, move |c, v| c.body.binary(op, v[0], v[1]))
        }
        "hardtanh" => {
            let x = tensor(l, n, "self")?;
            let lo = opt_scalar(n, "min_val", Scalar::Float(-1.0))?;
            let hi = opt_scalar(n, "max_val", Scalar::Float(1.0))?;
            let d = x.dtype;
            if d == DType::Bool {
                return msg("hardtanh needs a number tensor, found bool");
            }
            map(l, &[x], d, d, move |c, v| {
                let cd = c.body.dtype(v[0]);
                let (lo, hi) = (scalar_value(c, lo, cd), scalar_value(c, hi, cd));
                let m = c.body.binary(BinaryOp::Max, v[0], lo);
                c.body.binary(BinaryOp::Min, m, hi)
            })
        }
        "leaky_relu" => {
            let x = tensor(l, n, "self")?;
            let slope = opt_scalar(n, "negative_slope", Scalar::Float(0.01))?;
            let d = x.dtype;
            if !d.is_float() {
                return msg(format!("leaky_relu needs a float tensor, found {d:?}"));
            }
            map(l, &[x], d, d, move |c, v| {
                let cd = c.body.dtype(v[0]);
                let zero = c.body.constant(Constant::float(0.0), cd);
                let k = scalar_value(c, slope, cd);
                let scaled = c.body.binary(BinaryOp::Mul, v[0], k);
                let pos = c.body.binary(BinaryOp::Gt, v[0], zero);
                c.body.where_(pos, v[0], scaled)
            })
        }
        "elu" => {
            // x > 0 ? scale·x : scale·alpha·expm1(input_scale·x)
            let x = tensor(l, n, "self")?;
            let alpha = opt_scalar(n, "alpha", Scalar::Float(1.0))?;
            let scale = opt_scalar(n, "scale", Scalar::Float(1.0))?;
            let input_scale = opt_scalar(n, "input_scale", Scalar::Float(1.0))?;
            let d = x.dtype;
            if !d.is_float() {
                return msg(format!("elu needs a float tensor, found {d:?}"));
            }
            map(l, &[x], d, d, move |c, v| {
                let cd = c.body.dtype(v[0]);
                let zero = c.body.constant(Constant::float(0.0), cd);
                let (a, s, i) = (
                    scalar_value(c, alpha, cd),
                    scalar_value(c, scale, cd),
                    scalar_value(c, input_scale, cd),
                );
                let xi = c.body.binary(BinaryOp::Mul, v[0], i);
                let e = c.body.unary(UnaryOp::Expm1, xi);
                let neg = c.body.binary(BinaryOp::Mul, e, a);
                let pos = c.body.binary(BinaryOp::Gt, v[0], zero);
                let r = c.body.where_(pos, v[0], neg);
                c.body.binary(BinaryOp::Mul, r, s)
            })
        }
        _ => Err(NodeError::Unsupported),
    }
}

/// A scalar argument that may be absent (its schema default).
fn opt_scalar(n: &GraphNode, name: &str, default: Scalar) -> R<Scalar> {
    match n.arg(name) {
        None | Some(Arg::None) => Ok(default),
        Some(_) => scalar_arg(n, name),
    }
}

/// `round(x, decimals=d)` as ATen computes it: `rint(x·10^d) / 10^d`, or `rint(x / 10^-d) · 10^-d`
/// for negative `d`, in the compute type.
fn round_decimals(l: &mut Lowerer, n: &GraphNode, x: LTensor) -> R<LTensor> {
    let decimals = match n.arg("decimals") {
        Some(Arg::Int(e)) => l.env.pool().as_const(*e),
        _ => None,
    }
    .ok_or_else(|| NodeError::Message("round: 'decimals' must be a constant integer".into()))?;
    let d = x.dtype;
    let ten = 10f64.powi(decimals.unsigned_abs().min(400) as i32);
    let (into, back) = if decimals >= 0 {
        (BinaryOp::Mul, BinaryOp::Div)
    } else {
        (BinaryOp::Div, BinaryOp::Mul)
    };
    map(l, &[x], d, d, move |c, v| {
        let cd = c.body.dtype(v[0]);
        let k = c.body.constant(Constant::float(ten), cd);
        let scaled = c.body.binary(into, v[0], k);
        let r = c.body.unary(UnaryOp::Round, scaled);
        c.body.binary(back, r, k)
    })
}

/// Bitwise `xor` in the operands' promoted integer type; shifts in i64 (their
/// out-of-range meaning is the same at every width once the operand is widened), wrapped back.
fn bitwise(l: &mut Lowerer, n: &GraphNode, op: BinaryOp) -> R<LTensor> {
    let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
    let t = result_type(&[&a, &b])?;
    if t.is_float() {
        return msg(format!(
            "{}: bitwise ops need integer or bool tensors, found {t:?}",
            n.op
        ));
    }
    let shift = matches!(op, BinaryOp::Shl | BinaryOp::Shr);
    if shift && t == DType::Bool {
        return msg(format!("{}: shifts need integer tensors, found Bool", n.op));
    }
    let operand = if shift { DType::I64 } else { t };
    map(l, &[a, b], operand, t, move |c, v| {
        c.body.binary(op, v[0], v[1])
    })
}
