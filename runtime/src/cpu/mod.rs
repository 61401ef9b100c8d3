//! The CPU backend: runs a schedule on the host. With the `llvm` feature every kernel is native
//! code (see `jit`), buffers live in native storage placed by the memory plan, matmuls go to a
//! blocked SIMD library, rows are split across threads; other library steps (sort, scan, nonzero,
//! scatter, `.item()`, grouped matmul) run through the loop-IR interpreter's implementations.
//! Without the feature the whole schedule runs on the interpreter (`Program::run_plan`).

#[cfg(feature = "llvm")]
mod exec;
#[cfg(feature = "llvm")]
pub mod jit;
#[cfg(feature = "llvm")]
mod matmul;
#[cfg(feature = "llvm")]
mod memory;

#[cfg(feature = "llvm")]
pub use exec::Session;

use guardless_codegen::schedule::{schedule, Schedule};
use guardless_ir::loop_ir::interp::RunError;
use guardless_ir::loop_ir::Program;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;

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
    /// Threads for kernels and matmuls (0: all cores).
    pub threads: usize,
}

/// A program compiled for the host.
pub struct CpuProgram {
    pub program: Program,
    pub schedule: Schedule,
    #[cfg(feature = "llvm")]
    jit: jit::Jit,
}

impl CpuProgram {
    /// Schedules `program` and compiles its kernels.
    pub fn compile(mut program: Program) -> Result<CpuProgram, CpuError> {
        let schedule = schedule(&mut program);
        #[cfg(feature = "llvm")]
        {
            let jit = jit::Jit::compile(&mut program, &schedule)
                .map_err(|e| CpuError::Compile(e.to_string()))?;
            Ok(CpuProgram {
                program,
                schedule,
                jit,
            })
        }
        #[cfg(not(feature = "llvm"))]
        Ok(CpuProgram { program, schedule })
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
        exec::session(self, &self.jit, inputs, bindings, options)
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
