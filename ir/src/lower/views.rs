//! Views and broadcasting as index arithmetic: no copies. Size decisions are guard-free: decided
//! from ranges, else a guard on backed sizes, else (unbacked) a runtime assert that keeps the
//! kernel correct for every value.

use std::rc::Rc;

use super::ops::wrap_dim;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::loop_ir::Layout;
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

fn is_one(l: &mut Lowerer, e: Expr) -> bool {
    let one = l.env.pool_mut().one();
    let c = l.env.pool_mut().eq(e, one);
    // Backed sizes may be guarded on; unbacked ones answer false and are taken as not 1.
    l.env.guard_or_false(c)
}

/// Asserts `a == b` at run time unless it is already known; an impossible equality is an error.
pub(super) fn assert_equal(l: &mut Lowerer, a: Expr, b: Expr, what: &str) -> R<()> {
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

/// The common shape of `shapes` (right-aligned), equal sizes asserted where not provable.
pub(super) fn broadcast_sizes(l: &mut Lowerer, shapes: &[&[Expr]]) -> R<Vec<Expr>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out: Vec<Option<Expr>> = vec![None; rank];
    for sizes in shapes {
        let off = rank - sizes.len();
        for (k, &s) in sizes.iter().enumerate() {
            out[off + k] = Some(match out[off + k] {
                None => s,
                Some(o) if o == s => o,
                Some(o) if is_one(l, s) => o,
                Some(o) if is_one(l, o) => s,
                Some(o) => {
                    assert_equal(l, o, s, "broadcasting")?;
                    // Equal from here on: the constant, if either is, says more downstream.
                    if l.env.pool().as_const(s).is_some() {
                        s
                    } else {
                        o
                    }
                }
            });
        }
    }
    Ok(out
        .into_iter()
        .map(|s| s.expect("every dimension has a size"))
        .collect())
}

/// The common shape of `operands` (right-aligned) and each operand read at it.
pub(super) fn broadcast(l: &mut Lowerer, operands: &[LTensor]) -> R<(Vec<Expr>, Vec<LTensor>)> {
    let shapes: Vec<&[Expr]> = operands.iter().map(|t| t.sizes.as_slice()).collect();
    let sizes = broadcast_sizes(l, &shapes)?;
    let rank = sizes.len();
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
            strided: None,
            dtype: t.dtype,
        });
    }
    Ok((sizes, expanded))
}

pub(super) fn numel(l: &mut Lowerer, sizes: &[Expr]) -> Expr {
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
    // Dimensions regroup where products provably match (a split, a merge, size-1 dimensions
    // added or dropped); each group is reindexed on its own, so most reshapes need no division.
    let groups = reshape_groups(l, &x.sizes, &sizes)
        .unwrap_or_else(|| vec![(0..x.sizes.len(), 0..sizes.len())]);
    let in_sizes = x.sizes.clone();
    let out_sizes = sizes.clone();
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let p = c.env.pool_mut();
        let mut src = vec![p.zero(); in_sizes.len()];
        for (old, new) in &groups {
            // Linear index within the group's output dims, then the input's dims.
            let mut linear = p.zero();
            for k in new.clone() {
                let scaled = p.mul(linear, out_sizes[k]);
                linear = p.add(scaled, idx[k]);
            }
            let mut rest = linear;
            for k in old.clone().rev() {
                if k == old.start {
                    src[k] = rest;
                } else {
                    src[k] = p.modulo(rest, in_sizes[k]);
                    rest = p.floordiv(rest, in_sizes[k]);
                }
            }
        }
        let src: Vec<Expr> = src.into_iter().map(|e| c.env.simplify(e)).collect();
        inner(c, &src)
    });
    // A view of dense row-major storage is still one: the library kernels read it in place
    // (a convolution's weight as a matrix, no copy).
    let strided = x.strided.as_ref().and_then(|(base, layout)| {
        let dense = Layout::contiguous(&mut l.env, &x.sizes);
        let same = dense
            .strides
            .iter()
            .zip(&layout.strides)
            .all(|(&a, &b)| l.env.simplify(a) == l.env.simplify(b));
        same.then(|| {
            let mut v = Layout::contiguous(&mut l.env, &sizes);
            v.offset = layout.offset;
            (*base, v)
        })
    });
    let mut t = LTensor::lazy(x.dtype, sizes, loader);
    t.strided = strided;
    Ok(t)
}

