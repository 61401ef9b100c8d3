//! Elementwise ops: broadcast operands, compute in f64 or i64, round once to the result dtype.

use super::{
    at, broadcast_shape, build, elem, elementwise, fail, float_of, nan_max, nan_min, out,
    result_type, to, unary_float, unflatten, Node, Operand, E, R,
};
use crate::graph::{Arg, DType};
use crate::tensor::HostTensor;

/// `neg`, `abs`, `relu`: the result keeps the input's dtype.
pub(super) fn unary_same_dtype(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.operand("self")?;
    let d = result_type(&[&x])?;
    out(elementwise(&[&x], d, d, |v| {
        Ok(match (name, v[0]) {
            ("neg", E::F(a)) => E::F(-a),
            ("neg", E::I(a)) => E::I(a.wrapping_neg()),
            ("abs", E::F(a)) => E::F(a.abs()),
            ("abs", E::I(a)) => E::I(a.wrapping_abs()),
            (_, E::F(a)) => E::F(if a.is_nan() { a } else { a.max(0.0) }),
            (_, E::I(a)) => E::I(a.max(0)),
        })
    })?)
}

/// Transcendental functions and `silu`: integer inputs compute in f32.
pub(super) fn float_unary(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let x = n.operand("self")?;
    let d = float_of(result_type(&[&x])?);
    out(elementwise(&[&x], d, d, |v| {
        Ok(E::F(unary_float(name, v[0].f())))
    })?)
}

pub(super) fn gelu(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.operand("self")?;
    let d = float_of(result_type(&[&x])?);
    let tanh = match n.node.arg("approximate") {
        None | Some(Arg::None) => false,
        Some(Arg::Str(s)) if s == "none" || s == "tanh" => s == "tanh",
        Some(other) => {
            return fail(format!(
                "approximate argument must be either none or tanh, found {other:?}"
            ))
        }
    };
    out(elementwise(&[&x], d, d, |v| {
        let x = v[0].f();
        Ok(E::F(if tanh {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        } else {
            0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
        }))
    })?)
}

pub(super) fn bitwise_not(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    if x.dtype.is_float() {
        return fail("bitwise_not needs an integer or bool tensor");
    }
    let vals = (0..x.numel())
        .map(|i| {
            let v = elem(&x, i).i();
            E::I(if x.dtype == DType::Bool {
                i64::from(v == 0)
            } else {
                !v
            })
        })
        .collect();
    out(build(x.dtype, x.shape.clone(), vals))
}

pub(super) fn logical_not(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.operand("self")?;
    let d = result_type(&[&x])?;
    out(elementwise(&[&x], d, DType::Bool, |v| {
        Ok(E::I(i64::from(v[0].f() == 0.0)))
    })?)
}

/// `add`, `sub`, `rsub` with `alpha` on the second operand.
pub(super) fn add_sub(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let (mut a, mut c) = (n.operand("self")?, n.operand("other")?);
    if name == "rsub" {
        std::mem::swap(&mut a, &mut c);
    }
    let alpha = match n.number(n.scalar("alpha")?)? {
        Operand::Number(v, _) => v,
        Operand::Tensor(_) => unreachable!(),
    };
    let d = result_type(&[&a, &c])?;
    let sign = if name == "add" { 1.0 } else { -1.0 };
    out(elementwise(&[&a, &c], d, d, |v| {
        Ok(if d.is_float() {
            E::F(v[0].f() + sign * alpha.f() * v[1].f())
        } else {
            let s = v[1].i().wrapping_mul(alpha.i());
            E::I(if sign > 0.0 {
                v[0].i().wrapping_add(s)
            } else {
                v[0].i().wrapping_sub(s)
            })
        })
    })?)
}

pub(super) fn fmax_fmin(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let (a, c) = (n.operand("self")?, n.operand("other")?);
    let d = result_type(&[&a, &c])?;
    out(elementwise(&[&a, &c], d, d, |v| {
        Ok(match (v[0], v[1]) {
            (E::F(x), E::F(y)) if name == "fmax" => E::F(x.max(y)),
            (E::F(x), E::F(y)) => E::F(x.min(y)),
            (x, y) if name == "fmax" => E::I(x.i().max(y.i())),
            (x, y) => E::I(x.i().min(y.i())),
        })
    })?)
}

/// `mul`, `maximum`, `minimum`, `bitwise_and`, `bitwise_or`, `pow`.
pub(super) fn binary(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let a = n.operand("self")?;
    let c = n.operand(if name == "pow" { "exponent" } else { "other" })?;
    let d = result_type(&[&a, &c])?;
    if name.starts_with("bitwise") && d.is_float() {
        return fail("bitwise ops need integer or bool tensors");
    }
    out(elementwise(&[&a, &c], d, d, |v| {
        Ok(match (name, d.is_float()) {
            ("mul", true) => E::F(v[0].f() * v[1].f()),
            ("mul", false) => E::I(v[0].i().wrapping_mul(v[1].i())),
            ("maximum", _) => nan_max(v[0], v[1]),
            ("minimum", _) => nan_min(v[0], v[1]),
            ("bitwise_and", _) => E::I(v[0].i() & v[1].i()),
            ("bitwise_or", _) => E::I(v[0].i() | v[1].i()),
            (_, true) => E::F(v[0].f().powf(v[1].f())),
            (_, false) => E::I(if v[1].i() < 0 {
                0
            } else {
                v[0].i().wrapping_pow(v[1].i() as u32)
            }),
        })
    })?)
}

