//! Memory planning: each buffer a kernel stores or a library call produces lives from its step to
//! its last reader's; a dead buffer's slot is reused by a later buffer that provably fits in it
//! (for every size in range). Graph outputs get allocations of their own (they outlive the call).

use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use guardless_ir::sym::Expr;

use super::deps::Deps;
use super::{Kernel, Step};

#[derive(Clone, Debug)]
pub struct Allocation {
    pub buffer: BufferId,
    pub bytes: Expr,
    /// The shared slot; `None` for an allocation of its own (a graph output).
    pub slot: Option<usize>,
    /// The steps that produce it and that read it last.
    pub first: usize,
    pub last: usize,
}

#[derive(Clone, Debug)]
pub struct MemoryPlan {
    pub allocations: Vec<Allocation>,
    /// Each slot's size in bytes.
    pub slots: Vec<Expr>,
    /// Slots plus outputs, in bytes, and its value at the optimization hints.
    pub peak: Expr,
    pub peak_at_hints: i64,
}

pub fn plan(p: &mut Program, deps: &Deps, kernels: &[Kernel], steps: &[Step]) -> MemoryPlan {
    let n = p.buffers.len();
    let mut step_of = vec![usize::MAX; n];
    let mut needs = vec![false; n];
    for (s, step) in steps.iter().enumerate() {
        match step {
            Step::Input(b) | Step::View(b) => step_of[b.index()] = s,
            Step::Library(b) => {
                step_of[b.index()] = s;
                needs[b.index()] = !matches!(p.buffers[b.index()].kind, BufferKind::Item { .. });
            }
            Step::Kernel(k) => {
                for m in &kernels[*k].members {
                    step_of[m.buffer.index()] = s;
                    needs[m.buffer.index()] = m.stored.is_some();
                }
            }
        }
    }
    // The last step reading each buffer (a view's readers read its base).
    let mut last = step_of.clone();
    for i in (0..n).rev() {
        for r in &deps.readers[i] {
            let through = match p.buffers[r.index()].kind {
                BufferKind::View { .. } => last[r.index()],
                _ => step_of[r.index()],
            };
            last[i] = last[i].max(through);
        }
    }
    let mut allocations = Vec::new();
    let mut slots: Vec<Expr> = Vec::new();
    let mut holder: Vec<Option<usize>> = Vec::new(); // slot → allocation using it
    let mut order: Vec<usize> = (0..n).filter(|&i| needs[i]).collect();
    order.sort_by_key(|&i| (step_of[i], i));
    for i in order {
        let b = &p.buffers[i];
        let (size, sizes) = (b.dtype.size() as i64, b.layout.sizes.clone());
        let pool = p.env.pool_mut();
        let numel = sizes.iter().fold(pool.one(), |a, &s| pool.mul(a, s));
        let k = pool.constant(size);
        let bytes = pool.mul(numel, k);
        let bytes = p.env.simplify(bytes);
        let (first, end) = (step_of[i], last[i]);
        let slot = if deps.is_output[i] {
            None
        } else {
            // Free slots (their holder read for the last time before this step) that fit.
            let mut best: Option<(usize, i64)> = None;
            for (s, h) in holder.iter().enumerate() {
                let free = h.is_none_or(|a: usize| allocations_last(&allocations, a) < first);
                if !free {
                    continue;
                }
                let c = p.env.pool_mut().ge(slots[s], bytes);
                if p.env.statically_known_true(c) {
                    let hint = p.env.optimization_hint(slots[s]);
                    if best.is_none_or(|(_, h)| hint < h) {
                        best = Some((s, hint));
                    }
                }
            }
            Some(match best {
                Some((s, _)) => s,
                None => {
                    slots.push(bytes);
                    holder.push(None);
                    slots.len() - 1
                }
            })
        };
        if let Some(s) = slot {
            holder[s] = Some(allocations.len());
        }
        allocations.push(Allocation {
            buffer: BufferId(i as u32),
            bytes,
            slot,
            first,
            last: end,
        });
    }
    let pool = p.env.pool_mut();
    let mut peak = pool.zero();
    for &s in &slots {
        peak = pool.add(peak, s);
    }
    for a in allocations.iter().filter(|a| a.slot.is_none()) {
        peak = pool.add(peak, a.bytes);
    }
    let peak = p.env.simplify(peak);
    let peak_at_hints = p.env.optimization_hint(peak);
    MemoryPlan {
        allocations,
        slots,
        peak,
        peak_at_hints,
    }
}

fn allocations_last(a: &[Allocation], i: usize) -> usize {
    a[i].last
}
