//! Views that read the input along new paths rather than by reshaping it: `unfold` (sliding
//! windows as a new innermost dimension), `diagonal` (two dimensions walked together) and
//! `as_strided` (any sizes and strides over the storage). All are index arithmetic; nothing is
//! copied.

use std::rc::Rc;

use super::args::{dim_arg, int, ints, msg, opt_int, tensor};
use super::promote::compute_dtype;
use super::routing::ScatterStep;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Producer};
use crate::loop_ir::{BodyBuilder, BufferId, BufferKind, Layout, ScatterCombine};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

fn constant(l: &Lowerer, n: &GraphNode, name: &str) -> R<i64> {
    let e = int(n, name)?;
    l.env
        .pool()
        .as_const(e)
        .ok_or_else(|| NodeError::Message(format!("argument '{name}' must be a constant")))
}

/// `unfold(dimension, size, step)`: dimension `d` of length `S` becomes `(S − size) // step + 1`
/// windows and a new last dimension of `size` holds each window; `out[…, i, …, j] = x[…, i·step
/// + j, …]`. A window longer than the dimension is a runtime error, as in ATen.
pub(super) fn unfold(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    if x.sizes.is_empty() {
        return msg("unfold needs a tensor of at least one dimension");
    }
    let d = dim_arg(l, n, "dimension", x.sizes.len())?;
    let (size, step) = (constant(l, n, "size")?, constant(l, n, "step")?);
    if size < 0 || step < 1 {
        return msg(format!(
            "size must be non-negative and step positive, found size {size} and step {step}"
        ));
    }
    let len = x.sizes[d];
    let p = l.env.pool_mut();
    let window = p.constant(size);
    let fits = p.le(window, len);
    l.require(fits, |env| {
        format!(
            "a window of {size} can be longer than dimension {d} (size {})",
            env.text(len)
        )
    })?;
    let p = l.env.pool_mut();
    let rest = p.sub(len, window);
    let s = p.constant(step);
    let q = p.floordiv(rest, s);
    let one = p.one();
    let count = p.add(q, one);
    let count = l.env.simplify(count);
    let mut sizes = x.sizes.clone();
    sizes[d] = count;
    sizes.push(window);
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut src = idx[..idx.len() - 1].to_vec();
        let p = c.env.pool_mut();
        let start = p.scale(idx[d], step);
        src[d] = p.add(start, idx[idx.len() - 1]);
        inner(c, &src)
    });
    Ok(LTensor::lazy(x.dtype, sizes, loader))
}

/// `diagonal(offset, dim1, dim2)`: dimensions `dim1` and `dim2` go, and a last dimension walks
/// `x[…, k + max(−offset, 0), …, k + max(offset, 0), …]` for as long as both stay in range
/// (possibly empty: an offset past the edge gives no elements, as in ATen).
pub(super) fn diagonal(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let rank = x.sizes.len();
    if rank < 2 {
        return msg(format!("diagonal needs 2 or more dimensions, found {rank}"));
    }
    let offset = constant(l, n, "offset")?;
    let (d1, d2) = (dim_arg(l, n, "dim1", rank)?, dim_arg(l, n, "dim2", rank)?);
    if d1 == d2 {
        return msg(format!("dim1 and dim2 are both dimension {d1}"));
    }
    let (skip1, skip2) = ((-offset).max(0), offset.max(0));
    let p = l.env.pool_mut();
    let (o1, o2) = (p.constant(skip1), p.constant(skip2));
    let (r1, r2) = (p.sub(x.sizes[d1], o1), p.sub(x.sizes[d2], o2));
    let shortest = p.min(r1, r2);
    let zero = p.zero();
    let len = p.max(shortest, zero);
    let len = l.env.simplify(len);
    let mut sizes: Vec<Expr> = (0..rank)
        .filter(|&k| k != d1 && k != d2)
        .map(|k| x.sizes[k])
        .collect();
    sizes.push(len);
    let inner = x.loader.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let k = idx[idx.len() - 1];
        let mut rest = idx[..idx.len() - 1].iter();
        let p = c.env.pool_mut();
        let (o1, o2) = (p.constant(skip1), p.constant(skip2));
        let (a1, a2) = (p.add(k, o1), p.add(k, o2));
        let src: Vec<Expr> = (0..rank)
            .map(|j| match j {
                _ if j == d1 => a1,
                _ if j == d2 => a2,
                _ => *rest.next().expect("one index per kept dimension"),
            })
            .collect();
        inner(c, &src)
    });
    Ok(LTensor::lazy(x.dtype, sizes, loader))
}

