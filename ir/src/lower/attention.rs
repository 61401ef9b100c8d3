//! `scaled_dot_product_attention` by its decomposition into two batched matmuls and a softmax.

use std::rc::Rc;

use super::args::{msg, tensor};
use super::matmul::matmul;
use super::pointwise::map;
use super::promote::compute_dtype;
use super::reductions::softmax;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode};
use crate::loop_ir::{BinaryOp, Constant, UnaryOp};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

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
pub(super) fn sdpa(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
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
