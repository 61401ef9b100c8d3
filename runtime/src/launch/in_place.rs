//! Re-inplacing outputs written back into graph inputs: the output is computed into the input's
//! storage directly, so neither a buffer of its own nor the write-back copy is needed.
//!
//! - A KV-cache write: a scatter whose base is the input (or a reshaped view of it, the output
//!   then a view of the scatter laid out as the input: `cache.view(-1, h, d).index_copy_(…)`)
//!   moves only the new elements (no copy of the base).
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
        let ok = match (&s.steps[at], &p.buffers[id.index()].kind) {
            // The scatter's base addresses the input's storage as the result addresses its own
            // (the input itself, or a view of it laid out as the result), so the result can be
            // that storage. Its values must not read the input being overwritten (another
            // thread's target).
            (Step::Library(_), BufferKind::Scatter { base, body, .. }) => {
                p.storage_root(*base) == input
                    && layout(*base) == layout(id)
                    && native_scatter(id)
                    && !body.ops.iter().any(|(op, _)| {
                        matches!(op, Op::Load { buffer, .. } if p.storage_root(*buffer) == input)
                    })
            }
            (&Step::Kernel(k), BufferKind::Computed { .. }) if kernels && id == output => {
                reads_only_its_element(p, s, k, id, input)
            }
            _ => false,
        };
        if ok {
            out[id.index()] = Some(input);
        }
    }
    out
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
