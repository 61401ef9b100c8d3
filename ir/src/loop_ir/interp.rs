//! Executes a loop-IR program on host tensors, one element at a time: the semantics of the IR, not
//! a fast path. Every load is bounds-checked; an out-of-range index, a division by zero or an empty
//! max/min reduction is an error naming the buffer and its graph nodes.

use thiserror::Error;

use super::{
    BinaryOp, BufferId, BufferKind, Constant, ExternKernel, Op, Program, ReductionKind, UnaryOp,
};
use crate::graph::DType;
use crate::sym::{Bindings, Expr};
use crate::tensor::{round_to, wrap_to, Data, HostTensor};

#[derive(Debug, Clone, PartialEq, Error)]
pub enum RunError {
    #[error("buffer {buffer} ({origins}): {message}")]
    Buffer {
        buffer: String,
        origins: String,
        message: String,
    },
    #[error("input {index}: {message}")]
    Input { index: usize, message: String },
    /// A symbol outside its range or a runtime assert (recorded by the graph or by a guard-free
    /// lowering decision) that does not hold.
    #[error("{0}")]
    Assert(String),
}

#[derive(Copy, Clone, Debug)]
enum V {
    F(f64),
    I(i64),
}

impl V {
    fn f(self) -> f64 {
        match self {
            V::F(x) => x,
            V::I(x) => x as f64,
        }
    }
    fn i(self) -> i64 {
        match self {
            V::F(x) => x as i64,
            V::I(x) => x,
        }
    }
}

fn store(dtype: DType, v: V) -> V {
    if dtype.is_float() {
        V::F(round_to(dtype, v.f()))
    } else {
        V::I(wrap_to(dtype, v.i()))
    }
}

