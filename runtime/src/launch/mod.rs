//! Running a schedule on a device, independent of which: the launcher half of a GPU runtime.
//! It places buffers as the memory plan says, binds symbols as steps produce them, picks each
//! kernel's variant by its predicate at the actual sizes (and the base addresses of the buffers a
//! vector variant needs aligned), evaluates grids and derived sizes, and hands the device
//! launches, matmuls (an `addmm`'s bias in the matmul) and copies; scatters (`index_put`),
//! selects (`nonzero`, `masked_select`), scans, sorts and grouped matmuls run as generated
//! functions; `.item()` and selects' counts come back to the host lazily (`readback`). Library
//! steps a device cannot run (integer matmuls, layouts cuBLAS cannot take) run on the host
//! between device steps.
//!
//! `cuda` implements [`Device`] with the CUDA driver; the tests implement it with the CPU
//! emulation of CUDA, so everything here is exercised without a GPU.

mod gemm;

use guardless_codegen::cuda::{generate, CudaModule, EntryOf, Param, Part};
use guardless_codegen::schedule::{schedule, Schedule, Step};
use guardless_ir::graph::DType;
use guardless_ir::loop_ir::interp::RunError;
use guardless_ir::loop_ir::{Buffer, BufferId, BufferKind, LayoutValues, Program};
use guardless_ir::sym::{Bindings, Expr, SymbolId};
use guardless_ir::tensor::{Data, HostTensor};

use crate::elements::{self, Either};
pub use gemm::{BlasGemm, Gemm, Operand};

mod capture;
pub(crate) mod in_place;
mod library;
mod readback;
mod write_back;

/// What a device does for the launcher. Addresses are the device's (`u64`); every kernel
/// parameter is 8 bytes (a pointer or a `long long`), passed by value in `args`.
pub trait Device {
    /// An allocation, freed when dropped.
    type Memory;
    /// `bytes` bytes (at least 1), 256-byte aligned; 0xFF bytes when `poison`.
    fn alloc(&mut self, bytes: usize, poison: bool) -> Result<Self::Memory, String>;
    fn address(&self, m: &Self::Memory) -> u64;
    fn upload(&mut self, dst: u64, bytes: &[u8]) -> Result<(), String>;
    /// Waits for the work before it, then copies.
    fn download(&mut self, src: u64, out: &mut [u8]) -> Result<(), String>;
    fn fill(&mut self, dst: u64, byte: u8, len: usize) -> Result<(), String>;
    /// `len` bytes from `src` to `dst`, both on the device, in order with the other work.
    fn copy(&mut self, dst: u64, src: u64, len: usize) -> Result<(), String>;
    /// Launches entry `entry` of the module (one-dimensional grid and block).
    fn launch(&mut self, entry: usize, grid: u32, block: u32, args: &[u64]) -> Result<(), String>;
    /// `c = a · b` for each batch (row-major views; see [`Gemm`]).
    fn gemm(&mut self, g: &Gemm) -> Result<(), String>;
    /// Starts recording the work queued from now on instead of running it (a CUDA graph
    /// capture); uploads and downloads fail while recording.
    fn begin_capture(&mut self) -> Result<(), String> {
        Err("this device cannot record a call".into())
    }
    /// Ends the recording (also a failed one): the handle [`Device::replay`] takes.
    fn end_capture(&mut self) -> Result<usize, String> {
        Err("this device cannot record a call".into())
    }
    /// Queues the recorded work again, as one submission.
    fn replay(&mut self, recording: usize) -> Result<(), String> {
        let _ = recording;
        Err("this device cannot record a call".into())
    }
    /// Frees a recording.
    fn drop_recording(&mut self, recording: usize) {
        let _ = recording;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("kernel {kernel} ({nodes}): {message}")]
    Kernel {
        kernel: String,
        nodes: String,
        message: String,
    },
    #[error("device: {0}")]
    Device(String),
    #[error("cannot record the call: {0}")]
    Capture(String),
}

