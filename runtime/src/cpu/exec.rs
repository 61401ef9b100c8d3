//! Running a compiled schedule natively: storage from the memory plan, kernels over rows split
//! across threads, matmuls in `matmul`, other library steps through the interpreter.

use guardless_codegen::schedule::Step;
use guardless_ir::graph::DType;
use guardless_ir::loop_ir::interp::RunError;
use guardless_ir::loop_ir::{
    Buffer, BufferId, BufferKind, ExternKernel, Layout, LayoutValues, Op, Program, ScatterCombine,
};
use guardless_ir::sym::{Bindings, SymbolId};
use guardless_ir::tensor::{Data, HostTensor};

use super::jit::{shape_of, Jit};
use super::memory::{self, Block};
use super::{CpuProgram, NativeOutputs, OutputStorage, OutputView, RawTensor, RunOptions};
use crate::elements::{self, Either};

/// The inputs of a call: host tensors (copied in), or tensors in the caller's memory (read in
/// place when their layout is the graph's, else copied).
#[derive(Clone, Copy)]
pub(super) enum Inputs<'a> {
    Host(&'a [HostTensor]),
    Raw(&'a [RawTensor]),
}

fn fail(buf: &Buffer, message: String) -> RunError {
    RunError::Buffer {
        buffer: buf.name.clone(),
        origins: buf.origins.join(", "),
        message,
    }
}

struct State<'p> {
    p: &'p Program,
    b: Bindings,
    blocks: Vec<Block>,
    home: Vec<usize>,
    /// Every symbol's value for the kernels, recomputed only after bindings changed.
    syms: Vec<i64>,
    syms_stale: bool,
    poison: bool,
}

impl State<'_> {
    fn eval(&self, buf: &Buffer, e: guardless_ir::sym::Expr) -> Result<i64, RunError> {
        self.p
            .env
            .evaluate(e, &self.b)
            .map_err(|x| fail(buf, x.to_string()))
    }

    /// `l` (a layout of `buf`'s storage) at the current values.
    fn layout(&self, buf: &Buffer, l: &Layout) -> Result<LayoutValues, RunError> {
        l.evaluate(&self.p.env, &self.b)
            .map_err(|x| fail(buf, x.to_string()))
    }

    fn sizes(&self, buf: &Buffer) -> Result<Vec<i64>, RunError> {
        Ok(self.layout(buf, &buf.layout)?.sizes)
    }

    /// Offset and strides of a layout at the current values.
    fn strides(&self, buf: &Buffer, l: &Layout) -> Result<(i64, Vec<i64>), RunError> {
        let v = self.layout(buf, l)?;
        Ok((v.offset, v.strides))
    }

    /// Storage for `id` before it is written: at least its extent, in its home block.
    fn allocate(&mut self, id: BufferId) -> Result<(), RunError> {
        let buf = &self.p.buffers[id.index()];
        let bytes = guardless_ir::memory::checked_bytes(
            self.extent(id)? as u128,
            buf.dtype.size(),
            guardless_ir::memory::Place::Host,
            &|| "its storage".to_string(),
        )
        .map_err(|m| fail(buf, m))?;
        let h = self.home[id.index()];
        if self.blocks[h].is_borrowed() {
            return Err(fail(
                buf,
                "it would be written into an input's storage".into(),
            ));
        }
        self.blocks[h].ensure(bytes.max(8), self.poison);
        Ok(())
    }

    /// The elements `id`'s layout spans (0 when empty).
    fn extent(&self, id: BufferId) -> Result<usize, RunError> {
        let buf = &self.p.buffers[id.index()];
        self.layout(buf, &buf.layout)?
            .extent()
            .map_err(|m| fail(buf, m))
    }

    /// The symbol table the kernels read, brought up to date with the bindings.
    fn symbols(&mut self) -> *const i64 {
        if self.syms_stale {
            let env = &self.p.env;
            for (i, v) in self.syms.iter_mut().enumerate() {
                *v = env
                    .symbol_value(SymbolId::from_index(i), &self.b)
                    .unwrap_or(0);
            }
            self.syms_stale = false;
        }
        self.syms.as_ptr()
    }

    /// The storage of each of `buffers` (null for an empty one).
    fn pointers(&mut self, buffers: &[BufferId]) -> Vec<*mut u8> {
        buffers
            .iter()
            .map(|b| {
                let blk = &mut self.blocks[self.home[b.index()]];
                if blk.bytes() == 0 {
                    std::ptr::null_mut()
                } else {
                    blk.ptr()
                }
            })
            .collect()
    }

    /// Every element of `id` in row-major order, read through its layout.
    fn elements(&self, id: BufferId) -> Result<(Vec<usize>, Data), RunError> {
        let buf = &self.p.buffers[id.index()];
        let sizes = self.sizes(buf)?;
        let (off, strides) = self.strides(buf, &buf.layout)?;
        let shape: Vec<usize> = sizes.iter().map(|&s| s.max(0) as usize).collect();
        let numel = guardless_ir::memory::checked_numel(&shape, 8, &|| "the output".to_string())
            .map_err(|m| fail(buf, m))?;
        let bytes = self.blocks[self.home[id.index()]].as_bytes();
        let mut idx = vec![0usize; shape.len()];
        let (mut fs, mut is) = (Vec::new(), Vec::new());
        for _ in 0..numel {
            let at = off
                + idx
                    .iter()
                    .zip(&strides)
                    .map(|(&i, &s)| i as i64 * s)
                    .sum::<i64>();
            if at < 0 || (at as usize + 1) * buf.dtype.size() > bytes.len() {
                return Err(fail(buf, format!("read out of bounds at {at}")));
            }
            match elements::read(bytes, buf.dtype, at as usize) {
                Either::F(x) => fs.push(x),
                Either::I(x) => is.push(x),
            }
            for k in (0..shape.len()).rev() {
                idx[k] += 1;
                if idx[k] < shape[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
        let data = if buf.dtype.is_float() {
            Data::Float(fs)
        } else {
            Data::Int(is)
        };
        Ok((shape, data))
    }
}

/// A prepared call: inputs in native storage, ready to execute (repeatedly, for benchmarks).
pub struct Session<'p> {
    cp: &'p CpuProgram,
    jit: &'p Jit,
    st: State<'p>,
    given: Bindings,
    threads: usize,
    /// Input bytes copied into native storage (0 when every input was read in place).
    pub copied_input_bytes: usize,
    /// Bytes written back into mutated inputs by the last `execute` (see `write_back`).
    pub written_back_bytes: usize,
    /// The caller's tensors when passed in place: outputs that mutate an input copied into
    /// native storage are written back to them too.
    raw: Vec<RawTensor>,
}

/// # Safety
/// Every [`RawTensor`] in `inputs` must stay valid and unwritten while the session lives.
pub(super) unsafe fn session<'p>(
    cp: &'p CpuProgram,
    jit: &'p Jit,
    inputs: Inputs<'_>,
    bindings: &Bindings,
    options: &RunOptions,
) -> Result<Session<'p>, RunError> {
    let p = &cp.program;
    let s = &cp.schedule;
    p.env
        .check_bindings(bindings)
        .map_err(|e| RunError::Assert(e.to_string()))?;
    let n = p.buffers.len();
    let slots = s.memory.slots.len();
    let mut st = State {
        p,
        b: bindings.clone(),
        blocks: (0..slots + n).map(|_| Block::default()).collect(),
        home: cp.homes.clone(),
        syms: vec![0; p.env.pool().symbol_count()],
        syms_stale: true,
        poison: options.poison,
    };
    let mut copied_input_bytes = 0;
    for step in &s.steps {
        if let Step::Input(id) = step {
            copied_input_bytes += match inputs {
                Inputs::Host(t) => input(&mut st, *id, t)?,
                Inputs::Raw(t) => raw_input(&mut st, *id, t)?,
            };
        }
    }
    // A result computed in an input's storage (see `CpuProgram::in_place`) when that input is
    // the caller's memory, read in place: the result and its views live there.
    for (id, input) in cp.in_place.iter().enumerate() {
        let Some(input) = input else { continue };
        let h = st.home[input.index()];
        if st.blocks[h].is_borrowed() {
            for (j, &root) in cp.roots.iter().enumerate() {
                if root == id {
                    st.home[j] = h;
                }
            }
        }
    }
    let threads = match options.threads {
        0 => cores(),
        t => t,
    };
    Ok(Session {
        cp,
        jit,
        st,
        given: bindings.clone(),
        threads,
        copied_input_bytes,
        written_back_bytes: 0,
        raw: match inputs {
            Inputs::Raw(t) => t.to_vec(),
            Inputs::Host(_) => Vec::new(),
        },
    })
}

