//! A tensor with part of it replaced, as functionalization writes in-place assignments
//! (`x[..., a:b] = y`, `x[i] = y`, `x.copy_(y)`, `x.scatter_(dim, index, y)`): `slice_scatter`,
//! `select_scatter` and `copy` are lazy tensors that pick, per element, the written value or the
//! base's; `scatter` writes at data-dependent positions (a scatter step over a copy). The base
//! stays as it was.

use std::rc::Rc;

use super::args::{dim_arg, msg, scalar_arg, scalar_value, tensor};
use super::pointwise::map;
use super::promote::compute_dtype;
use super::routing::ScatterStep;
use super::slices::{slice, slice_range, wrap_index};
use super::views::{assert_equal, broadcast, expand, numel, view};
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::loop_ir::{BinaryOp, BodyBuilder, Constant, ScanKind, ScatterCombine};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// `slice_scatter(x, src, dim, start, end, step)`: `x` with `x[start:end:step]` along `dim`
/// replaced by `src`, which must have that slice's shape.
pub(super) fn slice_scatter(
    l: &mut Lowerer,
    x: LTensor,
    src: LTensor,
    dim: usize,
    start: Option<Expr>,
    end: Option<Expr>,
    step: Expr,
) -> R<LTensor> {
    let region = slice(l, x.clone(), dim, start, end, step)?;
    same_shape(l, &region.sizes, &src, "slice_scatter")?;
    let step = l
        .env
        .pool()
        .as_const(step)
        .expect("slice checked a constant step");
    let (start, end) = slice_range(l, start, end, x.sizes[dim]);
    let zero = l.env.pool_mut().zero();
    // Element i of the dimension is written when start <= i < end and i - start is a multiple
    // of the step; it then reads src at (i - start) / step.
    Ok(pick(
        x,
        src,
        move |c, i| {
            let p = c.env.pool_mut();
            let rel = p.sub(i, start);
            let lo = p.le(start, i);
            let hi = p.lt(i, end);
            let mut conds = vec![lo, hi];
            if step > 1 {
                let k = p.constant(step);
                let r = p.modulo(rel, k);
                conds.push(p.eq(r, zero));
            }
            let inside = p.and(&conds);
            let at = if step > 1 {
                let k = p.constant(step);
                p.floordiv(rel, k)
            } else {
                rel
            };
            (inside, Some(at))
        },
        dim,
    ))
}

/// `select_scatter(x, src, dim, index)`: `x` with `x.select(dim, index)` replaced by `src`, which
/// must have that selection's shape; the index may be negative (from the end), never out of range.
pub(super) fn select_scatter(
    l: &mut Lowerer,
    x: LTensor,
    src: LTensor,
    dim: usize,
    index: Expr,
) -> R<LTensor> {
    // `select` checks the index's range (at run time when it is symbolic).
    let region = super::slices::select(l, x.clone(), dim, index)?;
    same_shape(l, &region.sizes, &src, "select_scatter")?;
    let at = wrap_index(l, index, x.sizes[dim]);
    Ok(pick(
        x,
        src,
        move |c, i| (c.env.pool_mut().eq(i, at), None),
        dim,
    ))
}

/// `copy(x, src)`: `src` broadcast to `x`'s shape, in `x`'s dtype (a functional `x.copy_(src)`).
pub(super) fn copy(l: &mut Lowerer, x: LTensor, src: LTensor) -> R<LTensor> {
    if src.sizes.len() > x.sizes.len() {
        return Err(NodeError::Message(format!(
            "copy: a source of {} dimensions into a tensor of {}",
            src.sizes.len(),
            x.sizes.len()
        )));
    }
    let from = src.dtype;
    let src = expand(l, src, &x.sizes)?;
    super::pointwise::map(l, &[src], from, x.dtype, |_, v| v[0])
}

