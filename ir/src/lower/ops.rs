//! Lowering of each ATen overload, by name.

use std::rc::Rc;

use super::promote::{compute_dtype, result_type};
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::loop_ir::{BinaryOp, BufferKind, Constant, ReductionKind, ScanKind, UnaryOp, ValueId};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

pub(super) fn msg<T>(m: impl Into<String>) -> R<T> {
    Err(NodeError::Message(m.into()))
}

pub(crate) fn lower_node(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let op = n.op.strip_prefix("aten.").unwrap_or(&n.op);
    let (name, overload) = op.rsplit_once('.').unwrap_or((op, "default"));
    let one = |t: LTensor| Ok(vec![t]);
    match name {
        "neg" | "abs" | "relu" => {
            let x = tensor(l, n, "self")?;
            let u = match name {
                "neg" => UnaryOp::Neg,
                "abs" => UnaryOp::Abs,
                _ => UnaryOp::Relu,
            };
            let dtype = x.dtype;
            one(map(l, &[x], dtype, dtype, move |c, v| {
                c.body.unary(u, v[0])
            })?)
        }
        "exp" | "log" | "log1p" | "sqrt" | "rsqrt" | "sin" | "cos" | "tanh" | "sigmoid" | "erf"
        | "reciprocal" => {
            let x = tensor(l, n, "self")?;
            let u = match name {
                "exp" => UnaryOp::Exp,
                "log" => UnaryOp::Log,
                "log1p" => UnaryOp::Log1p,
                "sqrt" => UnaryOp::Sqrt,
                "rsqrt" => UnaryOp::Rsqrt,
                "sin" => UnaryOp::Sin,
                "cos" => UnaryOp::Cos,
                "tanh" => UnaryOp::Tanh,
                "sigmoid" => UnaryOp::Sigmoid,
                "erf" => UnaryOp::Erf,
                _ => UnaryOp::Reciprocal,
            };
            let dtype = float_of(x.dtype);
            one(map(l, &[x], dtype, dtype, move |c, v| {
                c.body.unary(u, v[0])
            })?)
        }
        "silu" => {
            let x = tensor(l, n, "self")?;
            let dtype = float_of(x.dtype);
            one(map(l, &[x], dtype, dtype, |c, v| {
                let s = c.body.unary(UnaryOp::Sigmoid, v[0]);
                c.body.binary(BinaryOp::Mul, v[0], s)
            })?)
        }
        "gelu" => {
            let x = tensor(l, n, "self")?;
            let tanh = match n.arg("approximate") {
                Some(Arg::Str(s)) if s == "tanh" => true,
                Some(Arg::Str(s)) if s == "none" => false,
                other => {
                    return msg(format!(
                        "approximate must be 'none' or 'tanh', found {other:?}"
                    ))
                }
            };
            let dtype = float_of(x.dtype);
            one(map(l, &[x], dtype, dtype, move |c, v| gelu(c, v[0], tanh))?)
        }
        "bitwise_not" => {
            let x = tensor(l, n, "self")?;
            if x.dtype.is_float() {
                return msg("bitwise_not needs an integer or bool tensor");
            }
            let dtype = x.dtype;
            one(map(l, &[x], dtype, dtype, |c, v| {
                c.body.unary(UnaryOp::BitNot, v[0])
            })?)
        }
        "logical_not" => {
            let x = tensor(l, n, "self")?;
            let dtype = x.dtype;
            one(map(l, &[x], dtype, DType::Bool, |c, v| {
                c.body.unary(UnaryOp::LogicalNot, v[0])
            })?)
        }
        "add" | "sub" | "rsub" => {
            let (mut a, mut b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
            if name == "rsub" {
                std::mem::swap(&mut a, &mut b);
            }
            let alpha = scalar_arg(n, "alpha")?;
            let t = result_type(&[&a, &b])?;
            let bin = if name == "add" {
                BinaryOp::Add
            } else {
                BinaryOp::Sub
            };
            let cd = compute_dtype(t);
            one(map(l, &[a, b], t, t, move |c, v| {
                let other = match alpha {
                    Scalar::Int(e) if c.env.pool().as_const(e) == Some(1) => v[1],
                    Scalar::Float(1.0) => v[1],
                    s => {
                        let k = scalar_value(c, s, cd);
                        c.body.binary(BinaryOp::Mul, v[1], k)
                    }
                };
                c.body.binary(bin, v[0], other)
            })?)
        }
        "_cdist_forward" => one(super::distance::cdist(l, n)?),
        "fmax" | "fmin" => {
            // maximum/minimum ignoring NaN: NaN only where both are.
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
            let t = result_type(&[&a, &b])?;
            let bin = if name == "fmax" {
                BinaryOp::Max
            } else {
                BinaryOp::Min
            };
            one(map(l, &[a, b], t, t, move |c, v| {
                let m = c.body.binary(bin, v[0], v[1]);
                if !c.body.dtype(v[0]).is_float() {
                    return m;
                }
                let a_nan = c.body.binary(BinaryOp::Ne, v[0], v[0]);
                let b_nan = c.body.binary(BinaryOp::Ne, v[1], v[1]);
                let m = c.body.where_(b_nan, v[0], m);
                c.body.where_(a_nan, v[1], m)
            })?)
        }
        "mul" | "maximum" | "minimum" | "bitwise_and" | "bitwise_or" => {
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
            let t = result_type(&[&a, &b])?;
            let bin = match name {
                "mul" => BinaryOp::Mul,
                "maximum" => BinaryOp::Max,
                "minimum" => BinaryOp::Min,
                "bitwise_and" => BinaryOp::BitAnd,
                _ => BinaryOp::BitOr,
            };
            if matches!(bin, BinaryOp::BitAnd | BinaryOp::BitOr) && t.is_float() {
                return msg("bitwise ops need integer or bool tensors");
            }
            one(map(l, &[a, b], t, t, move |c, v| {
                c.body.binary(bin, v[0], v[1])
            })?)
        }
        "div" => {
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
            let t = result_type(&[&a, &b])?;
            let mode = match n.arg("rounding_mode") {
                None | Some(Arg::None) => None,
                Some(Arg::Str(s)) if s == "floor" || s == "trunc" => Some(s.clone()),
                other => {
                    return msg(format!(
                        "rounding_mode must be null, 'floor' or 'trunc', found {other:?}"
                    ))
                }
            };
            let (t, bin) = match mode.as_deref() {
                None => (float_of(t), BinaryOp::Div),
                Some("floor") => (t, BinaryOp::FloorDiv),
                _ => (t, BinaryOp::TruncDiv),
            };
            one(map(l, &[a, b], t, t, move |c, v| {
                c.body.binary(bin, v[0], v[1])
            })?)
        }
        "fmod" | "remainder" => {
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
            let t = result_type(&[&a, &b])?;
            if t == DType::Bool {
                return msg(format!("{name} needs numbers, found bool tensors"));
            }
            let cd = compute_dtype(t);
            let python = name == "remainder";
            one(map(l, &[a, b], t, t, move |c, v| {
                let r = c.body.binary(BinaryOp::Rem, v[0], v[1]);
                if !python {
                    return r;
                }
                // The divisor's sign, as ATen: a non-zero remainder of the other sign gains b.
                let zero = if cd.is_float() {
                    Constant::float(0.0)
                } else {
                    Constant::Int(0)
                };
                let zero = c.body.constant(zero, cd);
                let nonzero = c.body.binary(BinaryOp::Ne, r, zero);
                let r_neg = c.body.binary(BinaryOp::Lt, r, zero);
                let b_neg = c.body.binary(BinaryOp::Lt, v[1], zero);
                let signs = c.body.binary(BinaryOp::Ne, r_neg, b_neg);
                let fix = c.body.binary(BinaryOp::LogicalAnd, nonzero, signs);
                let moved = c.body.binary(BinaryOp::Add, r, v[1]);
                c.body.where_(fix, moved, r)
            })?)
        }
        "pow" => {
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "exponent")?);
            let t = result_type(&[&a, &b])?;
            one(map(l, &[a, b], t, t, |c, v| {
                c.body.binary(BinaryOp::Pow, v[0], v[1])
            })?)
        }
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" | "logical_and" | "logical_or" => {
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
            let t = if name.starts_with("logical") {
                DType::Bool
            } else {
                result_type(&[&a, &b])?
            };
            let bin = match name {
                "eq" => BinaryOp::Eq,
                "ne" => BinaryOp::Ne,
                "lt" => BinaryOp::Lt,
                "le" => BinaryOp::Le,
                "gt" => BinaryOp::Gt,
                "ge" => BinaryOp::Ge,
                "logical_and" => BinaryOp::LogicalAnd,
                _ => BinaryOp::LogicalOr,
            };
            one(map(l, &[a, b], t, DType::Bool, move |c, v| {
                c.body.binary(bin, v[0], v[1])
            })?)
        }
        "where" => {
            let cond = tensor(l, n, "condition")?;
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "other")?);
            one(select(l, cond, a, b)?)
        }
        "masked_fill" => {
            let x = tensor(l, n, "self")?;
            let mask = tensor(l, n, "mask")?;
            let mut value = tensor(l, n, "value")?;
            // The fill value takes the tensor's dtype.
            value.wrapped = true;
            value.dtype = x.dtype;
            one(select(l, mask, value, x)?)
        }
        "clamp" | "clamp_min" | "clamp_max" => {
            let x = tensor(l, n, "self")?;
            let mut out = x;
            for (arg, bin) in [("min", BinaryOp::Max), ("max", BinaryOp::Min)] {
                let bound = match n.arg(arg) {
                    None | Some(Arg::None) => continue,
                    Some(_) => tensor(l, n, arg)?,
                };
                let t = result_type(&[&out, &bound])?;
                out = map(l, &[out, bound], t, t, move |c, v| {
                    c.body.binary(bin, v[0], v[1])
                })?;
            }
            one(out)
        }
        "_to_copy" => {
            let x = tensor(l, n, "self")?;
            let dtype = match n.arg("dtype") {
                Some(Arg::DType(d)) => *d,
                _ => x.dtype,
            };
            let from = x.dtype;
            one(map(l, &[x], from, dtype, |_, v| v[0])?)
        }
        "clone" | "alias" => one(tensor(l, n, "self")?),
        "sum" | "prod" | "mean" | "amax" | "amin" | "any" => reduce(l, n, name).map(|t| vec![t]),
        // The whole tensor's largest (smallest) element.
        "max" | "min" if overload == "default" => {
            reduce(l, n, if name == "max" { "amax" } else { "amin" }).map(|t| vec![t])
        }
        "argmax" | "argmin" | "max" | "min" if name.starts_with("arg") || overload == "dim" => {
            let (arg_kind, kind) = if name.ends_with("max") {
                (ReductionKind::ArgMax, ReductionKind::Max)
            } else {
                (ReductionKind::ArgMin, ReductionKind::Min)
            };
            let x = tensor(l, n, "self")?;
            let rank = x.sizes.len();
            let keepdim = matches!(n.arg("keepdim"), Some(Arg::Bool(true)));
            let dims: Vec<usize> = match n.arg("dim") {
                None | Some(Arg::None) => (0..rank).collect(),
                _ => vec![dim_arg(l, n, "dim", rank)?],
            };
            let dims: Vec<usize> = dims.into_iter().filter(|&d| d < rank).collect();
            nonempty(l, &x, &dims, name)?;
            let idx = l.reduction(&x, &dims, keepdim, arg_kind, DType::I64, &n.name);
            if name.starts_with("arg") {
                return one(idx);
            }
            let values = l.reduction(&x, &dims, keepdim, kind, x.dtype, &n.name);
            Ok(vec![values, idx])
        }
        "native_layer_norm" | "rms_norm" => {
            let x = tensor(l, n, "input")?;
            let normalized = ints(n, "normalized_shape")?;
            norm(l, n, x, normalized.len(), name == "rms_norm")
        }
        "var" | "var_mean" => {
            let x = tensor(l, n, "self")?;
            let dims = reduce_dims(l, n, x.sizes.len())?;
            let keepdim = matches!(n.arg("keepdim"), Some(Arg::Bool(true)));
            let correction = match n.arg("correction") {
                None | Some(Arg::None) => Scalar::Int(l.env.pool_mut().one()),
                Some(_) => scalar_arg(n, "correction")?,
            };
            let (var, mean) = variance(l, n, &x, &dims, keepdim, correction)?;
            Ok(if name == "var" {
                vec![var]
            } else {
                vec![var, mean]
            })
        }
        "scaled_dot_product_attention" => one(sdpa(l, n)?),
        "_softmax" | "_log_softmax" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            one(softmax(l, n, x, dim, name == "_log_softmax")?)
        }
        "view" | "reshape" | "_unsafe_view" => {
            let x = tensor(l, n, "self")?;
            let sizes = ints(n, if name == "reshape" { "shape" } else { "size" })?;
            one(super::views::view(l, x, &sizes)?)
        }
        "permute" => {
            let x = tensor(l, n, "self")?;
            let dims = const_ints(l, n, "dims")?;
            one(super::views::permute(x, &dims)?)
        }
        "transpose" | "t" => {
            let x = tensor(l, n, "self")?;
            let rank = x.sizes.len();
            let (d0, d1) = if name == "t" {
                if rank > 2 {
                    return msg(format!(
                        "t() expects a tensor of at most 2 dimensions, found {rank}"
                    ));
                }
                (0, rank.saturating_sub(1))
            } else {
                (dim_arg(l, n, "dim0", rank)?, dim_arg(l, n, "dim1", rank)?)
            };
            let mut perm: Vec<i64> = (0..rank as i64).collect();
            perm.swap(d0, d1);
            one(super::views::permute(x, &perm)?)
        }
        "unsqueeze" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len() + 1)?;
            one(super::views::unsqueeze(l, x, dim))
        }
        "squeeze" => {
            let x = tensor(l, n, "self")?;
            let rank = x.sizes.len();
            let dims: Vec<usize> = match overload {
                "dim" => vec![dim_arg(l, n, "dim", rank)?],
                "dims" => const_ints(l, n, "dim")?
                    .into_iter()
                    .map(|d| wrap_dim(d, rank))
                    .collect::<Result<_, _>>()?,
                _ => (0..rank).collect(),
            };
            one(super::views::squeeze(l, x, &dims)?)
        }
        "expand" => {
            let x = tensor(l, n, "self")?;
            let sizes = ints(n, "size")?;
            one(super::views::expand(l, x, &sizes)?)
        }
        "convolution" => one(super::conv::convolution(l, n)?),
        "_native_batch_norm_legit_no_training" => super::pool::batch_norm(l, n),
        "_native_batch_norm_legit" if overload == "no_stats" => {
            super::norms::batch_norm_batch_stats(l, n)
        }
        "native_group_norm" => super::norms::group_norm(l, n),
        "max_pool2d_with_indices" => super::pool::max_pool2d(l, n),
        "avg_pool2d" => super::avg_pool::avg_pool2d(l, n),
        "_adaptive_avg_pool2d" => super::avg_pool::adaptive_avg_pool2d(l, n),
        "upsample_bilinear2d" => one(super::pool::upsample_bilinear2d(l, n)?),
        "upsample_nearest2d" | "_upsample_nearest_exact2d" => one(super::pool::upsample_nearest2d(
            l,
            n,
            name.starts_with('_'),
        )?),
        "repeat" => {
            let x = tensor(l, n, "self")?;
            let repeats = ints(n, "repeats")?;
            one(super::views::repeat(l, x, &repeats)?)
        }
        "slice" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            let start = opt_int(n, "start")?;
            let end = opt_int(n, "end")?;
            let step = int(n, "step")?;
            one(super::views::slice(l, x, dim, start, end, step)?)
        }
        "slice_scatter" => {
            let (x, src) = (tensor(l, n, "self")?, tensor(l, n, "src")?);
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            let (start, end) = (opt_int(n, "start")?, opt_int(n, "end")?);
            let step = int(n, "step")?;
            one(super::overwrite::slice_scatter(
                l, x, src, dim, start, end, step,
            )?)
        }
        "select_scatter" => {
            let (x, src) = (tensor(l, n, "self")?, tensor(l, n, "src")?);
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            let index = int(n, "index")?;
            one(super::overwrite::select_scatter(l, x, src, dim, index)?)
        }
        "copy" => {
            let (x, src) = (tensor(l, n, "self")?, tensor(l, n, "src")?);
            one(super::overwrite::copy(l, x, src)?)
        }
        "scatter" | "scatter_add" => one(super::overwrite::scatter(l, n, name == "scatter_add")?),
        "scatter_reduce" => one(super::overwrite::scatter_reduce(l, n)?),
        "masked_scatter" => one(super::overwrite::masked_scatter(l, n)?),
        "select" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            let index = int(n, "index")?;
            one(super::views::select(l, x, dim, index)?)
        }
        "mm" | "bmm" => {
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "mat2")?);
            one(matmul(l, n, a, b, name == "bmm", None, false)?)
        }
        "addmm" => {
            let bias = tensor(l, n, "self")?;
            let (a, b) = (tensor(l, n, "mat1")?, tensor(l, n, "mat2")?);
            let (beta, alpha) = (scalar_arg(n, "beta")?, scalar_arg(n, "alpha")?);
            if is_one(l, beta) && is_one(l, alpha) && bias_is_a_row(l, &bias, &a, &b) {
                // The library adds it before its one rounding (cuBLASLt's bias epilogue).
                return one(matmul(l, n, a, b, false, Some(bias), false)?);
            }
            let t = result_type(&[&bias, &a])?;
            // The product stays in the compute dtype (f32 for bf16/f16) so the result rounds
            // once, after the epilogue, as the library's own alpha/beta would.
            let prod = matmul(l, n, a, b, false, None, true)?;
            let cd = compute_dtype(t);
            // The bias as an epilogue: beta·bias + alpha·(mat1 @ mat2); beta = 0 ignores the bias.
            let beta_zero = matches!(beta, Scalar::Int(e) if l.env.pool().as_const(e) == Some(0))
                || matches!(beta, Scalar::Float(f) if f == 0.0);
            one(map(l, &[bias, prod], t, t, move |c, v| {
                let a = scalar_value(c, alpha, cd);
                let p = c.body.binary(BinaryOp::Mul, a, v[1]);
                if beta_zero {
                    return p;
                }
                let bt = scalar_value(c, beta, cd);
                let q = c.body.binary(BinaryOp::Mul, bt, v[0]);
                c.body.binary(BinaryOp::Add, q, p)
            })?)
        }
        "embedding" | "index_select" | "gather" => {
            let (src, index) = if name == "embedding" {
                (tensor(l, n, "weight")?, tensor(l, n, "indices")?)
            } else {
                (tensor(l, n, "self")?, tensor(l, n, "index")?)
            };
            let dim = if name == "embedding" {
                0
            } else {
                dim_arg(l, n, "dim", src.sizes.len())?
            };
            one(super::views::indexed(l, src, index, dim, name)?)
        }
        "nonzero" | "masked_select" => {
            // The number found is the unbacked symbol the node states as its first dimension.
            let count = n
                .shape
                .as_ref()
                .and_then(|s| s.first())
                .and_then(|&e| l.env.pool().as_symbol(e))
                .ok_or_else(|| {
                    NodeError::Message(
                        "must state its \"shape\" with the unbacked count symbol first".into(),
                    )
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
            one(l.add_buffer(kind, dtype, &sizes, &n.name))
        }
        "sort" | "topk" => {
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
                    if !l.env.statically_known_true(ok) {
                        l.env
                            .check(ok)
                            .map_err(|_| NodeError::Message("topk: k is out of range".into()))?;
                    }
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
        "searchsorted" | "bucketize" => one(super::search::search_sorted(l, n, name)?),
        "cumsum" | "cumprod" | "logcumsumexp" => {
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
            one(scan(l, n, x, dim, kind, dtype)?.1)
        }
        "cummax" | "cummin" => {
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
        "index" => one(super::routing::index(l, n)?),
        "index_put" => one(super::routing::index_put(l, n)?),
        "repeat_interleave" if overload == "Tensor" => {
            one(super::routing::repeat_interleave(l, n)?)
        }
        "histc" => one(super::routing::histc(l, n)?),
        "_grouped_mm" => one(super::routing::grouped_mm(l, n)?),
        "empty_permuted" | "empty" | "empty_strided" => one(super::routing::empty(l, n)?),
        "as_strided" => one(super::strided_views::as_strided(l, n)?),
        "cat" => {
            let refs = match n.arg("tensors") {
                Some(Arg::Tensors(v)) => v.clone(),
                other => {
                    return msg(format!(
                        "argument 'tensors': expected tensors, found {other:?}"
                    ))
                }
            };
            let ts: Vec<LTensor> = refs
                .iter()
                .flatten()
                .map(|r| l.tensor(r))
                .collect::<Result<_, _>>()?;
            let dim = l.env.pool().as_const(int(n, "dim")?).ok_or_else(|| {
                NodeError::Message("cat: the dimension must be a constant".into())
            })?;
            one(super::views::cat(l, ts, dim)?)
        }
        "constant_pad_nd" => {
            let x = tensor(l, n, "self")?;
            let pad = ints(n, "pad")?;
            let value = scalar_arg(n, "value")?;
            one(super::views::pad(l, x, &pad, value)?)
        }
        "split" | "split_with_sizes" | "unbind" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            super::views::split(l, x, dim, name, n)
        }
        "unfold" => one(super::strided_views::unfold(l, n)?),
        "diagonal" => one(super::strided_views::diagonal(l, n)?),
        "flip" => {
            let x = tensor(l, n, "self")?;
            let rank = x.sizes.len();
            let dims: Vec<usize> = const_ints(l, n, "dims")?
                .into_iter()
                .map(|d| wrap_dim(d, rank))
                .collect::<Result<_, _>>()?;
            one(super::views::flip(x, &dims))
        }
        "full" | "full_like" | "scalar_tensor" => {
            let (sizes, like) = match name {
                "full" => (ints(n, "size")?, None),
                "full_like" => {
                    let x = tensor(l, n, "self")?;
                    (x.sizes.clone(), Some(x.dtype))
                }
                _ => (Vec::new(), None),
            };
            let value = scalar_arg(
                n,
                if name == "scalar_tensor" {
                    "s"
                } else {
                    "fill_value"
                },
            )?;
            let dtype = match n.arg("dtype") {
                Some(Arg::DType(d)) => *d,
                _ => like.unwrap_or(match value {
                    Scalar::Float(_) => DType::F32,
                    Scalar::Int(_) => DType::I64,
                    Scalar::Bool(_) => DType::Bool,
                }),
            };
            let cd = compute_dtype(dtype);
            let loader: Loader =
                Rc::new(move |c: &mut Ctx, _idx: &[Expr]| scalar_value(c, value, cd));
            one(LTensor::lazy(dtype, sizes, loader))
        }
        "arange" => one(arange(l, n, overload)?),
        "_local_scalar_dense" => {
            let x = tensor(l, n, "self")?;
            let sym = n
                .symbol
                .ok_or_else(|| NodeError::Message("needs the \"symbol\" it produces".into()))?;
            let numel = x.sizes.iter().fold(l.env.pool_mut().one(), |acc, &s| {
                l.env.pool_mut().mul(acc, s)
            });
            let one = l.env.pool_mut().one();
            let c = l.env.pool_mut().eq(numel, one);
            if !l.env.statically_known_true(c) {
                l.env.check(c).map_err(|_| {
                    NodeError::Message("item() of a tensor with more than one element".into())
                })?;
            }
            let x = l.realize(x, &n.name);
            l.add_item(x.buffer.expect("realized"), sym, &n.name);
            Ok(Vec::new())
        }
        "_assert_scalar" => {
            if let Some(Arg::SymBool(c)) = n.arg("self") {
                l.env
                    .check(*c)
                    .map_err(|e| NodeError::Message(e.to_string()))?;
            }
            Ok(Vec::new())
        }
        "_assert_tensor_metadata" => {
            // Checked, not dropped: a dtype that differs is an error now, sizes are runtime asserts.
            let a = tensor(l, n, "a")?;
            if let Some(Arg::DType(d)) = n.arg("dtype") {
                if *d != a.dtype {
                    return msg(format!("the tensor is {}, the metadata says {d}", a.dtype));
                }
            }
            if let Some(Arg::Ints(sizes)) = n.arg("size") {
                if sizes.len() != a.sizes.len() {
                    return msg(format!(
                        "the tensor has {} dimensions, the metadata {}",
                        a.sizes.len(),
                        sizes.len()
                    ));
                }
                for (&want, &have) in sizes.iter().zip(&a.sizes) {
                    let c = l.env.pool_mut().eq(want, have);
                    if !l.env.statically_known_true(c) {
                        l.env
                            .check(c)
                            .map_err(|e| NodeError::Message(e.to_string()))?;
                    }
                }
            }
            Ok(Vec::new())
        }
        "sym_constrain_range_for_size" => {
            super::routing::constrain_range(l, n)?;
            Ok(Vec::new())
        }
        _ => one(super::math::lower(l, n, name, overload)?),
    }
}

pub(super) fn float_of(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F32
    }
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

/// Broadcasts operands to one shape (guard-free) and applies `f` elementwise. Operands are cast to
/// the compute dtype of `operand_dtype` before `f`; the result has dtype `out`.
pub(super) fn map(
    l: &mut Lowerer,
    operands: &[LTensor],
    operand_dtype: DType,
    out: DType,
    f: impl Fn(&mut Ctx, &[ValueId]) -> ValueId + 'static,
) -> R<LTensor> {
    let (sizes, expanded) = super::views::broadcast(l, operands)?;
    let cd = compute_dtype(operand_dtype);
    let out_cd = compute_dtype(out);
    let loaders: Vec<Loader> = expanded.into_iter().map(|t| t.loader).collect();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let vals: Vec<ValueId> = loaders
            .iter()
            .map(|ld| {
                let v = ld(c, idx);
                c.body.cast(v, cd)
            })
            .collect();
        let r = f(c, &vals);
        c.body.cast(r, out_cd)
    });
    Ok(LTensor::lazy(out, sizes, loader))
}

