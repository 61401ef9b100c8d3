//! `scaled_dot_product_attention` as one fused attention step over its operands' storage.

use super::args::{msg, tensor};
use super::{LTensor, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode};
use crate::loop_ir::{Attention, BufferId, BufferKind, ExternKernel, Layout, PagedAttention};
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

/// `scaled_dot_product_attention` as one fused attention step ([`ExternKernel::Attention`]):
/// q, k and v read in place through their layouts (a transposed view needs no copy), grouped
/// query heads read their key/value head without a copy, the mask broadcast by zero strides
/// (never expanded), the causal mask and the scale applied inside the step. No score matrix
/// is stored. Inference only: a non-zero dropout is an error.
pub(super) fn sdpa(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    attention(l, n, "attn_mask")
}

/// The fused forms PyTorch's `scaled_dot_product_attention` dispatches to (what a
/// `torch.compile` backend sees once the op is chosen for a device):
/// `_scaled_dot_product_flash_attention_for_cpu`, `_scaled_dot_product_flash_attention`,
/// `_scaled_dot_product_efficient_attention`, `_scaled_dot_product_cudnn_attention`. Their first
/// output is the attention; the others (the log-sum-exp, sequence offsets, random state) serve
/// the backward and are not computed: a graph that reads one is refused.
pub(super) fn fused(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<Vec<LTensor>> {
    let (mask, outputs) = match name {
        "_scaled_dot_product_flash_attention_for_cpu" => ("attn_mask", 2),
        "_scaled_dot_product_flash_attention" => ("", 9),
        _ => ("attn_bias", if name.contains("cudnn") { 9 } else { 4 }),
    };
    let me = l.current;
    let read = |r: &crate::graph::TensorRef| {
        r.producer == crate::graph::Producer::Node(me) && r.index.unwrap_or(0) > 0
    };
    let used = l
        .readers()
        .any(|m| m.args.iter().any(|a| a.tensor_refs().any(&read)))
        || l.graph.outputs.iter().any(|o| read(&o.tensor));
    if used {
        return msg(format!(
            "only the attention (output 0) of {name} is computed: its other outputs (the \
             log-sum-exp, offsets, random state) serve the backward, which guardless does not run"
        ));
    }
    let out = attention(l, n, mask)?;
    Ok(vec![out; outputs])
}

/// Attention with its mask (if any) in argument `mask_arg`.
fn attention(l: &mut Lowerer, n: &GraphNode, mask_arg: &str) -> R<LTensor> {
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
    if !q.dtype.is_float() || k.dtype != q.dtype || v.dtype != q.dtype {
        return msg(format!(
            "expects query, key and value of one floating-point dtype, found {}, {} and {}",
            q.dtype, k.dtype, v.dtype
        ));
    }
    let dtype = q.dtype;
    let out_lead = q.sizes[..rank - 1].to_vec();
    // Fewer dimensions are leading sizes of 1 (a mask broadcasts from the right either way).
    let (q, k, v) = (
        lifted(l, q, rank, &n.name),
        lifted(l, k, rank, &n.name),
        lifted(l, v, rank, &n.name),
    );
    let size = |l: &Lowerer, b: BufferId, d: usize| l.buffers[b.index()].layout.sizes[d];
    let (b, hq, lq, e) = (size(l, q, 0), size(l, q, 1), size(l, q, 2), size(l, q, 3));
    let (hk, s) = (size(l, k, 1), size(l, k, 2));
    let ev = size(l, v, 3);
    for (what, x, y) in [
        ("key batch", size(l, k, 0), b),
        ("value batch", size(l, v, 0), b),
        ("value heads", size(l, v, 1), hk),
        ("key head dim", size(l, k, 3), e),
        ("value length", size(l, v, 2), s),
    ] {
        let eq = l.env.pool_mut().eq(x, y);
        l.require(eq, |env| {
            format!(
                "{what} {} differs from {} (query [B, Hq, Lq, D], key [B, Hkv, Lk, D], value [B, Hkv, Lk, Dv])",
                env.text(x),
                env.text(y)
            )
        })?;
    }
    // Grouped-query attention: query head h reads key/value head h / (hq / hk).
    if head_ratio(l, hq, hk).is_none() {
        return msg("query heads must be a constant multiple of key/value heads");
    }
    let scale_bits = match n.arg("scale") {
        Some(Arg::Float(f)) => Some(f.to_bits()),
        None | Some(Arg::None) => None,
        other => return msg(format!("scale: expected a float or null, found {other:?}")),
    };
    let causal = matches!(n.arg("is_causal"), Some(Arg::Bool(true)));
    let mut inputs = vec![q, k, v];
    match n.arg(mask_arg) {
        Some(Arg::Tensor(_)) => {
            let mask = tensor(l, n, mask_arg)?;
            if mask.dtype != DType::Bool && !mask.dtype.is_float() {
                return msg(format!(
                    "attn_mask: expected a boolean or floating-point mask, found {}",
                    mask.dtype
                ));
            }
            inputs.push(broadcast_mask(l, mask, &[b, hq, lq, s], &n.name)?);
        }
        None | Some(Arg::None) => {}
        other => {
            return msg(format!(
                "attn_mask: expected a tensor or null, found {other:?}"
            ))
        }
    }
    let kernel = ExternKernel::Attention(Attention { causal, scale_bits });
    let sizes = [b, hq, lq, ev];
    let kind = BufferKind::Extern { kernel, inputs };
    let out = if rank == 4 && read_transposed(l) {
        // Stored as [B, Lq, Hq, Dv]: the transpose the output projection's input needs is then
        // a view of dense storage, which the matmul reads in place (no copy kernel after).
        let p = l.env.pool_mut();
        let (hd, lhd) = (p.mul(hq, ev), p.mul(lq, hq));
        let lhd = p.mul(lhd, ev);
        let layout = Layout {
            sizes: sizes.to_vec(),
            strides: vec![lhd, ev, hd, p.one()],
            offset: p.zero(),
        };
        let id = l.push_buffer(kind, dtype, layout.clone(), &n.name);
        super::buffer_tensor(id, dtype, layout)
    } else {
        l.add_buffer(kind, dtype, &sizes, &n.name)
    };
    if rank == 4 {
        return Ok(out);
    }
    let mut sizes = out_lead;
    sizes.push(ev);
    super::views::view(l, out, &sizes)
}

/// `guardless.paged_attention`: attention of a flattened batch of sequences over a paged
/// key/value cache, one step ([`ExternKernel::PagedAttention`]); every operand read in place.
pub(super) fn paged(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let q = tensor(l, n, "query")?;
    let (k, v) = (tensor(l, n, "key_cache")?, tensor(l, n, "value_cache")?);
    let table = tensor(l, n, "block_table")?;
    let (lens, starts) = (tensor(l, n, "context_lens")?, tensor(l, n, "query_start")?);
    for (what, t, rank) in [
        ("query [T, Hq, D]", &q, 3),
        ("key_cache [num_blocks, block_size, Hkv, D]", &k, 4),
        ("value_cache [num_blocks, block_size, Hkv, Dv]", &v, 4),
        ("block_table [S, max_blocks]", &table, 2),
        ("context_lens [S]", &lens, 1),
        ("query_start [S + 1]", &starts, 1),
    ] {
        if t.sizes.len() != rank {
            return msg(format!(
                "expects {what}: {rank} dimensions, found {}",
                t.sizes.len()
            ));
        }
    }
    if !q.dtype.is_float() || k.dtype != q.dtype || v.dtype != q.dtype {
        return msg(format!(
            "expects query, key_cache and value_cache of one floating-point dtype, found {}, {} and {}",
            q.dtype, k.dtype, v.dtype
        ));
    }
    for (what, t) in [
        ("block_table", &table),
        ("context_lens", &lens),
        ("query_start", &starts),
    ] {
        if !matches!(t.dtype, DType::I32 | DType::I64) {
            return msg(format!(
                "{what}: expected int32 or int64, found {}",
                t.dtype
            ));
        }
    }
    let (hq, d) = (q.sizes[1], q.sizes[2]);
    let (hk, dv) = (k.sizes[2], v.sizes[3]);
    let seqs = table.sizes[0];
    let one = l.env.pool().one();
    let seqs_1 = l.env.pool_mut().add(seqs, one);
    for (what, x, y) in [
        ("value_cache blocks", v.sizes[0], k.sizes[0]),
        ("value_cache block size", v.sizes[1], k.sizes[1]),
        ("value_cache heads", v.sizes[2], hk),
        ("key_cache head dim", k.sizes[3], d),
        ("context_lens length", lens.sizes[0], seqs),
        ("query_start length", starts.sizes[0], seqs_1),
    ] {
        let eq = l.env.pool_mut().eq(x, y);
        l.require(eq, |env| {
            format!(
                "{what} {} differs from {} (query [T, Hq, D], caches [num_blocks, block_size, Hkv, D|Dv], \
                 block_table [S, max_blocks], context_lens [S], query_start [S + 1])",
                env.text(x),
                env.text(y)
            )
        })?;
    }
    if head_ratio(l, hq, hk).is_none() {
        return msg("query heads must be a constant multiple of key/value heads");
    }
    let scale_bits = match n.arg("scale") {
        Some(Arg::Float(f)) => Some(f.to_bits()),
        None | Some(Arg::None) => None,
        other => return msg(format!("scale: expected a float or null, found {other:?}")),
    };
    let dtype = q.dtype;
    let sizes = [q.sizes[0], hq, dv];
    let inputs = [q, k, v, table, lens, starts].map(|t| l.as_buffer(t, &n.name));
    let kernel = ExternKernel::PagedAttention(PagedAttention { scale_bits });
    let kind = BufferKind::Extern {
        kernel,
        inputs: inputs.to_vec(),
    };
    Ok(l.add_buffer(kind, dtype, &sizes, &n.name))
}

/// Whether every reader of the node being lowered (its output 0) swaps dimensions 1 and 2
/// (`transpose(1, 2)`, `permute([0, 2, 1, 3])`: heads and positions), and none is a graph output.
fn read_transposed(l: &Lowerer) -> bool {
    let me = l.current;
    let mine = |r: &crate::graph::TensorRef| {
        r.producer == crate::graph::Producer::Node(me) && r.index.unwrap_or(0) == 0
    };
    if l.graph.outputs.iter().any(|o| mine(&o.tensor)) {
        return false;
    }
    let consts = |n: &GraphNode, name: &str| -> Option<Vec<i64>> {
        match n.arg(name)? {
            Arg::Ints(v) => v.iter().map(|&e| l.env.pool().as_const(e)).collect(),
            Arg::Int(e) => Some(vec![l.env.pool().as_const(*e)?]),
            _ => None,
        }
    };
    let mut readers = 0;
    for n in l.readers() {
        if !n.args.iter().any(|a| a.tensor_refs().any(mine)) {
            continue;
        }
        readers += 1;
        let swaps = match n.op.as_str() {
            "aten.transpose.int" => {
                let d0 = consts(n, "dim0").and_then(|v| v.first().copied());
                let d1 = consts(n, "dim1").and_then(|v| v.first().copied());
                matches!(
                    (d0.map(|d| d.rem_euclid(4)), d1.map(|d| d.rem_euclid(4))),
                    (Some(1), Some(2)) | (Some(2), Some(1))
                )
            }
            "aten.permute.default" => consts(n, "dims")
                .is_some_and(|d| d.iter().map(|x| x.rem_euclid(4)).eq([0, 2, 1, 3])),
            _ => false,
        };
        if !swaps {
            return false;
        }
    }
    readers > 0
}

/// A buffer of `t` read as 4 dimensions: `rank` < 4 gains leading sizes of 1.
fn lifted(l: &mut Lowerer, t: LTensor, rank: usize, origin: &str) -> BufferId {
    let id = l.as_buffer(t, origin);
    if rank == 4 {
        return id;
    }
    let mut layout = l.buffers[id.index()].layout.clone();
    let (one, zero) = (l.env.pool().one(), l.env.pool().zero());
    for _ in rank..4 {
        layout.sizes.insert(0, one);
        layout.strides.insert(0, zero);
    }
    view_buffer(l, id, layout, origin)
}

/// The mask as a view of `[B, Hq, Lq, Lk]`: dimensions of size 1 (or missing, on the left)
/// broadcast by a stride of 0; any other must equal the target's size.
fn broadcast_mask(l: &mut Lowerer, mask: LTensor, target: &[Expr], origin: &str) -> R<BufferId> {
    if mask.sizes.len() > 4 {
        return msg(format!(
            "attn_mask has {} dimensions; at most 4 broadcast to [B, Hq, Lq, Lk]",
            mask.sizes.len()
        ));
    }
    let id = l.as_buffer(mask, origin);
    let own = l.buffers[id.index()].layout.clone();
    let off = 4 - own.sizes.len();
    let zero = l.env.pool().zero();
    let mut layout = Layout {
        sizes: target.to_vec(),
        strides: vec![zero; 4],
        offset: own.offset,
    };
    for (k, (&m, &stride)) in own.sizes.iter().zip(&own.strides).enumerate() {
        let t = target[off + k];
        let one = l.env.pool().one();
        let is_one = l.env.pool_mut().eq(m, one);
        if m == t {
            layout.strides[off + k] = stride;
        } else if m == one || l.env.guard_or_false(is_one) {
            continue;
        } else {
            let eq = l.env.pool_mut().eq(m, t);
            l.require(eq, |env| {
                format!(
                    "attn_mask size {} does not broadcast to {} in dimension {k}",
                    env.text(m),
                    env.text(t)
                )
            })?;
            layout.strides[off + k] = stride;
        }
    }
    Ok(view_buffer(l, id, layout, origin))
}

/// A view of `id`'s storage through `layout` (addressing the same storage as `id`'s own).
fn view_buffer(l: &mut Lowerer, id: BufferId, layout: Layout, origin: &str) -> BufferId {
    let mut base = id;
    while let BufferKind::View { base: b } = l.buffers[base.index()].kind {
        base = b;
    }
    let dtype = l.buffers[id.index()].dtype;
    l.push_buffer(BufferKind::View { base }, dtype, layout, origin)
}
