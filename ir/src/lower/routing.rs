//! Lowering of the ops of MoE routing and cache writes: boolean masks in `index`, `index_put`,
//! `repeat_interleave`, `histc`, `_grouped_mm`, and `empty_permuted`. Data-dependent sizes are
//! unbacked symbols bound at run time; data-dependent requirements are `Check` ops.

use std::rc::Rc;

use super::args::{const_ints, int, ints, msg, opt_int, scalar_arg, stated_symbol, tensor};
use super::indexing::index_plan;
use super::views::{assert_equal, expand, numel, view};
use super::{compute_dtype, Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::loop_ir::{
    BinaryOp, BodyBuilder, BufferKind, Check, Constant, ExternKernel, Layout, Loops, ReductionKind,
    ScanKind, ScatterCombine, UnaryOp,
};
use crate::sym::{Expr, SymbolId};

type R<T> = Result<T, NodeError>;

fn is_mask(t: &LTensor) -> bool {
    t.dtype == DType::Bool || t.dtype == DType::U8
}

/// The index list of `index`/`index_put`.
fn index_list(l: &Lowerer, n: &GraphNode) -> R<Vec<Option<LTensor>>> {
    match n.arg("indices") {
        Some(Arg::Tensors(v)) => v
            .iter()
            .map(|r| r.map(|r| l.tensor(&r)).transpose().map_err(NodeError::from))
            .collect(),
        other => msg(format!(
            "argument 'indices': expected tensors, found {other:?}"
        )),
    }
}

/// Replaces the boolean (or uint8) mask in `idx` by integer indices: the columns of its `nonzero`,
/// `count` long each. One mask per index list (two masks would need their counts to agree).
fn expand_mask(
    l: &mut Lowerer,
    n: &GraphNode,
    x_sizes: &[Expr],
    idx: Vec<Option<LTensor>>,
    count: SymbolId,
) -> R<Vec<Option<LTensor>>> {
    let mut out = Vec::new();
    for t in idx {
        let t = match t {
            Some(t) if is_mask(&t) => t,
            other => {
                out.push(other);
                continue;
            }
        };
        let (p, k) = (out.len(), t.sizes.len());
        if p + k > x_sizes.len() {
            return msg(format!(
                "a mask of {k} dimensions at dimension {p} of a tensor of {} dimensions",
                x_sizes.len()
            ));
        }
        for (j, &s) in t.sizes.iter().enumerate() {
            assert_equal(l, s, x_sizes[p + j], "the mask and the indexed tensor")?;
        }
        let mask = l.realize(t, &n.name).buffer.expect("realized");
        let c = l.env.pool_mut().symbol_expr(count);
        let rank = l.env.pool_mut().constant(k as i64);
        let select = BufferKind::Select {
            input: mask,
            mask: None,
            count,
        };
        let positions = l.add_buffer(select, DType::I64, &[c, rank], &n.name);
        for j in 0..k as i64 {
            let ld = positions.loader.clone();
            let column: Loader = Rc::new(move |cx: &mut Ctx, i: &[Expr]| {
                let j = cx.env.pool_mut().constant(j);
                ld(cx, &[i[0], j])
            });
            out.push(Some(LTensor::lazy(DType::I64, vec![c], column)));
        }
    }
    Ok(out)
}

/// `index.Tensor`. With a boolean mask the node states its shape, whose entry at the mask's
/// result dimension is the unbacked count symbol.
pub(super) fn index(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let mut x = tensor(l, n, "self")?;
    let mut idx = index_list(l, n)?;
    let masks = idx.iter().flatten().filter(|t| is_mask(t)).count();
    if masks > 1 {
        return msg("at most one boolean mask per index is supported");
    }
    // A 0-d mask indexes a new dimension of size 1 at its place (`x[True]` has one more
    // dimension than `x`): the same as a 1-element mask over `x` unsqueezed there.
    let mut at = 0;
    for t in idx.iter_mut() {
        match t {
            Some(m) if is_mask(m) && m.sizes.is_empty() => {
                x = super::views::unsqueeze(l, x, at);
                *m = super::views::unsqueeze(l, m.clone(), 0);
                break;
            }
            Some(m) if is_mask(m) => at += m.sizes.len(),
            _ => at += 1,
        }
    }
    let idx = if masks == 1 {
        let at = mask_result_dim(&x.sizes, &idx);
        let count = stated_symbol(l, n, at).ok_or_else(|| {
            NodeError::Message(format!(
                "a boolean mask: the node must state its \"shape\" with the unbacked count \
                     symbol at dimension {at}"
            ))
        })?;
        expand_mask(l, n, &x.sizes, idx, count)?
    } else {
        idx
    };
    super::indexing::advanced_index(l, x, idx)
}

/// The result dimension that holds a mask's count: the index tensors broadcast right-aligned, the
/// mask contributes one dimension, and the block sits in place when the indexed dims are adjacent.
fn mask_result_dim(x_sizes: &[Expr], idx: &[Option<LTensor>]) -> usize {
    let (mut positions, mut block, mut p) = (Vec::new(), 1, 0);
    for t in idx {
        match t {
            Some(m) if is_mask(m) => {
                positions.extend(p..p + m.sizes.len());
                p += m.sizes.len();
            }
            Some(m) => {
                positions.push(p);
                block = block.max(m.sizes.len());
                p += 1;
            }
            None => p += 1,
        }
    }
    let adjacent = positions.windows(2).all(|w| w[1] == w[0] + 1);
    let before = if adjacent {
        (0..x_sizes.len())
            .filter(|k| !positions.contains(k) && *k < positions[0])
            .count()
    } else {
        0
    };
    before + block - 1
}

/// `index_put`: a copy of `self` with `values` (broadcast to the indexed shape) written — or added,
/// with `accumulate` — at the indexed positions. A boolean mask's count is a fresh unbacked symbol.
pub(super) fn index_put(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let values = tensor(l, n, "values")?;
    let accumulate = matches!(n.arg("accumulate"), Some(Arg::Bool(true)));
    if values.dtype != x.dtype && !values.wrapped {
        return msg(format!(
            "values are {}, the destination is {} (index_put needs one dtype)",
            values.dtype, x.dtype
        ));
    }
    let idx = index_list(l, n)?;
    let masks = idx.iter().flatten().filter(|t| is_mask(t)).count();
    if masks > 1 {
        return msg("at most one boolean mask per index is supported");
    }
    if idx
        .iter()
        .flatten()
        .any(|t| is_mask(t) && t.sizes.is_empty())
    {
        return msg("a 0-dimensional mask in index_put is not supported");
    }
    let idx = if masks == 1 {
        let count = l.env.new_unbacked_size(None);
        let count = l.env.pool().as_symbol(count).expect("a symbol");
        expand_mask(l, n, &x.sizes, idx, count)?
    } else {
        idx
    };
    let (xd, cd) = (x.dtype, compute_dtype(x.dtype));
    if idx.iter().all(Option::is_none) {
        // `x[...] = v`: every element is written once.
        let v = expand(l, values, &x.sizes)?;
        let (lx, lv) = (x.loader.clone(), v.loader.clone());
        let loader: Loader = Rc::new(move |c: &mut Ctx, i: &[Expr]| {
            let v = lv(c, i);
            let v = c.body.cast(v, cd);
            if !accumulate {
                return v;
            }
            let a = lx(c, i);
            let a = c.body.cast(a, cd);
            c.body.binary(BinaryOp::Add, a, v)
        });
        return Ok(LTensor::lazy(xd, x.sizes.clone(), loader));
    }
    let plan = index_plan(l, &x.sizes, idx)?;
    let values = expand(l, values, &plan.sizes)?;
    // A write into a region of a larger tensor that the graph then puts back into it
    // (functionalization's `as_strided_scatter(t, index_put(as_strided(t, …), …), …)`: a KV
    // cache that is one layer's part of a pool) scatters into the whole tensor, so that the put
    // back is the scatter itself and only the written elements move.
    let region = super::strided_views::put_back_region(l, &x);
    let (base, view) = match region {
        Some((whole, layout)) => (whole, Some(layout)),
        None => (l.scatter_base(x, &n.name), None),
    };
    let vars = l.index_vars("x", &plan.sizes);
    let mut body = BodyBuilder::default();
    let mut ctx = Ctx {
        env: &mut l.env,
        body: &mut body,
    };
    let src = (plan.source)(&mut ctx, &vars);
    let v = (values.loader)(&mut ctx, &vars);
    let v = ctx.body.cast(v, cd);
    let step = ScatterStep {
        ranges: plan.sizes,
        vars,
        body: body.finish(v),
        at: src,
        combine: if accumulate {
            ScatterCombine::Add
        } else {
            ScatterCombine::Write
        },
        view: view.clone(),
    };
    let written = step.add(l, &base, xd, &n.name);
    Ok(match view {
        // The node's value: the region of the whole tensor written.
        Some(layout) => {
            let b = written.buffer.expect("a scatter is a buffer");
            super::strided_views::region_of(b, layout, xd)
        }
        None => written,
    })
}

/// A scatter step over a realized copy of its base: for every point of `ranges` (`vars`), the
/// body's value written (or added) at index `at` of the base's shape — or, with `view`, at index
/// `at` of that view of the (row-major) base's storage.
pub(super) struct ScatterStep {
    pub ranges: Vec<Expr>,
    pub vars: Vec<Expr>,
    pub body: crate::loop_ir::Body,
    pub at: Vec<Expr>,
    pub combine: ScatterCombine,
    pub view: Option<Layout>,
}

impl ScatterStep {
    pub(super) fn add(
        self,
        l: &mut Lowerer,
        base: &LTensor,
        dtype: DType,
        origin: &str,
    ) -> LTensor {
        let layout = match self.view {
            Some(v) => v,
            None => Layout::contiguous(&mut l.env, &base.sizes),
        };
        let target = layout.index(&mut l.env, &self.at);
        let kind = BufferKind::Scatter {
            base: base.buffer.expect("realized"),
            loops: Loops {
                ranges: self.ranges,
                vars: self.vars,
                reduction: None,
            },
            body: self.body,
            target,
            combine: self.combine,
        };
        l.add_buffer(kind, dtype, &base.sizes, origin)
    }
}

/// `repeat_interleave.Tensor`: position `j` of the result is the `i` whose run of `repeats[i]`
/// copies holds it — the number of running sums `≤ j`. The total binds the node's stated count
/// symbol (or, with `output_size`, a fresh one asserted equal to it).
pub(super) fn repeat_interleave(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let r = tensor(l, n, "repeats")?;
    if r.sizes.len() != 1 || r.dtype.is_float() || r.dtype == DType::Bool {
        return msg("repeats must be a one-dimensional integer tensor");
    }
    let (rd, len) = (r.dtype, r.sizes[0]);
    let ld = r.loader.clone();
    let checked: Loader = Rc::new(move |c: &mut Ctx, i: &[Expr]| {
        let v = ld(c, i);
        let v = c.body.cast(v, DType::I64);
        let zero = c.body.constant(Constant::Int(0), DType::I64);
        let ok = c.body.binary(BinaryOp::Ge, v, zero);
        c.body.check(ok, Check::NonNegativeRepeats);
        v
    });
    let checked = LTensor::lazy(DType::I64, vec![len], checked);
    let total = l.reduction(
        &checked,
        &[0],
        false,
        ReductionKind::Sum,
        DType::I64,
        &n.name,
    );
    let total = total.buffer.expect("realized");
    let count = match opt_int(n, "output_size")? {
        None => {
            let sym = stated_symbol(l, n, 0).ok_or_else(|| {
                NodeError::Message(
                    "must state its \"shape\" with the unbacked count symbol, or output_size"
                        .into(),
                )
            })?;
            l.add_item(total, sym, &n.name);
            l.env.pool_mut().symbol_expr(sym)
        }
        Some(size) => {
            let fresh = l.env.new_unbacked_size(None);
            let sym = l.env.pool().as_symbol(fresh).expect("a symbol");
            l.add_item(total, sym, &n.name);
            let eq = l.env.pool_mut().eq(fresh, size);
            l.env
                .check(eq)
                .map_err(|e| NodeError::Message(e.to_string()))?;
            size
        }
    };
    let as_i64 = super::pointwise::map(l, &[r], rd, DType::I64, |_, v| v[0])?;
    let input = l.realize(as_i64, &n.name).buffer.expect("realized");
    let ends = l.add_buffer(
        BufferKind::Scan {
            input,
            dim: 0,
            kind: ScanKind::Sum,
        },
        DType::I64,
        &[len],
        &n.name,
    );
    let le = ends.loader.clone();
    let before: Loader = Rc::new(move |c: &mut Ctx, ji: &[Expr]| {
        let end = le(c, &ji[1..]);
        let j = c.body.index(ji[0]);
        let done = c.body.binary(BinaryOp::Le, end, j);
        c.body.cast(done, DType::I64)
    });
    let before = LTensor::lazy(DType::I64, vec![count, len], before);
    let out = l.reduction(
        &before,
        &[1],
        false,
        ReductionKind::Sum,
        DType::I64,
        &n.name,
    );
    if rd == DType::I64 {
        return Ok(out);
    }
    super::pointwise::map(l, &[out], DType::I64, rd, |_, v| v[0])
}

/// A float constant of `min`/`max`.
fn float_scalar(l: &Lowerer, n: &GraphNode, name: &str) -> R<f64> {
    match scalar_arg(n, name)? {
        Scalar::Float(f) => Ok(f),
        Scalar::Bool(b) => Ok(f64::from(u8::from(b))),
        Scalar::Int(e) => l
            .env
            .pool()
            .as_const(e)
            .map(|v| v as f64)
            .ok_or_else(|| NodeError::Message(format!("argument '{name}' must be a constant"))),
    }
}

/// `histc`: counts per bin as a sum reduction over the flattened input for each bin, with ATen's
/// arithmetic (`(x - lo) * bins / (hi - lo)`, truncated, `hi` in the last bin, in the input dtype).
/// `min == max` takes the edges from the data, widened by one when equal; non-finite data edges
/// are a runtime error, as in ATen.
pub(super) fn histc(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    if !x.dtype.is_float() {
        return msg(format!(
            "histc needs a floating-point input, found {}",
            x.dtype
        ));
    }
    let bins = l
        .env
        .pool()
        .as_const(int(n, "bins")?)
        .filter(|&b| b > 0)
        .ok_or_else(|| NodeError::Message("bins must be a positive constant".into()))?;
    let (xd, cd) = (x.dtype, compute_dtype(x.dtype));
    let lo = crate::tensor::round_to(xd, float_scalar(l, n, "min")?);
    let hi = crate::tensor::round_to(xd, float_scalar(l, n, "max")?);
    let from_data = lo == hi;
    let finite = lo.is_finite() && hi.is_finite();
    if !from_data && !finite {
        return msg(format!("range of [{lo}, {hi}] is not finite"));
    }
    if !from_data && lo > hi {
        return msg("max must be larger than min");
    }
    let total = numel(l, &x.sizes);
    let flat = view(l, x, &[total])?;
    // The data's extremes over max(numel, 1) slots (an empty input gives ±inf, never read).
    let edges = if from_data {
        let one = l.env.pool_mut().one();
        let slots = l.env.pool_mut().max(total, one);
        let extreme = |l: &mut Lowerer, kind: ReductionKind, fill: f64| {
            let fl = flat.loader.clone();
            let padded: Loader = Rc::new(move |c: &mut Ctx, i: &[Expr]| {
                let at = c.body.index(i[0]);
                let n = c.body.index(total);
                let valid = c.body.binary(BinaryOp::Lt, at, n);
                let outer = c.body.enter_mask(valid);
                let v = fl(c, i);
                c.body.exit_mask(outer);
                let f = c.body.constant(Constant::float(fill), cd);
                c.body.where_(valid, v, f)
            });
            let t = LTensor::lazy(xd, vec![slots], padded);
            l.reduction(&t, &[0], false, kind, xd, &n.name)
        };
        let lo_t = extreme(l, ReductionKind::Min, f64::INFINITY);
        let hi_t = extreme(l, ReductionKind::Max, f64::NEG_INFINITY);
        Some((lo_t.loader, hi_t.loader))
    } else {
        None
    };
    // Rounds to the input dtype after each op, as ATen's arithmetic in that dtype does.
    let round = move |c: &mut Ctx, v| {
        if xd == cd {
            v
        } else {
            let r = c.body.cast(v, xd);
            c.body.cast(r, cd)
        }
    };
    let fl = flat.loader.clone();
    let counts: Loader = Rc::new(move |c: &mut Ctx, br: &[Expr]| {
        let e = fl(c, &br[1..]);
        let (lo, hi) = match &edges {
            Some((lo_ld, hi_ld)) => {
                let (lo0, hi0) = (lo_ld(c, &[]), hi_ld(c, &[]));
                let same = c.body.binary(BinaryOp::Eq, lo0, hi0);
                let one = c.body.constant(Constant::float(1.0), cd);
                let (lo1, hi1) = (
                    c.body.binary(BinaryOp::Sub, lo0, one),
                    c.body.binary(BinaryOp::Add, hi0, one),
                );
                let (lo1, hi1) = (round(c, lo1), round(c, hi1));
                let lo = c.body.where_(same, lo1, lo0);
                let hi = c.body.where_(same, hi1, hi0);
                let inf = c.body.constant(Constant::float(f64::INFINITY), cd);
                let (alo, ahi) = (
                    c.body.unary(UnaryOp::Abs, lo),
                    c.body.unary(UnaryOp::Abs, hi),
                );
                let (flo, fhi) = (
                    c.body.binary(BinaryOp::Lt, alo, inf),
                    c.body.binary(BinaryOp::Lt, ahi, inf),
                );
                let finite = c.body.binary(BinaryOp::LogicalAnd, flo, fhi);
                c.body.check(finite, Check::FiniteHistogramRange);
                (lo, hi)
            }
            None => (
                c.body.constant(Constant::float(lo), cd),
                c.body.constant(Constant::float(hi), cd),
            ),
        };
        let (ge, le) = (
            c.body.binary(BinaryOp::Ge, e, lo),
            c.body.binary(BinaryOp::Le, e, hi),
        );
        let inside = c.body.binary(BinaryOp::LogicalAnd, ge, le);
        let d = c.body.binary(BinaryOp::Sub, e, lo);
        let d = round(c, d);
        let nb = c.body.constant(Constant::float(bins as f64), cd);
        let scaled = c.body.binary(BinaryOp::Mul, d, nb);
        let scaled = round(c, scaled);
        let width = c.body.binary(BinaryOp::Sub, hi, lo);
        let width = round(c, width);
        let t = c.body.binary(BinaryOp::Div, scaled, width);
        let t = round(c, t);
        // Outside the range `t` may be NaN or infinite: never converted.
        let zero = c.body.constant(Constant::float(0.0), cd);
        let t = c.body.where_(inside, t, zero);
        let pos = c.body.cast(t, DType::I64);
        let last = c.body.constant(Constant::Int(bins - 1), DType::I64);
        let pos = c.body.binary(BinaryOp::Min, pos, last);
        let b = c.body.index(br[0]);
        let here = c.body.binary(BinaryOp::Eq, pos, b);
        let hit = c.body.binary(BinaryOp::LogicalAnd, inside, here);
        let one = c.body.constant(Constant::float(1.0), cd);
        c.body.where_(hit, one, zero)
    });
    let nbins = l.env.pool_mut().constant(bins);
    let counts = LTensor::lazy(xd, vec![nbins, total], counts);
    Ok(l.reduction(&counts, &[1], false, ReductionKind::Sum, xd, &n.name))
}

/// `_grouped_mm(self, mat2, offs)`: an extern kernel; see [`ExternKernel::GroupedMm`].
pub(super) fn grouped_mm(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "mat2")?);
    if !matches!(n.arg("bias"), None | Some(Arg::None)) {
        return msg("a bias is not supported (nor is it by ATen)");
    }
    if a.dtype != b.dtype {
        return msg(format!("operands are {} and {}", a.dtype, b.dtype));
    }
    let offs = match n.arg("offs") {
        None | Some(Arg::None) => None,
        Some(_) => {
            let o = tensor(l, n, "offs")?;
            if o.sizes.len() != 1 || o.dtype.is_float() || o.dtype == DType::Bool {
                return msg("offs must be a one-dimensional integer tensor");
            }
            Some(o)
        }
    };
    let (sa, sb) = (a.sizes.clone(), b.sizes.clone());
    let what = "_grouped_mm";
    let sizes = match (sa.len(), sb.len(), &offs) {
        (2, 3, Some(o)) => {
            assert_equal(l, sa[1], sb[1], what)?;
            assert_equal(l, o.sizes[0], sb[0], what)?;
            vec![sa[0], sb[2]]
        }
        (3, 3, None) => {
            assert_equal(l, sa[0], sb[0], what)?;
            assert_equal(l, sa[2], sb[1], what)?;
            vec![sa[0], sa[1], sb[2]]
        }
        (2, 2, Some(o)) => {
            assert_equal(l, sa[1], sb[0], what)?;
            vec![o.sizes[0], sa[0], sb[1]]
        }
        (3, 2, Some(o)) => {
            assert_equal(l, sa[2], sb[0], what)?;
            assert_equal(l, o.sizes[0], sa[0], what)?;
            vec![sa[1], sb[1]]
        }
        (ra, rb, o) => {
            return msg(format!(
                "operands of {ra} and {rb} dimensions {} offsets are not supported",
                if o.is_some() { "with" } else { "without" }
            ))
        }
    };
    let out = match n.arg("out_dtype") {
        Some(Arg::DType(d)) => *d,
        _ => a.dtype,
    };
    let mut inputs = vec![l.as_buffer(a, &n.name), l.as_buffer(b, &n.name)];
    if let Some(o) = offs {
        inputs.push(l.as_buffer(o, &n.name));
    }
    let kind = BufferKind::Extern {
        kernel: ExternKernel::GroupedMm,
        inputs,
    };
    Ok(l.add_buffer(kind, out, &sizes, &n.name))
}

