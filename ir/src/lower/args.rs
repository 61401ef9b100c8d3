//! Reading a node's arguments: tensors (or Python numbers standing for them), numbers,
//! integers and dimensions, each with an error naming the argument.

use std::rc::Rc;

use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::loop_ir::{Constant, ValueId};
use crate::sym::{Expr, SymbolId};

type R<T> = Result<T, NodeError>;

pub(super) fn msg<T>(m: impl Into<String>) -> R<T> {
    Err(NodeError::Message(m.into()))
}

/// The tensor argument `name`: a tensor, or a number standing for one.
pub(super) fn tensor(l: &Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    match n.arg(name) {
        Some(Arg::Tensor(r)) => Ok(l.tensor(r)?),
        Some(Arg::Number(s)) | Some(Arg::Scalar(s)) => Ok(number(*s)),
        other => msg(format!(
            "argument '{name}': expected a tensor, found {other:?}"
        )),
    }
}

/// A Python number as a zero-dimensional wrapped tensor.
pub(super) fn number(s: Scalar) -> LTensor {
    let dtype = match s {
        Scalar::Float(_) => DType::F64,
        Scalar::Int(_) => DType::I64,
        Scalar::Bool(_) => DType::Bool,
    };
    let loader: Loader = Rc::new(move |c: &mut Ctx, _idx: &[Expr]| scalar_value(c, s, dtype));
    LTensor {
        dtype,
        sizes: Vec::new(),
        loader,
        wrapped: true,
        buffer: None,
        strided: None,
    }
}

/// Emits a scalar as a value of dtype `d`.
pub(super) fn scalar_value(c: &mut Ctx, s: Scalar, d: DType) -> ValueId {
    let v = match s {
        Scalar::Float(f) => c.body.constant(Constant::float(f), DType::F64),
        Scalar::Bool(b) => c.body.constant(Constant::Int(i64::from(b)), DType::Bool),
        Scalar::Int(e) => match c.env.pool().as_const(e) {
            Some(k) => c.body.constant(Constant::Int(k), DType::I64),
            None => c.body.index(e),
        },
    };
    c.body.cast(v, d)
}

pub(super) fn scalar_arg(n: &GraphNode, name: &str) -> R<Scalar> {
    match n.arg(name) {
        Some(Arg::Scalar(s)) | Some(Arg::Number(s)) => Ok(*s),
        other => msg(format!(
            "argument '{name}': expected a number, found {other:?}"
        )),
    }
}

pub(super) fn int(n: &GraphNode, name: &str) -> R<Expr> {
    match n.arg(name) {
        Some(Arg::Int(e)) => Ok(*e),
        other => msg(format!(
            "argument '{name}': expected an integer, found {other:?}"
        )),
    }
}

pub(super) fn opt_int(n: &GraphNode, name: &str) -> R<Option<Expr>> {
    match n.arg(name) {
        Some(Arg::None) | None => Ok(None),
        Some(Arg::Int(e)) => Ok(Some(*e)),
        other => msg(format!(
            "argument '{name}': expected an integer or null, found {other:?}"
        )),
    }
}

pub(super) fn ints(n: &GraphNode, name: &str) -> R<Vec<Expr>> {
    match n.arg(name) {
        Some(Arg::Ints(v)) => Ok(v.clone()),
        other => msg(format!(
            "argument '{name}': expected a list of integers, found {other:?}"
        )),
    }
}

/// Dimension lists are static: every entry must be a constant.
pub(super) fn const_ints(l: &Lowerer, n: &GraphNode, name: &str) -> R<Vec<i64>> {
    ints(n, name)?
        .into_iter()
        .map(|e| {
            l.env.pool().as_const(e).ok_or_else(|| {
                NodeError::Message(format!(
                    "argument '{name}': dimensions must be constants, found '{}'",
                    l.env.text(e)
                ))
            })
        })
        .collect()
}

pub(super) fn wrap_dim(d: i64, rank: usize) -> Result<usize, NodeError> {
    let r = rank.max(1) as i64;
    let w = if d < 0 { d + r } else { d };
    if (0..r).contains(&w) {
        Ok(w as usize)
    } else {
        msg(format!(
            "dimension {d} is out of range for a tensor of {rank} dimensions"
        ))
    }
}

pub(super) fn dim_arg(l: &Lowerer, n: &GraphNode, name: &str, rank: usize) -> R<usize> {
    let e = int(n, name)?;
    match l.env.pool().as_const(e) {
        Some(d) => wrap_dim(d, rank),
        None => msg(format!(
            "argument '{name}': a dimension must be a constant, found '{}'",
            l.env.text(e)
        )),
    }
}

/// The symbol a node states as dimension `at` of its `shape`: the unbacked count a
/// data-dependent op produces.
pub(super) fn stated_symbol(l: &Lowerer, n: &GraphNode, at: usize) -> Option<SymbolId> {
    let e = *n.shape.as_ref()?.get(at)?;
    l.env.pool().as_symbol(e)
}
