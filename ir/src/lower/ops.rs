//! Lowering of each ATen overload, by name: the table from op names to the family modules that
//! lower them. Views, slices and indexing read their arguments here; `views`, `slices` and
//! `indexing` compose their loaders.

use super::args::{const_ints, dim_arg, int, ints, msg, opt_int, scalar_arg, tensor, wrap_dim};
use super::{
    attention, checks, factories, library, matmul, norms, pointwise, reductions, LTensor, Lowerer,
    NodeError,
};
use crate::graph::{Arg, GraphNode};

type R<T> = Result<T, NodeError>;

pub(crate) fn lower_node(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let op = n.op.strip_prefix("aten.").unwrap_or(&n.op);
    let (name, _) = op.rsplit_once('.').unwrap_or((op, "default"));
    if l.substitutes.is_empty() {
        if let Some(r) = super::zero_dim::lower(l, n, name, &lower_node) {
            return r;
        }
    }
    lower_op(l, n)
}

fn lower_op(l: &mut Lowerer, n: &GraphNode) -> R<Vec<LTensor>> {
    let op = n.op.strip_prefix("aten.").unwrap_or(&n.op);
    let (name, overload) = op.rsplit_once('.').unwrap_or((op, "default"));
    let one = |t: R<LTensor>| t.map(|t| vec![t]);
    let none = |r: R<()>| r.map(|()| Vec::new());
    match name {
        "neg" | "abs" | "relu" => one(pointwise::unary_same_dtype(l, n, name)),
        "exp" | "log" | "log1p" | "sqrt" | "rsqrt" | "sin" | "cos" | "tanh" | "sigmoid" | "erf"
        | "reciprocal" => one(pointwise::unary_float(l, n, name)),
        "silu" => one(pointwise::silu(l, n)),
        "gelu" => one(pointwise::gelu(l, n)),
        "bitwise_not" => one(pointwise::bitwise_not(l, n)),
        "logical_not" => one(pointwise::logical_not(l, n)),
        "add" | "sub" | "rsub" => one(pointwise::add_sub(l, n, name)),
        "_cdist_forward" => one(super::distance::cdist(l, n)),
        "fmax" | "fmin" => one(pointwise::fmax_fmin(l, n, name)),
        "mul" | "maximum" | "minimum" | "bitwise_and" | "bitwise_or" => {
            one(pointwise::binary(l, n, name))
        }
        "div" => one(pointwise::div(l, n)),
        "fmod" | "remainder" => one(pointwise::remainder(l, n, name)),
        "pow" => one(pointwise::pow(l, n)),
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" | "logical_and" | "logical_or" => {
            one(pointwise::compare(l, n, name))
        }
        "where" => one(pointwise::where_(l, n)),
        "masked_fill" => one(pointwise::masked_fill(l, n)),
        "clamp" | "clamp_min" | "clamp_max" => one(pointwise::clamp(l, n)),
        "_to_copy" => one(pointwise::to_copy(l, n)),
        "clone" | "alias" => one(tensor(l, n, "self")),
        "sum" | "prod" | "mean" | "amax" | "amin" | "any" => one(reductions::reduce(l, n, name)),
        // The whole tensor's largest (smallest) element.
        "max" | "min" if overload == "default" => one(reductions::reduce(
            l,
            n,
            if name == "max" { "amax" } else { "amin" },
        )),
        "argmax" | "argmin" | "max" | "min" if name.starts_with("arg") || overload == "dim" => {
            reductions::arg_reduce(l, n, name)
        }
        "native_layer_norm" | "rms_norm" => norms::layer_norm(l, n, name),
        "var" | "var_mean" => reductions::var(l, n, name),
        "scaled_dot_product_attention" => one(attention::sdpa(l, n)),
        "_scaled_dot_product_flash_attention_for_cpu"
        | "_scaled_dot_product_flash_attention"
        | "_scaled_dot_product_efficient_attention"
        | "_scaled_dot_product_cudnn_attention" => attention::fused(l, n, name),
        "guardless.paged_attention" => one(attention::paged(l, n)),
        "_softmax" | "_log_softmax" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            one(reductions::softmax(l, n, x, dim, name == "_log_softmax"))
        }
        "view" | "reshape" | "_unsafe_view" => {
            let x = tensor(l, n, "self")?;
            let sizes = ints(n, if name == "reshape" { "shape" } else { "size" })?;
            one(super::views::view(l, x, &sizes))
        }
        "permute" => {
            let x = tensor(l, n, "self")?;
            let dims = const_ints(l, n, "dims")?;
            one(super::views::permute(x, &dims))
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
            one(super::views::permute(x, &perm))
        }
        "unsqueeze" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len() + 1)?;
            Ok(vec![super::views::unsqueeze(l, x, dim)])
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
            one(super::views::squeeze(l, x, &dims))
        }
        "expand" => {
            let x = tensor(l, n, "self")?;
            let sizes = ints(n, "size")?;
            one(super::views::expand(l, x, &sizes))
        }
        "convolution" => one(super::conv::convolution(l, n)),
        "_native_batch_norm_legit_no_training" => super::pool::batch_norm(l, n),
        "_native_batch_norm_legit" if overload == "no_stats" => {
            super::norms::batch_norm_batch_stats(l, n)
        }
        "native_group_norm" => super::norms::group_norm(l, n),
        "max_pool2d_with_indices" => super::pool::max_pool2d(l, n),
        "avg_pool2d" => super::avg_pool::avg_pool2d(l, n),
        "_adaptive_avg_pool2d" => super::avg_pool::adaptive_avg_pool2d(l, n),
        "upsample_bilinear2d" => one(super::pool::upsample_bilinear2d(l, n)),
        "upsample_nearest2d" | "_upsample_nearest_exact2d" => {
            one(super::pool::upsample_nearest2d(l, n, name.starts_with('_')))
        }
        "repeat" => {
            let x = tensor(l, n, "self")?;
            let repeats = ints(n, "repeats")?;
            one(super::slices::repeat(l, x, &repeats))
        }
        "slice" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            let start = opt_int(n, "start")?;
            let end = opt_int(n, "end")?;
            let step = int(n, "step")?;
            one(super::slices::slice(l, x, dim, start, end, step))
        }
        "slice_scatter" => {
            let (x, src) = (tensor(l, n, "self")?, tensor(l, n, "src")?);
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            let (start, end) = (opt_int(n, "start")?, opt_int(n, "end")?);
            let step = int(n, "step")?;
            one(super::overwrite::slice_scatter(
                l, x, src, dim, start, end, step,
            ))
        }
        "select_scatter" => {
            let (x, src) = (tensor(l, n, "self")?, tensor(l, n, "src")?);
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            let index = int(n, "index")?;
            one(super::overwrite::select_scatter(l, x, src, dim, index))
        }
        "copy" => {
            let (x, src) = (tensor(l, n, "self")?, tensor(l, n, "src")?);
            one(super::overwrite::copy(l, x, src))
        }
        "scatter" | "scatter_add" => one(super::overwrite::scatter(l, n, name == "scatter_add")),
        "scatter_reduce" => one(super::overwrite::scatter_reduce(l, n)),
        "masked_scatter" => one(super::overwrite::masked_scatter(l, n)),
        "select" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            let index = int(n, "index")?;
            one(super::slices::select(l, x, dim, index))
        }
        "mm" | "bmm" => {
            let (a, b) = (tensor(l, n, "self")?, tensor(l, n, "mat2")?);
            one(matmul::matmul(l, n, a, b, name == "bmm", None, false))
        }
        "addmm" => one(matmul::addmm(l, n)),
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
            one(super::indexing::indexed(l, src, index, dim, name))
        }
        "nonzero" | "masked_select" => one(library::nonzero_or_masked_select(l, n, name)),
        "sort" | "topk" => library::sort(l, n, name),
        "searchsorted" | "bucketize" => one(super::search::search_sorted(l, n, name)),
        "cumsum" | "cumprod" | "logcumsumexp" => one(library::cumulative(l, n, name)),
        "cummax" | "cummin" => library::cumulative_extremum(l, n, name),
        "index" => one(super::routing::index(l, n)),
        "index_put" => one(super::routing::index_put(l, n)),
        "repeat_interleave" if overload == "Tensor" => one(super::routing::repeat_interleave(l, n)),
        "histc" => one(super::routing::histc(l, n)),
        "_grouped_mm" => one(super::routing::grouped_mm(l, n)),
        "empty_permuted" | "empty" | "empty_strided" => one(super::routing::empty(l, n)),
        "as_strided" => one(super::strided_views::as_strided(l, n)),
        "as_strided_scatter" => one(super::strided_views::as_strided_scatter(l, n)),
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
            one(super::slices::cat(l, ts, dim))
        }
        "constant_pad_nd" => {
            let x = tensor(l, n, "self")?;
            let pad = ints(n, "pad")?;
            let value = scalar_arg(n, "value")?;
            one(super::slices::pad(l, x, &pad, value))
        }
        "split" | "split_with_sizes" | "unbind" => {
            let x = tensor(l, n, "self")?;
            let dim = dim_arg(l, n, "dim", x.sizes.len())?;
            super::slices::split(l, x, dim, name, n)
        }
        "unfold" => one(super::strided_views::unfold(l, n)),
        "diagonal" => one(super::strided_views::diagonal(l, n)),
        "flip" => {
            let x = tensor(l, n, "self")?;
            let rank = x.sizes.len();
            let dims: Vec<usize> = const_ints(l, n, "dims")?
                .into_iter()
                .map(|d| wrap_dim(d, rank))
                .collect::<Result<_, _>>()?;
            Ok(vec![super::views::flip(x, &dims)])
        }
        "full" | "full_like" | "scalar_tensor" => one(factories::full(l, n, name)),
        "arange" => one(factories::arange(l, n, overload)),
        "_local_scalar_dense" => none(checks::item(l, n)),
        "_assert_scalar" => none(checks::assert_scalar(l, n)),
        "_assert_tensor_metadata" => none(checks::assert_tensor_metadata(l, n)),
        "sym_constrain_range_for_size" => none(super::routing::constrain_range(l, n)),
        _ => one(super::math::lower(l, n, name, overload)),
    }
}
