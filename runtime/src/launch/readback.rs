//! Data-dependent values (`.item()`, a select's count) produced on the device and read back
//! lazily: a step copies its value into the session's readback array (in stream order, so later
//! steps may reuse the memory it came from) and the value's symbol stays unbound until a step
//! that evaluates it runs, or the call ends. Then every pending value comes back in one
//! download — one wait for the device, however many selects and items are pending — and each
//! is checked against its range and the asserts it completes.

use guardless_codegen::schedule::{Schedule, Step};
use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use guardless_ir::sym::{Expr, SymbolId};

use super::{dev, fail, ArgSource, Device, LaunchError, Session};
use crate::elements::{self, Either};

/// A value copied to the readback array, its symbol not yet bound.
pub(super) struct Pending {
    /// The step that produced it (errors name it).
    pub buffer: BufferId,
    pub symbol: SymbolId,
    pub dtype: DType,
    /// Its 8-byte slot in the readback array.
    pub slot: usize,
}

/// By buffer: the readback slot of a step that produces a symbol on the device (a select or an
/// item), and the number of slots.
pub(super) fn slots(p: &Program) -> (Vec<Option<usize>>, usize) {
    let mut n = 0;
    let of = p
        .buffers
        .iter()
        .map(|b| {
            b.kind.produced_symbol().map(|_| {
                n += 1;
                n - 1
            })
        })
        .collect();
    (of, n)
}

/// By schedule step: the symbols the launcher evaluates to run it — its buffers' layouts and
/// allocation sizes, its kernels' predicates, grids and parameters, a library step's operands
/// and sizes — less the one it produces. A pending value is read back before the first step
/// that needs it.
pub(super) fn step_needs(
    p: &Program,
    s: &Schedule,
    variant_entry: &[Vec<Option<usize>>],
    step_entries: &[super::PartEntries],
    params: &[Vec<ArgSource>],
) -> Vec<Vec<SymbolId>> {
    let mut alloc_exprs: Vec<Vec<Expr>> = vec![Vec::new(); p.buffers.len()];
    for a in &s.memory.allocations {
        alloc_exprs[a.buffer.index()].push(a.bytes);
        alloc_exprs[a.buffer.index()].extend(a.slot.map(|k| s.memory.slots[k]));
    }
    // A buffer's layout and, through views, the layouts of the buffers it reads storage of.
    let layout_of = |es: &mut Vec<Expr>, mut b: BufferId| loop {
        let buf = &p.buffers[b.index()];
        es.extend(buf.layout.sizes.iter().chain(&buf.layout.strides));
        es.push(buf.layout.offset);
        es.extend(alloc_exprs[b.index()].iter().copied());
        match buf.kind {
            BufferKind::View { base } => b = base,
            _ => break,
        }
    };
    let mut symbols = Vec::new();
    let of_entry = |es: &mut Vec<Expr>, symbols: &mut Vec<SymbolId>, entry: usize| {
        for a in &params[entry] {
            match a {
                ArgSource::Symbol(x) => symbols.push(*x),
                ArgSource::Expr(e) | ArgSource::Workspace(e) | ArgSource::FastDivisor(e) => {
                    es.push(*e)
                }
                ArgSource::Buffer(_)
                | ArgSource::Error
                | ArgSource::Value(_)
                | ArgSource::Phase => {}
            }
        }
    };
    s.steps
        .iter()
        .map(|step| {
            let mut es = Vec::new();
            symbols.clear();
            let mut made = None;
            match step {
                Step::Input(_) | Step::View(_) => {}
                Step::Kernel(k) => {
                    let kernel = &s.kernels[*k];
                    for m in &kernel.members {
                        layout_of(&mut es, m.buffer);
                    }
                    for (v, variant) in kernel.variants.iter().enumerate() {
                        es.extend([variant.predicate, variant.grid]);
                        if let Some(e) = variant_entry[*k][v] {
                            of_entry(&mut es, &mut symbols, e);
                        }
                    }
                }
                Step::Library(id) => {
                    made = p.buffers[id.index()].kind.produced_symbol();
                    layout_of(&mut es, *id);
                    for r in p.library_inputs(*id) {
                        layout_of(&mut es, r);
                    }
                    match &p.buffers[id.index()].kind {
                        BufferKind::Scatter { loops, .. } => es.extend(loops.ranges.iter()),
                        BufferKind::Sort { take, .. } => es.extend(*take),
                        _ => {}
                    }
                    for e in step_entries[id.index()].iter().flatten() {
                        of_entry(&mut es, &mut symbols, *e);
                    }
                }
            }
            symbols.extend(p.env.pool().free_symbols_of(&es));
            symbols.retain(|&x| Some(x) != made);
            symbols.sort();
            symbols.dedup();
            symbols.clone()
        })
        .collect()
}

impl<D: Device> Session<'_, D> {
    /// Copies the value `id` produces (one element of `dtype` at `src`) into its readback slot;
    /// its symbol is bound when a later step needs it.
    pub(super) fn defer(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        src: u64,
        dtype: DType,
    ) -> Result<(), LaunchError> {
        let p = &self.exe.program;
        let symbol = p.buffers[id.index()]
            .kind
            .produced_symbol()
            .expect("a step that produces a symbol");
        let slot = self.exe.readback_slot[id.index()].expect("a readback slot");
        let at = dev_.address(&self.readback) + 8 * slot as u64;
        dev(dev_.copy(at, src, dtype.size()))?;
        self.pending.push(Pending {
            buffer: id,
            symbol,
            dtype,
            slot,
        });
        self.syncs.push(id);
        Ok(())
    }

    /// Reads the pending values back when step `step` evaluates one of their symbols.
    pub(super) fn read_back_for(&mut self, dev_: &mut D, step: usize) -> Result<(), LaunchError> {
        let needs = &self.exe.needs[step];
        if self
            .pending
            .iter()
            .any(|x| needs.binary_search(&x.symbol).is_ok())
        {
            self.read_back(dev_)?;
        }
        Ok(())
    }

    /// Every pending value, in one download (which waits for the device); each symbol bound
    /// after checking its range and the asserts it completes.
    pub(super) fn read_back(&mut self, dev_: &mut D) -> Result<(), LaunchError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let used = self.pending.iter().map(|x| x.slot + 1).max().unwrap_or(0);
        let mut bytes = vec![0u8; 8 * used];
        dev(dev_.download(dev_.address(&self.readback), &mut bytes))?;
        self.readbacks += 1;
        let p = &self.exe.program;
        for x in std::mem::take(&mut self.pending) {
            let buf = &p.buffers[x.buffer.index()];
            let v = match elements::read(&bytes[8 * x.slot..], x.dtype, 0) {
                Either::I(v) => v,
                // `.item()` of a float as a size: truncated, as the host does.
                Either::F(v) => v as i64,
            };
            p.bind_produced(&mut self.b, x.symbol, v)
                .map_err(|m| fail(buf, m))?;
        }
        Ok(())
    }

    /// `.item()` on the device: its one element goes to the readback array, no host step.
    pub(super) fn device_item(&mut self, dev_: &mut D, id: BufferId) -> Result<(), LaunchError> {
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let BufferKind::Item { input, .. } = buf.kind else {
            unreachable!("an item step")
        };
        let from = &p.buffers[input.index()];
        let layout = self.layout(from)?;
        if layout.sizes.iter().product::<i64>() < 1 {
            return Err(fail(buf, "item() of an empty tensor".into()));
        }
        let src =
            self.address(input, dev_) + (layout.offset.max(0) as usize * from.dtype.size()) as u64;
        self.defer(dev_, id, src, from.dtype)
    }
}