/// Consecutive ranges of input and output dimensions whose size products are provably equal,
/// covering both lists; `None` when no such split is found. Which side grows next is chosen from
/// the optimization hints — only the provable equality of each group matters for correctness.
fn reshape_groups(
    l: &mut Lowerer,
    old: &[Expr],
    new: &[Expr],
) -> Option<Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>> {
    let mut groups: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    let one = l.env.pool_mut().one();
    let is_one = |l: &mut Lowerer, e: Expr| {
        let c = l.env.pool_mut().eq(e, one);
        l.env.statically_known_true(c)
    };
    while i < old.len() || j < new.len() {
        if i == old.len() || j == new.len() {
            // What is left on one side must be all ones; it joins the last group.
            let rest_ok = old[i..].iter().chain(&new[j..]).all(|&e| is_one(l, e));
            let last = groups.last_mut()?;
            if !rest_ok {
                return None;
            }
            last.0.end = old.len();
            last.1.end = new.len();
            break;
        }
        let (i0, j0) = (i, j);
        let (mut po, mut pn) = (old[i], new[j]);
        i += 1;
        j += 1;
        loop {
            let c = l.env.pool_mut().eq(po, pn);
            if po == pn || l.env.statically_known_true(c) {
                break;
            }
            let (ho, hn) = (l.env.optimization_hint(po), l.env.optimization_hint(pn));
            if (ho <= hn && i < old.len()) || j == new.len() {
                if i == old.len() {
                    return None;
                }
                po = l.env.pool_mut().mul(po, old[i]);
                i += 1;
            } else {
                pn = l.env.pool_mut().mul(pn, new[j]);
                j += 1;
            }
        }
        groups.push((i0..i, j0..j));
    }
    Some(groups)
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
    let strided = x.strided.as_ref().map(|(base, layout)| {
        let layout = crate::loop_ir::Layout {
            sizes: sizes.clone(),
            strides: perm.iter().map(|&p| layout.strides[p]).collect(),
            offset: layout.offset,
        };
        (*base, layout)
    });
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        for (k, &p) in perm.iter().enumerate() {
            src[p] = idx[k];
        }
        inner(c, &src)
    });
    let mut t = LTensor::lazy(x.dtype, sizes, loader);
    t.strided = strided;
    Ok(t)
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
    LTensor::lazy(x.dtype, sizes, loader)
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
    Ok(LTensor::lazy(x.dtype, sizes, loader))
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
    Ok(LTensor::lazy(x.dtype, out, loader))
}

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
        if !l.env.statically_known_true(ok) {
            l.env.check(ok).map_err(|_| {
                NodeError::Message(format!(
                    "repeat: the repeat {} can be negative",
                    l.env.text(r)
                ))
            })?;
        }
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
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        let p = c.env.pool_mut();
        let scaled = p.scale(idx[dim], step);
        src[dim] = p.add(start, scaled);
        inner(c, &src)
    });
    Ok(LTensor::lazy(x.dtype, sizes, loader))
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
    let at = wrap_index(l, index, size);
    let mut sizes = x.sizes.clone();
    sizes.remove(dim);
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        src.insert(dim, at);
        inner(c, &src)
    });
    Ok(LTensor::lazy(x.dtype, sizes, loader))
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
            let sizes = super::ops::ints(n, "split_sizes")?;
            for &s in &sizes {
                let zero = l.env.pool_mut().zero();
                let c = l.env.pool_mut().ge(s, zero);
                if !l.env.statically_known_true(c) {
                    l.env.check(c).map_err(|_| {
                        NodeError::Message(format!(
                            "split_with_sizes: size {} is negative",
                            l.env.text(s)
                        ))
                    })?;
                }
            }
            let total = l.env.pool_mut().add_all(&sizes);
            assert_equal(l, total, size, "split_with_sizes")?;
            sizes
        }
        "split" => {
            let chunk = super::ops::int(n, "split_size")?;
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
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        src[dim] = c.env.pool_mut().add(start, idx[dim]);
        inner(c, &src)
    });
    LTensor::lazy(x.dtype, sizes, loader)
}