fn select(l: &mut Lowerer, cond: LTensor, a: LTensor, b: LTensor) -> R<LTensor> {
    let t = result_type(&[&a, &b])?;
    let (sizes, ex) = super::views::broadcast(l, &[cond, a, b])?;
    let cd = compute_dtype(t);
    let (lc, la, lb) = (
        ex[0].loader.clone(),
        ex[1].loader.clone(),
        ex[2].loader.clone(),
    );
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let cv = lc(c, idx);
        let cv = c.body.cast(cv, DType::Bool);
        let av = la(c, idx);
        let av = c.body.cast(av, cd);
        let bv = lb(c, idx);
        let bv = c.body.cast(bv, cd);
        c.body.where_(cv, av, bv)
    });
    Ok(LTensor::lazy(t, sizes, loader))
}

fn gelu(c: &mut Ctx, x: ValueId, tanh: bool) -> ValueId {
    let d = c.body.dtype(x);
    let k = |c: &mut Ctx, v: f64| c.body.constant(Constant::float(v), d);
    let half = k(c, 0.5);
    let one = k(c, 1.0);
    let inner = if tanh {
        // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        let x3 = c.body.binary(BinaryOp::Mul, x, x);
        let x3 = c.body.binary(BinaryOp::Mul, x3, x);
        let a = k(c, 0.044715);
        let ax3 = c.body.binary(BinaryOp::Mul, a, x3);
        let s = c.body.binary(BinaryOp::Add, x, ax3);
        let b = k(c, (2.0 / std::f64::consts::PI).sqrt());
        let t = c.body.binary(BinaryOp::Mul, b, s);
        c.body.unary(UnaryOp::Tanh, t)
    } else {
        // 0.5·x·(1 + erf(x/√2))
        let r = k(c, std::f64::consts::FRAC_1_SQRT_2);
        let t = c.body.binary(BinaryOp::Mul, x, r);
        c.body.unary(UnaryOp::Erf, t)
    };
    let s = c.body.binary(BinaryOp::Add, one, inner);
    let hx = c.body.binary(BinaryOp::Mul, half, x);
    c.body.binary(BinaryOp::Mul, hx, s)
}

