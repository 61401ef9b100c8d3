//! Views and broadcasting as index arithmetic: no copies. Size decisions are guard-free: decided
//! from ranges, else a guard on backed sizes, else (unbacked) a runtime assert that keeps the
//! kernel correct for every value.

use std::rc::Rc;

use super::ops::wrap_dim;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

fn is_one(l: &mut Lowerer, e: Expr) -> bool {
    let one = l.env.pool_mut().one();
    let c = l.env.pool_mut().eq(e, one);
    // Backed sizes may be guarded on; unbacked ones answer false and are taken as not 1.
    l.env.guard_or_false(c)
}

/// Asserts `a == b` at run time unless it is already known; an impossible equality is an error.
fn assert_equal(l: &mut Lowerer, a: Expr, b: Expr, what: &str) -> R<()> {
    let c = l.env.pool_mut().eq(a, b);
    if l.env.statically_known_true(c) {
        return Ok(());
    }
    l.env.check(c).map_err(|_| {
        NodeError::Message(format!(
            "{what}: sizes {} and {} differ",
            l.env.text(a),
            l.env.text(b)
        ))
    })
}

/// The common shape of `operands` (right-aligned) and each operand read at it.
pub(super) fn broadcast(l: &mut Lowerer, operands: &[LTensor]) -> R<(Vec<Expr>, Vec<LTensor>)> {
    let rank = operands.iter().map(|t| t.sizes.len()).max().unwrap_or(0);
    let mut out: Vec<Option<Expr>> = vec![None; rank];
    for t in operands {
        let off = rank - t.sizes.len();
        for (k, &s) in t.sizes.iter().enumerate() {
            out[off + k] = Some(match out[off + k] {
                None => s,
                Some(o) if o == s => o,
                Some(o) if is_one(l, s) => o,
                Some(o) if is_one(l, o) => s,
                Some(o) => {
                    assert_equal(l, o, s, "broadcasting")?;
                    o
                }
            });
        }
    }
    let sizes: Vec<Expr> = out
        .into_iter()
        .map(|s| s.expect("every dimension has a size"))
        .collect();
    let mut expanded = Vec::with_capacity(operands.len());
    for t in operands {
        let off = rank - t.sizes.len();
        // Dimensions of size 1 against a larger output read element 0.
        let bcast: Vec<bool> = t
            .sizes
            .iter()
            .enumerate()
            .map(|(k, &s)| s != sizes[off + k] && is_one(l, s))
            .collect();
        if off == 0 && !bcast.contains(&true) {
            expanded.push(t.clone());
            continue;
        }
        let inner = t.loader.clone();
        let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
            let zero = c.env.pool_mut().zero();
            let mine: Vec<Expr> = bcast
                .iter()
                .enumerate()
                .map(|(k, &b)| if b { zero } else { idx[off + k] })
                .collect();
            inner(c, &mine)
        });
        expanded.push(LTensor {
            sizes: sizes.clone(),
            loader,
            wrapped: t.wrapped,
            buffer: None,
            dtype: t.dtype,
        });
    }
    Ok((sizes, expanded))
}

fn numel(l: &mut Lowerer, sizes: &[Expr]) -> Expr {
    let p = l.env.pool_mut();
    sizes.iter().fold(p.one(), |acc, &s| p.mul(acc, s))
}