/// A library step's entries on the device, by [`Part`] (in `Part::ALL` order).
type PartEntries = [Option<usize>; Part::ALL.len()];

/// How a kernel parameter gets its value.
#[derive(Clone, Debug)]
enum ArgSource {
    /// The address of a buffer's storage.
    Buffer(BufferId),
    Symbol(SymbolId),
    Expr(Expr),
    /// The magic numbers dividing by this size (`guardless_codegen::cuda::fast_divisor`).
    FastDivisor(Expr),
    Error,
    /// A constant (a function's first error code).
    Value(u64),
    /// Split reductions' scratch, of this many bytes.
    Workspace(Expr),
    Phase,
}

/// A program scheduled and rendered to CUDA, its kernel parameters resolved for launching.
pub struct Executable {
    pub program: Program,
    pub schedule: Schedule,
    pub module: CudaModule,
    /// `[kernel][variant]`: the entry to launch, `None` when the variant has no generated code.
    variant_entry: Vec<Vec<Option<usize>>>,
    /// By buffer and [`Part`] (in `Part::ALL` order): the entries of a library step done on the
    /// device; a step without the parts it needs runs on the host.
    step_entries: Vec<PartEntries>,
    /// By buffer: the graph input whose storage it is computed in (see `in_place`).
    in_place: Vec<Option<BufferId>>,
    params: Vec<Vec<ArgSource>>,
    /// By schedule step: the symbols it evaluates (see `readback`).
    needs: Vec<Vec<SymbolId>>,
    /// By buffer: its slot in the readback array (a select or an item), and their number.
    readback_slot: Vec<Option<usize>>,
    readback_slots: usize,
}

impl Executable {
    /// Schedules `program` and generates its CUDA.
    pub fn new(mut program: Program) -> Result<Executable, LaunchError> {
        let schedule = schedule(&mut program);
        let module = generate(&mut program, &schedule);
        Executable::from_parts(program, schedule, module)
    }

    pub fn from_parts(
        mut program: Program,
        schedule: Schedule,
        module: CudaModule,
    ) -> Result<Executable, LaunchError> {
        let mut variant_entry: Vec<Vec<Option<usize>>> = schedule
            .kernels
            .iter()
            .map(|k| vec![None; k.variants.len()])
            .collect();
        let mut step_entries: Vec<PartEntries> =
            vec![[None; Part::ALL.len()]; program.buffers.len()];
        let mut params = Vec::with_capacity(module.entries.len());
        for (i, e) in module.entries.iter().enumerate() {
            // A library step's buffer, found once: it names the nodes in errors too.
            let step = match &e.of {
                EntryOf::Library { buffer, .. } => {
                    Some(program.buffers.iter().position(|b| &b.name == buffer))
                }
                EntryOf::Kernel { .. } => None,
            };
            let origins = match (&e.of, step) {
                (EntryOf::Kernel { kernel, .. }, _) => schedule.kernels[*kernel].origins.clone(),
                (_, Some(Some(id))) => program.buffers[id].origins.clone(),
                _ => Vec::new(),
            };
            let bad = |message: String| LaunchError::Kernel {
                kernel: e.name.clone(),
                nodes: origins.join(", "),
                message,
            };
            match &e.of {
                EntryOf::Kernel { kernel, variant } if e.generated => {
                    variant_entry[*kernel][*variant] = Some(i);
                }
                EntryOf::Kernel { .. } => {}
                EntryOf::Library { buffer, part } => {
                    let id = step
                        .flatten()
                        .ok_or_else(|| bad(format!("no buffer named {buffer}")))?;
                    step_entries[id][part.index()] = Some(i);
                }
            }
            let mut ps = Vec::with_capacity(e.params.len());
            for prm in &e.params {
                ps.push(match prm {
                    Param::Buffer { buffer, .. } => {
                        let id = program
                            .buffers
                            .iter()
                            .position(|b| &b.name == buffer)
                            .ok_or_else(|| bad(format!("no buffer named {buffer}")))?;
                        ArgSource::Buffer(program.storage_root(BufferId(id as u32)))
                    }
                    Param::Symbol { name } => ArgSource::Symbol(
                        program
                            .env
                            .symbol_id(name)
                            .ok_or_else(|| bad(format!("no symbol named {name}")))?,
                    ),
                    Param::Derived { expr, name } => ArgSource::Expr(
                        program
                            .env
                            .parse(expr)
                            .map_err(|x| bad(format!("derived size {name} = {expr}: {x}")))?,
                    ),
                    Param::FastDivisor { expr, name } => ArgSource::FastDivisor(
                        program
                            .env
                            .parse(expr)
                            .map_err(|x| bad(format!("divisor {name} = {expr}: {x}")))?,
                    ),
                    Param::Error => ArgSource::Error,
                    Param::ErrorBase { base } => ArgSource::Value(*base as u64),
                    Param::Workspace { bytes } => ArgSource::Workspace(
                        program
                            .env
                            .parse(bytes)
                            .map_err(|x| bad(format!("workspace size {bytes}: {x}")))?,
                    ),
                    Param::Phase => ArgSource::Phase,
                });
            }
            params.push(ps);
        }
        let on_device = |id: BufferId| step_entries[id.index()].iter().any(Option::is_some);
        let in_place = in_place::in_place_outputs(&mut program, &schedule, &on_device, true);
        let needs =
            readback::step_needs(&program, &schedule, &variant_entry, &step_entries, &params);
        let (readback_slot, readback_slots) = readback::slots(&program);
        Ok(Executable {
            program,
            schedule,
            module,
            variant_entry,
            step_entries,
            in_place,
            params,
            needs,
            readback_slot,
            readback_slots,
        })
    }
}