/// `as_strided(size, stride, storage_offset)`: a view of the storage under `self` at the given
/// sizes, strides and offset (0 by default). `self` must be its storage, as functionalized graphs
/// use it (a whole contiguous tensor, or a computed one); a view into a larger storage is refused,
/// not read differently from ATen. Every element the view can reach must lie in the storage:
/// proved from ranges, else a runtime assert naming the node; negative strides are refused.
pub(super) fn as_strided(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let (base, base_layout) = whole_storage(l, &x, n, "as_strided")?;
    let layout = strided_layout(l, n, &base_layout)?;
    Ok(region_of(base, layout, x.dtype))
}

/// `as_strided_scatter(self, src, size, stride, storage_offset)`: `self` with the elements of
/// that view of its storage replaced by `src` (of the view's shape). The view must not overlap
/// itself (no two of its elements the same storage element: proved from ranges, else refused).
/// When `src` is a write into that same region of `self` (see `put_back_region`), the result is
/// that write; otherwise a scatter of `src` over a copy of `self`.
pub(super) fn as_strided_scatter(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let src = tensor(l, n, "src")?;
    if src.dtype != x.dtype && !src.wrapped {
        return msg(format!(
            "the source is {}, the tensor is {} (as_strided_scatter needs one dtype)",
            src.dtype, x.dtype
        ));
    }
    let (base, base_layout) = whole_storage(l, &x, n, "as_strided_scatter")?;
    let layout = strided_layout(l, n, &base_layout)?;
    super::overwrite::same_shape(l, &layout.sizes, &src, "as_strided_scatter")?;
    if !non_overlapping(l, &layout) {
        return msg(format!(
            "the view (sizes {}, strides {}) may reach one storage element twice",
            texts(l, &layout.sizes),
            texts(l, &layout.strides)
        ));
    }
    if let Some((written, view)) = &src.strided {
        let whole = matches!(
            l.buffers[written.index()].kind,
            BufferKind::Scatter { base: b, .. } if b == base
        );
        if whole && *view == layout {
            let b = &l.buffers[written.index()];
            return Ok(super::buffer_tensor(*written, b.dtype, b.layout.clone()));
        }
    }
    let dtype = x.dtype;
    let whole = super::buffer_tensor(base, dtype, base_layout);
    let vars = l.index_vars("x", &layout.sizes);
    let mut body = BodyBuilder::default();
    let mut ctx = Ctx {
        env: &mut l.env,
        body: &mut body,
    };
    let v = (src.loader)(&mut ctx, &vars);
    let v = ctx.body.cast(v, compute_dtype(dtype));
    let step = ScatterStep {
        ranges: layout.sizes.clone(),
        vars: vars.clone(),
        body: body.finish(v),
        at: vars,
        combine: ScatterCombine::Write,
        view: Some(layout),
    };
    Ok(step.add(l, &whole, dtype, &n.name))
}

/// When the node being lowered writes into `x`, a region of a whole row-major buffer that does
/// not overlap itself, and its one reader puts the result back into that buffer
/// (`as_strided_scatter` with this node as `src`): the whole buffer and the region's layout, so
/// that the write goes straight into (a copy of) the whole buffer.
pub(super) fn put_back_region(l: &mut Lowerer, x: &LTensor) -> Option<(LTensor, Layout)> {
    let (whole, layout) = x.strided.clone()?;
    let current = l.current;
    let readers: Vec<_> = l.readers().collect();
    let (&reader, only) = (readers.first()?, readers.len() == 1);
    let puts_back = reader.op == "aten.as_strided_scatter.default"
        && matches!(reader.arg("src"), Some(Arg::Tensor(t)) if t.producer == Producer::Node(current));
    if !only || !puts_back || l.uses[current] != 1 {
        return None;
    }
    if !l.row_major(whole) || !non_overlapping(l, &layout) {
        return None;
    }
    let b = &l.buffers[whole.index()];
    Some((
        super::buffer_tensor(whole, b.dtype, b.layout.clone()),
        layout,
    ))
}

/// A view of buffer `base`'s storage through `layout`: index arithmetic, nothing copied.
pub(super) fn region_of(base: BufferId, layout: Layout, dtype: DType) -> LTensor {
    let view = layout.clone();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let at = view.index(c.env, idx);
        let v = c.body.load(base, at, dtype);
        c.body.cast(v, compute_dtype(dtype))
    });
    let mut t = LTensor::lazy(dtype, layout.sizes.clone(), loader);
    t.strided = Some((base, layout));
    t
}

