//! Slices, selections, splits, concatenation, padding and tiling: each a loader reading its
//! input at shifted (or masked) indices; bounds clamped as ATen does, never read out of range.

use std::rc::Rc;

use super::views::assert_equal;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::loop_ir::{BufferId, Layout};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// `repeat`: `x` tiled `repeats[k]` times along each dimension (extra leading repeats add
/// dimensions); element `i` reads `x` at `i mod size`. A symbolic repeat is asserted
/// non-negative at run time.
pub(super) fn repeat(l: &mut Lowerer, x: LTensor, repeats: &[Expr]) -> R<LTensor> {
    let rank = repeats.len();
    if rank < x.sizes.len() {
        return Err(NodeError::Message(format!(
            "repeat: {rank} repeats for a tensor of {} dimensions",
            x.sizes.len()
        )));
    }
    let off = rank - x.sizes.len();
    let mut sizes = Vec::with_capacity(rank);
    for (k, &r) in repeats.iter().enumerate() {
        let p = l.env.pool_mut();
        let zero = p.zero();
        let ok = p.ge(r, zero);
        l.require(ok, |env| {
            format!("repeat: the repeat {} can be negative", env.text(r))
        })?;
        let s = match k.checked_sub(off) {
            Some(d) => l.env.pool_mut().mul(x.sizes[d], r),
            None => r,
        };
        sizes.push(l.env.simplify(s));
    }
    // Dimensions repeated once read straight through; the others wrap.
    let own = x.sizes.clone();
    let once: Vec<bool> = repeats[off..]
        .iter()
        .map(|&r| l.env.pool().as_const(r) == Some(1))
        .collect();
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let src: Vec<Expr> = (0..own.len())
            .map(|d| {
                if once[d] {
                    idx[off + d]
                } else {
                    c.env.pool_mut().modulo(idx[off + d], own[d])
                }
            })
            .collect();
        inner(c, &src)
    });
    Ok(LTensor::lazy(x.dtype, sizes, loader))
}

/// A slice's `[start, end)` in a dimension of `size`, each bound clamped as ATen does (missing:
/// the whole dimension).
pub(super) fn slice_range(
    l: &mut Lowerer,
    start: Option<Expr>,
    end: Option<Expr>,
    size: Expr,
) -> (Expr, Expr) {
    let zero = l.env.pool_mut().zero();
    let start = clamp_bound(l, start.unwrap_or(zero), size);
    let end = match end {
        Some(e) => clamp_bound(l, e, size),
        None => size,
    };
    (start, end)
}

/// An index into a dimension of `size`, negative counting from the end (its range is checked
/// by the caller).
pub(super) fn wrap_index(l: &mut Lowerer, index: Expr, size: Expr) -> Expr {
    let p = l.env.pool_mut();
    let zero = p.zero();
    let neg = p.lt(index, zero);
    let wrapped = p.add(index, size);
    let at = p.where_(neg, wrapped, index);
    l.env.simplify(at)
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
    let (start, end) = slice_range(l, start, end, size);
    let p = l.env.pool_mut();
    let zero = p.zero();
    let diff = p.sub(end, start);
    let k = p.constant(step);
    let len = p.ceildiv(diff, k);
    let len = p.max(zero, len);
    let len = l.env.simplify(len);
    let mut sizes = x.sizes.clone();
    sizes[dim] = len;
    let strided = sliced_layout(l, &x, dim, start, len, step);
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        let p = c.env.pool_mut();
        let scaled = p.scale(idx[dim], step);
        src[dim] = p.add(start, scaled);
        inner(c, &src)
    });
    let mut t = LTensor::lazy(x.dtype, sizes, loader);
    t.strided = strided;
    Ok(t)
}

/// The strided view of elements `start..start + len` of dimension `dim` of `x`'s, when `x` is one
/// and `step` is 1: an extern kernel then reads the slice in place. (A slice with a step makes
/// its dimension's stride a multiple; a library call — cuBLAS — may need that dimension dense:
/// such a slice is copied into a dense buffer first, as before.)
fn sliced_layout(
    l: &mut Lowerer,
    x: &LTensor,
    dim: usize,
    start: Expr,
    len: Expr,
    step: i64,
) -> Option<(BufferId, Layout)> {
    let (base, layout) = x.strided.as_ref()?;
    if step != 1 {
        return None;
    }
    let mut v = advanced(l, layout, dim, start);
    v.sizes[dim] = len;
    Some((*base, v))
}