impl Program {
    /// Runs the program. `bindings` gives every graph symbol's value.
    pub fn run(
        &self,
        inputs: &[HostTensor],
        bindings: &Bindings,
    ) -> Result<Vec<HostTensor>, RunError> {
        self.env
            .check_bindings(bindings)
            .map_err(|e| RunError::Assert(e.to_string()))?;
        let mut storage: Vec<Vec<V>> = Vec::with_capacity(self.buffers.len());
        let mut b = bindings.clone();
        for buf in &self.buffers {
            let fail = |message: String| RunError::Buffer {
                buffer: buf.name.clone(),
                origins: buf.origins.join(", "),
                message,
            };
            let eval =
                |b: &Bindings, e: Expr| self.env.evaluate(e, b).map_err(|e| fail(e.to_string()));
            // A data-dependent output binds its count before its size can be known.
            if let BufferKind::Select { input, mask, count } = &buf.kind {
                let src = &storage[input.index()];
                let picked: Vec<usize> = match mask {
                    Some(m) => storage[m.index()]
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| v.i() != 0)
                        .map(|(k, _)| k)
                        .collect(),
                    None => src
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| v.f() != 0.0)
                        .map(|(k, _)| k)
                        .collect(),
                };
                self.bind_produced(&mut b, *count, picked.len() as i64)
                    .map_err(fail)?;
                let out = match mask {
                    Some(_) => picked.iter().map(|&k| src[k]).collect(),
                    None => {
                        let shape: Vec<i64> = self.buffers[input.index()]
                            .layout
                            .sizes
                            .iter()
                            .map(|&s| eval(&b, s))
                            .collect::<Result<_, _>>()?;
                        let mut out = Vec::with_capacity(picked.len() * shape.len());
                        for &k in &picked {
                            let mut rest = k as i64;
                            let mut idx = vec![0i64; shape.len()];
                            for d in (0..shape.len()).rev() {
                                idx[d] = rest % shape[d].max(1);
                                rest /= shape[d].max(1);
                            }
                            out.extend(idx.into_iter().map(V::I));
                        }
                        out
                    }
                };
                storage.push(out);
                continue;
            }
            let numel =
                buf.layout
                    .sizes
                    .iter()
                    .map(|&s| eval(&b, s))
                    .try_fold(1i64, |acc, s| {
                        s.and_then(|s| {
                            acc.checked_mul(s)
                                .ok_or_else(|| fail("size overflows".into()))
                        })
                    })?;
            match &buf.kind {
                BufferKind::Input(n) => {
                    let t = inputs.get(*n).ok_or(RunError::Input {
                        index: *n,
                        message: "missing".into(),
                    })?;
                    if t.numel() as i64 != numel {
                        return Err(RunError::Input {
                            index: *n,
                            message: format!("{} elements, expected {numel}", t.numel()),
                        });
                    }
                    storage.push(match &t.data {
                        Data::Float(v) => v.iter().map(|&x| V::F(x)).collect(),
                        Data::Int(v) => v.iter().map(|&x| V::I(x)).collect(),
                    });
                }
                BufferKind::Select { .. } => unreachable!("handled before the size is computed"),
                BufferKind::Sort {
                    input,
                    dim,
                    descending,
                    take,
                    indices,
                } => {
                    let in_sizes: Vec<i64> = self.buffers[input.index()]
                        .layout
                        .sizes
                        .iter()
                        .map(|&s| eval(&b, s))
                        .collect::<Result<_, _>>()?;
                    let len = in_sizes[*dim];
                    let keep = match take {
                        Some(k) => eval(&b, *k)?,
                        None => len,
                    };
                    if keep < 0 || keep > len {
                        return Err(fail(format!("selected {keep} of {len} elements")));
                    }
                    let inner: i64 = in_sizes[dim + 1..].iter().product();
                    let outer: i64 = in_sizes[..*dim].iter().product();
                    let src = &storage[input.index()];
                    let mut out = vec![V::I(0); (outer * keep * inner).max(0) as usize];
                    for o in 0..outer {
                        for i in 0..inner {
                            let mut line: Vec<(V, i64)> = (0..len)
                                .map(|j| (src[((o * len + j) * inner + i) as usize], j))
                                .collect();
                            line.sort_by(|a, c| order_key(a.0, c.0, *descending));
                            for (j, &(v, at)) in line.iter().take(keep as usize).enumerate() {
                                out[((o * keep + j as i64) * inner + i) as usize] =
                                    if *indices { V::I(at) } else { v };
                            }
                        }
                    }
                    storage.push(out);
                    continue;
                }
                BufferKind::Scan { input, dim } => {
                    // The input is contiguous with the same shape: running sums along `dim`.
                    let sizes: Vec<i64> = buf
                        .layout
                        .sizes
                        .iter()
                        .map(|&s| eval(&b, s))
                        .collect::<Result<_, _>>()?;
                    let src = &storage[input.index()];
                    let inner: i64 = sizes[dim + 1..].iter().product();
                    let len = sizes[*dim];
                    let mut acc = src.clone();
                    for k in 0..acc.len() as i64 {
                        // Not the first along `dim`: add the running sum of the previous element.
                        if inner > 0 && len > 0 && (k / inner) % len > 0 {
                            let prev = acc[(k - inner) as usize];
                            acc[k as usize] = store(
                                buf.dtype,
                                combine(ReductionKind::Sum, buf.dtype, prev, acc[k as usize]),
                            );
                        }
                    }
                    storage.push(acc);
                    continue;
                }
                BufferKind::Item { input, symbol } => {
                    let v = storage[input.index()]
                        .first()
                        .copied()
                        .ok_or_else(|| fail("item() of an empty tensor".into()))?
                        .i();
                    self.bind_produced(&mut b, *symbol, v).map_err(fail)?;
                    storage.push(Vec::new());
                    continue;
                }
                BufferKind::Extern {
                    kernel,
                    inputs: args,
                } => {
                    let dims = |id: BufferId| -> Result<Vec<i64>, RunError> {
                        self.buffers[id.index()]
                            .layout
                            .sizes
                            .iter()
                            .map(|&s| eval(&b, s))
                            .collect()
                    };
                    let (a, m) = (args[0], args[1]);
                    let (da, dm) = (dims(a)?, dims(m)?);
                    let (batch, rows, inner, cols) = match kernel {
                        ExternKernel::Mm => (1, da[0], da[1], dm[1]),
                        ExternKernel::Bmm => (da[0], da[1], da[2], dm[2]),
                    };
                    let k2 = if *kernel == ExternKernel::Mm {
                        dm[0]
                    } else {
                        dm[1]
                    };
                    if inner != k2 {
                        return Err(fail(format!(
                            "{} of [.., {inner}] by [{k2}, ..]",
                            kernel.name()
                        )));
                    }
                    let read = |id: BufferId, idx: &[i64]| -> Result<f64, RunError> {
                        let at = self.buffers[id.index()]
                            .layout
                            .index_value(&self.env, idx, &b)
                            .map_err(fail)?;
                        Ok(storage[id.index()]
                            .get(at as usize)
                            .filter(|_| at >= 0)
                            .ok_or_else(|| fail(format!("read out of bounds at {at}")))?
                            .f())
                    };
                    let mut out = Vec::with_capacity((batch * rows * cols).max(0) as usize);
                    for bi in 0..batch {
                        for r in 0..rows {
                            for c in 0..cols {
                                let mut acc = 0.0;
                                for k in 0..inner {
                                    let (x, y) = match kernel {
                                        ExternKernel::Mm => (read(a, &[r, k])?, read(m, &[k, c])?),
                                        ExternKernel::Bmm => {
                                            (read(a, &[bi, r, k])?, read(m, &[bi, k, c])?)
                                        }
                                    };
                                    acc += x * y;
                                }
                                out.push(store(buf.dtype, V::F(acc)));
                            }
                        }
                    }
                    storage.push(out);
                }
                BufferKind::Computed { loops, body } => {
                    let ranges: Vec<i64> = loops
                        .ranges
                        .iter()
                        .map(|&r| eval(&b, r))
                        .collect::<Result<_, _>>()?;
                    let (rkind, rranges) = match &loops.reduction {
                        Some((k, rr, _)) => (
                            Some(*k),
                            rr.iter()
                                .map(|&r| eval(&b, r))
                                .collect::<Result<Vec<_>, _>>()?,
                        ),
                        None => (None, Vec::new()),
                    };
                    let mut out = vec![V::I(0); numel.max(0) as usize];
                    let mut idx = vec![0i64; ranges.len()];
                    let total: i64 = ranges.iter().product();
                    for _ in 0..total.max(0) {
                        for (k, &v) in loops.vars.iter().zip(&idx) {
                            b.set(
                                self.env
                                    .pool()
                                    .as_symbol(*k)
                                    .expect("loop vars are symbols"),
                                v,
                            );
                        }
                        let value = match (rkind, &loops.reduction) {
                            (None, _) => self.eval_body(body, &mut b, &storage).map_err(fail)?,
                            (Some(kind), Some((_, _, rvars))) => self
                                .reduce(kind, body, rvars, &rranges, &mut b, &storage)
                                .map_err(fail)?,
                            _ => unreachable!(),
                        };
                        let at = buf.layout.index_value(&self.env, &idx, &b).map_err(fail)?;
                        let slot = out
                            .get_mut(at as usize)
                            .filter(|_| at >= 0)
                            .ok_or_else(|| fail(format!("store out of bounds at {at}")))?;
                        *slot = store(buf.dtype, value);
                        // Next index, last dimension fastest.
                        for k in (0..idx.len()).rev() {
                            idx[k] += 1;
                            if idx[k] < ranges[k] {
                                break;
                            }
                            idx[k] = 0;
                        }
                    }
                    storage.push(out);
                }
            }
        }
        let mut outs = Vec::new();
        for &o in &self.outputs {
            let buf = &self.buffers[o.index()];
            let shape: Vec<usize> = buf
                .layout
                .sizes
                .iter()
                .map(|&s| self.env.evaluate(s, &b).map(|v| v as usize))
                .collect::<Result<_, _>>()
                .map_err(|e| RunError::Buffer {
                    buffer: buf.name.clone(),
                    origins: String::new(),
                    message: e.to_string(),
                })?;
            let vals = &storage[o.index()];
            let data = if buf.dtype.is_float() {
                Data::Float(vals.iter().map(|v| v.f()).collect())
            } else {
                Data::Int(vals.iter().map(|v| v.i()).collect())
            };
            outs.push(HostTensor {
                dtype: buf.dtype,
                shape,
                data,
            });
        }
        Ok(outs)
    }

    fn reduce(
        &self,
        kind: ReductionKind,
        body: &super::Body,
        rvars: &[Expr],
        rranges: &[i64],
        b: &mut Bindings,
        storage: &[Vec<V>],
    ) -> Result<V, String> {
        let total: i64 = rranges.iter().product();
        let dtype = body.dtype(body.result.expect("body has a result"));
        if total <= 0 && !matches!(kind, ReductionKind::Sum | ReductionKind::Any) {
            return Err(format!("{} over an empty range", kind.name()));
        }
        let arg = matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin);
        let mut best: Option<(V, i64)> = None;
        let mut acc: Option<V> = None;
        let mut ridx = vec![0i64; rranges.len()];
        for _ in 0..total.max(0) {
            for (k, &v) in rvars.iter().zip(&ridx) {
                b.set(
                    self.env
                        .pool()
                        .as_symbol(*k)
                        .expect("loop vars are symbols"),
                    v,
                );
            }
            let v = self.eval_body(body, b, storage)?;
            if arg {
                let position = ridx.iter().zip(rranges).fold(0i64, |p, (&i, &n)| p * n + i);
                best = match best {
                    None => Some((v, position)),
                    Some((bv, bp)) => Some(if better(kind, dtype, v, bv) {
                        (v, position)
                    } else {
                        (bv, bp)
                    }),
                };
            } else {
                acc = Some(match acc {
                    None => v,
                    Some(a) => combine(kind, dtype, a, v),
                });
            }
            for k in (0..ridx.len()).rev() {
                ridx[k] += 1;
                if ridx[k] < rranges[k] {
                    break;
                }
                ridx[k] = 0;
            }
        }
        if let Some((_, position)) = best {
            return Ok(V::I(position));
        }
        Ok(match acc {
            Some(a) => a,
            None if dtype.is_float() => V::F(0.0),
            None => V::I(0),
        })
    }

    fn eval_body(
        &self,
        body: &super::Body,
        b: &mut Bindings,
        storage: &[Vec<V>],
    ) -> Result<V, String> {
        let mut vals: Vec<V> = Vec::with_capacity(body.ops.len());
        for &(op, dtype) in &body.ops {
            let v = match op {
                Op::Load { mask: Some(m), .. } | Op::Index(_, Some(m))
                    if vals[m.0 as usize].i() == 0 =>
                {
                    if dtype.is_float() {
                        V::F(0.0)
                    } else {
                        V::I(0)
                    }
                }
                Op::Load { buffer, index, .. } => {
                    let i = self.env.evaluate(index, b).map_err(|e| e.to_string())?;
                    let data = &storage[buffer.index()];
                    *data.get(i as usize).filter(|_| i >= 0).ok_or_else(|| {
                        format!(
                            "load from {} at index {i} is out of bounds (size {})",
                            self.buffers[buffer.index()].name,
                            data.len()
                        )
                    })?
                }
                Op::Constant(Constant::Float(bits)) => V::F(f64::from_bits(bits)),
                Op::Constant(Constant::Int(i)) => V::I(i),
                Op::Index(e, _) => V::I(self.env.evaluate(e, b).map_err(|e| e.to_string())?),
                Op::Cast(a) => vals[a.0 as usize],
                Op::Bind {
                    var, mask: Some(m), ..
                } if vals[m.0 as usize].i() == 0 => {
                    b.set(
                        self.env
                            .pool()
                            .as_symbol(var)
                            .expect("bound variables are symbols"),
                        0,
                    );
                    V::I(0)
                }
                Op::Bind {
                    var, value, size, ..
                } => {
                    let v = vals[value.0 as usize].i();
                    let n = self.env.evaluate(size, b).map_err(|e| e.to_string())?;
                    if !(0..n).contains(&v) {
                        return Err(format!(
                            "index {v} is out of range [0, {n}) for {}",
                            self.env.text(var)
                        ));
                    }
                    b.set(
                        self.env
                            .pool()
                            .as_symbol(var)
                            .expect("bound variables are symbols"),
                        v,
                    );
                    V::I(v)
                }
                Op::Unary(u, a) => unary(u, vals[a.0 as usize], dtype),
                Op::Binary(o, x, y) => {
                    binary(o, vals[x.0 as usize], vals[y.0 as usize], body.dtype(x))?
                }
                Op::Where(c, x, y) => {
                    if vals[c.0 as usize].i() != 0 {
                        vals[x.0 as usize]
                    } else {
                        vals[y.0 as usize]
                    }
                }
            };
            vals.push(store(dtype, v));
        }
        Ok(vals[body.result.expect("body has a result").0 as usize])
    }
}