/// `src` must have `sizes` (a scatter's region of the base).
pub(super) fn same_shape(l: &mut Lowerer, sizes: &[Expr], src: &LTensor, op: &str) -> R<()> {
    if src.sizes.len() != sizes.len() {
        return Err(NodeError::Message(format!(
            "{op}: a source of {} dimensions for a region of {}",
            src.sizes.len(),
            sizes.len()
        )));
    }
    for (&a, &b) in sizes.iter().zip(&src.sizes) {
        assert_equal(l, a, b, op)?;
    }
    Ok(())
}

/// `x` where `region(i)` (i: the index along `dim`) is false, else `src` read at the same index
/// with `dim` replaced by the region's own index (`Some`) or removed (`None`).
fn pick(
    x: LTensor,
    src: LTensor,
    region: impl Fn(&mut Ctx, Expr) -> (Expr, Option<Expr>) + 'static,
    dim: usize,
) -> LTensor {
    let (dtype, sizes) = (x.dtype, x.sizes.clone());
    let cd = compute_dtype(dtype);
    let (base, written) = (x.loader, src.loader);
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let (inside, at) = region(c, idx[dim]);
        // Left unsimplified, as `cat`'s ranges: undecidable for unbacked bounds.
        let m = c.body.index(inside);
        let m = c.body.cast(m, DType::Bool);
        // The source is read only where it is written: elsewhere its index is out of range.
        let outer = c.body.enter_mask(m);
        let mut s = idx.to_vec();
        match at {
            Some(at) => s[dim] = at,
            None => {
                s.remove(dim);
            }
        }
        let v = written(c, &s);
        let v = c.body.cast(v, cd);
        c.body.exit_mask(outer);
        let b = base(c, idx);
        let b = c.body.cast(b, cd);
        c.body.where_(m, v, b)
    });
    LTensor::lazy(dtype, sizes, loader)
}

/// `scatter` (`.src`, `.value`) and `scatter_add`: a copy of `self`, then for every position `p`
/// of `index`, `out[p with dim replaced by index[p]] = src[p]` (or the value; `scatter_add`:
/// added). Indices are checked against `0..size` at run time; among duplicates the last in
/// row-major order wins, as ATen's serial kernel (its parallel ones leave it unspecified).
pub(super) fn scatter(l: &mut Lowerer, n: &GraphNode, accumulate: bool) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let values = match n.arg("src") {
        Some(_) => Values::Src,
        None => Values::Number(scalar_arg(n, "value")?),
    };
    let combine = if accumulate {
        ScatterCombine::Add
    } else {
        ScatterCombine::Write
    };
    scatter_into(l, n, x, values, combine)
}

/// What a scatter puts at its targets: the node's `src`, or one number.
#[derive(Clone, Copy)]
enum Values {
    Src,
    Number(Scalar),
}

