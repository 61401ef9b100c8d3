//! Re-inplacing a KV-cache write: a device scatter whose result is written back into the graph
//! input it copies writes into that input's storage directly, so neither the copy of the base nor
//! the write-back moves the whole cache — only the new elements are written.

use guardless_codegen::schedule::{Schedule, Step};
use guardless_ir::loop_ir::{BufferId, BufferKind, Op, Program};

/// By buffer: whether a scatter step writes into its base's storage (the launcher then skips
/// the copy of the base and the write-back). It does when the base is graph input `k`, the
/// scatter's result is an output written back into input `k`, both have the same layout, and no
/// step after the scatter reads the input (they would see the new values early).
pub(super) fn in_place_scatters(
    p: &Program,
    s: &Schedule,
    on_device: &[super::PartEntries],
) -> Vec<bool> {
    let mut out = vec![false; p.buffers.len()];
    for (at, step) in s.steps.iter().enumerate() {
        let Step::Library(id) = *step else { continue };
        let BufferKind::Scatter { base, .. } = p.buffers[id.index()].kind else {
            continue;
        };
        let BufferKind::Input(k) = p.buffers[base.index()].kind else {
            continue;
        };
        let written_back = p
            .writes_back
            .iter()
            .any(|w| w.input == k && p.outputs[w.output] == id);
        let (bl, sl) = (
            &p.buffers[base.index()].layout,
            &p.buffers[id.index()].layout,
        );
        let same_layout = bl.strides == sl.strides && bl.offset == sl.offset;
        out[id.index()] = on_device[id.index()].iter().any(Option::is_some)
            && written_back
            && same_layout
            && !p.outputs.contains(&base)
            && !s.steps[at + 1..].iter().any(|st| reads(p, s, st, base));
    }
    out
}

/// Whether `step` reads the storage of `input`.
fn reads(p: &Program, s: &Schedule, step: &Step, input: BufferId) -> bool {
    match *step {
        Step::Input(_) | Step::View(_) => false,
        Step::Library(id) => p.library_reads(id).contains(&input),
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