/// `layout` with its offset moved `at` elements along dimension `dim`.
fn advanced(l: &mut Lowerer, layout: &Layout, dim: usize, at: Expr) -> Layout {
    let mut v = layout.clone();
    let p = l.env.pool_mut();
    let skipped = p.mul(at, layout.strides[dim]);
    let offset = p.add(layout.offset, skipped);
    v.offset = l.env.simplify(offset);
    v
}

/// The strided view without dimension `dim` (at position `at` of it) of `x`'s, when `x` is one
/// and that dimension is not its dense one (stride 1 over more than one element: dropping it
/// would leave a view no library call reads without a dense dimension; it is copied, as before).
fn selected_layout(
    l: &mut Lowerer,
    x: &LTensor,
    dim: usize,
    at: Expr,
) -> Option<(BufferId, Layout)> {
    let (base, layout) = x.strided.as_ref()?;
    let dense = l.env.pool().as_const(layout.strides[dim]) == Some(1)
        && l.env.pool().as_const(layout.sizes[dim]) != Some(1);
    if dense {
        return None;
    }
    let mut v = advanced(l, layout, dim, at);
    v.sizes.remove(dim);
    v.strides.remove(dim);
    Some((*base, v))
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
    l.require(ok, |env| {
        format!(
            "select: index {} is out of range for size {}",
            env.text(index),
            env.text(size)
        )
    })?;
    let at = wrap_index(l, index, size);
    let mut sizes = x.sizes.clone();
    sizes.remove(dim);
    let strided = selected_layout(l, &x, dim, at);
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        src.insert(dim, at);
        inner(c, &src)
    });
    let mut t = LTensor::lazy(x.dtype, sizes, loader);
    t.strided = strided;
    Ok(t)
}

/// `split`, `split_with_sizes`, `unbind`: slices of `x` along `dim`. The number of pieces must be
/// static: a constant, or decided by a backed size's hint (guarded); `split_with_sizes` asserts at
/// run time that the sizes add up.
pub(super) fn split(
    l: &mut Lowerer,
    x: LTensor,
    dim: usize,
    name: &str,
    n: &crate::graph::GraphNode,
) -> R<Vec<LTensor>> {
    let size = x.sizes[dim];
    let pieces: Vec<Expr> = match name {
        "split_with_sizes" => {
            let sizes = super::args::ints(n, "split_sizes")?;
            for &s in &sizes {
                let zero = l.env.pool_mut().zero();
                let c = l.env.pool_mut().ge(s, zero);
                l.require(c, |env| {
                    format!("split_with_sizes: size {} is negative", env.text(s))
                })?;
            }
            let total = l.env.pool_mut().add_all(&sizes);
            assert_equal(l, total, size, "split_with_sizes")?;
            sizes
        }
        "split" => {
            let chunk = super::args::int(n, "split_size")?;
            let count = l.env.pool_mut().ceildiv(size, chunk);
            let count = static_count(l, count, "split")?;
            let mut out = Vec::new();
            let p = l.env.pool_mut();
            for k in 0..count.max(1) {
                // Every piece has `chunk` elements but the last: min(chunk, size - k·chunk).
                let kc = p.scale(chunk, k);
                let rest = p.sub(size, kc);
                let zero = p.zero();
                let rest = p.max(zero, rest);
                out.push(p.min(chunk, rest));
            }
            out.into_iter().map(|e| l.env.simplify(e)).collect()
        }
        _ => {
            let count = static_count(l, size, "unbind")?;
            let one = l.env.pool_mut().one();
            vec![one; count as usize]
        }
    };
    let mut out = Vec::with_capacity(pieces.len());
    let starts = if name == "split_with_sizes" {
        prefix_offsets(l, &pieces)
    } else {
        let mut starts = vec![l.env.pool_mut().zero()];
        for &len in &pieces {
            let end = l
                .env
                .pool_mut()
                .add(*starts.last().expect("non-empty"), len);
            starts.push(end);
        }
        starts
    };
    for (k, &len) in pieces.iter().enumerate() {
        let mut piece = slice_at(l, x.clone(), dim, starts[k], len);
        if name == "unbind" {
            piece = squeeze_known(l, piece, dim);
        }
        out.push(piece);
    }
    Ok(out)
}

