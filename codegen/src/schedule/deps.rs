//! Read/write dependencies between buffers: who reads whom, at which symbolic indices.

use guardless_ir::loop_ir::{Body, BufferId, BufferKind, Op, Program};
use guardless_ir::sym::Expr;

pub struct Deps {
    /// For each buffer, the buffers it reads (once each, in first-read order).
    pub reads: Vec<Vec<BufferId>>,
    /// For each buffer, the buffers that read it.
    pub readers: Vec<Vec<BufferId>>,
    pub is_output: Vec<bool>,
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
            is_output,
        }
    }
}
