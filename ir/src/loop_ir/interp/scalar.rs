//! Scalar semantics of the interpreter: pointwise ops, reduction combines and the sort order.

use super::V;
use crate::graph::DType;
use crate::loop_ir::{BinaryOp, ReductionKind, ScanKind, UnaryOp};

/// The order of a sort: NaN above every number; descending reverses it (the sort is stable, so
/// equal values keep their positions' order either way).
pub(super) fn order_key(a: V, c: V, descending: bool) -> std::cmp::Ordering {
    let o = match (a, c) {
        (V::F(x), V::F(y)) => match (x.is_nan(), y.is_nan()) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ => x.partial_cmp(&y).expect("not NaN"),
        },
        _ => a.i().cmp(&c.i()),
    };
    if descending {
        o.reverse()
    } else {
        o
    }
}

/// Whether `v` replaces the current best `b` of an arg-reduction (strictly better, or the first NaN).
pub(super) fn better(kind: ReductionKind, dtype: DType, v: V, b: V) -> bool {
    if dtype.is_float() {
        let (x, y) = (v.f(), b.f());
        if y.is_nan() {
            return false;
        }
        if x.is_nan() {
            return true;
        }
        return if kind == ReductionKind::ArgMax {
            x > y
        } else {
            x < y
        };
    }
    if kind == ReductionKind::ArgMax {
        v.i() > b.i()
    } else {
        v.i() < b.i()
    }
}

/// IEEE 754-2019 maximum (`max`) or minimum: NaN if either operand is NaN, -0 below +0 — what
/// every backend computes, so that results agree to the sign of a zero.
pub fn ieee_max_min(x: f64, y: f64, max: bool) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x == y {
        // The same value, or +0 and -0.
        let bits = if max {
            x.to_bits() & y.to_bits()
        } else {
            x.to_bits() | y.to_bits()
        };
        f64::from_bits(bits)
    } else if (x > y) == max {
        x
    } else {
        y
    }
}

pub(super) fn combine(kind: ReductionKind, dtype: DType, a: V, v: V) -> V {
    match (kind, dtype.is_float()) {
        (ReductionKind::Sum, true) => V::F(a.f() + v.f()),
        (ReductionKind::Sum, false) => V::I(a.i().wrapping_add(v.i())),
        (ReductionKind::Prod, true) => V::F(a.f() * v.f()),
        (ReductionKind::Prod, false) => V::I(a.i().wrapping_mul(v.i())),
        // NaN propagates, as in ATen.
        (ReductionKind::Max, true) => V::F(ieee_max_min(a.f(), v.f(), true)),
        (ReductionKind::Min, true) => V::F(ieee_max_min(a.f(), v.f(), false)),
        (ReductionKind::Max, false) => V::I(a.i().max(v.i())),
        (ReductionKind::Min, false) => V::I(a.i().min(v.i())),
        (ReductionKind::Any, _) => V::I(i64::from(a.i() != 0 || v.i() != 0)),
        (ReductionKind::ArgMax | ReductionKind::ArgMin, _) => {
            unreachable!("arg-reductions keep a position")
        }
    }
}

/// One step of a scan: `a` the running value, `v` the next element. A running maximum or minimum
/// is the last element reaching it (an equal one, -0.0 after 0.0 say, or a NaN takes over), as
/// ATen's cummax/cummin keep it.
pub(super) fn scan_combine(kind: ScanKind, dtype: DType, a: V, v: V) -> V {
    let takes_over = |max: bool| match (a, v) {
        (V::F(x), V::F(y)) => y.is_nan() || (!x.is_nan() && if max { y >= x } else { y <= x }),
        _ if max => v.i() >= a.i(),
        _ => v.i() <= a.i(),
    };
    match kind {
        ScanKind::Sum => combine(ReductionKind::Sum, dtype, a, v),
        ScanKind::Prod => combine(ReductionKind::Prod, dtype, a, v),
        ScanKind::Max | ScanKind::Min if takes_over(kind == ScanKind::Max) => v,
        ScanKind::Max | ScanKind::Min => a,
        ScanKind::LogSumExp => V::F(log_add_exp(a.f(), v.f())),
    }
}

/// log(exp(a) + exp(b)) without overflow; equal infinities stay as they are (−inf + −inf is
/// −inf, not NaN), as in ATen.
pub(super) fn log_add_exp(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    if lo == hi && lo.is_infinite() {
        return lo;
    }
    hi + (lo - hi).exp().ln_1p()
}

