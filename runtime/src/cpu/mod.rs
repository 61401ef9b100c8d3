//! The CPU backend: runs a schedule on the host. With the `llvm` feature every kernel is native
//! code (see `jit`), buffers live in native storage placed by the memory plan, matmuls go to a
//! blocked SIMD library, rows are split across threads; other library steps (sort, scan, nonzero,
//! scatter, `.item()`, grouped matmul) run through the loop-IR interpreter's implementations.
//! Without the feature the whole schedule runs on the interpreter (`Program::run_plan`).

#[cfg(feature = "llvm")]
pub mod attention;
#[cfg(feature = "llvm")]
mod exec;
#[cfg(feature = "llvm")]
pub mod jit;
#[cfg(feature = "llvm")]
mod matmul;
#[cfg(feature = "llvm")]
mod rows;
#[cfg(feature = "llvm")]
pub mod shared_object;
// Without LLVM only the conversions for `run_raw` are used.
#[cfg_attr(not(feature = "llvm"), allow(dead_code))]
mod memory;

#[cfg(feature = "llvm")]
pub use exec::Session;

use guardless_codegen::cache::Cache;
use guardless_codegen::schedule::{schedule, Schedule};
use guardless_ir::graph::DType;
use guardless_ir::loop_ir::interp::RunError;
use guardless_ir::loop_ir::Program;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;

/// A tensor in the caller's memory (a torch tensor's storage, say), read in place.
#[derive(Clone, Debug)]
pub struct RawTensor {
    /// The first element.
    pub ptr: *const u8,
    /// Bytes readable from `ptr`.
    pub bytes: usize,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// In elements.
    pub strides: Vec<i64>,
}

/// Where an output's elements live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStorage {
    /// `NativeOutputs::storages[i]`.
    Owned(usize),
    /// The caller's input `k` (the output is a view of an input read in place).
    Input(usize),
}

/// An output as a strided view (in elements of its dtype) of its storage.
#[derive(Clone, Debug)]
pub struct OutputView {
    pub storage: OutputStorage,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub strides: Vec<i64>,
    pub offset: i64,
}

/// A call's outputs, handed over without copying: storages (8-byte words, little-endian elements)
/// and a view of one of them, or of an input, per output.
#[derive(Debug, Default)]
pub struct NativeOutputs {
    pub storages: Vec<Vec<u64>>,
    pub outputs: Vec<OutputView>,
    /// Input bytes copied because their layout was not the graph's.
    pub copied_input_bytes: usize,
    /// Bytes of outputs copied into the inputs they mutate after the kernels (0 when each was
    /// computed in its input's storage: a KV-cache update in place).
    pub written_back_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    #[error("CPU backend: {0}")]
    Compile(String),
}

/// How a call runs.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Fill every fresh allocation with 0xFF bytes (NaN, -1) so an unwritten element shows.
    pub poison: bool,
    /// Threads for kernels and matmuls (0: as many as rayon's pool has: `RAYON_NUM_THREADS`, else the cores).
    pub threads: usize,
}

/// A program compiled for the host.
pub struct CpuProgram {
    pub program: Program,
    pub schedule: Schedule,
    /// By buffer: the graph input whose storage it is computed in when that input is read in
    /// place (a KV-cache `index_put` written back into its cache writes only the new rows).
    #[cfg(feature = "llvm")]
    in_place: Vec<Option<guardless_ir::loop_ir::BufferId>>,
    /// By buffer: its storage root (the buffer its views end at), and the block its storage
    /// lives in before a call moves anything (the memory plan's slot, else a block of its own):
    /// fixed by the schedule, so computed once rather than per call.
    #[cfg(feature = "llvm")]
    roots: Vec<usize>,
    #[cfg(feature = "llvm")]
    homes: Vec<usize>,
    #[cfg(feature = "llvm")]
    jit: jit::Jit,
}

impl CpuProgram {
    /// Schedules `program` and compiles its kernels, through the disk cache where
    /// [`Cache::from_env`] says.
    pub fn compile(program: Program) -> Result<CpuProgram, CpuError> {
        Self::compile_with(program, &Cache::from_env())
    }

    /// Schedules `program` and compiles its kernels through `cache` (see
    /// [`jit::Jit::compile_with`]; the interpreter, without the `llvm` feature, compiles
    /// nothing).
    pub fn compile_with(mut program: Program, cache: &Cache) -> Result<CpuProgram, CpuError> {
        let schedule = schedule(&mut program);
        // Write scatters run natively (`exec::scatter`), writing only their updates.
        #[cfg(feature = "llvm")]
        let writes: Vec<bool> = program
            .buffers
            .iter()
            .map(|b| {
                matches!(
                    b.kind,
                    guardless_ir::loop_ir::BufferKind::Scatter {
                        combine: guardless_ir::loop_ir::ScatterCombine::Write,
                        ..
                    }
                )
            })
            .collect();
        #[cfg(feature = "llvm")]
        {
            let in_place = crate::launch::in_place::in_place_outputs(
                &mut program,
                &schedule,
                &|id| writes[id.index()],
                false,
            );
            let jit = jit::Jit::compile_with(&mut program, &schedule, cache)
                .map_err(|e| CpuError::Compile(e.to_string()))?;
            let n = program.buffers.len();
            let roots: Vec<usize> = (0..n)
                .map(|i| {
                    program
                        .storage_root(guardless_ir::loop_ir::BufferId(i as u32))
                        .index()
                })
                .collect();
            let slots = schedule.memory.slots.len();
            let mut slot_of = vec![None; n];
            for a in &schedule.memory.allocations {
                slot_of[a.buffer.index()] = a.slot;
            }
            let homes = roots
                .iter()
                .map(|&root| slot_of[root].unwrap_or(slots + root))
                .collect();
            Ok(CpuProgram {
                program,
                schedule,
                in_place,
                roots,
                homes,
                jit,
            })
        }
        #[cfg(not(feature = "llvm"))]
        {
            let _ = cache;
            Ok(CpuProgram { program, schedule })
        }
    }