/// The threads a call may use: rayon's pool (`RAYON_NUM_THREADS`, else the cores this process
/// may use), the pool the parallel kernels and matmuls run on. Asking for more parts than it
/// has threads only queues them behind each other while the caller waits.
fn cores() -> usize {
    rayon::current_num_threads()
}

impl Session<'_> {
    /// Runs every step after the inputs.
    pub fn execute(&mut self) -> Result<(), RunError> {
        self.st.b = self.given.clone();
        self.st.syms_stale = true;
        for step in &self.cp.schedule.steps {
            match step {
                Step::Input(_) | Step::View(_) => {}
                Step::Kernel(ki) => kernel(&mut self.st, self.cp, self.jit, *ki, self.threads)?,
                Step::Library(id) => library(&mut self.st, self.jit, *id, self.threads)?,
            }
        }
        self.write_back()
    }

    /// Outputs that mutate an input, copied into it once every kernel is done: into the
    /// session's storage of the input (a later `execute` reads the new values) and, for an
    /// input the caller passed in place, into the caller's memory.
    fn write_back(&mut self) -> Result<(), RunError> {
        let p = self.st.p;
        self.written_back_bytes = 0;
        for w in &p.writes_back {
            let Some(id) = p.input_buffer(w.input) else {
                continue;
            };
            let out = p.outputs[w.output];
            if self.st.home[out.index()] == self.st.home[id.index()] {
                // Computed in the input's storage: nothing to write back.
                continue;
            }
            if self.copy_back(out, id)? {
                continue;
            }
            // Read whole first: the output may share storage with the input.
            let (shape, data) = self.st.elements(out)?;
            let value = HostTensor {
                dtype: p.buffers[out.index()].dtype,
                shape,
                data,
            };
            self.written_back_bytes += value.numel() * value.dtype.size();
            let buf = &p.buffers[id.index()];
            let (off, strides) = self.st.strides(buf, &buf.layout)?;
            let h = self.st.home[id.index()];
            let block = &mut self.st.blocks[h];
            let borrowed = block.is_borrowed();
            // Safety: an input the graph mutates is the caller's to have written (documented on
            // `CpuProgram::run_raw`).
            let bytes = match unsafe { block.borrowed_mut() } {
                Some(b) => b,
                None => block.as_bytes_mut(),
            };
            elements::scatter(bytes, off, &strides, &value).map_err(|m| fail(buf, m))?;
            if let (false, Some(t)) = (borrowed, self.raw.get(w.input)) {
                unsafe { memory::write_raw(t, &value) }.map_err(|m| fail(buf, m))?;
            }
        }
        Ok(())
    }

    /// Output `out` copied into input `id`'s storage element by element in their own bytes (one
    /// `memcpy` when both are dense), when they are of one dtype in distinct blocks and the
    /// input's storage is the caller's memory or the session's own. False: the caller takes the
    /// general path (through host values).
    fn copy_back(&mut self, out: BufferId, id: BufferId) -> Result<bool, RunError> {
        let p = self.st.p;
        let (ob, ib) = (&p.buffers[out.index()], &p.buffers[id.index()]);
        let (oh, ih) = (self.st.home[out.index()], self.st.home[id.index()]);
        let raw_copy = !self.st.blocks[ih].is_borrowed() && !self.raw.is_empty();
        if ob.dtype != ib.dtype || raw_copy {
            return Ok(false);
        }
        let from = self.st.layout(ob, &ob.layout)?;
        let to = self.st.layout(ib, &ib.layout)?;
        if from.sizes != to.sizes {
            return Ok(false);
        }
        let size = ob.dtype.size();
        let (Ok(from_n), Ok(to_n)) = (from.extent(), to.extent()) else {
            return Ok(false); // negative strides: the general path
        };
        if from_n * size > self.st.blocks[oh].bytes() || to_n * size > self.st.blocks[ih].bytes() {
            return Err(fail(
                ib,
                "a written-back output exceeds the input's storage".into(),
            ));
        }
        let sizes = &from.sizes;
        let numel: i64 = sizes.iter().map(|&n| n.max(0)).product();
        let dense = |v: &LayoutValues| {
            (0..sizes.len())
                .all(|d| sizes[d] <= 1 || v.strides[d] == sizes[d + 1..].iter().product::<i64>())
        };
        let src = self.st.blocks[oh].ptr() as *const u8;
        let block = &mut self.st.blocks[ih];
        // Safety: an input the graph mutates is the caller's to have written (documented on
        // `CpuProgram::run_raw`); both layouts lie inside their blocks (checked above), which are
        // distinct.
        let dst = match unsafe { block.borrowed_mut() } {
            Some(b) => b.as_mut_ptr(),
            None => block.as_bytes_mut().as_mut_ptr(),
        };
        unsafe {
            if dense(&from) && dense(&to) {
                std::ptr::copy_nonoverlapping(
                    src.add(from.offset as usize * size),
                    dst.add(to.offset as usize * size),
                    numel as usize * size,
                );
            } else {
                for k in 0..numel {
                    let a = element_at(k, sizes, from.offset, &from.strides) as usize;
                    let b = element_at(k, sizes, to.offset, &to.strides) as usize;
                    std::ptr::copy_nonoverlapping(src.add(a * size), dst.add(b * size), size);
                }
            }
        }
        self.written_back_bytes += numel as usize * size;
        Ok(true)
    }

    /// The graph's outputs of the last execution.
    pub fn outputs(&self) -> Result<Vec<HostTensor>, RunError> {
        let p = self.st.p;
        let mut outs = Vec::with_capacity(p.outputs.len());
        for &o in &p.outputs {
            let (shape, data) = self.st.elements(o)?;
            outs.push(HostTensor {
                dtype: p.buffers[o.index()].dtype,
                shape,
                data,
            });
        }
        Ok(outs)
    }
}