/// The reduced dimensions: `dim` (None or [] means all), normalized, sorted, distinct.
fn reduce_dims(l: &Lowerer, n: &GraphNode, rank: usize) -> R<Vec<usize>> {
    let dims: Vec<i64> = match n.arg("dim") {
        None | Some(Arg::None) => Vec::new(),
        Some(Arg::Int(_)) => vec![l
            .env
            .pool()
            .as_const(int(n, "dim")?)
            .ok_or_else(|| NodeError::Message("a dimension must be a constant".into()))?],
        Some(Arg::Ints(_)) => const_ints(l, n, "dim")?,
        other => {
            return msg(format!(
                "argument 'dim': expected dimensions, found {other:?}"
            ))
        }
    };
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out: Vec<usize> = dims
        .iter()
        .map(|&d| wrap_dim(d, rank))
        .collect::<Result<_, _>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return msg("a dimension appears twice in 'dim'");
    }
    // A zero-dimensional tensor reduces over nothing.
    out.retain(|&d| d < rank);
    Ok(out)
}

fn reduce(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let x = tensor(l, n, "self")?;
    let rank = x.sizes.len();
    let dims = reduce_dims(l, n, rank)?;
    let keepdim = matches!(n.arg("keepdim"), Some(Arg::Bool(true)));
    let stated = match n.arg("dtype") {
        Some(Arg::DType(d)) => Some(*d),
        _ => None,
    };
    let (kind, acc) = match name {
        "sum" | "prod" => (
            if name == "sum" {
                ReductionKind::Sum
            } else {
                ReductionKind::Prod
            },
            stated.unwrap_or(if x.dtype.is_float() {
                x.dtype
            } else {
                DType::I64
            }),
        ),
        "mean" => {
            let d = stated.unwrap_or(x.dtype);
            if !d.is_float() {
                return msg(format!("mean needs a floating dtype, found {d}"));
            }
            (ReductionKind::Sum, d)
        }
        "amax" => (ReductionKind::Max, x.dtype),
        "amin" => (ReductionKind::Min, x.dtype),
        _ => (ReductionKind::Any, DType::Bool),
    };
    let src = if kind == ReductionKind::Any {
        let d = x.dtype;
        map(l, &[x], d, DType::Bool, |c, v| {
            let z = c.body.constant(Constant::Int(0), c.body.dtype(v[0]));
            let z = c.body.cast(z, c.body.dtype(v[0]));
            c.body.binary(BinaryOp::Ne, v[0], z)
        })?
    } else {
        x
    };
    if matches!(kind, ReductionKind::Max | ReductionKind::Min) {
        nonempty(l, &src, &dims, name)?;
    }
    let sizes: Vec<Expr> = dims.iter().map(|&d| src.sizes[d]).collect();
    let r = l.reduction(&src, &dims, keepdim, kind, acc, &n.name);
    if name != "mean" {
        return Ok(r);
    }
    // mean = sum / number of reduced elements (0/0 = NaN for an empty reduction, as in ATen).
    let count = sizes.iter().fold(l.env.pool_mut().one(), |acc, &s| {
        l.env.pool_mut().mul(acc, s)
    });
    let count = number(Scalar::Int(count));
    map(l, &[r, count], acc, acc, |c, v| {
        c.body.binary(BinaryOp::Div, v[0], v[1])
    })
}