/// `x` with, for every position `p` of the node's `index` in row-major order, the value at `p`
/// combined into `x[p with dim = index[p]]`.
fn scatter_into(
    l: &mut Lowerer,
    n: &GraphNode,
    x: LTensor,
    values: Values,
    combine: ScatterCombine,
) -> R<LTensor> {
    let index = tensor(l, n, "index")?;
    let rank = x.sizes.len();
    let dim = dim_arg(l, n, "dim", rank)?;
    if index.dtype.is_float() || index.dtype == DType::Bool {
        return msg(format!("indices must be integers, found {}", index.dtype));
    }
    if index.sizes.len() != rank {
        return msg(format!(
            "an index of {} dimensions for a tensor of {rank}",
            index.sizes.len()
        ));
    }
    let src = match values {
        Values::Src => {
            let src = tensor(l, n, "src")?;
            if src.sizes.len() != rank {
                return msg(format!(
                    "a source of {} dimensions for a tensor of {rank}",
                    src.sizes.len()
                ));
            }
            Some(src)
        }
        Values::Number(_) => None,
    };
    // The index may not exceed the source anywhere, nor the tensor off `dim`.
    for k in 0..rank {
        let mut bounds = Vec::new();
        if k != dim {
            bounds.push((x.sizes[k], "the tensor"));
        }
        if let Some(s) = &src {
            bounds.push((s.sizes[k], "the source"));
        }
        for (bound, what) in bounds {
            let c = l.env.pool_mut().le(index.sizes[k], bound);
            l.require(c, |env| {
                format!(
                    "the index exceeds {what} in dimension {k} ({} > {})",
                    env.text(index.sizes[k]),
                    env.text(bound)
                )
            })?;
        }
    }
    let (xd, cd) = (x.dtype, compute_dtype(x.dtype));
    let size = x.sizes[dim];
    let base = l.scatter_base(x, &n.name);
    let vars = l.index_vars("x", &index.sizes);
    let origin = l.origin();
    let mut body = BodyBuilder::default();
    let mut c = Ctx {
        env: &mut l.env,
        body: &mut body,
    };
    let i = (index.loader)(&mut c, &vars);
    let i = c.body.cast(i, DType::I64);
    let t = c.bind_index(i, size, &origin);
    let mut at = vars.clone();
    at[dim] = t;
    let v = match (&src, values) {
        (Some(s), _) => (s.loader)(&mut c, &vars),
        (None, Values::Number(v)) => scalar_value(&mut c, v, cd),
        (None, Values::Src) => unreachable!("a source was read"),
    };
    let v = c.body.cast(v, cd);
    let step = ScatterStep {
        ranges: index.sizes.clone(),
        vars,
        body: body.finish(v),
        at,
        combine,
        view: None,
    };
    Ok(step.add(l, &base, xd, &n.name))
}

/// `scatter_reduce.two`: `sum`, `prod`, `amax`, `amin` combine each value into its target
/// (NaN propagates); `mean` sums, then divides by the values that met each target (plus one for
/// `self`; integers by floor division, as ATen). With `include_self=False` every target first
/// holds the combination's identity, so only the values count; untouched elements keep `self`.
pub(super) fn scatter_reduce(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let reduce = match n.arg("reduce") {
        Some(Arg::Str(s)) => s.clone(),
        other => return msg(format!("reduce must be a string, found {other:?}")),
    };
    let combine = match reduce.as_str() {
        "sum" | "mean" => ScatterCombine::Add,
        "prod" => ScatterCombine::Mul,
        "amax" => ScatterCombine::Max,
        "amin" => ScatterCombine::Min,
        other => {
            return msg(format!(
                "reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', found '{other}'"
            ))
        }
    };
    let include_self = !matches!(n.arg("include_self"), Some(Arg::Bool(false)));
    let x = tensor(l, n, "self")?;
    let dtype = x.dtype;
    if dtype == DType::Bool {
        return msg("scatter_reduce of bools is not supported");
    }
    let identity = match (combine, dtype.is_float()) {
        (ScatterCombine::Mul, true) => Scalar::Float(1.0),
        (ScatterCombine::Max, true) => Scalar::Float(f64::NEG_INFINITY),
        (ScatterCombine::Min, true) => Scalar::Float(f64::INFINITY),
        (_, true) => Scalar::Float(0.0),
        (ScatterCombine::Mul, false) => Scalar::Int(l.env.pool_mut().constant(1)),
        (ScatterCombine::Max | ScatterCombine::Min, false) => {
            let (lo, hi) = dtype.int_range().expect("an integer dtype");
            let v = if combine == ScatterCombine::Max {
                lo
            } else {
                hi
            };
            Scalar::Int(l.env.pool_mut().constant(v))
        }
        (_, false) => Scalar::Int(l.env.pool_mut().zero()),
    };
    let start = if include_self {
        x.clone()
    } else {
        scatter_into(
            l,
            n,
            x.clone(),
            Values::Number(identity),
            ScatterCombine::Write,
        )?
    };
    let combined = scatter_into(l, n, start, Values::Src, combine)?;
    if reduce != "mean" {
        return Ok(combined);
    }
    // How many values met each element (and `self`, when included).
    let first = i64::from(include_self);
    let seed = {
        let one = l.env.pool_mut().constant(first);
        let ld: Loader =
            Rc::new(move |c: &mut Ctx, _: &[Expr]| scalar_value(c, Scalar::Int(one), DType::I64));
        LTensor::lazy(DType::I64, x.sizes.clone(), ld)
    };
    let one = Scalar::Int(l.env.pool_mut().one());
    let counts = scatter_into(l, n, seed, Values::Number(one), ScatterCombine::Add)?;
    let (lc, ln) = (combined.loader.clone(), counts.loader.clone());
    let cd = compute_dtype(dtype);
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let sum = lc(c, idx);
        let count = ln(c, idx);
        let zero = c.body.constant(Constant::Int(0), DType::I64);
        let none = c.body.binary(BinaryOp::Eq, count, zero);
        let count = c.body.cast(count, cd);
        let op = if cd.is_float() {
            BinaryOp::Div
        } else {
            BinaryOp::FloorDiv
        };
        // (Untouched elements keep `self`, never divided by 0.)
        let one = c.body.constant(
            if cd.is_float() {
                Constant::float(1.0)
            } else {
                Constant::Int(1)
            },
            cd,
        );
        let safe = c.body.where_(none, one, count);
        let mean = c.body.binary(op, sum, safe);
        let v = c.body.where_(none, sum, mean);
        c.body.cast(v, dtype)
    });
    Ok(LTensor::lazy(dtype, x.sizes.clone(), loader))
}

