//! A kernel's parameters: the buffers it touches, the size symbols its code uses, and the C
//! parameter list and manifest entries made of them.

use std::fmt::Write;

use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use guardless_ir::sym::{cuda_symbol, Expr, SymbolId};
use rustc_hash::FxHashSet;

use super::body::storage_type;
use super::kernel::KernelSymbols;
use super::Param;
use crate::schedule::{Kernel, Residence, Role};

/// The buffers a kernel touches, in order of first use, and whether it writes each: stored
/// members are written; loads from outside the kernel, or of members stored in an earlier pass,
/// are read from memory.
pub(crate) fn kernel_buffers(p: &Program, k: &Kernel) -> Vec<(BufferId, bool)> {
    let mut buffers: Vec<(BufferId, bool)> = Vec::new();
    let mut slot: rustc_hash::FxHashMap<BufferId, usize> = rustc_hash::FxHashMap::default();
    let mut note = |b: BufferId, written: bool| match slot.get(&b) {
        Some(&i) => buffers[i].1 |= written,
        None => {
            slot.insert(b, buffers.len());
            buffers.push((b, written));
        }
    };
    for m in &k.members {
        if m.stored.is_some() {
            note(m.buffer, true);
        }
        if let BufferKind::Computed { body, .. } = &p.buffers[m.buffer.index()].kind {
            for (op, _) in &body.ops {
                if let guardless_ir::loop_ir::Op::Load { buffer, .. } = op {
                    if k.residence(*buffer, m.pass) == Residence::Memory {
                        note(*buffer, false);
                    }
                }
            }
        }
    }
    buffers
}

/// The graph symbols a kernel's sizes, strides, offsets and indices use (its parameters), sorted
/// by name; computed once per kernel, whatever the variant.
pub(super) fn size_symbols(
    p: &Program,
    k: &Kernel,
    buffers: &[(BufferId, bool)],
    locals: &FxHashSet<SymbolId>,
    syms: &mut KernelSymbols,
) -> Vec<SymbolId> {
    if let Some(s) = &syms.symbols {
        return s.clone();
    }
    let mut exprs: Vec<Expr> = vec![k.rows, k.row_len];
    exprs.extend(k.outer.iter().chain(&k.inner).copied());
    for m in &k.members {
        let b = &p.buffers[m.buffer.index()];
        exprs.extend(b.layout.sizes.iter().chain(&b.layout.strides).copied());
        exprs.push(b.layout.offset);
        if let BufferKind::Computed { body, loops } = &b.kind {
            exprs.extend(loops.ranges.iter().copied());
            if let Some((_, rr, _)) = &loops.reduction {
                exprs.extend(rr.iter().copied());
            }
            for (op, _) in &body.ops {
                match op {
                    guardless_ir::loop_ir::Op::Load { index, .. } => exprs.push(*index),
                    guardless_ir::loop_ir::Op::Index(e, _) => exprs.push(*e),
                    guardless_ir::loop_ir::Op::Bind { size, .. } => exprs.push(*size),
                    _ => {}
                }
            }
        }
    }
    for &(b, _) in buffers {
        let l = &p.buffers[b.index()].layout;
        exprs.extend(l.strides.iter().copied());
        exprs.push(l.offset);
    }
    // One walk over all of them (their subexpressions are shared).
    let mut symbols: Vec<SymbolId> = p
        .env
        .pool()
        .free_symbols_of(&exprs)
        .into_iter()
        .filter(|id| !locals.contains(id))
        .collect();
    symbols.sort_by_key(|&id| p.env.symbol_name(id).to_string());
    syms.symbols = Some(symbols.clone());
    symbols
}

/// What a kernel's parameter list is made of.
pub(super) struct KernelShape<'a> {
    pub(super) buffers: &'a [(BufferId, bool)],
    pub(super) pointers: &'a [String],
    pub(super) symbols: &'a [SymbolId],
    pub(super) idx: &'static str,
    pub(super) blocks: i64,
    pub(super) reductions: usize,
    pub(super) passes: usize,
}

/// The kernel's parameters (C declarations and their manifest entries): buffers, size symbols,
/// derived symbols, a split reduction's workspace and phase, the error flag; the declarations
/// casting the symbols to the index type; and the launches per execution.
pub(super) fn kernel_params(
    p: &Program,
    k: &Kernel,
    s: KernelShape,
    syms: &mut KernelSymbols,
) -> (Vec<String>, Vec<Param>, String, usize) {
    let (idx, blocks, reductions, passes) = (s.idx, s.blocks, s.reductions, s.passes);
    let mut params_c = Vec::new();
    let mut params = Vec::new();
    for &(b, written) in s.buffers {
        let t = storage_type(p.buffers[b.index()].dtype);
        let q = if written { "" } else { "const " };
        params_c.push(format!("{q}{t}* __restrict__ {}", s.pointers[b.index()]));
        params.push(Param::Buffer {
            buffer: p.buffers[b.index()].name.clone(),
            written,
        });
    }
    let mut decls = String::new();
    for &id in s.symbols {
        let n = p.env.symbol_name(id).to_string();
        params_c.push(format!("long long gl_sym_{n}"));
        params.push(Param::Symbol { name: n.clone() });
        let _ = writeln!(
            decls,
            "  const {idx} {} = ({idx})gl_sym_{n};",
            cuda_symbol(&n)
        );
    }
    for &(id, e) in &syms.hoister.derived {
        let n = p.env.symbol_name(id).to_string();
        params_c.push(format!("long long gl_sym_{n}"));
        let expr = syms
            .texts
            .entry(id)
            .or_insert_with(|| p.env.text(e))
            .clone();
        params.push(Param::Derived {
            name: n.clone(),
            expr,
        });
        let _ = writeln!(
            decls,
            "  const {idx} {} = ({idx})gl_sym_{n};",
            cuda_symbol(&n)
        );
    }
    for (k, &d) in syms.fast_divisors.iter().enumerate() {
        params_c.push(format!("long long gl_fd{k}"));
        params.push(Param::FastDivisor {
            name: format!("gl_fd{k}"),
            expr: p.env.text(d),
        });
    }
    let mut phases = 1;
    if blocks > 0 {
        let rows = p.env.text(k.rows);
        params_c.push("char* __restrict__ gl_work".into());
        params.push(Param::Workspace {
            bytes: format!("{}*({rows})", 16 * blocks * reductions.max(1) as i64),
        });
        params_c.push("long long gl_phase".into());
        params.push(Param::Phase);
        let last_reduces = k
            .members
            .iter()
            .any(|m| m.pass == passes - 1 && m.role == Role::Reduction);
        phases = passes + usize::from(last_reduces);
    }
    params_c.push("int* __restrict__ gl_error".into());
    params.push(Param::Error);
    (params_c, params, decls, phases)
}