/// An extremum has no identity: as ATen, each dimension it reduces must be non-empty — proved
/// from ranges, else a runtime assert (the reduction itself yields the identity, ±inf, which
/// softmax relies on for an empty row no output reads).
fn nonempty(l: &mut Lowerer, x: &LTensor, dims: &[usize], name: &str) -> R<()> {
    for &d in dims {
        let one = l.env.pool().one();
        let c = l.env.pool_mut().ge(x.sizes[d], one);
        if !l.env.statically_known_true(c) {
            l.env.check(c).map_err(|_| {
                NodeError::Message(format!("{name} over dimension {d}, which is empty"))
            })?;
        }
    }
    Ok(())
}

fn softmax(l: &mut Lowerer, n: &GraphNode, x: LTensor, dim: usize, log: bool) -> R<LTensor> {
    let dtype = x.dtype;
    if !dtype.is_float() {
        return msg(format!("softmax needs a floating dtype, found {dtype}"));
    }
    let cd = compute_dtype(dtype);
    let max = l.reduction(&x, &[dim], true, ReductionKind::Max, cd, &n.name);
    let shifted = map(l, &[x, max], cd, cd, |c, v| {
        c.body.binary(BinaryOp::Sub, v[0], v[1])
    })?;
    let e = map(l, std::slice::from_ref(&shifted), cd, cd, |c, v| {
        c.body.unary(UnaryOp::Exp, v[0])
    })?;
    let sum = l.reduction(&e, &[dim], true, ReductionKind::Sum, cd, &n.name);
    if log {
        map(l, &[shifted, sum], cd, dtype, |c, v| {
            let lg = c.body.unary(UnaryOp::Log, v[1]);
            c.body.binary(BinaryOp::Sub, v[0], lg)
        })
    } else {
        // A product with the row's reciprocal, as ATen's vectorized CPU kernel computes it: one
        // division per row instead of one per element.
        map(l, &[e, sum], cd, dtype, |c, v| {
            let r = c.body.unary(UnaryOp::Reciprocal, v[1]);
            c.body.binary(BinaryOp::Mul, v[0], r)
        })
    }
}