impl Session<'_> {
    /// The graph's outputs of the last execution, left where the kernels wrote them: their
    /// storage moves to the caller (no copy) and the session's blocks are emptied.
    pub fn take_outputs(&mut self) -> Result<NativeOutputs, RunError> {
        let p = self.st.p;
        let mut storages = Vec::new();
        let mut storage_of_block = vec![None; self.st.blocks.len()];
        let mut outputs = Vec::with_capacity(p.outputs.len());
        for &o in &p.outputs {
            let buf = &p.buffers[o.index()];
            let sizes = self.st.sizes(buf)?;
            let (offset, strides) = self.st.strides(buf, &buf.layout)?;
            let h = self.st.home[o.index()];
            let borrowed = self.st.blocks[h].is_borrowed();
            let storage = match p.buffers[p.storage_root(o).index()].kind {
                BufferKind::Input(k) if borrowed => OutputStorage::Input(k),
                // Computed in place in an input's storage.
                _ if borrowed => OutputStorage::Input(self.input_of_block(h).ok_or_else(|| {
                    fail(buf, "an output in borrowed storage of no input".into())
                })?),
                _ => OutputStorage::Owned(*storage_of_block[h].get_or_insert_with(|| {
                    storages.push(self.st.blocks[h].take_words());
                    storages.len() - 1
                })),
            };
            if let OutputStorage::Owned(s) = storage {
                // Layouts were checked against their storage when written; check once more
                // before the caller builds views over it.
                let extent = if sizes.iter().any(|&n| n <= 0) {
                    0
                } else {
                    offset
                        + 1
                        + sizes
                            .iter()
                            .zip(&strides)
                            .map(|(&n, &st)| (n - 1) * st)
                            .sum::<i64>()
                };
                if extent as usize * buf.dtype.size() > storages[s].len() * 8 {
                    return Err(fail(buf, "an output's layout exceeds its storage".into()));
                }
            }
            outputs.push(OutputView {
                storage,
                dtype: buf.dtype,
                shape: sizes.iter().map(|&n| n.max(0) as usize).collect(),
                strides,
                offset,
            });
        }
        Ok(NativeOutputs {
            storages,
            outputs,
            copied_input_bytes: self.copied_input_bytes,
            written_back_bytes: self.written_back_bytes,
        })
    }
}

