//! The reference ops. Plain loops over contiguous host tensors; every op rounds its output to its
//! dtype. `Err(None)`: no reference implementation; `Err(Some(message))`: the op fails, as ATen would.

use crate::graph::{Arg, DType, Graph, GraphNode, Scalar, TensorRef};
use crate::sym::{Bindings, Expr};
use crate::tensor::{round_to, wrap_to, Data, HostTensor};

mod avg_pool;
mod conv;
mod distance;
mod math;
mod norms;
mod overwrite;
mod routing;
mod scans;
mod search;

type R<T> = Result<T, Option<String>>;

fn fail<T>(m: impl Into<String>) -> R<T> {
    Err(Some(m.into()))
}

/// A value in computation: floats as f64, the rest as i64.
#[derive(Copy, Clone)]
enum E {
    F(f64),
    I(i64),
}

impl E {
    fn f(self) -> f64 {
        match self {
            E::F(x) => x,
            E::I(x) => x as f64,
        }
    }
    fn i(self) -> i64 {
        match self {
            E::F(x) => x as i64,
            E::I(x) => x,
        }
    }
}

fn elem(t: &HostTensor, i: usize) -> E {
    match &t.data {
        Data::Float(v) => E::F(v[i]),
        Data::Int(v) => E::I(v[i]),
    }
}

fn build(dtype: DType, shape: Vec<usize>, vals: Vec<E>) -> HostTensor {
    let data = if dtype.is_float() {
        Data::Float(vals.into_iter().map(|v| round_to(dtype, v.f())).collect())
    } else {
        Data::Int(vals.into_iter().map(|v| wrap_to(dtype, v.i())).collect())
    };
    HostTensor { dtype, shape, data }
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1];
    }
    s
}

/// The multi-index of flat position `i` in `shape`.
fn unflatten(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        if shape[k] > 0 {
            idx[k] = i % shape[k];
            i /= shape[k];
        }
    }
    idx
}

fn flat(idx: &[usize], strides: &[usize]) -> usize {
    idx.iter().zip(strides).map(|(a, b)| a * b).sum()
}

// ---- type promotion (ATen's rules, written independently of the lowering's) ----

fn kind(d: DType) -> u8 {
    if d == DType::Bool {
        0
    } else if d.is_float() {
        2
    } else {
        1
    }
}

fn promote2(a: DType, b: DType) -> R<DType> {
    use DType::*;
    if a == b {
        return Ok(a);
    }
    if kind(a) != kind(b) {
        return Ok(if kind(a) > kind(b) { a } else { b });
    }
    let rank = |d: DType| match d {
        F16 | BF16 => 1,
        F32 => 2,
        F64 => 3,
        U8 | I8 => 1,
        I32 => 2,
        I64 => 3,
        Bool => 0,
    };
    if (a == F16 && b == BF16) || (a == BF16 && b == F16) {
        return Ok(F32);
    }
    if (a == U8 && b == I8) || (a == I8 && b == U8) {
        return fail("u8 with i8 needs i16");
    }
    Ok(if rank(a) >= rank(b) { a } else { b })
}

/// An operand: a tensor, or a Python number (`None` dtype marks a number's category via `E`).
enum Operand {
    Tensor(HostTensor),
    Number(E, DType),
}

fn result_type(ops: &[&Operand]) -> R<DType> {
    let (mut tensors, mut zeros, mut numbers): (Option<DType>, Option<DType>, Option<DType>) =
        (None, None, None);
    for o in ops {
        let (slot, d) = match o {
            Operand::Tensor(t) if t.shape.is_empty() => (&mut zeros, t.dtype),
            Operand::Tensor(t) => (&mut tensors, t.dtype),
            Operand::Number(_, d) => (&mut numbers, *d),
        };
        *slot = Some(match *slot {
            None => d,
            Some(x) => promote2(x, d)?,
        });
    }
    let mut r = tensors;
    if let Some(z) = zeros {
        if r.is_none_or(|r| kind(z) > kind(r)) {
            r = Some(z);
        }
    }
    if let Some(n) = numbers {
        if r.is_none_or(|r| kind(n) > kind(r)) {
            r = Some(match kind(n) {
                2 => DType::F32,
                1 => DType::I64,
                _ => DType::Bool,
            });
        }
    }
    r.ok_or_else(|| Some("no operands".into()))
}

fn shape_of(o: &Operand) -> &[usize] {
    match o {
        Operand::Tensor(t) => &t.shape,
        Operand::Number(..) => &[],
    }
}

fn broadcast_shape(ops: &[&Operand]) -> R<Vec<usize>> {
    let rank = ops.iter().map(|o| shape_of(o).len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    let mut set = vec![false; rank];
    for o in ops {
        let s = shape_of(o);
        let off = rank - s.len();
        for (k, &n) in s.iter().enumerate() {
            let slot = &mut out[off + k];
            if !set[off + k] || *slot == 1 {
                *slot = n;
                set[off + k] = true;
            } else if n != 1 && n != *slot {
                return fail(format!("shapes cannot broadcast: size {n} against {slot}"));
            }
        }
    }
    Ok(out)
}

/// Element of `o` at output index `idx` (broadcast).
fn at(o: &Operand, idx: &[usize]) -> E {
    match o {
        Operand::Number(v, _) => *v,
        Operand::Tensor(t) => {
            let off = idx.len() - t.shape.len();
            let st = strides(&t.shape);
            let i: usize = t
                .shape
                .iter()
                .enumerate()
                .map(|(k, &n)| if n == 1 { 0 } else { idx[off + k] * st[k] })
                .sum();
            elem(t, i)
        }
    }
}

/// Rounds an element to the computation dtype of `d` (f16/bf16 values are already f32-exact).
fn to(d: DType, v: E) -> E {
    if d.is_float() {
        E::F(v.f())
    } else if let (DType::Bool, E::F(x)) = (d, v) {
        // A float is true when non-zero (0.5 and NaN included), as in ATen.
        E::I(i64::from(x != 0.0))
    } else {
        E::I(wrap_to(d, v.i()))
    }
}

fn elementwise(
    ops: &[&Operand],
    operand_dtype: DType,
    out: DType,
    f: impl Fn(&[E]) -> R<E>,
) -> R<HostTensor> {
    let shape = broadcast_shape(ops)?;
    let n: usize = shape.iter().product();
    let mut vals = Vec::with_capacity(n);
    for i in 0..n {
        let idx = unflatten(i, &shape);
        let args: Vec<E> = ops.iter().map(|o| to(operand_dtype, at(o, &idx))).collect();
        let args: Vec<E> = if operand_dtype.is_float() {
            args.into_iter()
                .map(|a| E::F(round_to(operand_dtype, a.f())))
                .collect()
        } else {
            args
        };
        vals.push(f(&args)?);
    }
    Ok(build(out, shape, vals))
}

struct Node<'a> {
    graph: &'a Graph,
    node: &'a GraphNode,
    b: &'a Bindings,
    get: &'a dyn Fn(&TensorRef) -> HostTensor,
}