fn arange(l: &mut Lowerer, n: &GraphNode, overload: &str) -> R<LTensor> {
    let get = |name: &str| scalar_arg(n, name);
    let (start, end, step) = match overload {
        "default" => (
            Scalar::Int(l.env.pool_mut().zero()),
            get("end")?,
            Scalar::Int(l.env.pool_mut().one()),
        ),
        "start" => (
            get("start")?,
            get("end")?,
            Scalar::Int(l.env.pool_mut().one()),
        ),
        _ => (get("start")?, get("end")?, get("step")?),
    };
    let (Scalar::Int(s), Scalar::Int(e), Scalar::Int(st)) = (start, end, step) else {
        return Err(NodeError::Unsupported);
    };
    let step_c = match l.env.pool().as_const(st) {
        Some(k) if k > 0 => k,
        _ => return msg("arange: the step must be a positive constant"),
    };
    // Length ceil((end - start) / step), never negative.
    let p = l.env.pool_mut();
    let diff = p.sub(e, s);
    let stepc = p.constant(step_c);
    let len = p.ceildiv(diff, stepc);
    let zero = p.zero();
    let len = p.max(zero, len);
    let len = l.env.simplify(len);
    let dtype = match n.arg("dtype") {
        Some(Arg::DType(d)) => *d,
        _ => DType::I64,
    };
    let cd = compute_dtype(dtype);
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let p = c.env.pool_mut();
        let scaled = p.scale(idx[0], step_c);
        let at = p.add(s, scaled);
        let v = c.body.index(at);
        c.body.cast(v, cd)
    });
    Ok(LTensor::lazy(dtype, vec![len], loader))
}