impl Session<'_> {
    /// The graph input whose (borrowed) storage block `h` is.
    fn input_of_block(&self, h: usize) -> Option<usize> {
        self.st
            .p
            .buffers
            .iter()
            .enumerate()
            .find_map(|(i, b)| match b.kind {
                BufferKind::Input(k) if self.st.home[i] == h => Some(k),
                _ => None,
            })
    }
}

/// Reads input `k` in place when its layout is the graph's (offset 0, the same strides, aligned);
/// otherwise copies it into native storage. Returns the bytes copied.
fn raw_input(st: &mut State, id: BufferId, inputs: &[RawTensor]) -> Result<usize, RunError> {
    let p = st.p;
    let buf = &p.buffers[id.index()];
    let BufferKind::Input(k) = buf.kind else {
        unreachable!("an input step")
    };
    let err = |message: String| RunError::Input { index: k, message };
    let t = inputs.get(k).ok_or_else(|| err("missing".into()))?;
    let sizes = st.sizes(buf)?;
    memory::check_raw(t, buf.dtype, &sizes).map_err(err)?;
    let size = buf.dtype.size();
    if t.shape.contains(&0) {
        return Ok(0);
    }
    let (off, strides) = st.strides(buf, &buf.layout)?;
    let h = st.home[id.index()];
    let same = off == 0
        && (t.ptr as usize) % size == 0
        && sizes
            .iter()
            .zip(strides.iter().zip(&t.strides))
            .all(|(&n, (&a, &b))| n == 1 || a == b);
    if same {
        let bytes = st.extent(id)? * size;
        st.blocks[h] = Block::borrowed(t.ptr, bytes);
        return Ok(0);
    }
    st.allocate(id)?;
    let src = unsafe { std::slice::from_raw_parts(t.ptr, t.bytes) };
    let bytes = st.blocks[h].as_bytes_mut();
    let numel: usize = t.shape.iter().product();
    let mut idx = vec![0i64; sizes.len()];
    for _ in 0..numel {
        let dot = |s: &[i64]| idx.iter().zip(s).map(|(&i, &s)| i * s).sum::<i64>();
        let v = elements::read(src, buf.dtype, dot(&t.strides) as usize);
        elements::write(bytes, buf.dtype, (off + dot(&strides)) as usize, v);
        elements::next_index(&mut idx, &sizes);
    }
    Ok(numel * size)
}

fn input(st: &mut State, id: BufferId, inputs: &[HostTensor]) -> Result<usize, RunError> {
    let p = st.p;
    let buf = &p.buffers[id.index()];
    let BufferKind::Input(k) = buf.kind else {
        unreachable!("an input step")
    };
    let t = inputs.get(k).ok_or(RunError::Input {
        index: k,
        message: "missing".into(),
    })?;
    let sizes = st.sizes(buf)?;
    let numel: i64 = sizes.iter().product();
    if t.numel() as i64 != numel {
        return Err(RunError::Input {
            index: k,
            message: format!("{} elements, expected {numel}", t.numel()),
        });
    }
    st.allocate(id)?;
    let (off, strides) = st.strides(buf, &buf.layout)?;
    let h = st.home[id.index()];
    let bytes = st.blocks[h].as_bytes_mut();
    let mut idx = vec![0i64; sizes.len()];
    for e in 0..numel.max(0) as usize {
        let at = off + idx.iter().zip(&strides).map(|(&i, &s)| i * s).sum::<i64>();
        let v = match &t.data {
            Data::Float(v) => Either::F(v[e]),
            Data::Int(v) => Either::I(v[e]),
        };
        let v = match (v, buf.dtype.is_float()) {
            (Either::F(x), false) => Either::I(x as i64),
            (v, _) => v,
        };
        elements::write(bytes, buf.dtype, at as usize, v);
        elements::next_index(&mut idx, &sizes);
    }
    Ok(numel.max(0) as usize * buf.dtype.size())
}

struct SendPtr(*const *mut u8, *const i64);
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