/// `view`/`reshape`: the general flatten-and-reindex, exact for every size (the symbolic engine
/// simplifies the index arithmetic where ranges allow). `-1` is inferred.
pub(super) fn view(l: &mut Lowerer, x: LTensor, sizes: &[Expr]) -> R<LTensor> {
    let total = numel(l, &x.sizes);
    let minus_one = l.env.pool_mut().constant(-1);
    let inferred: Vec<usize> = (0..sizes.len())
        .filter(|&k| sizes[k] == minus_one)
        .collect();
    let mut sizes = sizes.to_vec();
    match inferred.as_slice() {
        [] => {}
        [k] => {
            let others: Vec<Expr> = sizes
                .iter()
                .enumerate()
                .filter(|(j, _)| j != k)
                .map(|(_, &s)| s)
                .collect();
            let rest = numel(l, &others);
            let q = l.env.pool_mut().floordiv(total, rest);
            sizes[*k] = l.env.simplify(q);
        }
        _ => return Err(NodeError::Message("only one dimension can be -1".into())),
    }
    for &s in &sizes {
        let zero = l.env.pool_mut().zero();
        let c = l.env.pool_mut().ge(s, zero);
        if l.env.statically_known_false(c) {
            return Err(NodeError::Message(format!(
                "size {} is negative",
                l.env.text(s)
            )));
        }
    }
    let new_total = numel(l, &sizes);
    assert_equal(l, total, new_total, "view")?;
    let in_sizes = x.sizes.clone();
    let out_sizes = sizes.clone();
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        // Linear index in the output, then the input's multi-index.
        let p = c.env.pool_mut();
        let mut linear = p.zero();
        for (k, &i) in idx.iter().enumerate() {
            let scaled = p.mul(linear, out_sizes[k]);
            linear = p.add(scaled, i);
        }
        let mut rest = linear;
        let mut src = vec![p.zero(); in_sizes.len()];
        for k in (0..in_sizes.len()).rev() {
            let m = p.modulo(rest, in_sizes[k]);
            src[k] = m;
            rest = p.floordiv(rest, in_sizes[k]);
        }
        let src: Vec<Expr> = src.into_iter().map(|e| c.env.simplify(e)).collect();
        inner(c, &src)
    });
    Ok(LTensor {
        dtype: x.dtype,
        sizes,
        loader,
        wrapped: false,
        buffer: None,
    })
}

pub(super) fn permute(x: LTensor, dims: &[i64]) -> R<LTensor> {
    let rank = x.sizes.len();
    if dims.len() != rank {
        return Err(NodeError::Message(format!(
            "permute: {} dimensions for a tensor of {rank}",
            dims.len()
        )));
    }
    let perm: Vec<usize> = dims
        .iter()
        .map(|&d| wrap_dim(d, rank))
        .collect::<Result<_, _>>()?;
    let mut seen = vec![false; rank];
    for &p in &perm {
        if std::mem::replace(&mut seen[p], true) {
            return Err(NodeError::Message(
                "permute: a dimension appears twice".into(),
            ));
        }
    }
    let sizes: Vec<Expr> = perm.iter().map(|&p| x.sizes[p]).collect();
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        for (k, &p) in perm.iter().enumerate() {
            src[p] = idx[k];
        }
        inner(c, &src)
    });
    Ok(LTensor {
        dtype: x.dtype,
        sizes,
        loader,
        wrapped: false,
        buffer: None,
    })
}

pub(super) fn unsqueeze(l: &mut Lowerer, x: LTensor, dim: usize) -> LTensor {
    let mut sizes = x.sizes.clone();
    sizes.insert(dim, l.env.pool_mut().one());
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        src.remove(dim);
        inner(c, &src)
    });
    LTensor {
        dtype: x.dtype,
        sizes,
        loader,
        wrapped: false,
        buffer: None,
    }
}

/// Drops the listed dimensions whose size is 1. An unbacked size is never 1 for this purpose — a
/// runtime assert says so — rather than a data-dependent shape.
pub(super) fn squeeze(l: &mut Lowerer, x: LTensor, dims: &[usize]) -> R<LTensor> {
    let mut keep = Vec::new();
    for (k, &s) in x.sizes.iter().enumerate() {
        if !dims.contains(&k) {
            keep.push(true);
            continue;
        }
        if is_one(l, s) {
            keep.push(false);
            continue;
        }
        let one = l.env.pool_mut().one();
        let c = l.env.pool_mut().ne(s, one);
        if !l.env.statically_known_true(c) {
            l.env
                .check(c)
                .map_err(|e| NodeError::Message(e.to_string()))?;
        }
        keep.push(true);
    }
    let sizes: Vec<Expr> = x
        .sizes
        .iter()
        .zip(&keep)
        .filter(|p| *p.1)
        .map(|p| *p.0)
        .collect();
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let zero = c.env.pool_mut().zero();
        let mut it = idx.iter();
        let src: Vec<Expr> = keep
            .iter()
            .map(|&k| if k { *it.next().expect("rank") } else { zero })
            .collect();
        inner(c, &src)
    });
    Ok(LTensor {
        dtype: x.dtype,
        sizes,
        loader,
        wrapped: false,
        buffer: None,
    })
}

