//! The interpreter's library buffers: sort, scan, scatter and the extern matmuls. Each returns the
//! buffer's contiguous storage or a message that the caller attaches to the buffer.

use super::scalar::{combine, order_key, scan_combine};
use super::{store, Storage, V};
use crate::loop_ir::{
    Buffer, BufferId, BufferKind, ExternKernel, Program, ReductionKind, ScanKind, ScatterCombine,
};
use crate::sym::{Bindings, Expr};

type R<T> = Result<T, String>;

impl Program {
    fn sizes_of(&self, id: BufferId, b: &Bindings) -> R<Vec<i64>> {
        self.sizes_of_buffer(&self.buffers[id.index()], b)
    }

    /// Element `idx` of buffer `id`, read through its layout.
    fn read_at(&self, storage: &Storage, id: BufferId, idx: &[i64], b: &Bindings) -> R<V> {
        let at = self.buffers[id.index()]
            .layout
            .index_value(&self.env, idx, b)?;
        storage
            .get(id)
            .get(at as usize)
            .filter(|_| at >= 0)
            .copied()
            .ok_or_else(|| {
                format!(
                    "read of {} out of bounds at {at}",
                    self.buffers[id.index()].name
                )
            })
    }

    /// `nonzero` / `masked_select`: binds the count found, then lists the indices or the values.
    pub(super) fn select(
        &self,
        storage: &Storage,
        b: &mut Bindings,
        input: BufferId,
        mask: Option<BufferId>,
        count: crate::sym::SymbolId,
    ) -> R<Vec<V>> {
        let src = storage.get(input);
        let picked: Vec<usize> = match mask {
            Some(m) => storage
                .get(m)
                .iter()
                .enumerate()
                .filter(|(_, v)| v.i() != 0)
                .map(|(k, _)| k)
                .collect(),
            None => src
                .iter()
                .enumerate()
                .filter(|(_, v)| v.f() != 0.0)
                .map(|(k, _)| k)
                .collect(),
        };
        self.bind_produced(b, count, picked.len() as i64)?;
        if mask.is_some() {
            return Ok(picked.iter().map(|&k| src[k]).collect());
        }
        let shape = self.sizes_of(input, b)?;
        let mut out = Vec::with_capacity(picked.len() * shape.len());
        for &k in &picked {
            let mut rest = k as i64;
            let mut idx = vec![0i64; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = rest % shape[d].max(1);
                rest /= shape[d].max(1);
            }
            out.extend(idx.into_iter().map(V::I));
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn sort(
        &self,
        storage: &Storage,
        b: &Bindings,
        input: BufferId,
        dim: usize,
        descending: bool,
        take: Option<Expr>,
        indices: bool,
    ) -> R<Vec<V>> {
        let in_sizes = self.sizes_of(input, b)?;
        let len = in_sizes[dim];
        let keep = match take {
            Some(k) => self.env.evaluate(k, b).map_err(|e| e.to_string())?,
            None => len,
        };
        if keep < 0 || keep > len {
            return Err(format!("selected {keep} of {len} elements"));
        }
        let inner: i64 = in_sizes[dim + 1..].iter().product();
        let outer: i64 = in_sizes[..dim].iter().product();
        let src = storage.get(input);
        let mut out = vec![V::I(0); (outer * keep * inner).max(0) as usize];
        for o in 0..outer {
            for i in 0..inner {
                let mut line: Vec<(V, i64)> = (0..len)
                    .map(|j| (src[((o * len + j) * inner + i) as usize], j))
                    .collect();
                line.sort_by(|a, c| order_key(a.0, c.0, descending));
                for (j, &(v, at)) in line.iter().take(keep as usize).enumerate() {
                    out[((o * keep + j as i64) * inner + i) as usize] =
                        if indices { V::I(at) } else { v };
                }
            }
        }
        Ok(out)
    }

    /// The running scan of `kind` along `dim` of the contiguous `input` (same shape), each
    /// element rounded once to the stored type from a value kept in f64 (integers: i64, wrapping)
    /// — not rounded per step, which loses a long bf16 line's small terms altogether.
    pub(super) fn scan(
        &self,
        buf: &Buffer,
        storage: &Storage,
        b: &Bindings,
        (input, dim, kind): (BufferId, usize, ScanKind),
    ) -> R<Vec<V>> {
        let sizes = self.sizes_of(input, b)?;
        let inner: i64 = sizes[dim + 1..].iter().product();
        let len = sizes[dim];
        let mut sums = storage.get(input).clone();
        for k in 0..sums.len() as i64 {
            // Not the first along `dim`: add the running sum of the previous element.
            if inner > 0 && len > 0 && (k / inner) % len > 0 {
                let prev = sums[(k - inner) as usize];
                sums[k as usize] = scan_combine(kind, buf.dtype, prev, sums[k as usize]);
            } else if kind == ScanKind::LogSumExp {
                // From −inf, as ATen starts it: a first −0.0 comes out +0.0.
                let first = V::F(f64::NEG_INFINITY);
                sums[k as usize] = scan_combine(kind, buf.dtype, first, sums[k as usize]);
            }
        }
        Ok(sums.into_iter().map(|v| store(buf.dtype, v)).collect())
    }

    /// A copy of the base, then the body's values combined with their targets in order.
    pub(super) fn scatter(&self, buf: &Buffer, storage: &Storage, b: &mut Bindings) -> R<Vec<V>> {
        let BufferKind::Scatter {
            base, combine: how, ..
        } = &buf.kind
        else {
            unreachable!("called for scatter buffers")
        };
        let shape = self.sizes_of(*base, b)?;
        let total: i64 = shape.iter().product();
        let mut out = Vec::with_capacity(total.max(0) as usize);
        let mut idx = vec![0i64; shape.len()];
        for _ in 0..total.max(0) {
            out.push(store(buf.dtype, self.read_at(storage, *base, &idx, b)?));
            next_index(&mut idx, &shape);
        }
        let kind = match how {
            ScatterCombine::Write => None,
            ScatterCombine::Add => Some(ReductionKind::Sum),
            ScatterCombine::Mul => Some(ReductionKind::Prod),
            ScatterCombine::Max => Some(ReductionKind::Max),
            ScatterCombine::Min => Some(ReductionKind::Min),
        };
        for (at, v) in self.updates_of_scatter(buf, storage, b)? {
            let slot = out
                .get_mut(at as usize)
                .filter(|_| at >= 0)
                .ok_or_else(|| format!("scatter out of bounds at {at}"))?;
            *slot = match kind {
                Some(k) => store(buf.dtype, combine(k, buf.dtype, *slot, v)),
                None => store(buf.dtype, v),
            };
        }
        Ok(out)
    }

    /// A scatter's updates in order: each target (a row-major index into the base's shape) and
    /// the body's value there, unrounded.
    pub(super) fn updates_of_scatter(
        &self,
        buf: &Buffer,
        storage: &Storage,
        b: &mut Bindings,
    ) -> R<Vec<(i64, V)>> {
        let BufferKind::Scatter {
            loops,
            body,
            target,
            ..
        } = &buf.kind
        else {
            unreachable!("called for scatter buffers")
        };
        let ranges: Vec<i64> = loops
            .ranges
            .iter()
            .map(|&r| self.env.evaluate(r, b).map_err(|e| e.to_string()))
            .collect::<R<_>>()?;
        let points = ranges.iter().product::<i64>().max(0);
        let mut updates = Vec::with_capacity(points as usize);
        let mut idx = vec![0i64; ranges.len()];
        for _ in 0..points {
            for (&var, &v) in loops.vars.iter().zip(&idx) {
                b.set(
                    self.env
                        .pool()
                        .as_symbol(var)
                        .expect("loop vars are symbols"),
                    v,
                );
            }
            let v = self.eval_body(body, b, storage)?;
            let at = self.env.evaluate(*target, b).map_err(|e| e.to_string())?;
            updates.push((at, v));
            next_index(&mut idx, &ranges);
        }
        Ok(updates)
    }

    /// mm, addmm, bmm and grouped mm: products accumulated exactly (f64), the bias added, rounded
    /// once.
    pub(super) fn extern_kernel(
        &self,
        buf: &Buffer,
        kernel: ExternKernel,
        args: &[BufferId],
        storage: &Storage,
        b: &Bindings,
    ) -> R<Vec<V>> {
        if let ExternKernel::Attention(spec) = kernel {
            return self.attention(buf, spec, args, storage, b);
        }
        if let ExternKernel::PagedAttention(spec) = kernel {
            return self.paged_attention(buf, spec, args, storage, b);
        }
        let (a, m) = (args[0], args[1]);
        let (da, dm) = (self.sizes_of(a, b)?, self.sizes_of(m, b)?);
        let out_shape = self.sizes_of_buffer(buf, b)?;
        let read = |id: BufferId, idx: &[i64]| self.read_at(storage, id, idx, b).map(|v| v.f());
        // Group g covers [start, end) of the grouped dimension (all of it without offsets).
        let offsets = args.get(2).filter(|_| kernel == ExternKernel::GroupedMm);
        let groups: Vec<(i64, i64)> = match offsets {
            Some(&offs) => {
                let limit = match (da.len(), dm.len()) {
                    (2, 3) => da[0],
                    (2, 2) => da[1],
                    _ => dm[1],
                };
                let mut start = 0;
                let mut gs = Vec::new();
                for g in 0..self.sizes_of(offs, b)?[0] {
                    let end = self.read_at(storage, offs, &[g], b)?.i();
                    if end < start || end > limit {
                        return Err(format!(
                            "{} (offset {g} is {end}, after {start}, size {limit})",
                            crate::loop_ir::Check::GroupOffsets.message()
                        ));
                    }
                    gs.push((start, end));
                    start = end;
                }
                gs
            }
            None => Vec::new(),
        };
        let inner = match kernel {
            ExternKernel::Mm | ExternKernel::AddMm => da[1],
            _ => *da.last().expect("rank ≥ 2"),
        };
        let inner2 = match (kernel, dm.len()) {
            (ExternKernel::Mm | ExternKernel::AddMm, _) | (_, 2) => dm[0],
            _ => dm[1],
        };
        if inner != inner2 {
            return Err(format!(
                "{} of [.., {inner}] by [{inner2}, ..]",
                kernel.name()
            ));
        }
        let bias_rank = match kernel {
            ExternKernel::AddMm => self.sizes_of(args[2], b)?.len(),
            _ => 0,
        };
        let total: i64 = out_shape.iter().product();
        let mut out = Vec::with_capacity(total.max(0) as usize);
        let mut o = vec![0i64; out_shape.len()];
        let dot = |rows: &dyn Fn(i64) -> R<f64>, cols: &dyn Fn(i64) -> R<f64>, ks: (i64, i64)| {
            (ks.0..ks.1).try_fold(0.0, |acc, k| Ok::<f64, String>(acc + rows(k)? * cols(k)?))
        };
        for _ in 0..total.max(0) {
            let v = match (kernel, da.len(), dm.len()) {
                (ExternKernel::Mm, ..) => dot(
                    &|k| read(a, &[o[0], k]),
                    &|k| read(m, &[k, o[1]]),
                    (0, inner),
                )?,
                (ExternKernel::AddMm, ..) => {
                    let at: &[i64] = match bias_rank {
                        1 => &[o[1]],
                        _ => &[0, o[1]],
                    };
                    dot(
                        &|k| read(a, &[o[0], k]),
                        &|k| read(m, &[k, o[1]]),
                        (0, inner),
                    )? + read(args[2], at)?
                }
                (ExternKernel::Bmm, ..) | (ExternKernel::GroupedMm, 3, 3) => dot(
                    &|k| read(a, &[o[0], o[1], k]),
                    &|k| read(m, &[o[0], k, o[2]]),
                    (0, inner),
                )?,
                // Row groups: row r uses the weight of the group that holds it.
                (_, 2, 3) => match groups.iter().position(|&(s, e)| s <= o[0] && o[0] < e) {
                    Some(g) => dot(
                        &|k| read(a, &[o[0], k]),
                        &|k| read(m, &[g as i64, k, o[1]]),
                        (0, inner),
                    )?,
                    None => 0.0,
                },
                // Inner-dimension groups: output g sums over its slice of k.
                (_, 2, 2) => dot(
                    &|k| read(a, &[o[1], k]),
                    &|k| read(m, &[k, o[2]]),
                    groups[o[0] as usize],
                )?,
                // Column groups: column c uses the operand of the group that holds it.
                _ => match groups.iter().position(|&(s, e)| s <= o[1] && o[1] < e) {
                    Some(g) => dot(
                        &|k| read(a, &[g as i64, o[0], k]),
                        &|k| read(m, &[k, o[1]]),
                        (0, inner),
                    )?,
                    None => 0.0,
                },
            };
            out.push(store(buf.dtype, V::F(v)));
            next_index(&mut o, &out_shape);
        }
        Ok(out)
    }

    /// Attention in f64, one query row at a time: the row's scores, hidden keys at -inf, the
    /// softmax, the weighted sum of the values, rounded once. A row with no visible key is 0.
    fn attention(
        &self,
        buf: &Buffer,
        spec: crate::loop_ir::Attention,
        args: &[BufferId],
        storage: &Storage,
        b: &Bindings,
    ) -> R<Vec<V>> {
        let (q, k, v, mask) = (args[0], args[1], args[2], args.get(3).copied());
        let (dq, dk, dv) = (
            self.sizes_of(q, b)?,
            self.sizes_of(k, b)?,
            self.sizes_of(v, b)?,
        );
        let (bs, hq, lq, d) = (dq[0], dq[1], dq[2], dq[3]);
        let (hk, lk, dvv) = (dk[1], dk[2], dv[3]);
        if hk <= 0 && hq > 0 || hk > 0 && hq % hk != 0 {
            return Err(format!(
                "{hq} query heads are not a multiple of {hk} key/value heads"
            ));
        }
        let group = if hk > 0 { hq / hk } else { 1 };
        let scale = spec.scale(d);
        let boolean =
            mask.is_some_and(|m| self.buffers[m.index()].dtype == crate::graph::DType::Bool);
        let read = |id: BufferId, idx: &[i64]| self.read_at(storage, id, idx, b);
        let mut out = Vec::with_capacity((bs * hq * lq * dvv).max(0) as usize);
        let mut scores = vec![0.0f64; lk.max(0) as usize];
        for bi in 0..bs {
            for h in 0..hq {
                let kh = h / group;
                for i in 0..lq {
                    let mut top = f64::NEG_INFINITY;
                    for j in 0..lk {
                        let mut x = f64::NEG_INFINITY;
                        if !(spec.causal && j > i) {
                            let mut dot = 0.0;
                            for t in 0..d {
                                dot += read(q, &[bi, h, i, t])?.f() * read(k, &[bi, kh, j, t])?.f();
                            }
                            x = dot * scale;
                            if let Some(m) = mask {
                                let mv = read(m, &[bi, h, i, j])?;
                                if boolean {
                                    if mv.i() == 0 {
                                        x = f64::NEG_INFINITY;
                                    }
                                } else {
                                    x += mv.f();
                                }
                            }
                        }
                        scores[j as usize] = x;
                        top = top.max(x);
                    }
                    // A NaN score is not hidden: it makes the row NaN, as in PyTorch.
                    let visible = scores.iter().any(|&x| x != f64::NEG_INFINITY);
                    let total: f64 = if visible {
                        scores.iter().map(|&x| (x - top).exp()).sum()
                    } else {
                        1.0
                    };
                    for c in 0..dvv {
                        let mut acc = 0.0;
                        if visible {
                            for j in 0..lk {
                                let w = (scores[j as usize] - top).exp() / total;
                                if w != 0.0 {
                                    acc += w * read(v, &[bi, kh, j, c])?.f();
                                }
                            }
                        }
                        out.push(store(buf.dtype, V::F(acc)));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Paged attention in f64 ([`ExternKernel::PagedAttention`]): each sequence's key rows
    /// found through its block table (the sequence data checked first), then each query row
    /// as [`Self::attention`] does it.
    fn paged_attention(
        &self,
        buf: &Buffer,
        spec: crate::loop_ir::PagedAttention,
        args: &[BufferId],
        storage: &Storage,
        b: &Bindings,
    ) -> R<Vec<V>> {
        use crate::loop_ir::PagedCheck;
        let [q, k, v, table, lens, starts] = args[..] else {
            return Err("paged attention takes six operands".into());
        };
        let (dq, dk, dv) = (
            self.sizes_of(q, b)?,
            self.sizes_of(k, b)?,
            self.sizes_of(v, b)?,
        );
        let (t, hq, d) = (dq[0], dq[1], dq[2]);
        let (nb, bs, hk, dvv) = (dk[0], dk[1], dk[2], dv[3]);
        let [seqs, width] = self.sizes_of(table, b)?[..] else {
            return Err("block table: not 2-d".into());
        };
        if hk <= 0 && hq > 0 || hk > 0 && hq % hk != 0 {
            return Err(format!(
                "{hq} query heads are not a multiple of {hk} key/value heads"
            ));
        }
        let group = if hk > 0 { hq / hk } else { 1 };
        let scale = spec.as_attention().scale(d);
        let read = |id: BufferId, idx: &[i64]| self.read_at(storage, id, idx, b);
        let start = |s: i64| read(starts, &[s]).map(|x| x.i());
        let mut monotone = true;
        for s in 0..seqs {
            monotone &= start(s)? <= start(s + 1)?;
        }
        if start(0)? != 0 || start(seqs)? != t || !monotone {
            return Err(PagedCheck::QueryStart.message().into());
        }
        let mut out = vec![0.0f64; (t * hq * dvv).max(0) as usize];
        for s in 0..seqs {
            let (q0, q1, c) = (start(s)?, start(s + 1)?, read(lens, &[s])?.i());
            if c < q1 - q0 || c > width.saturating_mul(bs) {
                return Err(PagedCheck::ContextLength.message().into());
            }
            let mut rows = Vec::with_capacity(c as usize);
            for j in 0..c {
                let blk = read(table, &[s, j / bs])?.i();
                if !(0..nb).contains(&blk) {
                    return Err(PagedCheck::Block.message().into());
                }
                rows.push((blk, j % bs));
            }
            let mut scores = Vec::with_capacity(rows.len());
            for (i, tok) in (q0..q1).enumerate() {
                let sees = (c - (q1 - q0) + i as i64 + 1) as usize;
                for h in 0..hq {
                    let kh = h / group;
                    scores.clear();
                    for &(blk, slot) in &rows[..sees] {
                        let mut dot = 0.0;
                        for e in 0..d {
                            dot += read(q, &[tok, h, e])?.f() * read(k, &[blk, slot, kh, e])?.f();
                        }
                        scores.push(dot * scale);
                    }
                    let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let total: f64 = scores.iter().map(|&x| (x - top).exp()).sum();
                    for e in 0..dvv {
                        let mut acc = 0.0;
                        for (&x, &(blk, slot)) in scores.iter().zip(&rows) {
                            acc += (x - top).exp() / total * read(v, &[blk, slot, kh, e])?.f();
                        }
                        // No key seen (no context): 0, as the ordinary form.
                        out[((tok * hq + h) * dvv + e) as usize] =
                            if sees == 0 { 0.0 } else { acc };
                    }
                }
            }
        }
        Ok(out.into_iter().map(|x| store(buf.dtype, V::F(x))).collect())
    }

    fn sizes_of_buffer(&self, buf: &Buffer, b: &Bindings) -> R<Vec<i64>> {
        buf.layout
            .sizes
            .iter()
            .map(|&s| self.env.evaluate(s, b).map_err(|e| e.to_string()))
            .collect()
    }
}

/// The next multi-index in row-major order (last dimension fastest).
pub(super) fn next_index(idx: &mut [i64], sizes: &[i64]) {
    for k in (0..idx.len()).rev() {
        idx[k] += 1;
        if idx[k] < sizes[k] {
            return;
        }
        idx[k] = 0;
    }
}