/// Drops dimension `dim`, known to have size 1.
fn squeeze_known(_l: &mut Lowerer, x: LTensor, dim: usize) -> LTensor {
    let mut sizes = x.sizes.clone();
    sizes.remove(dim);
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        src.insert(dim, c.env.pool_mut().zero());
        inner(c, &src)
    });
    LTensor::lazy(x.dtype, sizes, loader)
}

/// Reverses the listed dimensions.
pub(super) fn flip(x: LTensor, dims: &[usize]) -> LTensor {
    let sizes = x.sizes.clone();
    let inner = x.loader.clone();
    let dims = dims.to_vec();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        for &d in &dims {
            let p = c.env.pool_mut();
            let minus_one = p.constant(-1);
            let last = p.add(sizes[d], minus_one);
            src[d] = p.sub(last, idx[d]);
        }
        inner(c, &src)
    });
    LTensor::lazy(x.dtype, x.sizes, loader)
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
    let dim = super::ops::wrap_dim(dim, rank)?;
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
        if !l.env.statically_known_true(c) {
            l.env.check(c).map_err(|_| {
                NodeError::Message("constant_pad_nd: a padded size is negative".into())
            })?;
        }
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
        let fill = super::ops::scalar_value(c, value, cd);
        c.body.where_(m, v, fill)
    });
    Ok(LTensor::lazy(x.dtype, sizes, loader))
}

/// `embedding`, `index_select`, `gather`: reads of `src` at positions held in the integer tensor
/// `index`. Each index value is bound to a loop-level symbol after a bounds check, so a bad index is
/// a runtime error naming the buffer, never an out-of-bounds read.
pub(super) fn indexed(
    l: &mut Lowerer,
    src: LTensor,
    index: LTensor,
    dim: usize,
    name: &str,
) -> R<LTensor> {
    if index.dtype.is_float() || index.dtype == crate::graph::DType::Bool {
        return Err(NodeError::Message(format!(
            "{name}: indices must be integers, found {}",
            index.dtype
        )));
    }
    let rank = src.sizes.len();
    let size = src.sizes[dim];
    let sizes: Vec<Expr> = match name {
        // [*indices, *weight[1..]]
        "embedding" => index.sizes.iter().chain(&src.sizes[1..]).copied().collect(),
        "index_select" => {
            if index.sizes.len() > 1 {
                return Err(NodeError::Message(
                    "index_select: the index must have at most one dimension".into(),
                ));
            }
            let mut s = src.sizes.clone();
            s[dim] = index
                .sizes
                .first()
                .copied()
                .unwrap_or_else(|| l.env.pool_mut().one());
            s
        }
        _ => {
            if index.sizes.len() != rank {
                return Err(NodeError::Message(
                    "gather: the index must have as many dimensions as the input".into(),
                ));
            }
            for k in (0..rank).filter(|&k| k != dim) {
                let c = l.env.pool_mut().le(index.sizes[k], src.sizes[k]);
                if !l.env.statically_known_true(c) {
                    l.env.check(c).map_err(|_| {
                        NodeError::Message(format!(
                            "gather: index size exceeds the input in dimension {k}"
                        ))
                    })?;
                }
            }
            index.sizes.clone()
        }
    };
    let (src_ld, idx_ld) = (src.loader.clone(), index.loader.clone());
    let index_rank = index.sizes.len();
    let kind = name.to_string();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let (at_index, mut at_src): (Vec<Expr>, Vec<Expr>) = match kind.as_str() {
            "embedding" => (
                idx[..index_rank].to_vec(),
                std::iter::once(idx[0])
                    .chain(idx[index_rank..].iter().copied())
                    .collect(),
            ),
            "index_select" => (
                if index_rank == 0 {
                    vec![]
                } else {
                    vec![idx[dim]]
                },
                idx.to_vec(),
            ),
            _ => (idx.to_vec(), idx.to_vec()),
        };
        let v = idx_ld(c, &at_index);
        let v = c.body.cast(v, crate::graph::DType::I64);
        let t = c.env.new_index_var("t", size);
        c.body.bind(t, v, size);
        at_src[dim] = t;
        src_ld(c, &at_src)
    });
    Ok(LTensor::lazy(src.dtype, sizes, loader))
}

/// Where each element of `x[indices]` comes from: the result's sizes and, for a result index, the
/// source coordinates (emitting the index loads and their bounds-checked binds).
pub(super) struct IndexPlan {
    pub sizes: Vec<Expr>,
    pub source: SourceMap,
}