impl Node<'_> {
    fn eval(&self, e: Expr) -> R<i64> {
        self.graph
            .env
            .evaluate(e, self.b)
            .map_err(|e| Some(e.to_string()))
    }

    fn number(&self, s: Scalar) -> R<Operand> {
        Ok(match s {
            Scalar::Float(f) => Operand::Number(E::F(f), DType::F64),
            Scalar::Int(e) => Operand::Number(E::I(self.eval(e)?), DType::I64),
            Scalar::Bool(b) => Operand::Number(E::I(i64::from(b)), DType::Bool),
        })
    }

    fn operand(&self, name: &str) -> R<Operand> {
        match self.node.arg(name) {
            Some(Arg::Tensor(r)) => Ok(Operand::Tensor((self.get)(r))),
            Some(Arg::Number(s)) | Some(Arg::Scalar(s)) => self.number(*s),
            other => fail(format!(
                "argument '{name}': expected a tensor, found {other:?}"
            )),
        }
    }

    fn tensor(&self, name: &str) -> R<HostTensor> {
        match self.operand(name)? {
            Operand::Tensor(t) => Ok(t),
            Operand::Number(..) => fail(format!("argument '{name}' must be a tensor")),
        }
    }

    fn int(&self, name: &str) -> R<i64> {
        match self.node.arg(name) {
            Some(Arg::Int(e)) => self.eval(*e),
            other => fail(format!(
                "argument '{name}': expected an integer, found {other:?}"
            )),
        }
    }

    fn opt_int(&self, name: &str) -> R<Option<i64>> {
        match self.node.arg(name) {
            Some(Arg::Int(e)) => Ok(Some(self.eval(*e)?)),
            _ => Ok(None),
        }
    }

    fn ints(&self, name: &str) -> R<Vec<i64>> {
        match self.node.arg(name) {
            Some(Arg::Ints(v)) => v.iter().map(|&e| self.eval(e)).collect(),
            Some(Arg::Int(e)) => Ok(vec![self.eval(*e)?]),
            Some(Arg::None) | None => Ok(Vec::new()),
            other => fail(format!(
                "argument '{name}': expected integers, found {other:?}"
            )),
        }
    }

    fn scalar(&self, name: &str) -> R<Scalar> {
        match self.node.arg(name) {
            Some(Arg::Scalar(s)) | Some(Arg::Number(s)) => Ok(*s),
            other => fail(format!(
                "argument '{name}': expected a number, found {other:?}"
            )),
        }
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.node.arg(name), Some(Arg::Bool(true)))
    }

    fn dtype(&self, name: &str) -> Option<DType> {
        match self.node.arg(name) {
            Some(Arg::DType(d)) => Some(*d),
            _ => None,
        }
    }
}

fn wrap(d: i64, rank: usize) -> R<usize> {
    let r = rank.max(1) as i64;
    let w = if d < 0 { d + r } else { d };
    if (0..r).contains(&w) {
        Ok(w as usize)
    } else {
        fail(format!("dimension {d} out of range for {rank} dimensions"))
    }
}

fn float_of(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F32
    }
}

fn unary_float(name: &str, x: f64) -> f64 {
    match name {
        "exp" => x.exp(),
        "log" => x.ln(),
        "log1p" => x.ln_1p(),
        "sqrt" => x.sqrt(),
        "rsqrt" => 1.0 / x.sqrt(),
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tanh" => x.tanh(),
        "sigmoid" => 1.0 / (1.0 + (-x).exp()),
        "erf" => libm::erf(x),
        "reciprocal" => 1.0 / x,
        "silu" => x / (1.0 + (-x).exp()),
        _ => f64::NAN,
    }
}

/// A slice's dimension, start and end (ATen's clamping), step and length, from the node's
/// `dim`, `start`, `end`, `step` over `x`.
fn slice_bounds(n: &Node, x: &HostTensor) -> R<(usize, i64, i64, i64, usize)> {
    let dim = wrap(n.int("dim")?, x.shape.len())?;
    let size = x.shape[dim] as i64;
    let clampb = |v: i64| (if v < 0 { v + size } else { v }).clamp(0, size);
    let start = clampb(n.opt_int("start")?.unwrap_or(0));
    let end = clampb(n.opt_int("end")?.unwrap_or(size));
    let step = n.int("step")?;
    if step <= 0 {
        return fail("slice step must be positive");
    }
    let len = if end > start {
        (end - start + step - 1) / step
    } else {
        0
    };
    Ok((dim, start, end, step, len as usize))
}

/// Gathers `t` at the index map `src(out_idx)` into a new tensor of `shape` (views materialized).
fn gather_view(
    t: &HostTensor,
    shape: Vec<usize>,
    src: impl Fn(&[usize]) -> Vec<usize>,
) -> HostTensor {
    let st = strides(&t.shape);
    let n: usize = shape.iter().product();
    let vals = (0..n)
        .map(|i| elem(t, flat(&src(&unflatten(i, &shape)), &st)))
        .collect();
    build(t.dtype, shape, vals)
}

fn reduce(
    t: &HostTensor,
    dims: &[usize],
    keepdim: bool,
    out: DType,
    init: Option<E>,
    f: impl Fn(E, E) -> E,
) -> R<HostTensor> {
    let rank = t.shape.len();
    let kept: Vec<usize> = (0..rank).filter(|k| !dims.contains(k)).collect();
    let out_shape: Vec<usize> = (0..rank)
        .filter_map(|k| {
            if dims.contains(&k) {
                keepdim.then_some(1)
            } else {
                Some(t.shape[k])
            }
        })
        .collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&k| t.shape[k]).collect();
    let red_shape: Vec<usize> = dims.iter().map(|&k| t.shape[k]).collect();
    let (nk, nr): (usize, usize) = (kept_shape.iter().product(), red_shape.iter().product());
    if nr == 0 && init.is_none() {
        return fail("reduction over an empty dimension has no identity");
    }
    let st = strides(&t.shape);
    let mut vals = Vec::with_capacity(nk);
    for i in 0..nk {
        let ki = unflatten(i, &kept_shape);
        let mut acc = init;
        for j in 0..nr {
            let ri = unflatten(j, &red_shape);
            let mut idx = vec![0; rank];
            for (a, &k) in kept.iter().enumerate() {
                idx[k] = ki[a];
            }
            for (a, &k) in dims.iter().enumerate() {
                idx[k] = ri[a];
            }
            let v = to(out, elem(t, flat(&idx, &st)));
            acc = Some(match acc {
                None => v,
                Some(a) => f(a, v),
            });
        }
        vals.push(acc.expect("non-empty or with identity"));
    }
    Ok(build(out, out_shape, vals))
}

fn nan_max(a: E, b: E) -> E {
    match (a, b) {
        (E::F(x), E::F(y)) => E::F(if x.is_nan() || y.is_nan() {
            f64::NAN
        } else {
            x.max(y)
        }),
        _ => E::I(a.i().max(b.i())),
    }
}

fn nan_min(a: E, b: E) -> E {
    match (a, b) {
        (E::F(x), E::F(y)) => E::F(if x.is_nan() || y.is_nan() {
            f64::NAN
        } else {
            x.min(y)
        }),
        _ => E::I(a.i().min(b.i())),
    }
}