/// `empty` and `empty_permuted`: uninitialized memory in ATen; zeros here, so every run is
/// reproducible.
pub(super) fn empty(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let sizes = super::factories::nonnegative_sizes(l, ints(n, "size")?)?;
    if n.arg("physical_layout").is_some() {
        let mut layout = const_ints(l, n, "physical_layout")?;
        layout.sort_unstable();
        if layout != (0..sizes.len() as i64).collect::<Vec<_>>() {
            return msg("physical_layout must be a permutation of the dimensions");
        }
    }
    let dtype = match n.arg("dtype") {
        Some(Arg::DType(d)) => *d,
        _ => DType::F32,
    };
    let cd = compute_dtype(dtype);
    let zero = if cd.is_float() {
        Constant::float(0.0)
    } else {
        Constant::Int(0)
    };
    let loader: Loader = Rc::new(move |c: &mut Ctx, _: &[Expr]| c.body.constant(zero, cd));
    Ok(LTensor::lazy(dtype, sizes, loader))
}

/// `sym_constrain_range_for_size`: runtime asserts `min <= size` (min defaults to 0) and
/// `size <= max`, from which the symbolic engine learns the range.
pub(super) fn constrain_range(l: &mut Lowerer, n: &GraphNode) -> R<()> {
    let size = match scalar_arg(n, "size")? {
        Scalar::Int(e) => e,
        other => return msg(format!("size must be an integer, found {other:?}")),
    };
    let lo = opt_int(n, "min")?.unwrap_or_else(|| l.env.pool_mut().zero());
    let mut conds = vec![l.env.pool_mut().le(lo, size)];
    if let Some(hi) = opt_int(n, "max")? {
        conds.push(l.env.pool_mut().le(size, hi));
    }
    for c in conds {
        l.env
            .check(c)
            .map_err(|e| NodeError::Message(e.to_string()))?;
    }
    Ok(())
}