/// Whether `s` is the constant 1.
fn is_one(l: &Lowerer, s: Scalar) -> bool {
    match s {
        Scalar::Int(e) => l.env.pool().as_const(e) == Some(1),
        Scalar::Float(f) => f == 1.0,
        Scalar::Bool(_) => false,
    }
}

/// Whether `bias` is one row (`[n]` or `[1, n]`) of `a @ b`'s floating dtype, provably.
fn bias_is_a_row(l: &mut Lowerer, bias: &LTensor, a: &LTensor, b: &LTensor) -> bool {
    let (Some(&cols), true) = (b.sizes.last(), a.dtype.is_float()) else {
        return false;
    };
    if bias.dtype != a.dtype || b.dtype != a.dtype || a.sizes.len() != 2 || b.sizes.len() != 2 {
        return false;
    }
    let one = l.env.pool_mut().one();
    let mut proved = |x: Expr, y: Expr| {
        let c = l.env.pool_mut().eq(x, y);
        l.env.statically_known_true(c)
    };
    match bias.sizes[..] {
        [n] => proved(n, cols),
        [rows, n] => proved(rows, one) && proved(n, cols),
        _ => false,
    }
}

/// `mm`/`bmm` as an extern kernel over buffers (`addmm` with a `bias` row); the inner sizes must
/// agree (a runtime assert when they are symbolic). `widened`: the result in the operands'
/// compute dtype (f32 for bf16/f16) rather than theirs.
pub(super) fn matmul(
    l: &mut Lowerer,
    n: &GraphNode,
    a: LTensor,
    b: LTensor,
    batched: bool,
    bias: Option<LTensor>,
    widened: bool,
) -> R<LTensor> {
    let rank = if batched { 3 } else { 2 };
    if a.sizes.len() != rank || b.sizes.len() != rank {
        return msg(format!(
            "expects {rank}-dimensional operands, found {} and {}",
            a.sizes.len(),
            b.sizes.len()
        ));
    }
    if a.dtype != b.dtype {
        return msg(format!(
            "operands have different dtypes: {} and {}",
            a.dtype, b.dtype
        ));
    }
    let k = rank - 1;
    let eq = l.env.pool_mut().eq(a.sizes[k], b.sizes[k - 1]);
    if !l.env.statically_known_true(eq) {
        l.env.check(eq).map_err(|_| {
            NodeError::Message(format!(
                "inner sizes {} and {} differ",
                l.env.text(a.sizes[k]),
                l.env.text(b.sizes[k - 1])
            ))
        })?;
    }
    let mut sizes = a.sizes[..k].to_vec();
    if batched {
        let eq = l.env.pool_mut().eq(a.sizes[0], b.sizes[0]);
        if !l.env.statically_known_true(eq) {
            l.env
                .check(eq)
                .map_err(|_| NodeError::Message("batch sizes differ".into()))?;
        }
    }
    sizes.push(b.sizes[k]);
    let dtype = if widened {
        compute_dtype(a.dtype)
    } else {
        a.dtype
    };
    let (a, b) = (l.as_buffer(a, &n.name), l.as_buffer(b, &n.name));
    let mut inputs = vec![a, b];
    let kernel = match (batched, bias) {
        (true, _) => crate::loop_ir::ExternKernel::Bmm,
        (false, None) => crate::loop_ir::ExternKernel::Mm,
        (false, Some(bias)) => {
            inputs.push(l.as_buffer(bias, &n.name));
            crate::loop_ir::ExternKernel::AddMm
        }
    };
    Ok(l.add_buffer(
        BufferKind::Extern { kernel, inputs },
        dtype,
        &sizes,
        &n.name,
    ))
}