fn kernel(
    st: &mut State,
    cp: &CpuProgram,
    jit: &Jit,
    ki: usize,
    threads: usize,
) -> Result<(), RunError> {
    let p = st.p;
    let k = &cp.schedule.kernels[ki];
    let first = &p.buffers[k.members[0].buffer.index()];
    for m in &k.members {
        if m.stored.is_some() {
            st.allocate(m.buffer)?;
        }
    }
    let shape = shape_of(k);
    let mut rows = 1i64;
    for &d in &shape.row_dims {
        rows = rows.saturating_mul(st.eval(first, d)?.max(0));
    }
    let mut len = 1i64;
    for &d in &shape.elem_dims {
        len = len.saturating_mul(st.eval(first, d)?.max(0));
    }
    if rows == 0 {
        return Ok(());
    }
    // The kernel's own pointer table (its function may be shared with kernels of the same
    // structure over other buffers).
    let ptrs = st.pointers(&jit.buffers[ki]);
    let f = jit.kernels[ki];
    let parts = if rows >= 2 && threads > 1 && rows.saturating_mul(len) >= 1 << 15 {
        threads.min(rows as usize)
    } else {
        1
    };
    let args = SendPtr(ptrs.as_ptr(), st.symbols());
    // Per part: the error code and the values its message shows, and the row cache.
    let mut errs = vec![[0i64; 4]; parts];
    let words = jit.cache_slots[ki] * len.max(0) as usize;
    let mut scratch: Vec<Vec<u64>> = (0..parts).map(|_| vec![0u64; words]).collect();
    if parts == 1 {
        let s = scratch[0].as_mut_ptr() as *mut u8;
        unsafe { f(args.0, args.1, 0, rows, errs[0].as_mut_ptr(), s) };
    } else {
        let per = (rows as usize).div_ceil(parts) as i64;
        // Rayon's pool: its threads live across calls (spawning OS threads per kernel cost
        // ~0.1 ms, more than a small kernel's work).
        rayon::scope(|sc| {
            for (t, (e, s)) in errs.iter_mut().zip(scratch.iter_mut()).enumerate() {
                let args = &args;
                let (begin, end) = (t as i64 * per, ((t as i64 + 1) * per).min(rows));
                sc.spawn(move |_| unsafe {
                    f(
                        args.0,
                        args.1,
                        begin,
                        end,
                        e.as_mut_ptr(),
                        s.as_mut_ptr() as *mut u8,
                    )
                });
            }
        });
    }
    if let Some(e) = errs.iter().find(|e| e[0] != 0) {
        let (buffer, origins, mut message) = jit.errors[ki][e[0] as usize - 1].clone();
        for k in 0..3 {
            message = message.replace(&format!("{{{k}}}"), &e[k + 1].to_string());
        }
        return Err(RunError::Buffer {
            buffer,
            origins,
            message,
        });
    }
    Ok(())
}

fn library(st: &mut State, jit: &Jit, id: BufferId, threads: usize) -> Result<(), RunError> {
    let p = st.p;
    let buf = &p.buffers[id.index()];
    if let BufferKind::Extern { kernel, inputs } = &buf.kind {
        let dtype = p.buffers[inputs[0].index()].dtype;
        // Floats into their own dtype, or bf16/f16 (no bias) into f32.
        let widened = dtype != buf.dtype
            && matches!(dtype, DType::F16 | DType::BF16)
            && buf.dtype == DType::F32
            && *kernel != ExternKernel::AddMm;
        if matches!(
            kernel,
            ExternKernel::Mm | ExternKernel::AddMm | ExternKernel::Bmm
        ) && dtype.is_float()
            && (dtype == buf.dtype || widened)
            && inputs.iter().all(|i| p.buffers[i.index()].dtype == dtype)
        {
            return matmul(st, id, *kernel, inputs, threads);
        }
        if let ExternKernel::Attention(spec) = kernel {
            return attention(st, id, *spec, inputs, threads);
        }
        if let ExternKernel::PagedAttention(spec) = kernel {
            return paged_attention(st, id, *spec, inputs, threads);
        }
    }
    if scatter(st, jit, id)? {
        return Ok(());
    }
    let reads = p.library_reads(id);
    let mut values = Vec::with_capacity(reads.len());
    for r in reads {
        let rb = &p.buffers[r.index()];
        let blk = &st.blocks[st.home[r.index()]];
        let n = st.extent(r)?.min(blk.bytes() / rb.dtype.size());
        values.push((r, elements::to_data(blk.as_bytes(), rb.dtype, n)));
    }
    let data = p.run_library_step(id, &values, &mut st.b)?;
    st.syms_stale = true;
    if matches!(buf.kind, BufferKind::Item { .. }) {
        return Ok(());
    }
    st.allocate(id)?;
    let h = st.home[id.index()];
    let need = match &data {
        Data::Float(v) => v.len(),
        Data::Int(v) => v.len(),
    } * buf.dtype.size();
    if st.blocks[h].bytes() < need {
        st.blocks[h].ensure(need, false);
    }
    elements::from_data(st.blocks[h].as_bytes_mut(), buf.dtype, &data);
    Ok(())
}

