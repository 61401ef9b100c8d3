//! Re-inplacing outputs written back into graph inputs: the output is computed into the input's
//! storage directly, so neither a buffer of its own nor the write-back copy is needed.
//!
//! - A KV-cache write: a scatter whose base is the input (or a reshaped view of it, the output
//!   then a view of the scatter laid out as the input: `cache.view(-1, h, d).index_copy_(…)`)
//!   moves only the new elements (no copy of the base). Also a chain of scatters, each on the one
//!   before and the first on the input (a KV-cache pool written layer by layer).
//! - An elementwise update (`x.mul_(2)`, `x.copy_(y)` as a functionalized graph exports them):
//!   a kernel's stored member whose kernel reads the input only at the element that member
//!   writes, from the thread that writes it.
//!
//! In both cases the output has the input's layout, the input is not an output itself, and no
//! later step reads the input (it would see the new values early).

use guardless_codegen::schedule::{Schedule, Step};
use guardless_ir::loop_ir::{BufferId, BufferKind, Op, Program};

/// By buffer: the graph input whose storage it is computed in (the launcher then allocates
/// nothing for it, and a scatter skips the copy of its base). `native_scatter(id)`: whether
/// scatter `id` runs as the backend's own step (one that writes only its updates), not through
/// the host's interpreter; `kernels`: whether kernel members may be computed in place too.
pub(crate) fn in_place_outputs(
    p: &mut Program,
    s: &Schedule,
    native_scatter: &dyn Fn(BufferId) -> bool,
    kernels: bool,
) -> Vec<Option<BufferId>> {
    let mut out = vec![None; p.buffers.len()];
    for w in p.writes_back.clone() {
        let (output, Some(input)) = (p.outputs[w.output], p.input_buffer(w.input)) else {
            continue;
        };
        // The step's result: the output, or (a cache written through a reshaped view, viewed
        // back) the buffer the output is a view of.
        let id = p.storage_root(output);
        let Some(at) = s.steps.iter().position(|st| match *st {
            Step::Library(b) => b == id,
            Step::Kernel(k) => s.kernels[k].members.iter().any(|m| m.buffer == id),
            _ => false,
        }) else {
            continue;
        };
        let layout = |b: BufferId| &p.buffers[b.index()].layout;
        // One output per input: two written into it would overwrite each other.
        let writers = p.writes_back.iter().filter(|x| x.input == w.input).count();
        if layout(input) != layout(output)
            || writers > 1
            || p.outputs.iter().any(|&o| p.storage_root(o) == input)
            || s.steps[at + 1..].iter().any(|st| reads(p, s, st, input))
        {
            continue;
        }
        let computed = matches!(p.buffers[id.index()].kind, BufferKind::Computed { .. });
        let chain = match s.steps[at] {
            Step::Library(_) => scatter_chain(p, s, id, input, native_scatter),
            Step::Kernel(k)
                if computed
                    && kernels
                    && id == output
                    && reads_only_its_element(p, s, k, id, input) =>
            {
                vec![id]
            }
            _ => Vec::new(),
        };
        for b in chain {
            out[b.index()] = Some(input);
        }
    }
    out
}

/// The scatters that can all be computed in `input`'s storage, from `last` (the written-back
/// output's) down to the one whose base is `input` — several when the graph writes the input
/// in steps (functionalization threads a KV-cache pool through one scatter per layer's keys and
/// values: each scatter's base is the one before). Empty when any of them cannot.
///
/// Each scatter's base addresses the storage as the scatter addresses its own (the input
/// itself, or a view of it laid out as the result), so the result can be that storage; its
/// values must not read the storage being overwritten (another thread's target); no step after
/// it may read its base (it would see the new values), and no base may be a graph output.
fn scatter_chain(
    p: &Program,
    s: &Schedule,
    last: BufferId,
    input: BufferId,
    native_scatter: &dyn Fn(BufferId) -> bool,
) -> Vec<BufferId> {
    let layout = |b: BufferId| &p.buffers[b.index()].layout;
    let step_of = |b: BufferId| {
        s.steps
            .iter()
            .position(|st| matches!(*st, Step::Library(x) if x == b))
    };
    let mut chain = Vec::new();
    let mut id = last;
    loop {
        let BufferKind::Scatter { base, body, .. } = &p.buffers[id.index()].kind else {
            return Vec::new();
        };
        let (Some(at), base_root) = (step_of(id), p.storage_root(*base)) else {
            return Vec::new();
        };
        chain.push(id);
        let reads_storage = body.ops.iter().any(|(op, _)| {
            matches!(op, Op::Load { buffer, .. }
                if p.storage_root(*buffer) == input || chain.contains(&p.storage_root(*buffer)) || p.storage_root(*buffer) == base_root)
        });
        if layout(*base) != layout(id)
            || !native_scatter(id)
            || reads_storage
            || p.outputs.iter().any(|&o| p.storage_root(o) == base_root)
            || s.steps[at + 1..]
                .iter()
                .any(|st| reads(p, s, st, base_root))
        {
            return Vec::new();
        }
        if base_root == input {
            return chain;
        }
        id = base_root;
    }
}

/// Whether kernel `k` loads `input`'s storage only in member `id`'s body, at the element `id`
/// stores (the same index expression: the layouts are equal), so each thread reads an element
/// before it overwrites it and no thread reads one another overwrites.
fn reads_only_its_element(
    p: &mut Program,
    s: &Schedule,
    k: usize,
    id: BufferId,
    input: BufferId,
) -> bool {
    let mut loads = Vec::new();
    for m in &s.kernels[k].members {
        let BufferKind::Computed { body, .. } = &p.buffers[m.buffer.index()].kind else {
            return false;
        };
        for (op, _) in &body.ops {
            if let Op::Load { buffer, index, .. } = op {
                if p.storage_root(*buffer) == input {
                    if m.buffer != id {
                        return false;
                    }
                    loads.push(*index);
                }
            }
        }
    }
    let BufferKind::Computed { loops, .. } = &p.buffers[id.index()].kind else {
        return false;
    };
    if loops.reduction.is_some() {
        return false;
    }
    let (vars, layout) = (loops.vars.clone(), p.buffers[id.index()].layout.clone());
    let stored = layout.index(&mut p.env, &vars);
    loads.iter().all(|&i| i == stored)
}

/// Whether `step` reads the storage of `input`.
fn reads(p: &Program, s: &Schedule, step: &Step, input: BufferId) -> bool {
    match *step {
        Step::Input(_) | Step::View(_) => false,
        Step::Library(id) => p
            .library_reads(id)
            .iter()
            .any(|&r| p.storage_root(r) == input),
        Step::Kernel(k) => s.kernels[k].members.iter().any(|m| {
            let BufferKind::Computed { body, .. } = &p.buffers[m.buffer.index()].kind else {
                return false;
            };
            body.ops.iter().any(
                |(op, _)| matches!(op, Op::Load { buffer, .. } if p.storage_root(*buffer) == input),
            )
        }),
    }
}
