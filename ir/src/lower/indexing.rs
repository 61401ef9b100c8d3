//! Reads at positions held in integer tensors: `embedding`, `index_select`, `gather` and
//! advanced indexing (`index.Tensor`). Each index is bounds-checked at run time.

use std::rc::Rc;

use super::views::broadcast;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

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
    if name == "embedding" && rank != 2 {
        return Err(NodeError::Message(format!(
            "'weight' must be 2-D, found {rank} dimensions"
        )));
    }
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
                l.require(c, |_| {
                    format!("gather: index size exceeds the input in dimension {k}")
                })?;
            }
            index.sizes.clone()
        }
    };
    let (src_ld, idx_ld) = (src.loader.clone(), index.loader.clone());
    let index_rank = index.sizes.len();
    let kind = name.to_string();
    let origin = l.origin();
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
        let t = c.bind_index(v, size, &origin);
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
    let origin = l.origin();
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
            let t = c.bind_index(v, src_sizes[p], &origin);
            src[p] = t;
        }
        src
    });
    Ok(IndexPlan { sizes, source })
}