/// The offsets 0, s0, s0 + s1, … of pieces of sizes `sizes`. An offset summing more than two
/// non-constant terms is a derived symbol (`ShapeEnv::derived`) defined as the previous offset
/// plus one size: a `cat` or `split_with_sizes` of k symbolic pieces then has offsets of O(1)
/// terms each, not O(k) — O(k) index arithmetic in all instead of O(k²). The same sum is the same
/// symbol, so a split's and a later cat's offsets agree.
pub(super) fn prefix_offsets(l: &mut Lowerer, sizes: &[Expr]) -> Vec<Expr> {
    let zero = l.env.pool_mut().zero();
    let mut full = zero;
    let mut out = vec![zero];
    for &s in sizes {
        let prev = *out.last().expect("non-empty");
        full = l.env.pool_mut().add(full, s);
        let terms = match l.env.pool().node(full) {
            crate::sym::Node::Add { terms, .. } => terms.len(),
            crate::sym::Node::Const(_) => 0,
            _ => 1,
        };
        out.push(if terms > 2 && prev != zero {
            let step = l.env.pool_mut().add(prev, s);
            l.env.derived("off", full, step)
        } else {
            full
        });
    }
    out
}

/// A count that lowering needs as a number: a constant, or a backed expression's hint (guarded).
fn static_count(l: &mut Lowerer, e: Expr, what: &str) -> R<i64> {
    let e = l.env.simplify(e);
    if let Some(v) = l.env.pool().as_const(e) {
        return Ok(v);
    }
    let v = l.env.guarding_hint(e).map_err(|_| {
        NodeError::Message(format!(
            "{what}: the number of pieces, {}, depends on an unbacked size",
            l.env.text(e)
        ))
    })?;
    let k = l.env.pool_mut().constant(v);
    let c = l.env.pool_mut().eq(e, k);
    l.env
        .evaluate_guard(c)
        .map_err(|err| NodeError::Message(err.to_string()))?;
    Ok(v)
}

/// Elements `start..start + len` (already in range) of dimension `dim`.
fn slice_at(l: &mut Lowerer, x: LTensor, dim: usize, start: Expr, len: Expr) -> LTensor {
    let len = l.env.simplify(len);
    let mut sizes = x.sizes.clone();
    sizes[dim] = len;
    let strided = sliced_layout(l, &x, dim, start, len, 1);
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        src[dim] = c.env.pool_mut().add(start, idx[dim]);
        inner(c, &src)
    });
    let mut t = LTensor::lazy(x.dtype, sizes, loader);
    t.strided = strided;
    t
}

/// Drops dimension `dim`, known to have size 1.
fn squeeze_known(l: &mut Lowerer, x: LTensor, dim: usize) -> LTensor {
    let mut sizes = x.sizes.clone();
    sizes.remove(dim);
    let zero = l.env.pool().zero();
    let strided = selected_layout(l, &x, dim, zero);
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        src.insert(dim, c.env.pool_mut().zero());
        inner(c, &src)
    });
    let mut t = LTensor::lazy(x.dtype, sizes, loader);
    t.strided = strided;
    t
}