pub(super) fn div(n: &Node) -> R<Vec<HostTensor>> {
    let (a, c) = (n.operand("self")?, n.operand("other")?);
    let d = result_type(&[&a, &c])?;
    let mode = match n.node.arg("rounding_mode") {
        Some(Arg::Str(s)) if s == "floor" || s == "trunc" => Some(s.clone()),
        None | Some(Arg::None) => None,
        Some(other) => {
            return fail(format!(
            "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found {other:?}"
        ))
        }
    };
    let outd = if mode.is_none() { float_of(d) } else { d };
    out(elementwise(&[&a, &c], outd, outd, |v| {
        if outd.is_float() {
            let q = v[0].f() / v[1].f();
            return Ok(E::F(match mode.as_deref() {
                Some("floor") => q.floor(),
                Some("trunc") => q.trunc(),
                _ => q,
            }));
        }
        let (x, y) = (v[0].i(), v[1].i());
        if y == 0 {
            return fail("integer division by zero");
        }
        let q = x.wrapping_div(y);
        Ok(E::I(
            if mode.as_deref() == Some("floor") && x % y != 0 && ((x < 0) != (y < 0)) {
                q - 1
            } else {
                q
            },
        ))
    })?)
}

/// `fmod` (the dividend's sign) and `remainder` (the divisor's).
pub(super) fn remainder(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let (a, c) = (n.operand("self")?, n.operand("other")?);
    let d = result_type(&[&a, &c])?;
    if d == DType::Bool {
        return fail("fmod of bools");
    }
    let python = name == "remainder";
    out(elementwise(&[&a, &c], d, d, |v| {
        if d.is_float() {
            let (x, y) = (v[0].f(), v[1].f());
            let r = x % y;
            let fix = python && r != 0.0 && (r < 0.0) != (y < 0.0);
            return Ok(E::F(if fix { r + y } else { r }));
        }
        let (x, y) = (v[0].i(), v[1].i());
        if y == 0 {
            return fail("integer division by zero");
        }
        let r = x.wrapping_rem(y);
        let fix = python && r != 0 && (r < 0) != (y < 0);
        Ok(E::I(if fix { r + y } else { r }))
    })?)
}

/// Comparisons and `logical_and`/`logical_or`.
pub(super) fn compare(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let (a, c) = (n.operand("self")?, n.operand("other")?);
    let d = if name.starts_with("logical") {
        DType::F64
    } else {
        result_type(&[&a, &c])?
    };
    out(elementwise(&[&a, &c], d, DType::Bool, |v| {
        let (x, y) = (v[0], v[1]);
        let r = if d.is_float() {
            let (x, y) = (x.f(), y.f());
            match name {
                "eq" => x == y,
                "ne" => x != y,
                "lt" => x < y,
                "le" => x <= y,
                "gt" => x > y,
                "ge" => x >= y,
                "logical_and" => x != 0.0 && y != 0.0,
                _ => x != 0.0 || y != 0.0,
            }
        } else {
            let (x, y) = (x.i(), y.i());
            match name {
                "eq" => x == y,
                "ne" => x != y,
                "lt" => x < y,
                "le" => x <= y,
                "gt" => x > y,
                _ => x >= y,
            }
        };
        Ok(E::I(i64::from(r)))
    })?)
}

pub(super) fn where_or_masked_fill(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let (cond, a, c) = if name == "where" {
        (
            n.operand("condition")?,
            n.operand("self")?,
            n.operand("other")?,
        )
    } else {
        let x = n.operand("self")?;
        let value = match n.operand("value")? {
            Operand::Tensor(t) if t.shape.is_empty() => Operand::Number(elem(&t, 0), DType::F64),
            other => other,
        };
        // The fill value takes the tensor's dtype.
        let xd = result_type(&[&x])?;
        let value = match value {
            Operand::Number(v, _) => Operand::Number(v, xd),
            t => t,
        };
        (n.operand("mask")?, value, x)
    };
    let d = result_type(&[&a, &c])?;
    let shape_ops = [&cond, &a, &c];
    let shape = broadcast_shape(&shape_ops)?;
    let total: usize = shape.iter().product();
    let mut vals = Vec::with_capacity(total);
    for i in 0..total {
        let idx = unflatten(i, &shape);
        let pick = if at(&cond, &idx).f() != 0.0 { &a } else { &c };
        vals.push(to(d, at(pick, &idx)));
    }
    out(build(d, shape, vals))
}

pub(super) fn clamp(n: &Node) -> R<Vec<HostTensor>> {
    let mut x = n.operand("self")?;
    for arg in ["min", "max"] {
        let bound = match n.node.arg(arg) {
            None | Some(Arg::None) => continue,
            Some(_) => n.operand(arg)?,
        };
        let d = result_type(&[&x, &bound])?;
        let t = elementwise(&[&x, &bound], d, d, |v| {
            Ok(if arg == "min" {
                nan_max(v[0], v[1])
            } else {
                nan_min(v[0], v[1])
            })
        })?;
        x = Operand::Tensor(t);
    }
    match x {
        Operand::Tensor(t) => out(t),
        Operand::Number(..) => fail("clamp of a number"),
    }
}

pub(super) fn to_copy(n: &Node) -> R<Vec<HostTensor>> {
    let x = n.tensor("self")?;
    let d = n.dtype("dtype").unwrap_or(x.dtype);
    let vals = (0..x.numel()).map(|i| {
        let v = elem(&x, i);
        if d.is_float() {
            E::F(v.f())
        } else if d == DType::Bool {
            E::I(i64::from(v.f() != 0.0))
        } else {
            // Float to integer truncates toward zero.
            E::I(match v {
                E::F(f) => f.trunc() as i64,
                E::I(i) => i,
            })
        }
    });
    out(build(d, x.shape.clone(), vals.collect()))
}
