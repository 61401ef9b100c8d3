//! Persistent reductions keep a row in registers: each thread's share of an input that several
//! passes read is loaded once (in the first pass) into `gl_cN[step][lane]` and read from there
//! after. This decides which loads are cached, within the register file.

use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use guardless_ir::sym::{Expr, SymbolId};

use super::body::{compute_type, unmasked_loads};
use crate::schedule::config::{persistent_limit, KernelConfig};
use crate::schedule::{Kernel, Residence};

/// An input of a persistent reduction read in several passes, kept in registers.
pub(super) struct CachedLoad {
    /// The buffer and the index (in the kernel's variables).
    pub(super) key: (BufferId, Expr),
    /// The pass that loads it; the others read `name[step][lane]`.
    pub(super) first_pass: usize,
    pub(super) passes: Vec<usize>,
    pub(super) name: String,
    pub(super) ty: &'static str,
}

/// A load's key: its index in the kernel's variables (`vars`: the member's map to them).
pub(super) fn load_key(p: &mut Program, vars: &[(SymbolId, Expr)], index: Expr) -> Expr {
    let e = p.env.pool_mut().substitute_pairs(index, vars);
    p.env.simplify(e)
}

/// The loads a persistent variant keeps in registers (empty: none worth it or none fit, and the
/// looped code serves) and the most steps of `lanes` elements a row takes (its bound).
pub(super) fn cached_loads(
    p: &mut Program,
    k: &Kernel,
    c: &KernelConfig,
    member_vars: &[Vec<(SymbolId, Expr)>],
    lpt: i64,
) -> (Vec<CachedLoad>, i64) {
    let bound = p
        .env
        .bound(k.row_len)
        .hi
        .min(persistent_limit(c.threads_per_row) as i128);
    let steps = ((bound.max(1) as i64) + c.lanes - 1) / c.lanes.max(1);
    let member_of: rustc_hash::FxHashSet<BufferId> = k.members.iter().map(|m| m.buffer).collect();
    let mut cached: Vec<CachedLoad> = Vec::new();
    for (mi, m) in k.members.iter().enumerate() {
        let BufferKind::Computed { body, .. } = &p.buffers[m.buffer.index()].kind.clone() else {
            continue;
        };
        for (_, buffer, index, d) in unmasked_loads(body) {
            if member_of.contains(&buffer) {
                continue;
            }
            let key = (buffer, load_key(p, &member_vars[mi], index));
            match cached.iter_mut().find(|x| x.key == key) {
                Some(x) => {
                    x.first_pass = x.first_pass.min(m.pass);
                    if !x.passes.contains(&m.pass) {
                        x.passes.push(m.pass);
                    }
                }
                None => cached.push(CachedLoad {
                    key,
                    first_pass: m.pass,
                    passes: vec![m.pass],
                    name: format!("gl_c{}", cached.len()),
                    ty: compute_type(d),
                }),
            }
        }
    }
    cached.retain(|x| x.passes.len() > 1);
    // An IEEE float division is a subroutine call whose spills fail the compile once the
    // row's steps are unrolled around it; such kernels re-read the row instead (for now).
    let divides = k
        .members
        .iter()
        .any(|m| match &p.buffers[m.buffer.index()].kind {
            BufferKind::Computed { body, .. } => {
                divides_per_element(body, &|b| k.residence(b, m.pass) == Residence::RowValue)
            }
            _ => false,
        });
    if divides {
        cached.clear();
    }
    // Within the configuration's budget (`KernelConfig::row_cache`); what does not fit is re-read.
    let budget = c.row_cache;
    let mut used = 0;
    cached.retain(|_| {
        let fits = used + steps * lpt <= budget;
        if fits {
            used += steps * lpt;
        }
        fits
    });
    (cached, steps)
}

/// Whether `body` divides floats that change from element to element (the division depends on a
/// load of memory or of an elementwise value): a division of a row value by a constant (RMSNorm's
/// mean) is loop-invariant and hoisted by the compiler.
pub(super) fn divides_per_element(
    body: &guardless_ir::loop_ir::Body,
    row_value: &dyn Fn(BufferId) -> bool,
) -> bool {
    use guardless_ir::loop_ir::{BinaryOp, Op};
    let mut varies = vec![false; body.ops.len()];
    for (i, &(op, d)) in body.ops.iter().enumerate() {
        let mut any = false;
        op.for_each_operand(|v| any |= varies[v.0 as usize]);
        varies[i] = match op {
            Op::Load { buffer, .. } => !row_value(buffer) || any,
            Op::Index(..) | Op::Bind { .. } => true,
            Op::Constant(_) => false,
            _ => any,
        };
        if let Op::Binary(BinaryOp::Div, _, _) = op {
            if d.is_float() && varies[i] {
                return true;
            }
        }
    }
    false
}