/// `cat`: each element comes from the input whose range along `dim` holds it; every input is read
/// under its own mask, so no read is ever out of bounds (an empty input is never read).
pub(super) fn cat(l: &mut Lowerer, ts: Vec<LTensor>, dim: i64) -> R<LTensor> {
    // ATen skips legacy empty 1-D inputs when the others have more dimensions.
    let zero = l.env.pool_mut().zero();
    let rank = ts.iter().map(|t| t.sizes.len()).max().unwrap_or(0);
    let ts: Vec<LTensor> = ts
        .into_iter()
        .filter(|t| !(rank > 1 && t.sizes == [zero]))
        .collect();
    let Some(first) = ts.first().cloned() else {
        return Err(NodeError::Message("cat of no tensors".into()));
    };
    let dim = super::args::wrap_dim(dim, rank)?;
    for t in &ts {
        if t.sizes.len() != rank {
            return Err(NodeError::Message(format!(
                "cat: a tensor of {} dimensions among tensors of {rank}",
                t.sizes.len()
            )));
        }
        for k in (0..rank).filter(|&k| k != dim) {
            assert_equal(l, first.sizes[k], t.sizes[k], "cat")?;
        }
    }
    let dtype = super::promote::result_type(&ts.iter().collect::<Vec<_>>())?;
    let lens: Vec<Expr> = ts.iter().map(|t| t.sizes[dim]).collect();
    let offsets = prefix_offsets(l, &lens);
    let mut sizes = first.sizes.clone();
    // The size stays the plain sum: later shape checks compare it with other sizes.
    sizes[dim] = l.env.pool_mut().add_all(&lens);
    let loaders: Vec<Loader> = ts.iter().map(|t| t.loader.clone()).collect();
    let cd = super::promote::compute_dtype(dtype);
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let i = idx[dim];
        let mut picks = Vec::with_capacity(loaders.len());
        for (j, ld) in loaders.iter().enumerate() {
            let p = c.env.pool_mut();
            let lo = p.le(offsets[j], i);
            let hi = p.lt(i, offsets[j + 1]);
            let inside = p.and(&[lo, hi]);
            // Left unsimplified: undecidable for unbacked offsets, and simplifying costs O(offset terms).
            let m = c.body.index(inside);
            let m = c.body.cast(m, crate::graph::DType::Bool);
            let outer = c.body.enter_mask(m);
            let mut src = idx.to_vec();
            src[dim] = c.env.pool_mut().sub(i, offsets[j]);
            let v = ld(c, &src);
            let v = c.body.cast(v, cd);
            c.body.exit_mask(outer);
            picks.push((m, v));
        }
        let (_, mut r) = *picks.last().expect("non-empty");
        for &(m, v) in picks.iter().rev().skip(1) {
            r = c.body.where_(m, v, r);
        }
        r
    });
    Ok(LTensor::lazy(dtype, sizes, loader))
}

/// `constant_pad_nd`: `pad` gives (before, after) for the last dimension, then the one before, …;
/// negative amounts crop. Reads outside the input are masked off.
pub(super) fn pad(
    l: &mut Lowerer,
    x: LTensor,
    pad: &[Expr],
    value: crate::graph::Scalar,
) -> R<LTensor> {
    let rank = x.sizes.len();
    if pad.len() % 2 != 0 || pad.len() / 2 > rank {
        return Err(NodeError::Message(format!(
            "constant_pad_nd: {} pad amounts for {rank} dimensions",
            pad.len()
        )));
    }
    let mut sizes = x.sizes.clone();
    let mut before = vec![l.env.pool_mut().zero(); rank];
    for (k, pair) in pad.chunks(2).enumerate() {
        let d = rank - 1 - k;
        before[d] = pair[0];
        let p = l.env.pool_mut();
        let grown = p.add_all(&[x.sizes[d], pair[0], pair[1]]);
        let zero = p.zero();
        let c = p.ge(grown, zero);
        l.require(c, |_| "constant_pad_nd: a padded size is negative".into())?;
        sizes[d] = l.env.simplify(grown);
    }
    let in_sizes = x.sizes.clone();
    let inner = x.loader.clone();
    let cd = super::promote::compute_dtype(x.dtype);
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        let mut conds = Vec::new();
        for d in 0..src.len() {
            let p = c.env.pool_mut();
            src[d] = p.sub(idx[d], before[d]);
            let zero = p.zero();
            conds.push(p.le(zero, src[d]));
            conds.push(p.lt(src[d], in_sizes[d]));
        }
        let inside = c.env.pool_mut().and(&conds);
        let inside = c.env.simplify(inside); // padding bounds are short
        let m = c.body.index(inside);
        let m = c.body.cast(m, crate::graph::DType::Bool);
        let outer = c.body.enter_mask(m);
        let v = inner(c, &src);
        let v = c.body.cast(v, cd);
        c.body.exit_mask(outer);
        let fill = super::args::scalar_value(c, value, cd);
        c.body.where_(m, v, fill)
    });
    Ok(LTensor::lazy(x.dtype, sizes, loader))
}
