//! Matrix products (`mm`, `bmm`, `addmm`) and attention, accumulated in f64.

use super::{
    at, build, elem, elementwise, fail, flat, out, result_type, strides, Node, Operand, E, R,
};
use crate::graph::{Arg, DType};
use crate::tensor::HostTensor;

/// `scaled_dot_product_attention`: scores, mask, softmax and the weighted sum, in f64.
/// `scaled_dot_product_attention` (its mask in `mask_arg`); the fused forms' other outputs
/// (`outputs` in all) serve the backward: the lowering refuses graphs that read them, and here
/// they repeat the attention.
pub(super) fn sdpa(n: &Node, mask_arg: &str, outputs: usize) -> R<Vec<HostTensor>> {
    let (q, k, v) = (n.tensor("query")?, n.tensor("key")?, n.tensor("value")?);
    if q.dtype != k.dtype || q.dtype != v.dtype {
        return fail(format!(
            "Expected query, key, and value to have the same dtype, but got query {}, key {}, value {}",
            q.dtype, k.dtype, v.dtype
        ));
    }
    let rank = q.shape.len();
    if !(2..=4).contains(&rank) || k.shape.len() != rank || v.shape.len() != rank {
        return fail("expects query, key and value of one rank, 2 to 4 dimensions");
    }
    // Fewer dimensions read as leading sizes of 1: the same flat positions.
    let lift = |s: &[usize]| [vec![1; 4 - rank], s.to_vec()].concat();
    let (q4, k4, v4) = (lift(&q.shape), lift(&k.shape), lift(&v.shape));
    if !matches!(n.node.arg("dropout_p"), Some(Arg::Float(f)) if *f == 0.0) {
        return fail("dropout is not supported");
    }
    let (b, hq, lq, e) = (q4[0], q4[1], q4[2], q4[3]);
    let (hk, s, ev) = (k4[1], k4[2], v4[3]);
    if k4[0] != b || v4[0] != b || v4[1] != hk || k4[3] != e || v4[2] != s {
        return fail(format!(
            "query {:?}, key {:?} and value {:?} do not fit: batch, heads (key and value), \
             head dim (query and key) and length (key and value) must agree",
            q.shape, k.shape, v.shape
        ));
    }
    // No heads at all is an empty result.
    if hq != hk && (hk == 0 || hq % hk != 0) {
        return fail("query heads must be a multiple of key/value heads");
    }
    let rep = if hq == hk { 1 } else { hq / hk };
    let scale = match n.node.arg("scale") {
        Some(Arg::Float(f)) => *f,
        _ => 1.0 / (e as f64).sqrt(),
    };
    let causal = n.flag("is_causal");
    let mask = match n.node.arg(mask_arg) {
        Some(Arg::Tensor(r)) => Some((n.get)(r)),
        _ => None,
    };
    let (qs, ks, vs) = (strides(&q4), strides(&k4), strides(&v4));
    let mut vals = Vec::with_capacity(b * hq * lq * ev);
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / rep;
            for i in 0..lq {
                let mut logits = vec![0.0f64; s];
                for (j, lg) in logits.iter_mut().enumerate() {
                    let dot: f64 = (0..e)
                        .map(|t| {
                            elem(&q, flat(&[bi, h, i, t], &qs)).f()
                                * elem(&k, flat(&[bi, kh, j, t], &ks)).f()
                        })
                        .sum();
                    let mut x = scaled_score(dot, scale, e);
                    if causal && j > i {
                        x = f64::NEG_INFINITY;
                    }
                    if let Some(m) = &mask {
                        let mv = at(&Operand::Tensor(m.clone()), &[bi, h, i, j]);
                        if m.dtype == DType::Bool {
                            if mv.i() == 0 {
                                x = f64::NEG_INFINITY;
                            }
                        } else {
                            x += mv.f();
                        }
                    }
                    *lg = x;
                }
                attend(
                    &logits,
                    ev,
                    |j, c| elem(&v, flat(&[bi, kh, j, c], &vs)).f(),
                    &mut vals,
                );
            }
        }
    }
    let mut shape = q.shape[..rank - 1].to_vec();
    shape.push(ev);
    let attention = build(q.dtype, shape, vals);
    Ok(vec![attention; outputs])
}

