//! Executes a loop-IR program on host tensors, one element at a time: the semantics of the IR, not
//! a fast path. Every load is bounds-checked; an out-of-range index, a division by zero or an empty
//! max/min reduction is an error naming the buffer and its graph nodes.

mod exec;
mod library;
mod scalar;

use exec::Storage;
pub use exec::{ExecPlan, ExecStep, ReadFn, Scalar};

use thiserror::Error;

use scalar::{better, binary, combine, unary};

use super::{Constant, Op, Program, ReductionKind};
use crate::graph::DType;
use crate::sym::{Bindings, Expr};
use crate::tensor::{round_to, wrap_to};

#[derive(Debug, Clone, PartialEq, Error)]
pub enum RunError {
    #[error("{}", super::kernel_error(&format!("buffer {buffer} ({origins})"), message))]
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
pub(super) enum V {
    F(f64),
    I(i64),
}

impl V {
    pub(super) fn f(self) -> f64 {
        match self {
            V::F(x) => x,
            V::I(x) => x as f64,
        }
    }
    pub(super) fn i(self) -> i64 {
        match self {
            V::F(x) => x as i64,
            V::I(x) => x,
        }
    }
}

pub(super) fn store(dtype: DType, v: V) -> V {
    if dtype.is_float() {
        V::F(round_to(dtype, v.f()))
    } else if let (DType::Bool, V::F(x)) = (dtype, v) {
        // A float is true when non-zero (0.5 and NaN included), as in ATen.
        V::I(i64::from(x != 0.0))
    } else {
        V::I(wrap_to(dtype, v.i()))
    }
}

impl Program {
    /// Reduces the body over the reduction ranges. `lanes` ≤ 1: in order, exactly. Otherwise the
    /// schedule's reduction order: lane `l` accumulates positions `l, l + lanes, …` (rounded to the
    /// accumulation dtype at every step, as a kernel does), then lanes combine in a balanced binary
    /// tree, pairs `2i, 2i + 1` first. Arg-reductions keep the first best position either way.
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &self,
        kind: ReductionKind,
        body: &super::Body,
        rvars: &[Expr],
        rranges: &[i64],
        b: &mut Bindings,
        storage: &Storage,
        lanes: i64,
    ) -> Result<V, String> {
        let total: i64 = rranges.iter().product();
        let dtype = body.dtype(body.result.expect("body has a result"));
        let arg = matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin);
        let laned = lanes > 1;
        let merge = |a: Option<(V, i64)>, c: Option<(V, i64)>| -> Option<(V, i64)> {
            match (a, c) {
                (None, x) | (x, None) => x,
                (Some((av, ap)), Some((cv, cp))) if arg => Some(
                    if better(kind, dtype, cv, av) || (!better(kind, dtype, av, cv) && cp < ap) {
                        (cv, cp)
                    } else {
                        (av, ap)
                    },
                ),
                (Some((av, ap)), Some((cv, _))) => {
                    let v = combine(kind, dtype, av, cv);
                    Some((if laned { store(dtype, v) } else { v }, ap))
                }
            }
        };
        let width = if laned { lanes as usize } else { 1 };
        let mut acc: Vec<Option<(V, i64)>> = vec![None; width];
        let mut ridx = vec![0i64; rranges.len()];
        for position in 0..total.max(0) {
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
            let lane = (position as usize) % width;
            acc[lane] = merge(acc[lane], Some((v, position)));
            for k in (0..ridx.len()).rev() {
                ridx[k] += 1;
                if ridx[k] < rranges[k] {
                    break;
                }
                ridx[k] = 0;
            }
        }
        while acc.len() > 1 {
            acc = acc
                .chunks(2)
                .map(|p| merge(p[0], p.get(1).copied().flatten()))
                .collect();
        }
        Ok(match acc[0] {
            Some((_, position)) if arg => V::I(position),
            Some((v, _)) => v,
            // An empty range: the identity (lowering asserts extrema of user ops non-empty; an
            // internal one, softmax's row maximum, may be empty when no output reads it).
            None if arg => V::I(0),
            None => match (kind, dtype.is_float()) {
                (ReductionKind::Prod, true) => V::F(1.0),
                (ReductionKind::Prod, false) => V::I(1),
                (ReductionKind::Max, true) => V::F(f64::NEG_INFINITY),
                (ReductionKind::Min, true) => V::F(f64::INFINITY),
                (ReductionKind::Max, false) => V::I(dtype.int_range().map_or(i64::MIN, |r| r.0)),
                (ReductionKind::Min, false) => V::I(dtype.int_range().map_or(i64::MAX, |r| r.1)),
                (_, true) => V::F(0.0),
                (_, false) => V::I(0),
            },
        })
    }

    fn eval_body(
        &self,
        body: &super::Body,
        b: &mut Bindings,
        storage: &Storage,
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
                    storage.load(self, buffer, i)?
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
                        return Err(match self.env.index_origin(var) {
                            Some(origin) => {
                                format!("{origin}: index {v} is out of range for size {n}")
                            }
                            None => format!(
                                "index {v} is out of range [0, {n}) for {}",
                                self.env.text(var)
                            ),
                        });
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
                Op::Check { cond, check } => {
                    if vals[cond.0 as usize].i() == 0 {
                        return Err(check.message().to_string());
                    }
                    vals[cond.0 as usize]
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
    pub fn bind_produced(
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