/// Mean and variance over `dims` (two passes: the mean, then the squared deviations), in the
/// compute dtype, returned in the input's dtype.
fn variance(
    l: &mut Lowerer,
    n: &GraphNode,
    x: &LTensor,
    dims: &[usize],
    keepdim: bool,
    correction: Scalar,
) -> R<(LTensor, LTensor)> {
    let dtype = x.dtype;
    if !dtype.is_float() {
        return msg(format!("var needs a floating dtype, found {dtype}"));
    }
    let cd = compute_dtype(dtype);
    let count = dims.iter().fold(l.env.pool_mut().one(), |acc, &d| {
        l.env.pool_mut().mul(acc, x.sizes[d])
    });
    let sum = l.reduction(x, dims, true, ReductionKind::Sum, cd, &n.name);
    let mean = map(l, &[sum, number(Scalar::Int(count))], cd, cd, |c, v| {
        c.body.binary(BinaryOp::Div, v[0], v[1])
    })?;
    let mean = l.realize(mean, &n.name);
    let dev = map(l, &[x.clone(), mean.clone()], cd, cd, |c, v| {
        let d = c.body.binary(BinaryOp::Sub, v[0], v[1]);
        c.body.binary(BinaryOp::Mul, d, d)
    })?;
    let ss = l.reduction(&dev, dims, keepdim, ReductionKind::Sum, cd, &n.name);
    let denom = match correction {
        Scalar::Int(k) => {
            let d = l.env.pool_mut().sub(count, k);
            number(Scalar::Int(d))
        }
        Scalar::Float(f) => {
            let cnt = number(Scalar::Int(count));
            map(l, &[cnt], DType::F64, DType::F64, move |c, v| {
                let k = c.body.constant(Constant::float(f), DType::F64);
                c.body.binary(BinaryOp::Sub, v[0], k)
            })?
        }
        Scalar::Bool(_) => return msg("correction must be a number"),
    };
    // max(0, N - correction), as ATen divides by it.
    let var = map(l, &[ss, denom], cd, dtype, |c, v| {
        let d = c.body.cast(v[1], c.body.dtype(v[0]));
        let zero = c.body.constant(Constant::float(0.0), c.body.dtype(v[0]));
        let d = c.body.binary(BinaryOp::Max, d, zero);
        c.body.binary(BinaryOp::Div, v[0], d)
    })?;
    let mean_out = if keepdim {
        map(l, &[mean], cd, dtype, |_, v| v[0])?
    } else {
        let kept: Vec<Expr> = (0..x.sizes.len())
            .filter(|k| !dims.contains(k))
            .map(|k| x.sizes[k])
            .collect();
        let squeezed = super::views::view(l, mean, &kept)?;
        map(l, &[squeezed], cd, dtype, |_, v| v[0])?
    };
    Ok((var, mean_out))
}

/// `native_layer_norm` (outputs: normalized, mean, rstd) and `rms_norm` over the last `k` dims.
fn norm(l: &mut Lowerer, n: &GraphNode, x: LTensor, k: usize, rms: bool) -> R<Vec<LTensor>> {
    let dtype = x.dtype;
    if !dtype.is_float() {
        return msg(format!(
            "normalization needs a floating dtype, found {dtype}"
        ));
    }
    let rank = x.sizes.len();
    if k == 0 || k > rank {
        return msg(format!(
            "normalized_shape has {k} dimensions, the input {rank}"
        ));
    }
    let dims: Vec<usize> = (rank - k..rank).collect();
    let cd = compute_dtype(dtype);
    let eps = match n.arg("eps") {
        Some(Arg::Float(f)) => *f,
        // rms_norm's default: the dtype's machine epsilon.
        _ => match dtype {
            DType::F64 => f64::EPSILON,
            DType::F16 => 0.0009765625,
            DType::BF16 => 0.0078125,
            _ => f32::EPSILON as f64,
        },
    };
    let (mut out, mean, rstd) = super::norms::standardize(l, n, &x, &dims, eps, !rms)?;
    for (arg, bin) in [("weight", BinaryOp::Mul), ("bias", BinaryOp::Add)] {
        if let Some(Arg::Tensor(_)) = n.arg(arg) {
            let w = tensor(l, n, arg)?;
            out = map(l, &[out, w], cd, cd, move |c, v| {
                c.body.binary(bin, v[0], v[1])
            })?;
        }
    }
    let out = map(l, &[out], cd, dtype, |_, v| v[0])?;
    if rms {
        return Ok(vec![out]);
    }
    // mean and rstd in the input's dtype, as ATen's CPU kernel returns them.
    let mean = map(
        l,
        &[mean.expect("layer norm has a mean")],
        cd,
        dtype,
        |_, v| v[0],
    )?;
    let rstd = map(l, &[rstd], cd, dtype, |_, v| v[0])?;
    Ok(vec![out, mean, rstd])
}