/// `masked_scatter`: where the mask (broadcast with `self`) is true, the next element of
/// `source` in row-major order; elsewhere `self`. Each true position's rank among the true ones
/// is a running count (a scan of the flattened mask), read back as a bounds-checked index into
/// the flattened source: a source with too few elements is a runtime error naming the node.
pub(super) fn masked_scatter(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let (x, mask, source) = (
        tensor(l, n, "self")?,
        tensor(l, n, "mask")?,
        tensor(l, n, "source")?,
    );
    if mask.dtype != DType::Bool {
        return msg(format!("the mask must be bool, found {}", mask.dtype));
    }
    if source.dtype != x.dtype {
        return msg(format!(
            "source of {} for a tensor of {}",
            source.dtype, x.dtype
        ));
    }
    let (sizes, ex) = broadcast(l, &[x, mask])?;
    let (x, mask) = (ex[0].clone(), ex[1].clone());
    let total = numel(l, &sizes);
    // The running count of true positions, over the flattened mask.
    let ones = map(
        l,
        std::slice::from_ref(&mask),
        DType::Bool,
        DType::I64,
        |_, v| v[0],
    )?;
    let ones = l.realize(ones, &n.name);
    let flat = view(l, ones, &[total])?;
    let (_, counts) = super::library::scan(l, n, flat, 0, ScanKind::Sum, DType::I64)?;
    let counts = view(l, counts, &sizes)?;
    let src_len = numel(l, &source.sizes);
    let source = view(l, source, &[src_len])?;
    let origin = l.origin();
    let (lx, lm, lc, ls) = (
        x.loader.clone(),
        mask.loader.clone(),
        counts.loader.clone(),
        source.loader.clone(),
    );
    let dtype = x.dtype;
    let cd = compute_dtype(dtype);
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let keep = lx(c, idx);
        let take = lm(c, idx);
        let outer = c.body.enter_mask(take);
        let count = lc(c, idx);
        let one = c.body.constant(Constant::Int(1), DType::I64);
        let at = c.body.binary(BinaryOp::Sub, count, one);
        let t = c.bind_index(at, src_len, &origin);
        let v = ls(c, &[t]);
        let v = c.body.cast(v, cd);
        c.body.exit_mask(outer);
        let keep = c.body.cast(keep, cd);
        c.body.where_(take, v, keep)
    });
    Ok(LTensor::lazy(dtype, sizes, loader))
}