/// The softmax of one row's scores (hidden keys at -inf) applied to the values (`value(j, c)`:
/// key `j`'s element `c` of `ev`), appended to `vals`. A row with no visible key (all masked,
/// or no keys) is 0, as in PyTorch; a NaN score is not hidden: it makes the row NaN.
fn attend(logits: &[f64], ev: usize, value: impl Fn(usize, usize) -> f64, vals: &mut Vec<E>) {
    if logits.iter().all(|&x| x == f64::NEG_INFINITY) {
        vals.extend((0..ev).map(|_| E::F(0.0)));
        return;
    }
    let mx = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let ex: Vec<f64> = logits.iter().map(|&x| (x - mx).exp()).collect();
    let total: f64 = ex.iter().sum();
    for c in 0..ev {
        let acc: f64 = (0..logits.len()).map(|j| ex[j] / total * value(j, c)).sum();
        vals.push(E::F(acc));
    }
}

/// `guardless.paged_attention`: each sequence's queries against its keys, found through the
/// block table, causal with bottom-right alignment; in f64. Sequence data that breaks the
/// op's rules fails with its message.
pub(super) fn paged_attention(n: &Node) -> R<Vec<HostTensor>> {
    use crate::loop_ir::PagedCheck;
    let q = n.tensor("query")?;
    let (k, v) = (n.tensor("key_cache")?, n.tensor("value_cache")?);
    let (table, lens, starts) = (
        n.tensor("block_table")?,
        n.tensor("context_lens")?,
        n.tensor("query_start")?,
    );
    if q.shape.len() != 3 || k.shape.len() != 4 || v.shape.len() != 4 || table.shape.len() != 2 {
        return fail("paged_attention: expects query [T, Hq, D], caches [num_blocks, block_size, Hkv, D] and block_table [S, max_blocks]");
    }
    let (t, hq, d) = (q.shape[0], q.shape[1], q.shape[2]);
    let (nb, bs, hk, dv) = (k.shape[0], k.shape[1], k.shape[2], v.shape[3]);
    let (seqs, width) = (table.shape[0], table.shape[1]);
    if v.shape[..3] != k.shape[..3]
        || k.shape[3] != d
        || lens.shape != [seqs]
        || starts.shape != [seqs + 1]
    {
        return fail("paged_attention: operand shapes do not fit");
    }
    if hk == 0 && hq > 0 || hk > 0 && hq % hk != 0 {
        return fail("query heads must be a multiple of key/value heads");
    }
    let group = hq / hk.max(1);
    let scale = match n.node.arg("scale") {
        Some(Arg::Float(f)) => *f,
        _ => 1.0 / (d as f64).sqrt(),
    };
    let int = |x: &HostTensor, i: usize| elem(x, i).i();
    let (ks, vs) = (strides(&k.shape), strides(&v.shape));
    let mut vals = vec![E::F(0.0); t * hq * dv];
    let monotone = (0..seqs).all(|s| int(&starts, s) <= int(&starts, s + 1));
    if int(&starts, 0) != 0 || int(&starts, seqs) != t as i64 || !monotone {
        return fail(PagedCheck::QueryStart.message());
    }
    for s in 0..seqs {
        let (q0, q1, c) = (int(&starts, s), int(&starts, s + 1), int(&lens, s));
        if c < q1 - q0 || c > (width * bs) as i64 {
            return fail(PagedCheck::ContextLength.message());
        }
        let rows: Vec<usize> = (0..c as usize)
            .map(|j| int(&table, s * width + j / bs))
            .map(|blk| usize::try_from(blk).ok().filter(|&b| b < nb))
            .zip(0..c as usize)
            .map(|(blk, j)| blk.map(|b| b * bs + j % bs))
            .collect::<Option<_>>()
            .ok_or_else(|| Some(PagedCheck::Block.message().to_string()))?;
        for (i, tok) in (q0 as usize..q1 as usize).enumerate() {
            let sees = (c - (q1 - q0) + i as i64 + 1) as usize;
            for h in 0..hq {
                let kh = h / group;
                let logits: Vec<f64> = rows[..sees]
                    .iter()
                    .map(|&r| {
                        let dot: f64 = (0..d)
                            .map(|e| {
                                elem(&q, (tok * hq + h) * d + e).f()
                                    * elem(&k, flat(&[r / bs, r % bs, kh, e], &ks)).f()
                            })
                            .sum();
                        scaled_score(dot, scale, d)
                    })
                    .collect();
                let mut row = Vec::with_capacity(dv);
                attend(
                    &logits,
                    dv,
                    |j, e| {
                        let r = rows[j];
                        elem(&v, flat(&[r / bs, r % bs, kh, e], &vs)).f()
                    },
                    &mut row,
                );
                let at = (tok * hq + h) * dv;
                vals[at..at + dv].copy_from_slice(&row);
            }
        }
    }
    Ok(vec![build(q.dtype, vec![t, hq, dv], vals)])
}

