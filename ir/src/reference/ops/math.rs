//! The remaining elementwise math, element by element in f64: transcendental functions,
//! rounding, signs, NaN/infinity tests, xor, shifts (by each dtype's own width, as ATen's
//! kernels), `atan2` and the activations `hardtanh`, `leaky_relu`, `elu`.

use super::{elementwise, fail, float_of, result_type, Node, E, R};
use crate::graph::{DType, Scalar};
use crate::tensor::HostTensor;

fn transcendental(name: &str) -> Option<fn(f64) -> f64> {
    Some(match name {
        "expm1" => f64::exp_m1,
        "log2" => f64::log2,
        "log10" => f64::log10,
        "exp2" => f64::exp2,
        "tan" => f64::tan,
        "atan" => f64::atan,
        "asin" => f64::asin,
        "acos" => f64::acos,
        "sinh" => f64::sinh,
        "cosh" => f64::cosh,
        "asinh" => f64::asinh,
        "acosh" => f64::acosh,
        "atanh" => f64::atanh,
        _ => return None,
    })
}

/// Bits and signedness of an integer dtype.
fn width(d: DType) -> (u32, bool) {
    match d {
        DType::I8 => (8, true),
        DType::U8 => (8, false),
        DType::I32 => (32, true),
        _ => (64, true),
    }
}

/// ATen's `a << b` at `d`'s width: an amount that is negative or the width or more gives 0.
fn shift_left(a: i64, b: i64, d: DType) -> i64 {
    let (bits, _) = width(d);
    if b < 0 || b >= i64::from(bits) {
        0
    } else {
        ((a as u64) << b) as i64
    }
}

/// ATen's `a >> b`: an amount out of range shifts by the most there is (the sign, or 0).
fn shift_right(a: i64, b: i64, d: DType) -> i64 {
    let (bits, signed) = width(d);
    let most = i64::from(bits) - i64::from(signed);
    if b < 0 || b >= most {
        if signed {
            a >> (bits - 1).min(63)
        } else {
            0
        }
    } else {
        a >> b
    }
}

fn scalar_or(n: &Node, name: &str, default: f64) -> R<f64> {
    match n.node.arg(name) {
        None | Some(crate::graph::Arg::None) => Ok(default),
        Some(_) => Ok(match n.scalar(name)? {
            Scalar::Float(f) => f,
            Scalar::Int(e) => n.eval(e)? as f64,
            Scalar::Bool(b) => f64::from(u8::from(b)),
        }),
    }
}