/// Result index → source coordinates, emitting what it needs into the body.
pub(super) type SourceMap = Rc<dyn Fn(&mut Ctx, &[Expr]) -> Vec<Expr>>;

/// `index.Tensor` with integer index tensors (`None` keeps a dimension whole): the index tensors
/// broadcast together; their dimensions replace the indexed ones in place when those are adjacent,
/// else come first (NumPy's rule). Negative indices count from the end; each index is bounds-checked
/// at run time. Boolean masks are turned into integer indices before (see `routing`).
pub(super) fn advanced_index(l: &mut Lowerer, x: LTensor, idx: Vec<Option<LTensor>>) -> R<LTensor> {
    if idx.iter().all(Option::is_none) {
        return Ok(x);
    }
    let plan = index_plan(l, &x.sizes, idx)?;
    let (inner, source) = (x.loader.clone(), plan.source);
    let loader: Loader = Rc::new(move |c: &mut Ctx, out: &[Expr]| {
        let src = source(c, out);
        inner(c, &src)
    });
    Ok(LTensor::lazy(x.dtype, plan.sizes, loader))
}

pub(super) fn index_plan(
    l: &mut Lowerer,
    src_sizes: &[Expr],
    idx: Vec<Option<LTensor>>,
) -> R<IndexPlan> {
    let rank = src_sizes.len();
    if idx.len() > rank {
        return Err(NodeError::Message(format!(
            "{} indices for a tensor of {rank} dimensions",
            idx.len()
        )));
    }
    let positions: Vec<usize> = idx
        .iter()
        .enumerate()
        .filter(|(_, t)| t.is_some())
        .map(|(k, _)| k)
        .collect();
    let tensors: Vec<LTensor> = idx.into_iter().flatten().collect();
    for t in &tensors {
        if t.dtype.is_float() || t.dtype == crate::graph::DType::Bool {
            return Err(NodeError::Message(format!(
                "indices must be integers or boolean masks, found {}",
                t.dtype
            )));
        }
    }
    let (bsizes, tensors) = broadcast(l, &tensors)?;
    let adjacent = positions.windows(2).all(|w| w[1] == w[0] + 1);
    let first = positions[0];
    let rest: Vec<usize> = (0..rank).filter(|k| !positions.contains(k)).collect();
    // Output dims: [before…, B…, after…] when adjacent, else [B…, rest…].
    let before: Vec<usize> = if adjacent {
        rest.iter().copied().filter(|&k| k < first).collect()
    } else {
        Vec::new()
    };
    let after: Vec<usize> = rest
        .iter()
        .copied()
        .filter(|k| !before.contains(k))
        .collect();
    let mut sizes: Vec<Expr> = before.iter().map(|&k| src_sizes[k]).collect();
    sizes.extend(&bsizes);
    sizes.extend(after.iter().map(|&k| src_sizes[k]));
    let (nb, nbefore) = (bsizes.len(), before.len());
    let src_sizes = src_sizes.to_vec();
    let loaders: Vec<Loader> = tensors.iter().map(|t| t.loader.clone()).collect();
    let source = Rc::new(move |c: &mut Ctx, out: &[Expr]| {
        let b_idx = &out[nbefore..nbefore + nb];
        let mut src = vec![c.env.pool_mut().zero(); rank];
        for (a, &k) in before.iter().enumerate() {
            src[k] = out[a];
        }
        for (a, &k) in after.iter().enumerate() {
            src[k] = out[nbefore + nb + a];
        }
        for (ld, &p) in loaders.iter().zip(&positions) {
            let v = ld(c, b_idx);
            let v = c.body.cast(v, crate::graph::DType::I64);
            // A negative index counts from the end.
            let zero = c
                .body
                .constant(crate::loop_ir::Constant::Int(0), crate::graph::DType::I64);
            let neg = c.body.binary(crate::loop_ir::BinaryOp::Lt, v, zero);
            let size = c.body.index(src_sizes[p]);
            let wrapped = c.body.binary(crate::loop_ir::BinaryOp::Add, v, size);
            let v = c.body.where_(neg, wrapped, v);
            let t = c.env.new_index_var("t", src_sizes[p]);
            c.body.bind(t, v, src_sizes[p]);
            src[p] = t;
        }
        src
    });
    Ok(IndexPlan { sizes, source })
}