/// The storage under `x` as `as_strided` addresses it: `x`'s own buffer when `x` is one whole
/// and row-major, else `x` computed into one. A view into a larger or strided storage is refused.
fn whole_storage(l: &mut Lowerer, x: &LTensor, n: &GraphNode, op: &str) -> R<(BufferId, Layout)> {
    match x.strided.clone() {
        Some((b, view)) => {
            let own = l.buffers[b.index()].layout.clone();
            let dense = Layout::contiguous(&mut l.env, &own.sizes);
            let zero = l.env.pool().as_const(own.offset) == Some(0);
            if view != own || own.strides != dense.strides || !zero {
                return msg(format!(
                    "{op} of a view into a larger or strided storage is not supported: \
                     guardless takes it over a whole contiguous tensor"
                ));
            }
            Ok((b, own))
        }
        None => {
            let t = l.realize(x.clone(), &n.name);
            let b = t.buffer.expect("realized");
            Ok((b, l.buffers[b.index()].layout.clone()))
        }
    }
}

/// The layout of the node's `size`, `stride` and `storage_offset` over a storage laid out as
/// `base`: strides proved non-negative, and every element the view can reach in the storage
/// (proved from ranges, else a runtime assert naming the node).
fn strided_layout(l: &mut Lowerer, n: &GraphNode, base: &Layout) -> R<Layout> {
    let sizes = ints(n, "size")?;
    let strides = ints(n, "stride")?;
    if sizes.len() != strides.len() {
        return msg(format!(
            "{} sizes and {} strides",
            sizes.len(),
            strides.len()
        ));
    }
    for &s in &strides {
        let zero = l.env.pool_mut().zero();
        let ok = l.env.pool_mut().ge(s, zero);
        if !l.env.statically_known_true(ok) {
            return msg(format!("stride {} can be negative", l.env.text(s)));
        }
    }
    let offset = match opt_int(n, "storage_offset")? {
        Some(o) => o,
        None => l.env.pool_mut().zero(),
    };
    // The last element the view reaches, and one past the base's last.
    let p = l.env.pool_mut();
    let one = p.one();
    let mut last = offset;
    for (&s, &st) in sizes.iter().zip(&strides) {
        let before = p.sub(s, one);
        let span = p.mul(before, st);
        last = p.add(last, span);
    }
    let mut end = base.offset;
    for (&s, &st) in base.sizes.iter().zip(&base.strides) {
        let before = p.sub(s, one);
        let span = p.mul(before, st);
        end = p.add(end, span);
    }
    let end = p.add(end, one);
    let fits = p.lt(last, end);
    // A view with no element reaches nothing.
    let empty = sizes.iter().any(|&s| l.env.pool().as_const(s) == Some(0));
    if !empty && !l.env.statically_known_true(fits) {
        l.env.check(fits).map_err(|_| {
            NodeError::Message(format!(
                "the view reaches element {} of a storage of {}",
                l.env.text(last),
                l.env.text(end)
            ))
        })?;
    }
    Ok(Layout {
        sizes,
        strides,
        offset,
    })
}

/// Whether no two elements of `layout` are one storage element, proved for every value of the
/// sizes: each dimension's stride spans the dimensions after it (sizes of 1 aside).
fn non_overlapping(l: &mut Lowerer, layout: &Layout) -> bool {
    let dims: Vec<usize> = (0..layout.sizes.len())
        .filter(|&d| !l.provably_one(layout.sizes[d]))
        .collect();
    dims.windows(2).all(|w| {
        let (a, b) = (w[0], w[1]);
        let p = l.env.pool_mut();
        let span = p.mul(layout.sizes[b], layout.strides[b]);
        let ok = p.ge(layout.strides[a], span);
        l.env.statically_known_true(ok)
    }) && dims.last().is_none_or(|&d| {
        let zero = l.env.pool_mut().zero();
        let ok = l.env.pool_mut().gt(layout.strides[d], zero);
        l.env.statically_known_true(ok)
    })
}

fn texts(l: &Lowerer, xs: &[Expr]) -> String {
    xs.iter()
        .map(|&e| l.env.text(e))
        .collect::<Vec<_>>()
        .join(", ")
}
