//! Views and broadcasting as index arithmetic: no copies. Size decisions are guard-free: decided
//! from ranges, else a guard on backed sizes, else (unbacked) a runtime assert that keeps the
//! kernel correct for every value.

use std::rc::Rc;

use super::args::wrap_dim;
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
    l.require(c, |env| {
        format!("{what}: sizes {} and {} differ", env.text(a), env.text(b))
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
    let one = l.env.pool_mut().one();
    sizes.insert(dim, one);
    // A strided view stays one: the new dimension's stride is what a contiguous tensor's would
    // be (it is never stepped along).
    let strided = x.strided.as_ref().map(|(base, layout)| {
        let mut v = layout.clone();
        let stride = match layout.strides.get(dim) {
            Some(&s) => l.env.pool_mut().mul(s, layout.sizes[dim]),
            None => one,
        };
        v.sizes.insert(dim, one);
        v.strides.insert(dim, l.env.simplify(stride));
        (*base, v)
    });
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx.to_vec();
        src.remove(dim);
        inner(c, &src)
    });
    let mut t = LTensor::lazy(x.dtype, sizes, loader);
    t.strided = strided;
    t
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
    // A strided view without the dropped dimensions (each of size 1) is still one.
    let strided = x.strided.as_ref().map(|(base, layout)| {
        let kept = |v: &[Expr]| -> Vec<Expr> {
            v.iter().zip(&keep).filter(|p| *p.1).map(|p| *p.0).collect()
        };
        let v = crate::loop_ir::Layout {
            sizes: kept(&layout.sizes),
            strides: kept(&layout.strides),
            offset: layout.offset,
        };
        (*base, v)
    });
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
    let mut t = LTensor::lazy(x.dtype, sizes, loader);
    t.strided = strided;
    Ok(t)
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
        if s != minus_one {
            let zero = l.env.pool_mut().zero();
            let c = l.env.pool_mut().ge(s, zero);
            l.require(c, |env| {
                format!(
                    "expand: the expanded size {} must be non-negative (or -1 for a dimension kept)",
                    env.text(s)
                )
            })?;
        }
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
