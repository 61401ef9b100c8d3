//! Inputs that keep the contracts of ops on data: random sequence data is almost never valid
//! for `guardless.paged_attention` (offsets that start at 0 and end at the token count, contexts
//! that hold their queries, blocks inside the cache), so tools that run graphs on random inputs
//! (`guardless run`, `bench`, the tests) replace those operands with a valid batch here.

use crate::graph::Graph;
use crate::loop_ir::{BufferKind, ExternKernel};
use crate::sym::Bindings;
use crate::tensor::{Data, HostTensor};

/// For each paged attention step whose block table, context lengths and query offsets are
/// graph inputs (that `random` says were drawn at random): a valid batch for the sizes at `b`
/// — the query tokens dealt to the sequences in turn, each context its queries plus a history
/// of pseudo-random length within its block table row, blocks drawn pseudo-randomly from the
/// whole cache, out of order. A graph that does not lower is left as it is.
pub fn valid_sequences(
    graph: &Graph,
    b: &Bindings,
    inputs: &mut [HostTensor],
    seed: u64,
    random: impl Fn(usize) -> bool,
) {
    if !graph
        .nodes
        .iter()
        .any(|n| n.op == "guardless.paged_attention.default")
    {
        return;
    }
    let Ok(mut p) = crate::lower::lower(graph) else {
        return;
    };
    // Sizes not bound are taken at their optimization hints, as random inputs are drawn.
    let mut b = b.clone();
    for i in 0..p.env.pool().symbol_count() {
        let id = crate::sym::SymbolId::from_index(i);
        if b.get(id).is_none() {
            let h = p.env.symbol_optimization_hint(id);
            b.set(id, h);
        }
    }
    let p = p;
    let size = |id: crate::loop_ir::BufferId, d: usize| {
        let e = p.buffers[id.index()].layout.sizes[d];
        p.env.evaluate(e, &b).ok().map(|v| v.max(0) as usize)
    };
    let input_of = |id: crate::loop_ir::BufferId| match p.buffers[id.index()].kind {
        BufferKind::Input(k) => Some(k),
        _ => None,
    };
    for buf in &p.buffers {
        let BufferKind::Extern {
            kernel: ExternKernel::PagedAttention(_),
            inputs: ops,
        } = &buf.kind
        else {
            continue;
        };
        let (Some(table), Some(lens), Some(starts)) =
            (input_of(ops[3]), input_of(ops[4]), input_of(ops[5]))
        else {
            continue;
        };
        let sizes = (
            size(ops[0], 0),
            size(ops[1], 0),
            size(ops[1], 1),
            size(ops[3], 0),
            size(ops[3], 1),
        );
        let (Some(tokens), Some(blocks), Some(block_size), Some(seqs), Some(width)) = sizes else {
            continue;
        };
        if seqs == 0 || ![table, lens, starts].into_iter().all(&random) {
            continue;
        }
        let values = batch(
            Batch {
                tokens,
                seqs,
                blocks,
                block_size,
                width,
            },
            seed,
        );
        for (k, v) in [table, lens, starts].into_iter().zip(values) {
            if matches!(inputs[k].data, Data::Int(_)) {
                inputs[k].data = Data::Int(v);
            }
        }
    }
}

/// The sizes a batch must fit.
struct Batch {
    tokens: usize,
    seqs: usize,
    blocks: usize,
    block_size: usize,
    width: usize,
}

/// A valid batch: the block table, the context lengths and the offsets.
fn batch(s: Batch, seed: u64) -> [Vec<i64>; 3] {
    let capacity = s.width * s.block_size;
    let mut state = seed.wrapping_mul(6364136223846793005) | 1;
    let mut next = move |m: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) % m.max(1) as u64) as usize
    };
    let (mut start, mut starts_v, mut lens_v) = (0usize, vec![0i64], Vec::new());
    let mut table_v = vec![0i64; s.seqs * s.width];
    for q in 0..s.seqs {
        // Tokens past full tables (more queries than any context holds) stay unassigned: the
        // offsets then miss the token count, and the run says so.
        let queries = (s.tokens / s.seqs + usize::from(q < s.tokens % s.seqs)).min(capacity);
        let keys = queries + next(capacity - queries + 1);
        for j in 0..keys.div_ceil(s.block_size.max(1)) {
            table_v[q * s.width + j] = next(s.blocks) as i64;
        }
        start += queries;
        starts_v.push(start as i64);
        lens_v.push(keys as i64);
    }
    [table_v, lens_v, starts_v]
}