/// A tensor already on the device (a torch CUDA tensor, say), read in place when its layout is
/// the graph's.
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    pub address: u64,
    /// Bytes readable from `address`.
    pub bytes: usize,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// In elements.
    pub strides: Vec<i64>,
}

impl DeviceTensor {
    /// Elements from `address` to one past the last its strides reach (0 when empty).
    pub fn extent(&self) -> Result<usize, String> {
        LayoutValues {
            sizes: self.shape.iter().map(|&n| n as i64).collect(),
            offset: 0,
            strides: self.strides.clone(),
        }
        .extent()
    }
}

/// A call's inputs.
#[derive(Clone, Copy)]
pub enum Inputs<'a> {
    Host(&'a [HostTensor]),
    Device(&'a [DeviceTensor]),
}

#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// Fill fresh allocations with 0xFF bytes (NaN, -1) so an unwritten element shows.
    pub poison: bool,
}

enum Storage<M> {
    Empty,
    Owned(M, usize),
    /// The caller's memory, never written.
    Borrowed(u64, usize),
}

/// A prepared call: inputs on the device, ready to execute (repeatedly, for benchmarks).
pub struct Session<'e, D: Device> {
    exe: &'e Executable,
    given: Bindings,
    b: Bindings,
    storage: Vec<Storage<D::Memory>>,
    /// Buffer → its storage (memory-plan slot, or the storage root's own).
    home: Vec<usize>,
    error: D::Memory,
    /// Scratch for split reductions' partial results, grown to the largest need.
    work: Option<(D::Memory, usize)>,
    poison: bool,
    /// Input bytes copied because they were not in the graph's layout (or were host tensors).
    pub copied_input_bytes: usize,
    /// Library steps that ran on the host, in the last execution.
    pub host_steps: usize,
    /// Their buffers (why a call cannot be recorded).
    host_step_buffers: Vec<BufferId>,
    /// Steps on the device whose data-dependent value came back to the host, in the last
    /// execution (a recording could not replay that either).
    syncs: Vec<BufferId>,
    /// Their values, 8 bytes each, and those not read back yet.
    readback: D::Memory,
    pending: Vec<readback::Pending>,
    /// Downloads of data-dependent values (each waits for the device), in the last execution.
    pub readbacks: usize,
    /// The call recorded by [`Session::capture`], for [`Session::replay`].
    recording: Option<usize>,
    /// The caller's device tensors: an output that mutates an input copied in is written back
    /// to them too.
    device_inputs: Vec<DeviceTensor>,
}