    /// Whether the native code came from the disk cache (`hit`), was compiled and stored there
    /// (`stored`), or was compiled without it (`off: why`); `interpreter` without native code.
    pub fn cache_use(&self) -> String {
        #[cfg(feature = "llvm")]
        return match &self.jit.cache {
            shared_object::CacheUse::Hit => "hit".into(),
            shared_object::CacheUse::Stored => "stored".into(),
            shared_object::CacheUse::Off(why) => format!("off: {why}"),
        };
        #[cfg(not(feature = "llvm"))]
        "interpreter".into()
    }

    /// The native functions the kernels run (kernels of the same structure share one; 0 on the
    /// interpreter).
    pub fn functions(&self) -> usize {
        #[cfg(feature = "llvm")]
        return self.jit.functions;
        #[cfg(not(feature = "llvm"))]
        0
    }

    /// What runs the kernels: `llvm` (native code) or `interpreter`.
    pub fn backend(&self) -> &'static str {
        if cfg!(feature = "llvm") {
            "llvm"
        } else {
            "interpreter"
        }
    }

    /// Loads `inputs` into native storage for [`Session::execute`] (which may run repeatedly).
    #[cfg(feature = "llvm")]
    pub fn session(
        &self,
        inputs: &[HostTensor],
        bindings: &Bindings,
        options: &RunOptions,
    ) -> Result<Session<'_>, RunError> {
        // Host tensors are copied in; nothing is borrowed.
        unsafe {
            exec::session(
                self,
                &self.jit,
                exec::Inputs::Host(inputs),
                bindings,
                options,
            )
        }
    }

    /// Runs on tensors in the caller's memory, reading them in place where their layout is the
    /// graph's; the outputs' storage is handed over, not copied. Without the `llvm` feature the
    /// interpreter runs it, and inputs and outputs are copied.
    ///
    /// An output that mutates an input (`Program::writes_back`) is written into the caller's
    /// tensor after the kernels.
    ///
    /// # Safety
    /// Each input's `ptr` must point to `bytes` readable bytes that stay valid and unwritten
    /// during the call; an input that an output mutates must be writable.
    pub unsafe fn run_raw(
        &self,
        inputs: &[RawTensor],
        bindings: &Bindings,
        options: &RunOptions,
    ) -> Result<NativeOutputs, RunError> {
        #[cfg(feature = "llvm")]
        {
            let mut s = exec::session(
                self,
                &self.jit,
                exec::Inputs::Raw(inputs),
                bindings,
                options,
            )?;
            s.execute()?;
            s.take_outputs()
        }
        #[cfg(not(feature = "llvm"))]
        {
            let p = &self.program;
            for b in &p.buffers {
                if let guardless_ir::loop_ir::BufferKind::Input(k) = b.kind {
                    let t = inputs.get(k).ok_or(RunError::Input {
                        index: k,
                        message: "missing".into(),
                    })?;
                    let sizes = b
                        .layout
                        .sizes
                        .iter()
                        .map(|&s| p.env.evaluate(s, bindings))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| RunError::Assert(e.to_string()))?;
                    memory::check_raw(t, b.dtype, &sizes)
                        .map_err(|message| RunError::Input { index: k, message })?;
                }
            }
            let host: Vec<_> = inputs
                .iter()
                .map(|t| unsafe { memory::raw_to_host(t) })
                .collect();
            let copied = host.iter().map(|t| t.numel() * t.dtype.size()).sum();
            let outs = self.run(&host, bindings, options)?;
            let mut written = 0;
            for w in &p.writes_back {
                written += outs[w.output].numel() * outs[w.output].dtype.size();
                unsafe { memory::write_raw(&inputs[w.input], &outs[w.output]) }.map_err(
                    |message| RunError::Input {
                        index: w.input,
                        message,
                    },
                )?;
            }
            let mut native = memory::host_to_native(&outs, copied);
            native.written_back_bytes = written;
            Ok(native)
        }
    }

    /// Runs the program on `inputs` (in graph input order); `bindings` gives every graph symbol
    /// the inputs do not determine.
    pub fn run(
        &self,
        inputs: &[HostTensor],
        bindings: &Bindings,
        options: &RunOptions,
    ) -> Result<Vec<HostTensor>, RunError> {
        #[cfg(feature = "llvm")]
        {
            let mut s = self.session(inputs, bindings, options)?;
            s.execute()?;
            s.outputs()
        }
        #[cfg(not(feature = "llvm"))]
        {
            let _ = options;
            let plan = self.schedule.exec_plan(&self.program);
            self.program.run_plan(inputs, bindings, &plan)
        }
    }
}