pub(super) fn run_node(
    graph: &Graph,
    node: &GraphNode,
    get: &dyn Fn(&TensorRef) -> HostTensor,
    b: &Bindings,
) -> R<Vec<HostTensor>> {
    let n = Node {
        graph,
        node,
        b,
        get,
    };
    let op = node.op.strip_prefix("aten.").unwrap_or(&node.op);
    let (name, overload) = op.rsplit_once('.').unwrap_or((op, "default"));
    let out = |t: HostTensor| Ok(vec![t]);
    match name {
        "neg" | "abs" | "relu" => {
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
        "exp" | "log" | "log1p" | "sqrt" | "rsqrt" | "sin" | "cos" | "tanh" | "sigmoid" | "erf"
        | "reciprocal" | "silu" => {
            let x = n.operand("self")?;
            let d = float_of(result_type(&[&x])?);
            out(elementwise(&[&x], d, d, |v| {
                Ok(E::F(unary_float(name, v[0].f())))
            })?)
        }
        "gelu" => {
            let x = n.operand("self")?;
            let d = float_of(result_type(&[&x])?);
            let tanh = matches!(node.arg("approximate"), Some(Arg::Str(s)) if s == "tanh");
            out(elementwise(&[&x], d, d, |v| {
                let x = v[0].f();
                Ok(E::F(if tanh {
                    0.5 * x
                        * (1.0
                            + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x))
                                .tanh())
                } else {
                    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
                }))
            })?)
        }
        "bitwise_not" => {
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
        "logical_not" => {
            let x = n.operand("self")?;
            let d = result_type(&[&x])?;
            out(elementwise(&[&x], d, DType::Bool, |v| {
                Ok(E::I(i64::from(v[0].f() == 0.0)))
            })?)
        }
        "add" | "sub" | "rsub" => {
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
        "_cdist_forward" => distance::cdist(&n),
        "fmax" | "fmin" => {
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
        "mul" | "maximum" | "minimum" | "bitwise_and" | "bitwise_or" | "pow" => {
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
        "div" => {
            let (a, c) = (n.operand("self")?, n.operand("other")?);
            let d = result_type(&[&a, &c])?;
            let mode = match node.arg("rounding_mode") {
                Some(Arg::Str(s)) => Some(s.clone()),
                _ => None,
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
        "fmod" | "remainder" => {
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
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" | "logical_and" | "logical_or" => {
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
        "where" | "masked_fill" => {
            let (cond, a, c) = if name == "where" {
                (
                    n.operand("condition")?,
                    n.operand("self")?,
                    n.operand("other")?,
                )
            } else {
                let x = n.operand("self")?;
                let value = match n.operand("value")? {
                    Operand::Tensor(t) if t.shape.is_empty() => {
                        Operand::Number(elem(&t, 0), DType::F64)
                    }
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
        "clamp" | "clamp_min" | "clamp_max" => {
            let mut x = n.operand("self")?;
            for arg in ["min", "max"] {
                let bound = match node.arg(arg) {
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
        "_to_copy" => {
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
        "clone" | "alias" => out(n.tensor("self")?),
        "max" | "min" if overload == "default" => {
            let x = n.tensor("self")?;
            let dims: Vec<usize> = (0..x.shape.len()).collect();
            let f = if name == "max" { nan_max } else { nan_min };
            out(reduce(&x, &dims, false, x.dtype, None, f)?)
        }
        "sum" | "prod" | "mean" | "amax" | "amin" | "any" => {
            let x = n.tensor("self")?;
            let rank = x.shape.len();
            let dims = n.ints("dim")?;
            let mut dims: Vec<usize> = if dims.is_empty() {
                (0..rank).collect()
            } else {
                dims.iter().map(|&d| wrap(d, rank)).collect::<R<_>>()?
            };
            dims.sort_unstable();
            dims.dedup();
            dims.retain(|&d| d < rank);
            let keep = n.flag("keepdim");
            match name {
                "sum" => {
                    let d = n.dtype("dtype").unwrap_or(if x.dtype.is_float() {
                        x.dtype
                    } else {
                        DType::I64
                    });
                    let init = if d.is_float() { E::F(0.0) } else { E::I(0) };
                    out(reduce(&x, &dims, keep, d, Some(init), |a, v| {
                        match (a, v) {
                            (E::F(a), v) => E::F(a + v.f()),
                            (E::I(a), v) => E::I(a.wrapping_add(v.i())),
                        }
                    })?)
                }
                "prod" => {
                    let d = n.dtype("dtype").unwrap_or(if x.dtype.is_float() {
                        x.dtype
                    } else {
                        DType::I64
                    });
                    let init = if d.is_float() { E::F(1.0) } else { E::I(1) };
                    out(reduce(&x, &dims, keep, d, Some(init), |a, v| {
                        match (a, v) {
                            (E::F(a), v) => E::F(a * v.f()),
                            (E::I(a), v) => E::I(a.wrapping_mul(v.i())),
                        }
                    })?)
                }
                "mean" => {
                    let d = n.dtype("dtype").unwrap_or(x.dtype);
                    if !d.is_float() {
                        return fail(format!("mean needs a floating dtype, found {d}"));
                    }
                    let count: usize = dims.iter().map(|&k| x.shape[k]).product();
                    let s = reduce(&x, &dims, keep, DType::F64, Some(E::F(0.0)), |a, v| {
                        E::F(a.f() + v.f())
                    })?;
                    let vals = (0..s.numel())
                        .map(|i| E::F(elem(&s, i).f() / count as f64))
                        .collect();
                    out(build(d, s.shape.clone(), vals))
                }
                "amax" => out(reduce(&x, &dims, keep, x.dtype, None, nan_max)?),
                "amin" => out(reduce(&x, &dims, keep, x.dtype, None, nan_min)?),
                _ => out(reduce(
                    &x,
                    &dims,
                    keep,
                    DType::Bool,
                    Some(E::I(0)),
                    |a, v| E::I(i64::from(a.i() != 0 || v.f() != 0.0)),
                )?),
            }
        }
        "argmax" | "argmin" | "max" | "min" if name.starts_with("arg") || overload == "dim" => {
            let x = n.tensor("self")?;
            let is_max = name.ends_with("max");
            let rank = x.shape.len();
            let all = matches!(node.arg("dim"), None | Some(Arg::None));
            let dims: Vec<usize> = if all {
                (0..rank).collect()
            } else {
                vec![wrap(n.int("dim")?, rank)?]
            };
            let dims: Vec<usize> = dims.into_iter().filter(|&d| d < rank).collect();
            let keep = n.flag("keepdim");
            let red: Vec<usize> = dims.iter().map(|&d| x.shape[d]).collect();
            let count: usize = red.iter().product();
            if count == 0 {
                return fail(format!("{name} over an empty dimension"));
            }
            let kept: Vec<usize> = (0..rank).filter(|k| !dims.contains(k)).collect();
            let kept_shape: Vec<usize> = kept.iter().map(|&k| x.shape[k]).collect();
            let st = strides(&x.shape);
            let (mut idxs, mut vals) = (Vec::new(), Vec::new());
            for i in 0..kept_shape.iter().product::<usize>() {
                let ki = unflatten(i, &kept_shape);
                let mut best: Option<(f64, usize)> = None;
                for j in 0..count {
                    let ri = unflatten(j, &red);
                    let mut idx = vec![0; rank];
                    for (a, &k) in kept.iter().enumerate() {
                        idx[k] = ki[a];
                    }
                    for (a, &k) in dims.iter().enumerate() {
                        idx[k] = ri[a];
                    }
                    let v = elem(&x, flat(&idx, &st)).f();
                    best = match best {
                        None => Some((v, j)),
                        Some((b, _))
                            if !b.is_nan()
                                && (v.is_nan() || if is_max { v > b } else { v < b }) =>
                        {
                            Some((v, j))
                        }
                        keep_best => keep_best,
                    };
                }
                let (v, j) = best.expect("non-empty");
                idxs.push(E::I(j as i64));
                vals.push(if x.dtype.is_float() {
                    E::F(v)
                } else {
                    E::I(v as i64)
                });
            }
            let shape: Vec<usize> = (0..rank)
                .filter_map(|k| {
                    if dims.contains(&k) {
                        keep.then_some(1)
                    } else {
                        Some(x.shape[k])
                    }
                })
                .collect();
            let indices = build(DType::I64, shape.clone(), idxs);
            if name.starts_with("arg") {
                return out(indices);
            }
            Ok(vec![build(x.dtype, shape, vals), indices])
        }
        "native_layer_norm" | "rms_norm" | "var" | "var_mean" => {
            let x = n.tensor(if name.starts_with("var") {
                "self"
            } else {
                "input"
            })?;
            if !x.dtype.is_float() {
                return fail("needs a floating dtype");
            }
            let rank = x.shape.len();
            let dims: Vec<usize> = if name.starts_with("var") {
                let d = n.ints("dim")?;
                let mut d: Vec<usize> = if d.is_empty() {
                    (0..rank).collect()
                } else {
                    d.iter().map(|&k| wrap(k, rank)).collect::<R<_>>()?
                };
                d.sort_unstable();
                d
            } else {
                let k = n.ints("normalized_shape")?.len();
                if k == 0 || k > rank {
                    return fail("bad normalized_shape");
                }
                (rank - k..rank).collect()
            };
            let count: usize = dims.iter().map(|&d| x.shape[d]).product();
            let sum = reduce(&x, &dims, true, DType::F64, Some(E::F(0.0)), |a, v| {
                E::F(a.f() + v.f())
            })?;
            let st = strides(&x.shape);
            let rst = strides(&sum.shape);
            let reduced_at = |i: usize| -> usize {
                let mut idx = unflatten(i, &x.shape);
                for &d in &dims {
                    idx[d] = 0;
                }
                flat(&idx, &rst)
            };
            let rms = name == "rms_norm";
            let mean: Vec<f64> = (0..sum.numel())
                .map(|i| {
                    if rms {
                        0.0
                    } else {
                        elem(&sum, i).f() / count as f64
                    }
                })
                .collect();
            let mut ss = vec![0.0; sum.numel()];
            for i in 0..x.numel() {
                let d = elem(&x, flat(&unflatten(i, &x.shape), &st)).f() - mean[reduced_at(i)];
                ss[reduced_at(i)] += d * d;
            }
            if name.starts_with("var") {
                let correction = match node.arg("correction") {
                    Some(Arg::Scalar(s)) => match n.number(*s)? {
                        Operand::Number(v, _) => v.f(),
                        Operand::Tensor(_) => unreachable!(),
                    },
                    _ => 1.0,
                };
                let denom = (count as f64 - correction).max(0.0);
                let keep = n.flag("keepdim");
                let shape: Vec<usize> = (0..rank)
                    .filter_map(|k| {
                        if dims.contains(&k) {
                            keep.then_some(1)
                        } else {
                            Some(x.shape[k])
                        }
                    })
                    .collect();
                let var = build(
                    x.dtype,
                    shape.clone(),
                    ss.iter().map(|&s| E::F(s / denom)).collect(),
                );
                if name == "var" {
                    return out(var);
                }
                return Ok(vec![
                    var,
                    build(x.dtype, shape, mean.iter().map(|&m| E::F(m)).collect()),
                ]);
            }
            let eps = match node.arg("eps") {
                Some(Arg::Float(f)) => *f,
                _ => match x.dtype {
                    DType::F64 => f64::EPSILON,
                    DType::F16 => 0.0009765625,
                    DType::BF16 => 0.0078125,
                    _ => f32::EPSILON as f64,
                },
            };
            let rstd: Vec<f64> = ss
                .iter()
                .map(|&s| 1.0 / (s / count as f64 + eps).sqrt())
                .collect();
            let opt = |arg: &str| -> R<Option<HostTensor>> {
                match node.arg(arg) {
                    Some(Arg::Tensor(r)) => Ok(Some(get(r))),
                    _ => Ok(None),
                }
            };
            let (w, bias) = (opt("weight")?, opt("bias")?);
            let norm_shape: Vec<usize> = dims.iter().map(|&d| x.shape[d]).collect();
            let inner: usize = norm_shape.iter().product();
            let vals: Vec<E> = (0..x.numel())
                .map(|i| {
                    let r = reduced_at(i);
                    let mut v = (elem(&x, i).f() - mean[r]) * rstd[r];
                    if let Some(w) = &w {
                        v *= elem(w, i % inner.max(1)).f();
                    }
                    if let Some(b) = &bias {
                        v += elem(b, i % inner.max(1)).f();
                    }
                    E::F(v)
                })
                .collect();
            let y = build(x.dtype, x.shape.clone(), vals);
            if rms {
                return out(y);
            }
            let stats = |v: &[f64]| {
                build(
                    x.dtype,
                    sum.shape.clone(),
                    v.iter().map(|&m| E::F(m)).collect(),
                )
            };
            Ok(vec![y, stats(&mean), stats(&rstd)])
        }
        "scaled_dot_product_attention" => {
            let (q, k, v) = (n.tensor("query")?, n.tensor("key")?, n.tensor("value")?);
            let rank = q.shape.len();
            if !(2..=4).contains(&rank) || k.shape.len() != rank || v.shape.len() != rank {
                return fail("expects query, key and value of one rank, 2 to 4 dimensions");
            }
            // Fewer dimensions read as leading sizes of 1: the same flat positions.
            let lift = |s: &[usize]| [vec![1; 4 - rank], s.to_vec()].concat();
            let (q4, k4, v4) = (lift(&q.shape), lift(&k.shape), lift(&v.shape));
            if !matches!(node.arg("dropout_p"), Some(Arg::Float(f)) if *f == 0.0) {
                return fail("dropout is not supported");
            }
            let (b, hq, lq, e) = (q4[0], q4[1], q4[2], q4[3]);
            let (hk, s, ev) = (k4[1], k4[2], v4[3]);
            // No heads at all is an empty result.
            if hq != hk && (hk == 0 || hq % hk != 0) {
                return fail("query heads must be a multiple of key/value heads");
            }
            let rep = if hq == hk { 1 } else { hq / hk };
            let scale = match node.arg("scale") {
                Some(Arg::Float(f)) => *f,
                _ => 1.0 / (e as f64).sqrt(),
            };
            let causal = n.flag("is_causal");
            let mask = match node.arg("attn_mask") {
                Some(Arg::Tensor(r)) => Some(get(r)),
                _ => None,
            };
            let (qs, ks, vs) = (strides(&q4), strides(&k4), strides(&v4));
            let mut vals = Vec::with_capacity(b * hq * lq * ev);
            for bi in 0..b {
                for h in 0..hq {
                    let kh = h / rep;
                    for i in 0..lq {
                        let mut logits = vec![0.0f64; s];
                        for (j, lg) in logits.iter_mut().enumerate() {
                            let dot: f64 = (0..e)
                                .map(|t| {
                                    elem(&q, flat(&[bi, h, i, t], &qs)).f()
                                        * elem(&k, flat(&[bi, kh, j, t], &ks)).f()
                                })
                                .sum();
                            let mut x = dot * scale;
                            if causal && j > i {
                                x = f64::NEG_INFINITY;
                            }
                            if let Some(m) = &mask {
                                let mv = at(&Operand::Tensor(m.clone()), &[bi, h, i, j]);
                                if m.dtype == DType::Bool {
                                    if mv.i() == 0 {
                                        x = f64::NEG_INFINITY;
                                    }
                                } else {
                                    x += mv.f();
                                }
                            }
                            *lg = x;
                        }
                        let mx = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let ex: Vec<f64> = logits.iter().map(|&x| (x - mx).exp()).collect();
                        let total: f64 = ex.iter().sum();
                        for c in 0..ev {
                            let acc: f64 = (0..s)
                                .map(|j| ex[j] / total * elem(&v, flat(&[bi, kh, j, c], &vs)).f())
                                .sum();
                            vals.push(E::F(acc));
                        }
                    }
                }
            }
            let mut shape = q.shape[..rank - 1].to_vec();
            shape.push(ev);
            out(build(q.dtype, shape, vals))
        }
        "_softmax" | "_log_softmax" => {
            let x = n.tensor("self")?;
            if !x.dtype.is_float() {
                return fail("softmax needs a floating dtype");
            }
            let rank = x.shape.len();
            let dim = wrap(n.int("dim")?, rank)?;
            // Empty along `dim` means empty: no row to normalize, nothing to fail on.
            if x.numel() == 0 {
                return out(build(x.dtype, x.shape.clone(), Vec::new()));
            }
            let dims = if rank == 0 { vec![] } else { vec![dim] };
            let m = reduce(&x, &dims, true, DType::F64, None, nan_max)?;
            let st = strides(&x.shape);
            let mst = strides(&m.shape);
            let shifted: Vec<f64> = (0..x.numel())
                .map(|i| {
                    let mut idx = unflatten(i, &x.shape);
                    let v = elem(&x, flat(&idx, &st)).f();
                    if rank > 0 {
                        idx[dim] = 0;
                    }
                    v - elem(&m, flat(&idx, &mst)).f()
                })
                .collect();
            let e = build(
                DType::F64,
                x.shape.clone(),
                shifted.iter().map(|&v| E::F(v.exp())).collect(),
            );
            let s = reduce(&e, &dims, true, DType::F64, Some(E::F(0.0)), |a, v| {
                E::F(a.f() + v.f())
            })?;
            let vals = (0..x.numel())
                .map(|i| {
                    let mut idx = unflatten(i, &x.shape);
                    if rank > 0 {
                        idx[dim] = 0;
                    }
                    let total = elem(&s, flat(&idx, &mst)).f();
                    E::F(if name == "_log_softmax" {
                        shifted[i] - total.ln()
                    } else {
                        shifted[i].exp() / total
                    })
                })
                .collect();
            out(build(x.dtype, x.shape.clone(), vals))
        }
        "view" | "reshape" | "_unsafe_view" => {
            let x = n.tensor("self")?;
            let mut sizes = n.ints(if name == "reshape" { "shape" } else { "size" })?;
            let total = x.numel() as i64;
            let known: i64 = sizes.iter().filter(|&&s| s != -1).product();
            if let Some(k) = sizes.iter().position(|&s| s == -1) {
                if known == 0 {
                    return fail("cannot infer -1 with other sizes 0");
                }
                sizes[k] = total / known;
            }
            if sizes.iter().any(|&s| s < 0) || sizes.iter().product::<i64>() != total {
                return fail(format!(
                    "shape {sizes:?} is invalid for input of size {total}"
                ));
            }
            let shape: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
            out(HostTensor {
                dtype: x.dtype,
                shape,
                data: x.data,
            })
        }
        "permute" | "transpose" | "t" => {
            let x = n.tensor("self")?;
            let rank = x.shape.len();
            let perm: Vec<usize> = match name {
                "permute" => n
                    .ints("dims")?
                    .iter()
                    .map(|&d| wrap(d, rank))
                    .collect::<R<_>>()?,
                _ => {
                    let (a, c) = if name == "t" {
                        (0, rank.saturating_sub(1))
                    } else {
                        (wrap(n.int("dim0")?, rank)?, wrap(n.int("dim1")?, rank)?)
                    };
                    let mut p: Vec<usize> = (0..rank).collect();
                    p.swap(a, c);
                    p
                }
            };
            let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
            out(gather_view(&x, shape, |idx| {
                let mut src = vec![0; rank];
                for (k, &p) in perm.iter().enumerate() {
                    src[p] = idx[k];
                }
                src
            }))
        }
        "unsqueeze" => {
            let x = n.tensor("self")?;
            let dim = wrap(n.int("dim")?, x.shape.len() + 1)?;
            let mut shape = x.shape.clone();
            shape.insert(dim, 1);
            out(HostTensor {
                dtype: x.dtype,
                shape,
                data: x.data,
            })
        }
        "squeeze" => {
            let x = n.tensor("self")?;
            let rank = x.shape.len();
            let dims: Vec<usize> = match overload {
                "dim" => vec![wrap(n.int("dim")?, rank)?],
                "dims" => n
                    .ints("dim")?
                    .iter()
                    .map(|&d| wrap(d, rank))
                    .collect::<R<_>>()?,
                _ => (0..rank).collect(),
            };
            let shape: Vec<usize> = x
                .shape
                .iter()
                .enumerate()
                .filter(|(k, &s)| !(dims.contains(k) && s == 1))
                .map(|(_, &s)| s)
                .collect();
            out(HostTensor {
                dtype: x.dtype,
                shape,
                data: x.data,
            })
        }
        "expand" => {
            let x = n.tensor("self")?;
            let sizes = n.ints("size")?;
            let off = sizes
                .len()
                .checked_sub(x.shape.len())
                .ok_or_else(|| Some("expand to fewer dimensions".to_string()))?;
            let mut shape = Vec::with_capacity(sizes.len());
            for (k, &s) in sizes.iter().enumerate() {
                if k < off {
                    shape.push(s as usize);
                    continue;
                }
                let own = x.shape[k - off];
                shape.push(if s == -1 || s as usize == own {
                    own
                } else if own == 1 {
                    s as usize
                } else {
                    return fail(format!("expand: size {own} cannot become {s}"));
                });
            }
            let xs = x.shape.clone();
            out(gather_view(&x, shape, |idx| {
                xs.iter()
                    .enumerate()
                    .map(|(k, &s)| if s == 1 { 0 } else { idx[off + k] })
                    .collect()
            }))
        }
        "repeat" => {
            let x = n.tensor("self")?;
            let reps = n.ints("repeats")?;
            let off = match reps.len().checked_sub(x.shape.len()) {
                Some(off) if reps.iter().all(|&r| r >= 0) => off,
                _ => return fail(format!("repeat {reps:?} of shape {:?}", x.shape)),
            };
            let shape: Vec<usize> = (0..reps.len())
                .map(|k| match k.checked_sub(off) {
                    Some(d) => x.shape[d] * reps[k] as usize,
                    None => reps[k] as usize,
                })
                .collect();
            let xs = x.shape.clone();
            out(gather_view(&x, shape, |idx| {
                xs.iter()
                    .enumerate()
                    .map(|(d, &s)| idx[off + d] % s)
                    .collect()
            }))
        }
        "slice" => {
            let x = n.tensor("self")?;
            let (dim, start, _, step, len) = slice_bounds(&n, &x)?;
            let mut shape = x.shape.clone();
            shape[dim] = len;
            out(gather_view(&x, shape, |idx| {
                let mut s = idx.to_vec();
                s[dim] = (start + idx[dim] as i64 * step) as usize;
                s
            }))
        }
        "select" => {
            let x = n.tensor("self")?;
            let dim = wrap(n.int("dim")?, x.shape.len())?;
            let size = x.shape[dim] as i64;
            let i = n.int("index")?;
            if i < -size || i >= size {
                return fail(format!("index {i} is out of range for size {size}"));
            }
            let i = if i < 0 { i + size } else { i } as usize;
            let mut shape = x.shape.clone();
            shape.remove(dim);
            out(gather_view(&x, shape, |idx| {
                let mut s = idx.to_vec();
                s.insert(dim, i);
                s
            }))
        }
        "mm" | "bmm" | "addmm" => {
            let (a, m) = if name == "addmm" {
                (n.tensor("mat1")?, n.tensor("mat2")?)
            } else {
                (n.tensor("self")?, n.tensor("mat2")?)
            };
            let batched = name == "bmm";
            let rank = if batched { 3 } else { 2 };
            if a.shape.len() != rank || m.shape.len() != rank || a.dtype != m.dtype {
                return fail("bad matmul operands");
            }
            let (bs, r, k, c) = if batched {
                (a.shape[0], a.shape[1], a.shape[2], m.shape[2])
            } else {
                (1, a.shape[0], a.shape[1], m.shape[1])
            };
            let k2 = if batched { m.shape[1] } else { m.shape[0] };
            if k != k2 || (batched && a.shape[0] != m.shape[0]) {
                return fail(format!("matmul of {:?} by {:?}", a.shape, m.shape));
            }
            let mut vals = Vec::with_capacity(bs * r * c);
            for b in 0..bs {
                for i in 0..r {
                    for j in 0..c {
                        let s: f64 = (0..k)
                            .map(|t| {
                                elem(&a, (b * r + i) * k + t).f()
                                    * elem(&m, (b * k + t) * c + j).f()
                            })
                            .sum();
                        vals.push(E::F(s));
                    }
                }
            }
            let shape = if batched { vec![bs, r, c] } else { vec![r, c] };
            if name != "addmm" {
                return out(build(a.dtype, shape, vals));
            }
            // addmm rounds once, after the bias (cuBLASLt's epilogue, ATen's CPU kernel): the
            // product stays exact until then.
            let bias = n.operand("self")?;
            let (beta, alpha) = (n.number(n.scalar("beta")?)?, n.number(n.scalar("alpha")?)?);
            let (Operand::Number(beta, _), Operand::Number(alpha, _)) = (beta, alpha) else {
                unreachable!()
            };
            let d = result_type(&[&bias, &Operand::Tensor(a.clone())])?;
            let p = Operand::Tensor(build(DType::F64, shape, vals));
            out(elementwise(&[&bias, &p], DType::F64, d, |v| {
                Ok(if beta.f() == 0.0 {
                    E::F(alpha.f() * v[1].f())
                } else {
                    E::F(beta.f() * v[0].f() + alpha.f() * v[1].f())
                })
            })?)
        }
        "embedding" | "index_select" | "gather" => {
            let (src, index) = if name == "embedding" {
                (n.tensor("weight")?, n.tensor("indices")?)
            } else {
                (n.tensor("self")?, n.tensor("index")?)
            };
            if index.dtype.is_float() || index.dtype == DType::Bool {
                return fail("indices must be integers");
            }
            let rank = src.shape.len();
            let dim = if name == "embedding" {
                0
            } else {
                wrap(n.int("dim")?, rank)?
            };
            let size = src.shape[dim];
            let shape: Vec<usize> = match name {
                "embedding" => index.shape.iter().chain(&src.shape[1..]).copied().collect(),
                "index_select" => {
                    let mut s = src.shape.clone();
                    s[dim] = index.numel();
                    s
                }
                _ => {
                    if index.shape.len() != rank
                        || (0..rank).any(|k| k != dim && index.shape[k] > src.shape[k])
                    {
                        return fail("gather: index shape does not fit the input");
                    }
                    index.shape.clone()
                }
            };
            let sst = strides(&src.shape);
            let ist = strides(&index.shape);
            let total: usize = shape.iter().product();
            let mut vals = Vec::with_capacity(total);
            for i in 0..total {
                let idx = unflatten(i, &shape);
                let (at_index, mut at_src): (Vec<usize>, Vec<usize>) = match name {
                    "embedding" => (
                        idx[..index.shape.len()].to_vec(),
                        std::iter::once(0)
                            .chain(idx[index.shape.len()..].iter().copied())
                            .collect(),
                    ),
                    "index_select" => (
                        if index.shape.is_empty() {
                            vec![]
                        } else {
                            vec![idx[dim]]
                        },
                        idx.clone(),
                    ),
                    _ => (idx.clone(), idx.clone()),
                };
                let v = elem(&index, flat(&at_index, &ist)).i();
                if v < 0 || v as usize >= size {
                    return fail(format!("index {v} is out of range for size {size}"));
                }
                at_src[dim] = v as usize;
                vals.push(elem(&src, flat(&at_src, &sst)));
            }
            out(build(src.dtype, shape, vals))
        }
        "nonzero" | "masked_select" => {
            let x = n.operand("self")?;
            if name == "nonzero" {
                let Operand::Tensor(x) = x else {
                    return fail("nonzero of a number");
                };
                let rank = x.shape.len();
                let picked: Vec<usize> =
                    (0..x.numel()).filter(|&k| elem(&x, k).f() != 0.0).collect();
                let vals = picked
                    .iter()
                    .flat_map(|&k| unflatten(k, &x.shape))
                    .map(|i| E::I(i as i64))
                    .collect();
                return out(build(DType::I64, vec![picked.len(), rank], vals));
            }
            let mask = n.operand("mask")?;
            let d = result_type(&[&x])?;
            let shape = broadcast_shape(&[&x, &mask])?;
            let mut vals = Vec::new();
            for i in 0..shape.iter().product::<usize>() {
                let idx = unflatten(i, &shape);
                if at(&mask, &idx).i() != 0 {
                    vals.push(at(&x, &idx));
                }
            }
            let count = vals.len();
            out(build(d, vec![count], vals))
        }
        "sort" | "topk" => {
            let x = n.tensor("self")?;
            let rank = x.shape.len();
            if rank == 0 {
                return Ok(vec![x, build(DType::I64, vec![], vec![E::I(0)])]);
            }
            let dim = wrap(n.int("dim")?, rank)?;
            let descending = n.flag(if name == "topk" {
                "largest"
            } else {
                "descending"
            });
            let len = x.shape[dim];
            let keep = if name == "topk" {
                n.int("k")?
            } else {
                len as i64
            };
            if keep < 0 || keep as usize > len {
                return fail(format!("k = {keep} is out of range for size {len}"));
            }
            let keep = keep as usize;
            let inner: usize = x.shape[dim + 1..].iter().product();
            let outer: usize = x.shape[..dim].iter().product();
            let mut shape = x.shape.clone();
            shape[dim] = keep;
            let total = outer * keep * inner;
            let (mut vals, mut idxs) = (vec![E::I(0); total], vec![E::I(0); total]);
            for o in 0..outer {
                for i in 0..inner {
                    let mut line: Vec<(f64, usize)> = (0..len)
                        .map(|j| (elem(&x, (o * len + j) * inner + i).f(), j))
                        .collect();
                    // Stable; NaN above every number.
                    line.sort_by(|a, b| {
                        let ord = match (a.0.is_nan(), b.0.is_nan()) {
                            (true, true) => std::cmp::Ordering::Equal,
                            (true, false) => std::cmp::Ordering::Greater,
                            (false, true) => std::cmp::Ordering::Less,
                            _ => a.0.partial_cmp(&b.0).unwrap(),
                        };
                        if descending {
                            ord.reverse()
                        } else {
                            ord
                        }
                    });
                    for (j, &(v, at)) in line.iter().take(keep).enumerate() {
                        let slot = (o * keep + j) * inner + i;
                        vals[slot] = if x.dtype.is_float() {
                            E::F(v)
                        } else {
                            E::I(v as i64)
                        };
                        idxs[slot] = E::I(at as i64);
                    }
                }
            }
            Ok(vec![
                build(x.dtype, shape.clone(), vals),
                build(DType::I64, shape, idxs),
            ])
        }
        "cumsum" | "cumprod" | "logcumsumexp" => scans::running(&n, name),
        "searchsorted" | "bucketize" => search::search_sorted(&n, name),
        "cummax" | "cummin" => scans::running_extreme(&n, name == "cummax"),
        "index" => routing::index(&n),
        "index_put" => routing::index_put(&n),
        "repeat_interleave" if overload == "Tensor" => routing::repeat_interleave(&n),
        "histc" => routing::histc(&n),
        "_grouped_mm" => routing::grouped_mm(&n),
        "empty_permuted" | "empty" | "empty_strided" => routing::empty(&n),
        "slice_scatter" => overwrite::slice_scatter(&n),
        "select_scatter" => overwrite::select_scatter(&n),
        "copy" => overwrite::copy(&n),
        "convolution" => conv::convolution(&n),
        "_native_batch_norm_legit_no_training" => conv::batch_norm(&n),
        "_native_batch_norm_legit" if overload == "no_stats" => norms::batch_norm_batch_stats(&n),
        "native_group_norm" => norms::group_norm(&n),
        "max_pool2d_with_indices" => conv::max_pool2d(&n),
        "avg_pool2d" => avg_pool::avg_pool2d(&n),
        "_adaptive_avg_pool2d" => avg_pool::adaptive_avg_pool2d(&n),
        "upsample_bilinear2d" => conv::upsample_bilinear2d(&n),
        "upsample_nearest2d" | "_upsample_nearest_exact2d" => {
            conv::upsample_nearest2d(&n, name.starts_with('_'))
        }
        "scatter" | "scatter_add" => overwrite::scatter(&n, name == "scatter_add"),
        "scatter_reduce" => overwrite::scatter_reduce(&n),
        "masked_scatter" => overwrite::masked_scatter(&n),
        "cat" => {
            let ts: Vec<HostTensor> = match node.arg("tensors") {
                Some(Arg::Tensors(v)) => v.iter().flatten().map(get).collect(),
                _ => return fail("cat needs tensors"),
            };
            let rank = ts.iter().map(|t| t.shape.len()).max().unwrap_or(0);
            let ts: Vec<HostTensor> = ts
                .into_iter()
                .filter(|t| !(rank > 1 && t.shape == [0]))
                .collect();
            if ts.is_empty() {
                return fail("cat of no tensors");
            }
            let dim = wrap(n.int("dim")?, rank)?;
            for t in &ts {
                let same = t.shape.len() == rank
                    && (0..rank).all(|k| k == dim || t.shape[k] == ts[0].shape[k]);
                if !same {
                    return fail(format!(
                        "cat: shape {:?} does not match {:?}",
                        t.shape, ts[0].shape
                    ));
                }
            }
            let ops: Vec<Operand> = ts.iter().cloned().map(Operand::Tensor).collect();
            let d = result_type(&ops.iter().collect::<Vec<_>>())?;
            let mut shape = ts[0].shape.clone();
            shape[dim] = ts.iter().map(|t| t.shape[dim]).sum();
            let total: usize = shape.iter().product();
            let mut vals = Vec::with_capacity(total);
            for i in 0..total {
                let mut idx = unflatten(i, &shape);
                let mut j = 0;
                while idx[dim] >= ts[j].shape[dim] {
                    idx[dim] -= ts[j].shape[dim];
                    j += 1;
                }
                vals.push(to(d, elem(&ts[j], flat(&idx, &strides(&ts[j].shape)))));
            }
            out(build(d, shape, vals))
        }
        "constant_pad_nd" => {
            let x = n.tensor("self")?;
            let pad = n.ints("pad")?;
            let rank = x.shape.len();
            if pad.len() % 2 != 0 || pad.len() / 2 > rank {
                return fail("bad pad length");
            }
            let mut before = vec![0i64; rank];
            let mut shape: Vec<i64> = x.shape.iter().map(|&s| s as i64).collect();
            for (k, pair) in pad.chunks(2).enumerate() {
                let d = rank - 1 - k;
                before[d] = pair[0];
                shape[d] += pair[0] + pair[1];
                if shape[d] < 0 {
                    return fail("padded size is negative");
                }
            }
            let shape: Vec<usize> = shape.iter().map(|&s| s as usize).collect();
            let fill = match n.number(n.scalar("value")?)? {
                Operand::Number(v, _) => v,
                Operand::Tensor(_) => unreachable!(),
            };
            let st = strides(&x.shape);
            let total: usize = shape.iter().product();
            let mut vals = Vec::with_capacity(total);
            for i in 0..total {
                let idx = unflatten(i, &shape);
                let src: Vec<i64> = idx
                    .iter()
                    .zip(&before)
                    .map(|(&a, &b)| a as i64 - b)
                    .collect();
                let inside = src
                    .iter()
                    .zip(&x.shape)
                    .all(|(&s, &n)| s >= 0 && (s as usize) < n);
                vals.push(if inside {
                    elem(&x, src.iter().zip(&st).map(|(&s, &t)| s as usize * t).sum())
                } else {
                    fill
                });
            }
            out(build(x.dtype, shape, vals))
        }
        "split" | "split_with_sizes" | "unbind" => {
            let x = n.tensor("self")?;
            let rank = x.shape.len();
            let dim = wrap(n.int("dim")?, rank)?;
            let size = x.shape[dim];
            let lens: Vec<usize> = match name {
                "split_with_sizes" => {
                    let v = n.ints("split_sizes")?;
                    if v.iter().any(|&s| s < 0) || v.iter().sum::<i64>() != size as i64 {
                        return fail(format!("split sizes {v:?} do not add up to {size}"));
                    }
                    v.iter().map(|&s| s as usize).collect()
                }
                "split" => {
                    let c = n.int("split_size")?;
                    if c <= 0 {
                        return fail("split_size must be positive");
                    }
                    let c = c as usize;
                    let count = size.div_ceil(c).max(1);
                    (0..count)
                        .map(|k| c.min(size.saturating_sub(k * c)))
                        .collect()
                }
                _ => vec![1; size],
            };
            let mut outs = Vec::new();
            let mut start = 0;
            for len in lens {
                let mut shape = x.shape.clone();
                shape[dim] = len;
                let mut t = gather_view(&x, shape, |idx| {
                    let mut s = idx.to_vec();
                    s[dim] += start;
                    s
                });
                if name == "unbind" {
                    t.shape.remove(dim);
                }
                outs.push(t);
                start += len;
            }
            Ok(outs)
        }
        "unfold" => {
            let x = n.tensor("self")?;
            let d = wrap(n.int("dimension")?, x.shape.len())?;
            let (size, step) = (n.int("size")?, n.int("step")?);
            if x.shape.is_empty() || size < 0 || step < 1 || size as usize > x.shape[d] {
                return fail(format!(
                    "unfold of size {size}, step {step} over {:?}",
                    x.shape
                ));
            }
            let mut shape = x.shape.clone();
            shape[d] = (x.shape[d] - size as usize) / step as usize + 1;
            shape.push(size as usize);
            out(gather_view(&x, shape, |idx| {
                let mut src = idx[..idx.len() - 1].to_vec();
                src[d] = src[d] * step as usize + idx[idx.len() - 1];
                src
            }))
        }
        "as_strided" => {
            // `self` read as its own row-major storage.
            let x = n.tensor("self")?;
            let (sizes, strides) = (n.ints("size")?, n.ints("stride")?);
            let offset = n.opt_int("storage_offset")?.unwrap_or(0);
            if sizes.len() != strides.len() || strides.iter().chain([&offset]).any(|&s| s < 0) {
                return fail("as_strided: mismatched or negative sizes and strides");
            }
            let shape: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
            let numel: usize = shape.iter().product();
            let last = offset
                + sizes
                    .iter()
                    .zip(&strides)
                    .map(|(&s, &st)| (s - 1) * st)
                    .sum::<i64>();
            if numel > 0 && last as usize >= x.numel() {
                return fail(format!(
                    "as_strided reaches element {last} of {}",
                    x.numel()
                ));
            }
            let vals = (0..numel)
                .map(|i| {
                    let idx = unflatten(i, &shape);
                    let at = offset as usize
                        + idx
                            .iter()
                            .zip(&strides)
                            .map(|(&k, &st)| k * st as usize)
                            .sum::<usize>();
                    elem(&x, at)
                })
                .collect();
            out(build(x.dtype, shape, vals))
        }
        "diagonal" => {
            let x = n.tensor("self")?;
            let rank = x.shape.len();
            let (d1, d2) = (wrap(n.int("dim1")?, rank)?, wrap(n.int("dim2")?, rank)?);
            let offset = n.int("offset")?;
            if d1 == d2 {
                return fail("diagonal of one dimension twice");
            }
            let (s1, s2) = ((-offset).max(0) as usize, offset.max(0) as usize);
            let len = x.shape[d1]
                .saturating_sub(s1)
                .min(x.shape[d2].saturating_sub(s2));
            let mut shape: Vec<usize> = (0..rank)
                .filter(|&k| k != d1 && k != d2)
                .map(|k| x.shape[k])
                .collect();
            shape.push(len);
            out(gather_view(&x, shape, |idx| {
                let k = idx[idx.len() - 1];
                let mut kept = idx[..idx.len() - 1].iter();
                (0..rank)
                    .map(|j| {
                        if j == d1 {
                            k + s1
                        } else if j == d2 {
                            k + s2
                        } else {
                            *kept.next().unwrap_or(&0)
                        }
                    })
                    .collect()
            }))
        }
        "flip" => {
            let x = n.tensor("self")?;
            let rank = x.shape.len();
            let dims: Vec<usize> = n
                .ints("dims")?
                .iter()
                .map(|&d| wrap(d, rank))
                .collect::<R<_>>()?;
            let shape = x.shape.clone();
            out(gather_view(&x, x.shape.clone(), |idx| {
                idx.iter()
                    .enumerate()
                    .map(|(k, &i)| {
                        if dims.contains(&k) {
                            shape[k] - 1 - i
                        } else {
                            i
                        }
                    })
                    .collect()
            }))
        }
        "full" | "full_like" | "scalar_tensor" => {
            let (shape, like): (Vec<usize>, Option<DType>) = match name {
                "full" => (n.ints("size")?.iter().map(|&s| s as usize).collect(), None),
                "full_like" => {
                    let x = n.tensor("self")?;
                    (x.shape.clone(), Some(x.dtype))
                }
                _ => (Vec::new(), None),
            };
            let value = n.scalar(if name == "scalar_tensor" {
                "s"
            } else {
                "fill_value"
            })?;
            let d = n.dtype("dtype").or(like).unwrap_or(match value {
                Scalar::Float(_) => DType::F32,
                Scalar::Int(_) => DType::I64,
                Scalar::Bool(_) => DType::Bool,
            });
            let v = match n.number(value)? {
                Operand::Number(v, _) => v,
                Operand::Tensor(_) => unreachable!(),
            };
            let count: usize = shape.iter().product();
            out(build(d, shape, vec![v; count]))
        }
        "arange" => {
            let num = |s: &str| -> R<i64> {
                match n.number(n.scalar(s)?)? {
                    Operand::Number(E::I(v), _) => Ok(v),
                    _ => Err(None),
                }
            };
            let (start, end, step) = match overload {
                "default" => (0, num("end")?, 1),
                "start" => (num("start")?, num("end")?, 1),
                _ => (num("start")?, num("end")?, num("step")?),
            };
            if step <= 0 {
                return fail("arange step must be positive");
            }
            let len = if end > start {
                (end - start + step - 1) / step
            } else {
                0
            };
            let d = n.dtype("dtype").unwrap_or(DType::I64);
            out(build(
                d,
                vec![len as usize],
                (0..len).map(|i| E::I(start + i * step)).collect(),
            ))
        }
        "_assert_scalar" => {
            if let Some(Arg::SymBool(c)) = node.arg("self") {
                if n.eval(*c)? == 0 {
                    return fail(format!("runtime assert '{}' failed", graph.env.text(*c)));
                }
            }
            Ok(Vec::new())
        }
        "_local_scalar_dense" => out(n.tensor("self")?),
        "_assert_tensor_metadata" => {
            let a = n.tensor("a")?;
            if let Some(d) = n.dtype("dtype") {
                if d != a.dtype {
                    return fail(format!("the tensor is {}, the metadata says {d}", a.dtype));
                }
            }
            if let Some(Arg::Ints(_)) = node.arg("size") {
                let want = n.ints("size")?;
                if want.len() != a.shape.len()
                    || want.iter().zip(&a.shape).any(|(&w, &h)| w != h as i64)
                {
                    return fail(format!(
                        "the tensor has shape {:?}, the metadata says {want:?}",
                        a.shape
                    ));
                }
            }
            Ok(Vec::new())
        }
        "sym_constrain_range_for_size" => routing::constrain_range(&n),
        _ => math::run(&n, name, overload),
    }
}