/// `mm`, `bmm`, `addmm`.
pub(super) fn matmul(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let (a, m) = if name == "addmm" {
        (n.tensor("mat1")?, n.tensor("mat2")?)
    } else {
        (n.tensor("self")?, n.tensor("mat2")?)
    };
    let batched = name == "bmm";
    let rank = if batched { 3 } else { 2 };
    if a.shape.len() != rank || m.shape.len() != rank || a.dtype != m.dtype {
        return fail("bad matmul operands");
    }
    let (bs, r, k, c) = if batched {
        (a.shape[0], a.shape[1], a.shape[2], m.shape[2])
    } else {
        (1, a.shape[0], a.shape[1], m.shape[1])
    };
    let k2 = if batched { m.shape[1] } else { m.shape[0] };
    if k != k2 || (batched && a.shape[0] != m.shape[0]) {
        return fail(format!("matmul of {:?} by {:?}", a.shape, m.shape));
    }
    let mut vals = Vec::with_capacity(bs * r * c);
    for b in 0..bs {
        for i in 0..r {
            for j in 0..c {
                let s: f64 = (0..k)
                    .map(|t| elem(&a, (b * r + i) * k + t).f() * elem(&m, (b * k + t) * c + j).f())
                    .sum();
                vals.push(E::F(s));
            }
        }
    }
    let shape = if batched { vec![bs, r, c] } else { vec![r, c] };
    if name != "addmm" {
        return out(build(a.dtype, shape, vals));
    }
    // addmm rounds once, after the bias (cuBLASLt's epilogue, ATen's CPU kernel): the
    // product stays exact until then.
    let bias = n.operand("self")?;
    let (beta, alpha) = (n.number(n.scalar("beta")?)?, n.number(n.scalar("alpha")?)?);
    let (Operand::Number(beta, _), Operand::Number(alpha, _)) = (beta, alpha) else {
        unreachable!()
    };
    let d = result_type(&[&bias, &Operand::Tensor(a.clone())])?;
    let p = Operand::Tensor(build(DType::F64, shape, vals));
    out(elementwise(&[&bias, &p], DType::F64, d, |v| {
        Ok(if beta.f() == 0.0 {
            E::F(alpha.f() * v[1].f())
        } else {
            E::F(beta.f() * v[0].f() + alpha.f() * v[1].f())
        })
    })?)
}

/// A query–key dot product over a head dim of `head_dim`, scaled. PyTorch scales the query and
/// the key by √scale before their product, so an empty head dim scores 0 whatever the scale (1/√0
/// is infinite; 0 · ∞ would be NaN): every key weighs the same, as in PyTorch.
fn scaled_score(dot: f64, scale: f64, head_dim: usize) -> f64 {
    if head_dim == 0 {
        0.0
    } else {
        dot * scale
    }
}