fn fail(buf: &Buffer, message: String) -> LaunchError {
    LaunchError::Run(RunError::Buffer {
        buffer: buf.name.clone(),
        origins: buf.origins.join(", "),
        message,
    })
}

/// Blocks of `per_block` that cover `count` items (none for a count ≤ 0).
fn blocks(count: i64, per_block: i64) -> i64 {
    (count.max(0) as u64).div_ceil(per_block as u64) as i64
}

fn dev<T>(r: Result<T, String>) -> Result<T, LaunchError> {
    r.map_err(LaunchError::Device)
}

impl<'e, D: Device> Session<'e, D> {
    pub fn new(
        dev_: &mut D,
        exe: &'e Executable,
        inputs: Inputs<'_>,
        bindings: &Bindings,
        options: &SessionOptions,
    ) -> Result<Session<'e, D>, LaunchError> {
        let p = &exe.program;
        p.env
            .check_bindings(bindings)
            .map_err(|e| RunError::Assert(e.to_string()))?;
        let n = p.buffers.len();
        let slots = exe.schedule.memory.slots.len();
        let mut slot_of = vec![None; n];
        for a in &exe.schedule.memory.allocations {
            slot_of[a.buffer.index()] = a.slot;
        }
        let mut home: Vec<usize> = (0..n)
            .map(|i| {
                let root = p.storage_root(BufferId(i as u32)).index();
                slot_of[root].unwrap_or(slots + root)
            })
            .collect();
        // An output computed in place (and every view of it) lives in its input's storage.
        for i in 0..n {
            let root = p.storage_root(BufferId(i as u32));
            if let Some(input) = exe.in_place[root.index()] {
                home[i] = home[input.index()];
            }
        }
        let error = dev(dev_.alloc(4, false))?;
        let readback = dev(dev_.alloc(8 * exe.readback_slots.max(1), false))?;
        let mut s = Session {
            exe,
            given: bindings.clone(),
            b: bindings.clone(),
            storage: (0..slots + n).map(|_| Storage::Empty).collect(),
            home,
            error,
            work: None,
            poison: options.poison,
            copied_input_bytes: 0,
            host_steps: 0,
            host_step_buffers: Vec::new(),
            syncs: Vec::new(),
            readback,
            pending: Vec::new(),
            readbacks: 0,
            recording: None,
            device_inputs: match inputs {
                Inputs::Device(t) => t.to_vec(),
                Inputs::Host(_) => Vec::new(),
            },
        };
        for step in &exe.schedule.steps {
            if let Step::Input(id) = step {
                s.copied_input_bytes += s.input(dev_, *id, inputs)?;
            }
        }
        Ok(s)
    }

    fn eval(&self, buf: &Buffer, e: Expr) -> Result<i64, LaunchError> {
        self.exe
            .program
            .env
            .evaluate(e, &self.b)
            .map_err(|x| fail(buf, x.to_string()))
    }

    /// `buf`'s layout at the current values.
    fn layout(&self, buf: &Buffer) -> Result<LayoutValues, LaunchError> {
        buf.layout
            .evaluate(&self.exe.program.env, &self.b)
            .map_err(|x| fail(buf, x.to_string()))
    }

    fn sizes(&self, buf: &Buffer) -> Result<Vec<i64>, LaunchError> {
        Ok(self.layout(buf)?.sizes)
    }

    fn offset_strides(&self, buf: &Buffer) -> Result<(i64, Vec<i64>), LaunchError> {
        let v = self.layout(buf)?;
        Ok((v.offset, v.strides))
    }

    /// The elements `id`'s layout spans (0 when empty).
    fn extent(&self, id: BufferId) -> Result<usize, LaunchError> {
        let buf = &self.exe.program.buffers[id.index()];
        self.layout(buf)?.extent().map_err(|m| fail(buf, m))
    }

    /// The bytes of `id`'s storage (0 before it is allocated).
    fn storage_bytes(&self, id: BufferId) -> usize {
        match &self.storage[self.home[id.index()]] {
            Storage::Empty => 0,
            Storage::Owned(_, b) | Storage::Borrowed(_, b) => *b,
        }
    }

    fn address(&self, id: BufferId, dev_: &D) -> u64 {
        match &self.storage[self.home[id.index()]] {
            Storage::Empty => 0,
            Storage::Owned(m, _) => dev_.address(m),
            Storage::Borrowed(a, _) => *a,
        }
    }

    /// Storage for `id` before it is written: at least its extent (and its slot's planned size).
    fn allocate(&mut self, dev_: &mut D, id: BufferId) -> Result<u64, LaunchError> {
        let bytes = self.bytes_at(id, &self.b)?;
        self.allocate_bytes(dev_, id, bytes)
    }

    /// The bytes `id` needs at the values `b`: its extent, and its slot's planned size.
    fn bytes_at(&self, id: BufferId, b: &Bindings) -> Result<usize, LaunchError> {
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let extent = buf
            .layout
            .evaluate(&p.env, b)
            .map_err(|x| fail(buf, x.to_string()))?
            .extent()
            .map_err(|m| fail(buf, m))?;
        let mut bytes = guardless_ir::memory::checked_bytes(
            extent as u128,
            buf.dtype.size(),
            guardless_ir::memory::Place::Device,
            &|| "its storage".to_string(),
        )
        .map_err(|m| fail(buf, m))?;
        let h = self.home[id.index()];
        if let Some(&slot) = self.exe.schedule.memory.slots.get(h) {
            let planned = p
                .env
                .evaluate(slot, b)
                .map_err(|x| fail(buf, x.to_string()))?;
            bytes = bytes.max(planned.max(0) as usize);
        }
        Ok(bytes)
    }

    /// Storage of at least `bytes` for `id` (kept when what it has is enough).
    fn allocate_bytes(
        &mut self,
        dev_: &mut D,
        id: BufferId,
        bytes: usize,
    ) -> Result<u64, LaunchError> {
        let buf = &self.exe.program.buffers[id.index()];
        let h = self.home[id.index()];
        match &self.storage[h] {
            Storage::Owned(m, have) if *have >= bytes => return Ok(dev_.address(m)),
            Storage::Borrowed(..) => {
                return Err(fail(
                    buf,
                    "it would be written into an input's storage".into(),
                ))
            }
            _ => {}
        }
        let m = dev(dev_.alloc(bytes.max(16), self.poison))?;
        let a = dev_.address(&m);
        self.storage[h] = Storage::Owned(m, bytes.max(16));
        Ok(a)
    }

    fn input(&mut self, dev_: &mut D, id: BufferId, inputs: Inputs) -> Result<usize, LaunchError> {
        let p = &self.exe.program;
        let buf = &p.buffers[id.index()];
        let BufferKind::Input(k) = buf.kind else {
            unreachable!("an input step")
        };
        let sizes = self.sizes(buf)?;
        let numel: i64 = sizes.iter().map(|&s| s.max(0)).product();
        let missing = || RunError::Input {
            index: k,
            message: "missing".into(),
        };
        let host = match inputs {
            Inputs::Host(t) => t.get(k).ok_or_else(missing)?.clone(),
            Inputs::Device(t) => {
                let t = t.get(k).ok_or_else(missing)?;
                let (off, strides) = self.offset_strides(buf)?;
                check_device(t, buf.dtype, &sizes)
                    .map_err(|message| RunError::Input { index: k, message })?;
                let same = off == 0
                    && sizes
                        .iter()
                        .zip(&strides)
                        .zip(&t.strides)
                        .all(|((&n, &a), &b)| n <= 1 || a == b);
                if same && t.address % 16 == 0 {
                    let h = self.home[id.index()];
                    self.storage[h] = Storage::Borrowed(t.address, t.bytes);
                    return Ok(0);
                }
                download_strided(dev_, t)?
            }
        };
        if host.numel() as i64 != numel {
            return Err(RunError::Input {
                index: k,
                message: format!("{} elements, expected {numel}", host.numel()),
            }
            .into());
        }
        let at = self.allocate(dev_, id)?;
        let (off, strides) = self.offset_strides(buf)?;
        let mut bytes = vec![0u8; self.extent(id)? * buf.dtype.size()];
        let mut idx = vec![0i64; sizes.len()];
        for e in 0..numel.max(0) as usize {
            let i = off + idx.iter().zip(&strides).map(|(&i, &s)| i * s).sum::<i64>();
            let v = match (&host.data, buf.dtype.is_float()) {
                (Data::Float(v), true) => Either::F(v[e]),
                (Data::Float(v), false) => Either::I(v[e] as i64),
                (Data::Int(v), _) => Either::I(v[e]),
            };
            elements::write(&mut bytes, buf.dtype, i as usize, v);
            elements::next_index(&mut idx, &sizes);
        }
        dev(dev_.upload(at, &bytes))?;
        Ok(bytes.len())
    }

    /// Runs every step after the inputs. Device work is queued; nothing waits for it unless a
    /// host step needs its results.
    pub fn execute(&mut self, dev_: &mut D) -> Result<(), LaunchError> {
        self.b = self.given.clone();
        self.host_steps = 0;
        self.host_step_buffers.clear();
        self.syncs.clear();
        self.pending.clear();
        self.readbacks = 0;
        let flag = dev_.address(&self.error);
        dev(dev_.fill(flag, 0, 4))?;
        for (i, step) in self.exe.schedule.steps.iter().enumerate() {
            self.read_back_for(dev_, i)?;
            match step {
                Step::Input(_) | Step::View(_) => {}
                Step::Kernel(k) => self.kernel(dev_, *k)?,
                Step::Library(id) => self.library(dev_, *id)?,
            }
        }
        // The outputs' sizes, and the call's range and assert checks.
        self.read_back(dev_)?;
        self.write_back(dev_)
    }

    /// Where buffer `id` lies on the device: its first element, shape and strides.
    fn view(&self, dev_: &D, id: BufferId) -> Result<DeviceTensor, LaunchError> {
        let buf = &self.exe.program.buffers[id.index()];
        let sizes = self.sizes(buf)?;
        let (off, strides) = self.offset_strides(buf)?;
        let have = self.storage_bytes(id);
        let size = buf.dtype.size();
        if self.extent(id)? * size > have {
            return Err(fail(buf, "a layout exceeds its storage".into()));
        }
        let skip = (off.max(0) as usize * size).min(have);
        Ok(DeviceTensor {
            address: self.address(id, dev_) + skip as u64,
            bytes: have - skip,
            dtype: buf.dtype,
            shape: sizes.iter().map(|&n| n.max(0) as usize).collect(),
            strides,
        })
    }

    /// The variant of kernel `ki` to launch at the current sizes and addresses.
    fn choose(&self, dev_: &D, ki: usize) -> Result<Option<usize>, LaunchError> {
        let exe = self.exe;
        let k = &exe.schedule.kernels[ki];
        let env = &exe.program.env;
        for (vi, v) in k.variants.iter().enumerate() {
            let Some(entry) = exe.variant_entry[ki][vi] else {
                continue;
            };
            let holds = env
                .evaluate(v.predicate, &self.b)
                .map_err(|x| LaunchError::Kernel {
                    kernel: k.name.clone(),
                    nodes: k.origins.join(", "),
                    message: format!("variant {vi}'s predicate: {x}"),
                })?;
            if holds != 0 && v.aligned.iter().all(|&b| self.address(b, dev_) % 16 == 0) {
                return Ok(Some(entry));
            }
        }
        Ok(None)
    }

    fn kernel(&mut self, dev_: &mut D, ki: usize) -> Result<(), LaunchError> {
        let exe = self.exe;
        let k = &exe.schedule.kernels[ki];
        let bad = |message: String| LaunchError::Kernel {
            kernel: k.name.clone(),
            nodes: k.origins.join(", "),
            message,
        };
        for m in &k.members {
            // A member computed in an input's storage (see `in_place`) has it already.
            if m.stored.is_some() && exe.in_place[m.buffer.index()].is_none() {
                self.allocate(dev_, m.buffer)?;
            }
        }
        let entry = self
            .choose(dev_, ki)?
            .ok_or_else(|| bad("no variant's predicate holds".into()))?;
        let e = &exe.module.entries[entry];
        let (_, variant) = e.kernel_variant().expect("a kernel's entry");
        let v = &k.variants[variant];
        let grid = exe
            .program
            .env
            .evaluate(v.grid, &self.b)
            .map_err(|x| bad(format!("grid: {x}")))?;
        self.launch(dev_, entry, grid, v.config.threads, &bad)
    }

    /// Launches `entry` on `grid` blocks (none when `grid` ≤ 0) of `threads`, once per phase.
    fn launch(
        &mut self,
        dev_: &mut D,
        entry: usize,
        grid: i64,
        threads: i64,
        bad: &dyn Fn(String) -> LaunchError,
    ) -> Result<(), LaunchError> {
        let exe = self.exe;
        let e = &exe.module.entries[entry];
        let env = &exe.program.env;
        if grid <= 0 {
            return Ok(());
        }
        let grid = u32::try_from(grid)
            .ok()
            .filter(|&g| g <= i32::MAX as u32)
            .ok_or_else(|| bad(format!("grid of {grid} blocks exceeds 2^31 - 1")))?;
        let flag = dev_.address(&self.error);
        let mut args = Vec::with_capacity(exe.params[entry].len());
        let mut phase_at = None;
        for a in &exe.params[entry] {
            args.push(match a {
                ArgSource::Buffer(b) => self.address(*b, dev_),
                ArgSource::Symbol(s) => env
                    .symbol_value(*s, &self.b)
                    .ok_or_else(|| bad(format!("symbol {} is unbound", env.symbol_name(*s))))?
                    as u64,
                ArgSource::Expr(x) => {
                    env.evaluate(*x, &self.b)
                        .map_err(|x| bad(format!("derived size: {x}")))? as u64
                }
                ArgSource::FastDivisor(x) => guardless_codegen::cuda::fast_divisor(
                    env.evaluate(*x, &self.b)
                        .map_err(|x| bad(format!("divisor: {x}")))?,
                ),
                ArgSource::Error => flag,
                ArgSource::Value(v) => *v,
                ArgSource::Workspace(x) => {
                    let bytes = env
                        .evaluate(*x, &self.b)
                        .map_err(|x| bad(format!("workspace: {x}")))?
                        .max(16) as usize;
                    if self.work.as_ref().is_none_or(|(_, have)| *have < bytes) {
                        let m = dev(dev_.alloc(bytes, self.poison))?;
                        self.work = Some((m, bytes));
                    }
                    self.work.as_ref().map_or(0, |(m, _)| dev_.address(m))
                }
                ArgSource::Phase => {
                    phase_at = Some(args.len());
                    0
                }
            });
        }
        for phase in 0..e.phases.max(1) {
            if let Some(i) = phase_at {
                args[i] = phase as u64;
            }
            dev(dev_.launch(entry, grid, threads as u32, &args)).map_err(|x| bad(x.to_string()))?;
        }
        Ok(())
    }

    /// Waits for the device and reports the first data-dependent error a kernel raised.
    pub fn check(&self, dev_: &mut D) -> Result<(), LaunchError> {
        let mut code = [0u8; 4];
        dev(dev_.download(dev_.address(&self.error), &mut code))?;
        match i32::from_le_bytes(code) {
            0 => Ok(()),
            c => {
                let errors = &self.exe.module.errors;
                let message = usize::try_from(c - 1)
                    .ok()
                    .and_then(|i| errors.get(i))
                    .cloned()
                    .unwrap_or_else(|| format!("unknown error code {c}"));
                Err(RunError::Assert(message).into())
            }
        }
    }

    /// The graph's outputs of the last execution where they lie on the device (storage the
    /// session owns, or an input's): `address` is the first element. Valid until the session is
    /// dropped or executes again.
    pub fn output_views(&self, dev_: &mut D) -> Result<Vec<DeviceTensor>, LaunchError> {
        self.check(dev_)?;
        let p = &self.exe.program;
        p.outputs.iter().map(|&o| self.view(dev_, o)).collect()
    }

    /// The graph's outputs of the last execution, copied to the host.
    pub fn outputs(&self, dev_: &mut D) -> Result<Vec<HostTensor>, LaunchError> {
        self.output_views(dev_)?
            .iter()
            .map(|v| download_strided(dev_, v))
            .collect()
    }
}