/// `Err(None)` when `name` is not one of these ops.
pub(super) fn run(n: &Node, name: &str, overload: &str) -> R<Vec<HostTensor>> {
    let out = |t: HostTensor| Ok(vec![t]);
    if let Some(f) = transcendental(name) {
        let x = n.operand("self")?;
        let d = float_of(result_type(&[&x])?);
        return out(elementwise(&[&x], d, d, |v| Ok(E::F(f(v[0].f()))))?);
    }
    match name {
        "floor" | "ceil" | "round" | "trunc" => {
            let x = n.operand("self")?;
            let d = result_type(&[&x])?;
            let decimals = if overload == "decimals" {
                // `int decimals` (not SymInt): export specializes it to a constant.
                match n.node.arg("decimals") {
                    Some(crate::graph::Arg::Int(e))
                        if n.graph.env.pool().as_const(*e).is_none() =>
                    {
                        return fail("round: 'decimals' must be a constant integer")
                    }
                    _ => n.int("decimals")?,
                }
            } else {
                0
            };
            out(elementwise(&[&x], d, d, |v| {
                let a = match v[0] {
                    E::I(i) => return Ok(E::I(i)),
                    E::F(a) => a,
                };
                let r: fn(f64) -> f64 = match name {
                    "floor" => f64::floor,
                    "ceil" => f64::ceil,
                    "round" => f64::round_ties_even,
                    _ => f64::trunc,
                };
                Ok(E::F(if decimals == 0 {
                    r(a)
                } else {
                    let k = 10f64.powi(decimals.unsigned_abs().min(400) as i32);
                    // In the compute type, as ATen: f32 for f32, f16 and bf16.
                    let k = if d == DType::F64 { k } else { k as f32 as f64 };
                    let round32 = |v: f64| if d == DType::F64 { v } else { v as f32 as f64 };
                    if decimals > 0 {
                        round32(r(round32(a * k)) / k)
                    } else {
                        round32(r(round32(a / k)) * k)
                    }
                }))
            })?)
        }
        "sign" | "sgn" => {
            let x = n.operand("self")?;
            let d = result_type(&[&x])?;
            out(elementwise(&[&x], d, d, |v| {
                Ok(match v[0] {
                    E::F(a) => E::F(if a > 0.0 {
                        1.0
                    } else if a < 0.0 {
                        -1.0
                    } else {
                        0.0
                    }),
                    E::I(i) => E::I(i.signum()),
                })
            })?)
        }
        "isnan" | "isinf" => {
            let x = n.operand("self")?;
            let d = result_type(&[&x])?;
            out(elementwise(&[&x], d, DType::Bool, |v| {
                let r = match v[0] {
                    E::F(a) if name == "isnan" => a.is_nan(),
                    E::F(a) => a.is_infinite(),
                    E::I(_) => false,
                };
                Ok(E::I(i64::from(r)))
            })?)
        }
        "logical_xor" => {
            let (a, c) = (n.operand("self")?, n.operand("other")?);
            let d = result_type(&[&a, &c])?;
            out(elementwise(&[&a, &c], d, DType::Bool, |v| {
                Ok(E::I(i64::from((v[0].f() != 0.0) != (v[1].f() != 0.0))))
            })?)
        }
        "atan2" | "hypot" | "copysign" => {
            let (a, c) = (n.operand("self")?, n.operand("other")?);
            let d = float_of(result_type(&[&a, &c])?);
            let f: fn(f64, f64) -> f64 = match name {
                "atan2" => f64::atan2,
                "hypot" => f64::hypot,
                _ => f64::copysign,
            };
            out(elementwise(&[&a, &c], d, d, |v| {
                Ok(E::F(f(v[0].f(), v[1].f())))
            })?)
        }
        "bitwise_xor"
        | "__lshift__"
        | "__rshift__"
        | "bitwise_left_shift"
        | "bitwise_right_shift" => {
            let (a, c) = (n.operand("self")?, n.operand("other")?);
            let d = result_type(&[&a, &c])?;
            if d.is_float() || (d == DType::Bool && name != "bitwise_xor") {
                return fail(format!("{name} needs integer tensors, found {d:?}"));
            }
            out(elementwise(&[&a, &c], d, d, |v| {
                let (x, y) = (v[0].i(), v[1].i());
                Ok(E::I(match name {
                    "bitwise_xor" => x ^ y,
                    "__lshift__" | "bitwise_left_shift" => shift_left(x, y, d),
                    _ => shift_right(x, y, d),
                }))
            })?)
        }
        "hardtanh" => {
            let x = n.operand("self")?;
            let d = result_type(&[&x])?;
            if d == DType::Bool {
                return fail("hardtanh is not defined for bool");
            }
            let (lo, hi) = (
                scalar_or(n, "min_val", -1.0)?,
                scalar_or(n, "max_val", 1.0)?,
            );
            out(elementwise(&[&x], d, d, |v| {
                Ok(match v[0] {
                    E::F(a) if a.is_nan() => E::F(a),
                    E::F(a) => E::F(a.max(lo).min(hi)),
                    E::I(i) => E::I(i.max(lo as i64).min(hi as i64)),
                })
            })?)
        }
        "leaky_relu" | "elu" => {
            let x = n.operand("self")?;
            let d = result_type(&[&x])?;
            if !d.is_float() {
                return fail(format!("{name} needs a float tensor, found {d:?}"));
            }
            let slope = scalar_or(n, "negative_slope", 0.01)?;
            let (alpha, scale, input_scale) = (
                scalar_or(n, "alpha", 1.0)?,
                scalar_or(n, "scale", 1.0)?,
                scalar_or(n, "input_scale", 1.0)?,
            );
            out(elementwise(&[&x], d, d, |v| {
                let a = v[0].f();
                Ok(E::F(match (name, a > 0.0) {
                    ("leaky_relu", true) => a,
                    ("leaky_relu", false) => a * slope,
                    (_, true) => a * scale,
                    (_, false) => (a * input_scale).exp_m1() * alpha * scale,
                }))
            })?)
        }
        _ => Err(None),
    }
}