impl Program {
    /// Binds a symbol a data-dependent op produced, checking its range and the asserts it completes.
    fn bind_produced(
        &self,
        b: &mut Bindings,
        symbol: crate::sym::SymbolId,
        v: i64,
    ) -> Result<(), String> {
        let range = self.env.symbol_range(symbol);
        if !range.contains(v) {
            return Err(format!(
                "{} = {v} is outside its range {range}",
                self.env.symbol_name(symbol)
            ));
        }
        b.set(symbol, v);
        self.check_bound_asserts(b)
    }

    /// Checks the runtime asserts whose symbols are all bound (a data-dependent symbol was just
    /// produced).
    fn check_bound_asserts(&self, b: &Bindings) -> Result<(), String> {
        for &a in self.env.runtime_asserts() {
            if let Ok(0) = self.env.evaluate(a, b) {
                return Err(format!("runtime assert '{}' failed", self.env.text(a)));
            }
        }
        Ok(())
    }
}

impl super::Layout {
    /// The storage index of `idx` at run time.
    fn index_value(
        &self,
        env: &crate::sym::ShapeEnv,
        idx: &[i64],
        b: &Bindings,
    ) -> Result<i64, String> {
        let mut at = env.evaluate(self.offset, b).map_err(|e| e.to_string())?;
        for (&s, &i) in self.strides.iter().zip(idx) {
            let s = env.evaluate(s, b).map_err(|e| e.to_string())?;
            at += s * i;
        }
        Ok(at)
    }
}