/// A `write` scatter natively (`index_put`, `index_copy`: a KV-cache update): the base copied
/// into the result (one `memcpy` when both are dense in row-major order; nothing when the
/// result is computed in the base's storage), then only the updates written, by the JIT's
/// function of the scatter (`llvm::scatter`; the interpreter computes them where there is
/// none). False (the caller interprets the whole step) for a combining scatter, a body that
/// reads the base, or a result that shares the base's storage under another layout.
fn scatter(st: &mut State, jit: &Jit, id: BufferId) -> Result<bool, RunError> {
    let p = st.p;
    let buf = &p.buffers[id.index()];
    let BufferKind::Scatter {
        base,
        body,
        combine: ScatterCombine::Write,
        ..
    } = &buf.kind
    else {
        return Ok(false);
    };
    let root = p.storage_root(*base);
    let mut loads: Vec<BufferId> = body
        .ops
        .iter()
        .filter_map(|(op, _)| match op {
            Op::Load { buffer, .. } => Some(p.storage_root(*buffer)),
            _ => None,
        })
        .collect();
    loads.sort_by_key(|b| b.0);
    loads.dedup();
    let from = &p.buffers[base.index()];
    let (sizes, from_off, from_strides) = {
        let v = st.layout(from, &from.layout)?;
        (v.sizes, v.offset, v.strides)
    };
    let (out_off, out_strides) = st.strides(buf, &buf.layout)?;
    let shared = st.home[root.index()] == st.home[id.index()];
    if loads.contains(&root) || (shared && (from_off, &from_strides) != (out_off, &out_strides)) {
        return Ok(false);
    }
    let native = jit.scatters.get(&id);
    let updates = match native {
        Some(_) => None,
        None => {
            let mut values = Vec::with_capacity(loads.len());
            for r in loads {
                let rb = &p.buffers[r.index()];
                let blk = &st.blocks[st.home[r.index()]];
                let n = st.extent(r)?.min(blk.bytes() / rb.dtype.size());
                values.push((r, elements::to_data(blk.as_bytes(), rb.dtype, n)));
            }
            let updates = p.scatter_updates(id, &values, &mut st.b)?;
            st.syms_stale = true;
            Some(updates)
        }
    };
    let size = buf.dtype.size();
    if !shared {
        st.allocate(id)?;
        let src = st.blocks[st.home[root.index()]].ptr() as *const u8;
        let dst = st.blocks[st.home[id.index()]].ptr();
        let dense = |strides: &[i64]| {
            (0..sizes.len())
                .all(|d| sizes[d] <= 1 || strides[d] == sizes[d + 1..].iter().product::<i64>())
        };
        let numel: i64 = sizes.iter().map(|&n| n.max(0)).product();
        // Safety: both layouts were checked against their storage (the base's when it was
        // read or written, the result's when allocated); the blocks are distinct.
        unsafe {
            if dense(&from_strides) && dense(&out_strides) {
                std::ptr::copy_nonoverlapping(
                    src.offset(from_off as isize * size as isize),
                    dst.offset(out_off as isize * size as isize),
                    numel as usize * size,
                );
            } else {
                for k in 0..numel {
                    let (a, b) = (
                        element_at(k, &sizes, from_off, &from_strides),
                        element_at(k, &sizes, out_off, &out_strides),
                    );
                    std::ptr::copy_nonoverlapping(
                        src.offset(a as isize * size as isize),
                        dst.offset(b as isize * size as isize),
                        size,
                    );
                }
            }
        }
    }
    let Some((targets, data)) = updates else {
        let f = native.expect("a native function where no updates were interpreted");
        let BufferKind::Scatter { loops, .. } = &buf.kind else {
            unreachable!("a scatter")
        };
        let mut points = 1i64;
        for &r in &loops.ranges {
            points = points.saturating_mul(st.eval(buf, r)?.max(0));
        }
        if points > 0 {
            let ptrs = st.pointers(&f.buffers);
            let syms = st.symbols();
            let mut err = [0i64; 4];
            // In order on this thread: a later update of the same target wins.
            unsafe {
                (f.function)(
                    ptrs.as_ptr(),
                    syms,
                    0,
                    points,
                    err.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            if err[0] != 0 {
                let (buffer, origins, mut message) = f.errors[err[0] as usize - 1].clone();
                for k in 0..3 {
                    message = message.replace(&format!("{{{k}}}"), &err[k + 1].to_string());
                }
                return Err(RunError::Buffer {
                    buffer,
                    origins,
                    message,
                });
            }
        }
        return Ok(true);
    };
    let numel: i64 = sizes.iter().map(|&n| n.max(0)).product();
    let block = &mut st.blocks[st.home[id.index()]];
    // Safety: a result in a borrowed block is computed in place in an input the graph mutates,
    // which the caller passed writable (documented on `CpuProgram::run_raw`).
    let bytes = match unsafe { block.borrowed_mut() } {
        Some(b) => b,
        None => block.as_bytes_mut(),
    };
    for (k, &t) in targets.iter().enumerate() {
        if t < 0 || t >= numel {
            return Err(fail(buf, format!("scatter out of bounds at {t}")));
        }
        let at = element_at(t, &sizes, out_off, &out_strides) as usize;
        let v = match &data {
            Data::Float(v) => Either::F(v[k]),
            Data::Int(v) => Either::I(v[k]),
        };
        elements::write(bytes, buf.dtype, at, v);
    }
    Ok(true)
}

/// The storage element of row-major index `k` into `sizes`, through `offset` and `strides`.
/// An attention operand: its sizes and its storage as a 4-d operand whose dimension `k` is
/// the buffer's dimension `order[k]` (`None`: a dimension of size 1, stride 0).
fn attention_operand(
    st: &mut State,
    owner: &Buffer,
    b: BufferId,
    order: [Option<usize>; 4],
) -> Result<(Vec<i64>, super::attention::Operand), RunError> {
    let p = st.p;
    let x = &p.buffers[b.index()];
    let sizes = st.sizes(x)?;
    let (offset, strides) = st.strides(x, &x.layout)?;
    if order.iter().flatten().any(|&k| k >= strides.len()) {
        return Err(fail(
            owner,
            format!(
                "attention operand {} has {} dimensions",
                x.name,
                sizes.len()
            ),
        ));
    }
    let strides = order.map(|k| k.map_or(0, |k| strides[k] as isize));
    let operand = super::attention::Operand {
        ptr: st.blocks[st.home[b.index()]].ptr() as *const u8,
        dtype: x.dtype,
        offset: offset as isize,
        strides,
    };
    Ok((sizes, operand))
}

/// The output of attention step `id` as a 4-d operand (see [`attention_operand`]).
fn attention_output(
    st: &mut State,
    id: BufferId,
    order: [Option<usize>; 4],
) -> Result<super::attention::Output, RunError> {
    st.allocate(id)?;
    let p = st.p;
    let o = attention_operand(st, &p.buffers[id.index()], id, order)?.1;
    Ok(super::attention::Output {
        ptr: o.ptr as *mut u8,
        dtype: o.dtype,
        offset: o.offset,
        strides: o.strides,
    })
}

/// Fails unless `heads` is a multiple of `kv_heads`.
fn check_heads(buf: &Buffer, heads: usize, kv_heads: usize) -> Result<(), RunError> {
    if kv_heads == 0 && heads > 0 || heads % kv_heads.max(1) != 0 {
        return Err(fail(
            buf,
            format!("{heads} query heads are not a multiple of {kv_heads} key/value heads"),
        ));
    }
    Ok(())
}

const DENSE: [Option<usize>; 4] = [Some(0), Some(1), Some(2), Some(3)];

/// Fused attention over its operands' storage (`super::attention`).
fn attention(
    st: &mut State,
    id: BufferId,
    spec: guardless_ir::loop_ir::Attention,
    inputs: &[BufferId],
    threads: usize,
) -> Result<(), RunError> {
    use super::attention::{Operands, Sizes};
    let p = st.p;
    let buf = &p.buffers[id.index()];
    let out = attention_output(st, id, DENSE)?;
    let (sq, q) = attention_operand(st, buf, inputs[0], DENSE)?;
    let (sk, k) = attention_operand(st, buf, inputs[1], DENSE)?;
    let (sv, v) = attention_operand(st, buf, inputs[2], DENSE)?;
    let mask = match inputs.get(3) {
        Some(&m) => Some(attention_operand(st, buf, m, DENSE)?.1),
        None => None,
    };
    let u = |x: i64| x.max(0) as usize;
    let sizes = Sizes {
        batch: u(sq[0]),
        heads: u(sq[1]),
        kv_heads: u(sk[1]),
        lq: u(sq[2]),
        lk: u(sk[2]),
        d: u(sq[3]),
        dv: u(sv[3]),
    };
    check_heads(buf, sizes.heads, sizes.kv_heads)?;
    let ops = Operands { q, k, v, mask, out };
    // Safety: layouts were checked against their storage when allocated and read.
    unsafe { super::attention::attention(spec, sizes, ops, threads) };
    Ok(())
}

/// Paged attention over its operands' storage (`super::attention::paged_attention`): the
/// sequence data (offsets, lengths, the blocks each sequence reads) checked here first.
fn paged_attention(
    st: &mut State,
    id: BufferId,
    spec: guardless_ir::loop_ir::PagedAttention,
    inputs: &[BufferId],
    threads: usize,
) -> Result<(), RunError> {
    use super::attention::{Operands, Pages, Sequence, Sizes};
    use guardless_ir::loop_ir::PagedCheck;
    let p = st.p;
    let buf = &p.buffers[id.index()];
    // Tokens are positions of one batch entry; a cache block is a batch entry, its rows
    // positions.
    let tokens = [None, Some(1), Some(0), Some(2)];
    let cache = [Some(0), Some(2), Some(1), Some(3)];
    let out = attention_output(st, id, tokens)?;
    let (sq, q) = attention_operand(st, buf, inputs[0], tokens)?;
    let (sk, k) = attention_operand(st, buf, inputs[1], cache)?;
    let (sv, v) = attention_operand(st, buf, inputs[2], cache)?;
    let line = [Some(0), None, None, None];
    let (st_, table) = attention_operand(st, buf, inputs[3], [Some(0), Some(1), None, None])?;
    let (_, lens) = attention_operand(st, buf, inputs[4], line)?;
    let (_, starts) = attention_operand(st, buf, inputs[5], line)?;
    let u = |x: i64| x.max(0) as usize;
    let (seqs, width, blocks, block_size) = (u(st_[0]), u(st_[1]), sk[0], u(sk[1]));
    // Safety: each element read lies inside its operand's checked layout.
    let int = |o: &super::attention::Operand, i: usize, j: usize| unsafe {
        o.get::<f64>(o.at(i, j, 0, 0)) as i64
    };
    let bad = |c: PagedCheck| fail(buf, c.message().to_string());
    let tokens_ = sq[0];
    let monotone = (0..seqs).all(|s| int(&starts, s, 0) <= int(&starts, s + 1, 0));
    if int(&starts, 0, 0) != 0 || int(&starts, seqs, 0) != tokens_ || !monotone {
        return Err(bad(PagedCheck::QueryStart));
    }
    let mut sequences = Vec::with_capacity(seqs);
    for s in 0..seqs {
        let (start, end, keys) = (int(&starts, s, 0), int(&starts, s + 1, 0), int(&lens, s, 0));
        if keys < end - start || keys > (width * block_size) as i64 {
            return Err(bad(PagedCheck::ContextLength));
        }
        let used = (keys as usize).div_ceil(block_size.max(1));
        if (0..used).any(|i| !(0..blocks).contains(&int(&table, s, i))) {
            return Err(bad(PagedCheck::Block));
        }
        sequences.push(Sequence {
            index: s,
            start: start as usize,
            queries: (end - start) as usize,
            keys: keys as usize,
        });
    }
    let sizes = Sizes {
        batch: 1,
        heads: u(sq[1]),
        kv_heads: u(sk[2]),
        lq: u(tokens_),
        lk: 0,
        d: u(sq[2]),
        dv: u(sv[3]),
    };
    check_heads(buf, sizes.heads, sizes.kv_heads)?;
    let ops = Operands {
        q,
        k,
        v,
        mask: None,
        out,
    };
    let pages = Pages { table, block_size };
    // Safety: layouts were checked against their storage, the sequence data just above.
    unsafe {
        super::attention::paged_attention(
            spec.as_attention(),
            sizes,
            ops,
            pages,
            &sequences,
            threads,
        )
    };
    Ok(())
}

fn element_at(mut k: i64, sizes: &[i64], offset: i64, strides: &[i64]) -> i64 {
    let mut at = offset;
    for d in (0..sizes.len()).rev() {
        let n = sizes[d].max(1);
        at += (k % n) * strides[d];
        k /= n;
    }
    at
}

fn matmul(
    st: &mut State,
    id: BufferId,
    kernel: ExternKernel,
    inputs: &[BufferId],
    threads: usize,
) -> Result<(), RunError> {
    let p = st.p;
    let buf = &p.buffers[id.index()];
    st.allocate(id)?;
    let view = |st: &State, b: BufferId| -> Result<(Vec<i64>, i64, Vec<i64>), RunError> {
        let x = &p.buffers[b.index()];
        let sizes = st.sizes(x)?;
        let (off, strides) = st.strides(x, &x.layout)?;
        Ok((sizes, off, strides))
    };
    let (sa, oa, ta) = view(st, inputs[0])?;
    let (sb, ob, tb) = view(st, inputs[1])?;
    let (so, oo, to) = view(st, id)?;
    let batched = kernel == ExternKernel::Bmm;
    let r = usize::from(batched);
    if sa.len() != 2 + r || sb.len() != 2 + r || sa[1 + r] != sb[r] {
        return Err(fail(buf, format!("{} of {sa:?} by {sb:?}", kernel.name())));
    }
    let batches = if batched { sa[0] } else { 1 };
    let mat = |rows: i64, cols: i64, off: i64, rs: i64, cs: i64| super::matmul::Mat {
        rows: rows as usize,
        cols: cols as usize,
        rs: rs as isize,
        cs: cs as isize,
        offset: off as isize,
    };
    let pa = st.blocks[st.home[inputs[0].index()]].ptr() as *const u8;
    let pb = st.blocks[st.home[inputs[1].index()]].ptr() as *const u8;
    let po = st.blocks[st.home[id.index()]].ptr();
    // The operands' dtype (the output's, or narrower: see `library`).
    let dtype: DType = p.buffers[inputs[0].index()].dtype;
    // addmm's bias row: element j at offset + j * stride.
    let bias = match kernel {
        ExternKernel::AddMm => {
            let (_, off, strides) = view(st, inputs[2])?;
            let row = super::matmul::Row {
                offset: off as isize,
                stride: strides.last().copied().unwrap_or(0) as isize,
            };
            Some((
                st.blocks[st.home[inputs[2].index()]].ptr() as *const u8,
                row,
            ))
        }
        _ => None,
    };
    for g in 0..batches.max(0) {
        let (ga, gb, go) = if batched {
            (oa + g * ta[0], ob + g * tb[0], oo + g * to[0])
        } else {
            (oa, ob, oo)
        };
        let a = mat(sa[r], sa[r + 1], ga, ta[r], ta[r + 1]);
        let b = mat(sb[r], sb[r + 1], gb, tb[r], tb[r + 1]);
        let o = mat(so[r], so[r + 1], go, to[r], to[r + 1]);
        if a.cols == 0 {
            // An empty inner dimension: the product is zeros (plus the bias).
            let row: Vec<f64> = (0..o.cols as isize)
                .map(|j| match bias {
                    Some((_, r)) => {
                        let blk = &st.blocks[st.home[inputs[2].index()]];
                        let at = (r.offset + j * r.stride) as usize;
                        match elements::read(blk.as_bytes(), dtype, at) {
                            Either::F(x) => x,
                            Either::I(x) => x as f64,
                        }
                    }
                    None => 0.0,
                })
                .collect();
            let h = st.home[id.index()];
            let bytes = st.blocks[h].as_bytes_mut();
            for i in 0..o.rows as isize {
                for (j, &v) in row.iter().enumerate() {
                    let at = (o.offset + i * o.rs + j as isize * o.cs) as usize;
                    elements::write(bytes, buf.dtype, at, Either::F(v));
                }
            }
            continue;
        }
        // Layouts were checked against their storage when allocated and read.
        unsafe { super::matmul::gemm(dtype, buf.dtype, (pa, a), (pb, b), (po, o), bias, threads) };
    }
    Ok(())
}