/// The elements of a strided view of `bytes`, in row-major order.
fn gather(dtype: DType, bytes: &[u8], sizes: &[i64], off: i64, strides: &[i64]) -> HostTensor {
    let shape: Vec<usize> = sizes.iter().map(|&s| s.max(0) as usize).collect();
    let numel: usize = shape.iter().product();
    let mut idx = vec![0i64; sizes.len()];
    let (mut fs, mut is) = (Vec::new(), Vec::new());
    for _ in 0..numel {
        let at = off + idx.iter().zip(strides).map(|(&i, &s)| i * s).sum::<i64>();
        match elements::read(bytes, dtype, at as usize) {
            Either::F(x) => fs.push(x),
            Either::I(x) => is.push(x),
        }
        elements::next_index(&mut idx, sizes);
    }
    let data = if dtype.is_float() {
        Data::Float(fs)
    } else {
        Data::Int(is)
    };
    HostTensor { dtype, shape, data }
}

/// A caller's device tensor against the graph's input: dtype, shape, and strides that stay
/// inside the bytes given.
fn check_device(t: &DeviceTensor, dtype: DType, sizes: &[i64]) -> Result<(), String> {
    if t.dtype != dtype {
        return Err(format!("dtype {:?}, expected {dtype:?}", t.dtype));
    }
    let shape: Vec<i64> = t.shape.iter().map(|&s| s as i64).collect();
    if shape != sizes || t.strides.len() != shape.len() {
        return Err(format!("shape {shape:?}, expected {sizes:?}"));
    }
    // An empty tensor reads nothing: its strides do not matter.
    if shape.iter().all(|&s| s > 0) && t.extent()? * dtype.size() > t.bytes {
        return Err(format!(
            "strides {:?} reach past its {} bytes",
            t.strides, t.bytes
        ));
    }
    Ok(())
}

/// A device tensor's elements, through its strides, on the host.
pub(super) fn download_strided<D: Device>(
    dev_: &mut D,
    t: &DeviceTensor,
) -> Result<HostTensor, LaunchError> {
    let sizes: Vec<i64> = t.shape.iter().map(|&s| s as i64).collect();
    let n = t.extent().map_err(LaunchError::Device)?;
    // The bytes on the host, and the elements as a host tensor holds them (8 bytes each).
    let what = || format!("an output of shape {:?} copied to the host", t.shape);
    let bytes = guardless_ir::memory::checked_bytes(
        n as u128,
        t.dtype.size(),
        guardless_ir::memory::Place::Host,
        &what,
    )
    .map_err(LaunchError::Device)?;
    guardless_ir::memory::checked_numel(&t.shape, 8, &what).map_err(LaunchError::Device)?;
    let mut bytes = vec![0u8; bytes];
    if !bytes.is_empty() {
        dev(dev_.download(t.address, &mut bytes))?;
    }
    Ok(gather(t.dtype, &bytes, &sizes, 0, &t.strides))
}