/// The order of a sort: NaN above every number; descending reverses it (the sort is stable, so
/// equal values keep their positions' order either way).
fn order_key(a: V, c: V, descending: bool) -> std::cmp::Ordering {
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
fn better(kind: ReductionKind, dtype: DType, v: V, b: V) -> bool {
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

fn combine(kind: ReductionKind, dtype: DType, a: V, v: V) -> V {
    match (kind, dtype.is_float()) {
        (ReductionKind::Sum, true) => V::F(a.f() + v.f()),
        (ReductionKind::Sum, false) => V::I(a.i().wrapping_add(v.i())),
        // NaN propagates, as in ATen.
        (ReductionKind::Max, true) => V::F(if a.f().is_nan() || v.f().is_nan() {
            f64::NAN
        } else {
            a.f().max(v.f())
        }),
        (ReductionKind::Min, true) => V::F(if a.f().is_nan() || v.f().is_nan() {
            f64::NAN
        } else {
            a.f().min(v.f())
        }),
        (ReductionKind::Max, false) => V::I(a.i().max(v.i())),
        (ReductionKind::Min, false) => V::I(a.i().min(v.i())),
        (ReductionKind::Any, _) => V::I(i64::from(a.i() != 0 || v.i() != 0)),
        (ReductionKind::ArgMax | ReductionKind::ArgMin, _) => {
            unreachable!("arg-reductions keep a position")
        }
    }
}

fn unary(u: UnaryOp, a: V, dtype: DType) -> V {
    if !dtype.is_float() && u != UnaryOp::LogicalNot {
        return match u {
            UnaryOp::Neg => V::I(a.i().wrapping_neg()),
            UnaryOp::Abs => V::I(a.i().wrapping_abs()),
            UnaryOp::Relu => V::I(a.i().max(0)),
            UnaryOp::BitNot if dtype == DType::Bool => V::I(i64::from(a.i() == 0)),
            UnaryOp::BitNot => V::I(!a.i()),
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
        UnaryOp::Reciprocal => 1.0 / x,
        UnaryOp::LogicalNot => return V::I(i64::from(a.f() == 0.0)),
        UnaryOp::BitNot => f64::NAN,
    })
}

fn binary(o: BinaryOp, a: V, b: V, dtype: DType) -> Result<V, String> {
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
            Pow => V::F(x.powf(y)),
            Max => V::F(if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.max(y)
            }),
            Min => V::F(if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.min(y)
            }),
            Eq => cmp(x == y),
            Ne => cmp(x != y),
            Lt => cmp(x < y),
            Le => cmp(x <= y),
            Gt => cmp(x > y),
            Ge => cmp(x >= y),
            LogicalAnd => cmp(x != 0.0 && y != 0.0),
            LogicalOr => cmp(x != 0.0 || y != 0.0),
            BitAnd | BitOr => return Err("bitwise op on floats".into()),
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
    })
}