pub(super) fn unary(u: UnaryOp, a: V, dtype: DType) -> V {
    if !dtype.is_float() && u != UnaryOp::LogicalNot {
        return match u {
            UnaryOp::Neg => V::I(a.i().wrapping_neg()),
            UnaryOp::Abs => V::I(a.i().wrapping_abs()),
            UnaryOp::Relu => V::I(a.i().max(0)),
            UnaryOp::BitNot if dtype == DType::Bool => V::I(i64::from(a.i() == 0)),
            UnaryOp::BitNot => V::I(!a.i()),
            UnaryOp::Sign => V::I(a.i().signum()),
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => a,
            _ => V::F(unary(u, V::F(a.f()), DType::F64).f()),
        };
    }
    let x = a.f();
    V::F(match u {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Log1p => x.ln_1p(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        UnaryOp::Erf => libm::erf(x),
        UnaryOp::Expm1 => x.exp_m1(),
        UnaryOp::Log2 => x.log2(),
        UnaryOp::Log10 => x.log10(),
        UnaryOp::Exp2 => x.exp2(),
        UnaryOp::Tan => x.tan(),
        UnaryOp::Atan => x.atan(),
        UnaryOp::Asin => x.asin(),
        UnaryOp::Acos => x.acos(),
        UnaryOp::Sinh => x.sinh(),
        UnaryOp::Cosh => x.cosh(),
        UnaryOp::Asinh => x.asinh(),
        UnaryOp::Acosh => x.acosh(),
        UnaryOp::Atanh => x.atanh(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Trunc => x.trunc(),
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        UnaryOp::Reciprocal => 1.0 / x,
        UnaryOp::LogicalNot => return V::I(i64::from(a.f() == 0.0)),
        UnaryOp::BitNot => f64::NAN,
    })
}

pub(super) fn binary(o: BinaryOp, a: V, b: V, dtype: DType) -> Result<V, String> {
    use BinaryOp::*;
    let cmp = |r: bool| V::I(i64::from(r));
    if dtype.is_float() {
        let (x, y) = (a.f(), b.f());
        return Ok(match o {
            Add => V::F(x + y),
            Sub => V::F(x - y),
            Mul => V::F(x * y),
            Div => V::F(x / y),
            FloorDiv => V::F((x / y).floor()),
            TruncDiv => V::F((x / y).trunc()),
            Rem => V::F(x % y),
            Pow => V::F(x.powf(y)),
            Atan2 => V::F(x.atan2(y)),
            Hypot => V::F(x.hypot(y)),
            Copysign => V::F(x.copysign(y)),
            Max => V::F(ieee_max_min(x, y, true)),
            Min => V::F(ieee_max_min(x, y, false)),
            Eq => cmp(x == y),
            Ne => cmp(x != y),
            Lt => cmp(x < y),
            Le => cmp(x <= y),
            Gt => cmp(x > y),
            Ge => cmp(x >= y),
            LogicalAnd => cmp(x != 0.0 && y != 0.0),
            LogicalOr => cmp(x != 0.0 || y != 0.0),
            BitAnd | BitOr | BitXor | Shl | Shr => return Err("bitwise op on floats".into()),
        });
    }
    let (x, y) = (a.i(), b.i());
    Ok(match o {
        Add => V::I(x.wrapping_add(y)),
        Sub => V::I(x.wrapping_sub(y)),
        Mul => V::I(x.wrapping_mul(y)),
        Div => V::F(x as f64 / y as f64),
        FloorDiv | TruncDiv => {
            if y == 0 {
                return Err("integer division by zero".into());
            }
            let q = x.wrapping_div(y);
            V::I(if o == FloorDiv && (x % y != 0) && ((x < 0) != (y < 0)) {
                q - 1
            } else {
                q
            })
        }
        Rem => {
            if y == 0 {
                return Err("integer division by zero".into());
            }
            V::I(x.wrapping_rem(y))
        }
        Pow => V::I(if y < 0 {
            0
        } else {
            x.wrapping_pow(y.min(u32::MAX as i64) as u32)
        }),
        Max => V::I(x.max(y)),
        Min => V::I(x.min(y)),
        Eq => cmp(x == y),
        Ne => cmp(x != y),
        Lt => cmp(x < y),
        Le => cmp(x <= y),
        Gt => cmp(x > y),
        Ge => cmp(x >= y),
        LogicalAnd => cmp(x != 0 && y != 0),
        LogicalOr => cmp(x != 0 || y != 0),
        BitAnd => V::I(x & y),
        BitOr => V::I(x | y),
        BitXor => V::I(x ^ y),
        Shl => V::I(if (0..64).contains(&y) { x << y } else { 0 }),
        Shr => V::I(x >> if (0..64).contains(&y) { y } else { 63 }),
        Atan2 => V::F((x as f64).atan2(y as f64)),
        Hypot => V::F((x as f64).hypot(y as f64)),
        Copysign => V::F((x as f64).copysign(y as f64)),
    })
}