pub(super) fn expand(l: &mut Lowerer, x: LTensor, sizes: &[Expr]) -> R<LTensor> {
    let rank = sizes.len();
    if rank < x.sizes.len() {
        return Err(NodeError::Message(format!(
            "expand: {rank} sizes for a tensor of {} dimensions",
            x.sizes.len()
        )));
    }
    let off = rank - x.sizes.len();
    let minus_one = l.env.pool_mut().constant(-1);
    let mut out = Vec::with_capacity(rank);
    let mut bcast = Vec::with_capacity(x.sizes.len());
    for (k, &s) in sizes.iter().enumerate() {
        if k < off {
            if s == minus_one {
                return Err(NodeError::Message(
                    "expand: -1 is not allowed for a new leading dimension".into(),
                ));
            }
            out.push(s);
            continue;
        }
        let own = x.sizes[k - off];
        if s == minus_one || s == own {
            out.push(own);
            bcast.push(false);
        } else if is_one(l, own) {
            out.push(s);
            bcast.push(true);
        } else {
            assert_equal(l, own, s, "expand")?;
            out.push(own);
            bcast.push(false);
        }
    }
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let zero = c.env.pool_mut().zero();
        let src: Vec<Expr> = bcast
            .iter()
            .enumerate()
            .map(|(k, &b)| if b { zero } else { idx[off + k] })
            .collect();
        inner(c, &src)
    });
    Ok(LTensor {
        dtype: x.dtype,
        sizes: out,
        loader,
        wrapped: false,
        buffer: None,
    })
}

/// ATen's clamping of a slice bound: negative counts from the end, then into `[0, size]`.
fn clamp_bound(l: &mut Lowerer, b: Expr, size: Expr) -> Expr {
    let p = l.env.pool_mut();
    let zero = p.zero();
    let neg = p.lt(b, zero);
    let wrapped = p.add(b, size);
    let w = p.where_(neg, wrapped, b);
    let lo = p.max(zero, w);
    let e = p.min(lo, size);
    l.env.simplify(e)
}

pub(super) fn slice(
    l: &mut Lowerer,
    x: LTensor,
    dim: usize,
    start: Option<Expr>,
    end: Option<Expr>,
    step: Expr,
) -> R<LTensor> {
    let step = match l.env.pool().as_const(step) {
        Some(k) if k > 0 => k,
        _ => {
            return Err(NodeError::Message(
                "slice: the step must be a positive constant".into(),
            ))
        }
    };
    let size = x.sizes[dim];
    let zero = l.env.pool_mut().zero();
    let start = clamp_bound(l, start.unwrap_or(zero), size);
    let end = match end {
        Some(e) => clamp_bound(l, e, size),
        None => size,
    };
    let p = l.env.pool_mut();
    let diff = p.sub(end, start);
    let k = p.constant(step);
    let len = p.ceildiv(diff, k);
    let len = p.max(zero, len);
    let len = l.env.simplify(len);
    let mut sizes = x.sizes.clone();
    sizes[dim] = len;
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        let p = c.env.pool_mut();
        let scaled = p.scale(idx[dim], step);
        src[dim] = p.add(start, scaled);
        inner(c, &src)
    });
    Ok(LTensor {
        dtype: x.dtype,
        sizes,
        loader,
        wrapped: false,
        buffer: None,
    })
}

/// `select(dim, index)`: a negative index counts from the end; an index out of range is a runtime
/// assert, never an out-of-bounds read.
pub(super) fn select(l: &mut Lowerer, x: LTensor, dim: usize, index: Expr) -> R<LTensor> {
    let size = x.sizes[dim];
    let p = l.env.pool_mut();
    let neg_size = p.neg(size);
    let lo = p.ge(index, neg_size);
    let hi = p.lt(index, size);
    let ok = p.and(&[lo, hi]);
    if !l.env.statically_known_true(ok) {
        l.env.check(ok).map_err(|_| {
            NodeError::Message(format!(
                "select: index {} is out of range for size {}",
                l.env.text(index),
                l.env.text(size)
            ))
        })?;
    }
    let p = l.env.pool_mut();
    let zero = p.zero();
    let neg = p.lt(index, zero);
    let wrapped = p.add(index, size);
    let at = p.where_(neg, wrapped, index);
    let at = l.env.simplify(at);
    let mut sizes = x.sizes.clone();
    sizes.remove(dim);
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        src.insert(dim, at);
        inner(c, &src)
    });
    Ok(LTensor {
        dtype: x.dtype,
        sizes,
        loader,
        wrapped: false,
        buffer: None,
    })
}
