//! Read/write dependencies between buffers: who reads whom, at which symbolic indices.

use guardless_ir::loop_ir::{Body, Buffer, BufferId, BufferKind, Op, Program};
use guardless_ir::sym::{Expr, SymbolId};
use rustc_hash::FxHashMap;

pub struct Deps {
    /// For each buffer, the buffers it reads (once each, in first-read order).
    pub reads: Vec<Vec<BufferId>>,
    /// For each buffer, the buffers that read it.
    pub readers: Vec<Vec<BufferId>>,
    /// For each buffer, the steps producing data-dependent symbols it uses (a select's count,
    /// an `.item()`): it runs after them, as after the buffers it reads.
    pub after: Vec<Vec<BufferId>>,
    pub is_output: Vec<bool>,
}

/// Every expression computing `buf` evaluates: its layout, loop ranges, and the indices, index
/// values and bounds in its body.
fn expressions(buf: &Buffer) -> Vec<Expr> {
    let l = &buf.layout;
    let mut es: Vec<Expr> = l.sizes.iter().chain(&l.strides).copied().collect();
    es.push(l.offset);
    let (loops, body) = match &buf.kind {
        BufferKind::Computed { loops, body } | BufferKind::Scatter { loops, body, .. } => {
            (loops, body)
        }
        BufferKind::Sort { take, .. } => {
            es.extend(*take);
            return es;
        }
        _ => return es,
    };
    es.extend(&loops.ranges);
    if let Some((_, ranges, _)) = &loops.reduction {
        es.extend(ranges);
    }
    for (op, _) in &body.ops {
        match op {
            Op::Load { index, .. } => es.push(*index),
            Op::Index(e, _) => es.push(*e),
            Op::Bind { var, size, .. } => es.extend([*var, *size]),
            _ => {}
        }
    }
    es
}

/// The loads of `body`: buffer and index.
pub fn loads(body: &Body) -> impl Iterator<Item = (BufferId, Expr)> + '_ {
    body.ops.iter().filter_map(|(op, _)| match op {
        Op::Load { buffer, index, .. } => Some((*buffer, *index)),
        _ => None,
    })
}

impl Deps {
    pub fn new(p: &Program) -> Deps {
        let n = p.buffers.len();
        let mut reads: Vec<Vec<BufferId>> = vec![Vec::new(); n];
        for (i, b) in p.buffers.iter().enumerate() {
            let mut add = |r: BufferId| {
                if !reads[i].contains(&r) {
                    reads[i].push(r);
                }
            };
            match &b.kind {
                BufferKind::Input(_) => {}
                BufferKind::Computed { body, .. } => loads(body).for_each(|(r, _)| add(r)),
                BufferKind::Scatter { base, body, .. } => {
                    add(*base);
                    loads(body).for_each(|(r, _)| add(r));
                }
                BufferKind::Extern { inputs, .. } => inputs.iter().for_each(|&r| add(r)),
                BufferKind::View { base } => add(*base),
                BufferKind::Item { input, .. }
                | BufferKind::Scan { input, .. }
                | BufferKind::Sort { input, .. } => add(*input),
                BufferKind::Select { input, mask, .. } => {
                    add(*input);
                    mask.iter().for_each(|&m| add(m));
                }
            }
        }
        let mut readers = vec![Vec::new(); n];
        for (i, rs) in reads.iter().enumerate() {
            for r in rs {
                readers[r.index()].push(BufferId(i as u32));
            }
        }
        let producer: FxHashMap<SymbolId, BufferId> = p
            .buffers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| Some((b.kind.produced_symbol()?, BufferId(i as u32))))
            .collect();
        let mut after = vec![Vec::new(); n];
        if !producer.is_empty() {
            for (i, b) in p.buffers.iter().enumerate() {
                for s in p.env.pool().free_symbols_of(&expressions(b)) {
                    match producer.get(&s) {
                        Some(&q) if q.index() != i && !after[i].contains(&q) => after[i].push(q),
                        _ => {}
                    }
                }
            }
        }
        let mut is_output = vec![false; n];
        for o in &p.outputs {
            is_output[o.index()] = true;
        }
        // A view of an output keeps the output's buffer; an output that is a view keeps its base.
        for (i, b) in p.buffers.iter().enumerate().rev() {
            if let (BufferKind::View { base }, true) = (&b.kind, is_output[i]) {
                is_output[base.index()] = true;
            }
        }
        Deps {
            reads,
            readers,
            after,
            is_output,
        }
    }
}
