//! Ops computed by library steps over realized buffers rather than by generated loops:
//! `nonzero`/`masked_select` (their count is an unbacked symbol), `sort`/`topk` and the scans.

use std::rc::Rc;

use super::args::{dim_arg, int, msg, number, stated_symbol, tensor};
use super::pointwise::map;
use super::promote::compute_dtype;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::loop_ir::{BinaryOp, BufferKind, Constant, ScanKind};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// `nonzero` (indices) and `masked_select` (values) of the elements a mask keeps.
pub(super) fn nonzero_or_masked_select(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    // The number found is the unbacked symbol the node states as its first dimension.
    let count = stated_symbol(l, n, 0).ok_or_else(|| {
        NodeError::Message("must state its \"shape\" with the unbacked count symbol first".into())
    })?;
    let x = tensor(l, n, "self")?;
    let (input, mask, sizes) = if name == "nonzero" {
        let rank = l.env.pool_mut().constant(x.sizes.len() as i64);
        let count_e = l.env.pool_mut().symbol_expr(count);
        let input = l.realize(x, &n.name);
        (input, None, vec![count_e, rank])
    } else {
        let mask = tensor(l, n, "mask")?;
        let (_, ex) = super::views::broadcast(l, &[x, mask])?;
        let mut ex = ex.into_iter();
        let x = ex.next().expect("two");
        let m = ex.next().expect("two");
        let m = map(l, &[m], DType::Bool, DType::Bool, |_, v| v[0])?;
        let count_e = l.env.pool_mut().symbol_expr(count);
        let input = l.realize(x, &n.name);
        let mask = l.realize(m, &n.name);
        (input, Some(mask.buffer.expect("realized")), vec![count_e])
    };
    let dtype = if name == "nonzero" {
        DType::I64
    } else {
        input.dtype
    };
    let kind = BufferKind::Select {
        input: input.buffer.expect("realized"),
        mask,
        count,
    };
    Ok(l.add_buffer(kind, dtype, &sizes, &n.name))
}

/// `sort` and `topk` (values and indices) along one dimension.
pub(super) fn sort(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<Vec<LTensor>> {
    let x = tensor(l, n, "self")?;
    let rank = x.sizes.len();
    let dim = if rank == 0 {
        0
    } else {
        dim_arg(l, n, "dim", rank)?
    };
    let descending = matches!(
        n.arg(if name == "topk" {
            "largest"
        } else {
            "descending"
        }),
        Some(Arg::Bool(true))
    );
    let mut sizes = x.sizes.clone();
    let take = if name == "topk" {
        let k = int(n, "k")?;
        if rank > 0 {
            let p = l.env.pool_mut();
            let zero = p.zero();
            let lo = p.ge(k, zero);
            let hi = p.le(k, sizes[dim]);
            let ok = p.and(&[lo, hi]);
            l.require(ok, |_| "topk: k is out of range".into())?;
            sizes[dim] = k;
        }
        Some(k)
    } else {
        None
    };
    let dtype = x.dtype;
    let input = l.realize(x, &n.name);
    if rank == 0 {
        let zero = number(Scalar::Int(l.env.pool_mut().zero()));
        let idx = map(l, &[zero], DType::I64, DType::I64, |_, v| v[0])?;
        return Ok(vec![input, idx]);
    }
    let id = input.buffer.expect("realized");
    let values = l.add_buffer(
        BufferKind::Sort {
            input: id,
            dim,
            descending,
            take,
            indices: false,
        },
        dtype,
        &sizes,
        &n.name,
    );
    let indices = l.add_buffer(
        BufferKind::Sort {
            input: id,
            dim,
            descending,
            take,
            indices: true,
        },
        DType::I64,
        &sizes,
        &n.name,
    );
    Ok(vec![values, indices])
}

/// `cumsum`, `cumprod`, `logcumsumexp`: integer inputs accumulate in i64 unless a dtype is stated.
pub(super) fn cumulative(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let rank = x.sizes.len();
    let dim = dim_arg(l, n, "dim", rank)?;
    let kind = match name {
        "cumsum" => ScanKind::Sum,
        "cumprod" => ScanKind::Prod,
        _ => ScanKind::LogSumExp,
    };
    let dtype = match n.arg("dtype") {
        Some(Arg::DType(d)) => *d,
        _ if x.dtype.is_float() => x.dtype,
        _ if kind == ScanKind::LogSumExp => {
            return msg(format!(
                "{name} of {} is not defined: it takes floats",
                x.dtype.name()
            ))
        }
        _ => DType::I64,
    };
    Ok(scan(l, n, x, dim, kind, dtype)?.1)
}

/// `cummax`/`cummin`: running values and the position each was reached at.
pub(super) fn cumulative_extremum(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<Vec<LTensor>> {
    let x = tensor(l, n, "self")?;
    let rank = x.sizes.len();
    let dim = dim_arg(l, n, "dim", rank)?;
    let kind = if name == "cummax" {
        ScanKind::Max
    } else {
        ScanKind::Min
    };
    let dtype = x.dtype;
    let (input, values) = scan(l, n, x, dim, kind, dtype)?;
    let indices = running_position(l, n, input, values.clone(), dim)?;
    Ok(vec![values, indices])
}

/// The inclusive scan of `kind` of `x` (converted to `dtype`) along `dim`, with the contiguous
/// input it scans; a 0-d tensor is its own scan.
pub(super) fn scan(
    l: &mut Lowerer,
    n: &GraphNode,
    x: LTensor,
    dim: usize,
    kind: ScanKind,
    dtype: DType,
) -> R<(LTensor, LTensor)> {
    let rank = x.sizes.len();
    let from = x.dtype;
    let cast = map(l, &[x], from, dtype, |_, v| v[0])?;
    let input = l.realize(cast, &n.name);
    if rank == 0 {
        return Ok((input.clone(), input));
    }
    let kind = BufferKind::Scan {
        input: input.buffer.expect("realized"),
        dim,
        kind,
    };
    let out = l.add_buffer(kind, dtype, &input.sizes, &n.name);
    Ok((input, out))
}

/// `cummax`/`cummin`'s indices: the last position along `dim`, up to each element, where the
/// running value was reached (ATen's `>=`/`<=`: a tie moves it on) or a NaN was met — the
/// running maximum of those positions, given the running values.
fn running_position(
    l: &mut Lowerer,
    n: &GraphNode,
    x: LTensor,
    values: LTensor,
    dim: usize,
) -> R<LTensor> {
    if x.sizes.is_empty() {
        return map(l, &[x], DType::I64, DType::I64, |c, _| {
            c.body.constant(Constant::Int(0), DType::I64)
        });
    }
    let (lx, lv) = (x.loader.clone(), values.loader.clone());
    let float = x.dtype.is_float();
    let cd = compute_dtype(x.dtype);
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let a = lx(c, idx);
        let a = c.body.cast(a, cd);
        let v = lv(c, idx);
        let v = c.body.cast(v, cd);
        let mut reached = c.body.binary(BinaryOp::Eq, a, v);
        if float {
            let nan = c.body.binary(BinaryOp::Ne, a, a);
            reached = c.body.binary(BinaryOp::LogicalOr, reached, nan);
        }
        let at = c.body.index(idx[dim]);
        let zero = c.body.constant(Constant::Int(0), DType::I64);
        c.body.where_(reached, at, zero)
    });
    let positions = LTensor::lazy(DType::I64, x.sizes.clone(), loader);
    Ok(scan(l, n, positions, dim, ScanKind::Max, DType::I64)?.1)
}