/// The constant `r` with `hq == r · hk`: proved (head counts may be symbolic, or asserted equal
/// to constants), or for backed head counts taken from their hints and guarded.
fn head_ratio(l: &mut Lowerer, hq: Expr, hk: Expr) -> Option<i64> {
    let (a, c) = (l.env.simplify(hq), l.env.simplify(hk));
    let same = l.env.pool_mut().eq(a, c);
    if a == c || l.env.statically_known_true(same) {
        return Some(1);
    }
    let ratio = l.env.pool_mut().floordiv(a, c);
    let ratio = l.env.simplify(ratio);
    let r = match l.env.pool().as_const(ratio) {
        Some(r) => r,
        None => {
            let (ha, hc) = (l.env.guarding_hint(a).ok()?, l.env.guarding_hint(c).ok()?);
            if hc <= 0 || ha % hc != 0 {
                return None;
            }
            ha / hc
        }
    };
    if r < 1 {
        return None;
    }
    let rc = l.env.pool_mut().scale(c, r);
    let exact = l.env.pool_mut().eq(a, rc);
    (a == rc || l.env.guard_or_false(exact)).then_some(r)
}

/// `scaled_dot_product_attention` by its decomposition: `softmax(q·kᵀ·scale + mask)·v`, with
/// grouped-query heads read through an index map (no copy) and the causal mask as an index
/// predicate. Inference only: a non-zero dropout is an error.
fn sdpa(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let (q, k, v) = (
        tensor(l, n, "query")?,
        tensor(l, n, "key")?,
        tensor(l, n, "value")?,
    );
    let rank = q.sizes.len();
    if !(2..=4).contains(&rank) || k.sizes.len() != rank || v.sizes.len() != rank {
        return msg(
            "expects query, key and value of one rank, 2 to 4 dimensions ([batch, heads,] length, head dim)",
        );
    }
    if !matches!(n.arg("dropout_p"), Some(Arg::Float(f)) if *f == 0.0) {
        return msg("dropout is not supported (inference only)");
    }
    // Fewer dimensions are leading sizes of 1 (a mask broadcasts from the right either way).
    let out_lead = q.sizes[..rank - 1].to_vec();
    let lift = |l: &mut Lowerer, t: LTensor| -> R<LTensor> {
        let one = l.env.pool().one();
        let mut sizes = vec![one; 4 - rank];
        sizes.extend_from_slice(&t.sizes);
        super::views::view(l, t, &sizes)
    };
    let (q, k, v) = (lift(l, q)?, lift(l, k)?, lift(l, v)?);
    let (b, hq, lq, e) = (q.sizes[0], q.sizes[1], q.sizes[2], q.sizes[3]);
    let (hk, s) = (k.sizes[1], k.sizes[2]);
    let ev = v.sizes[3];
    // The default scale 1/sqrt(head dim): a constant, or computed from a symbolic head dim.
    let scale = match (n.arg("scale"), l.env.pool().as_const(e)) {
        (Some(Arg::Float(f)), _) => Some(*f),
        (_, Some(head_dim)) => Some(1.0 / (head_dim as f64).sqrt()),
        _ => None,
    };
    // Grouped-query attention: query head h reads key/value head h / (hq / hk).
    let Some(rep) = head_ratio(l, hq, hk) else {
        return msg("query heads must be a constant multiple of key/value heads");
    };
    let repeat = |t: &LTensor| -> LTensor {
        if rep == 1 {
            return t.clone();
        }
        let inner = t.loader.clone();
        let mut sizes = t.sizes.clone();
        sizes[1] = hq;
        let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
            let mut src = idx.to_vec();
            let r = c.env.pool_mut().constant(rep);
            src[1] = c.env.pool_mut().floordiv(idx[1], r);
            inner(c, &src)
        });
        LTensor::lazy(t.dtype, sizes, loader)
    };
    let (k, v) = (repeat(&k), repeat(&v));
    let bh = l.env.pool_mut().mul(b, hq);
    let kt = super::views::permute(k, &[0, 1, 3, 2])?;
    let q3 = super::views::view(l, q.clone(), &[bh, lq, e])?;
    let kt3 = super::views::view(l, kt, &[bh, e, s])?;
    let scores = matmul(l, n, q3, kt3, true, None, false)?;
    let scores = super::views::view(l, scores, &[b, hq, lq, s])?;
    let cd = compute_dtype(q.dtype);
    let causal = matches!(n.arg("is_causal"), Some(Arg::Bool(true)));
    let inner = scores.loader.clone();
    let scaled: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let x = inner(c, idx);
        let x = c.body.cast(x, cd);
        let k = match scale {
            Some(s) => c.body.constant(Constant::float(s), cd),
            None => {
                let e = c.body.index(e);
                let e = c.body.cast(e, cd);
                c.body.unary(UnaryOp::Rsqrt, e)
            }
        };
        let x = c.body.binary(BinaryOp::Mul, x, k);
        if !causal {
            return x;
        }
        // Top-left aligned, as torch: key j is visible to query i when j <= i.
        let visible = c.env.pool_mut().le(idx[3], idx[2]);
        let m = c.body.index(visible);
        let m = c.body.cast(m, DType::Bool);
        let ninf = c.body.constant(Constant::float(f64::NEG_INFINITY), cd);
        c.body.where_(m, x, ninf)
    });
    let mut logits = LTensor::lazy(cd, scores.sizes.clone(), scaled);
    match n.arg("attn_mask") {
        Some(Arg::Tensor(_)) => {
            let mask = tensor(l, n, "attn_mask")?;
            logits = if mask.dtype == DType::Bool {
                map(l, &[logits, mask], cd, cd, move |c, v| {
                    let m = c.body.cast(v[1], DType::Bool);
                    let ninf = c.body.constant(Constant::float(f64::NEG_INFINITY), cd);
                    c.body.where_(m, v[0], ninf)
                })?
            } else {
                map(l, &[logits, mask], cd, cd, |c, v| {
                    c.body.binary(BinaryOp::Add, v[0], v[1])
                })?
            };
        }
        None | Some(Arg::None) => {}
        other => {
            return msg(format!(
                "attn_mask: expected a tensor or null, found {other:?}"
            ))
        }
    }
    let probs = softmax(l, n, logits, 3, false)?;
    let probs = map(l, &[probs], cd, q.dtype, |_, v| v[0])?;
    let p3 = super::views::view(l, probs, &[bh, lq, s])?;
    let v3 = super::views::view(l, v, &[bh, s, ev])?;
    let out = matmul(l, n, p3, v3, true, None, false)?;
    let mut sizes = out_lead;
    sizes.push(ev);
    super::views::view(l, out, &sizes)
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
