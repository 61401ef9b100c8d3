//! The guardless runtime: runs scheduled programs. `cpu` executes a schedule on the host with
//! native buffers, its kernels JIT-compiled through LLVM (feature `llvm`).

pub use guardless_codegen as codegen;

pub mod cpu;
pub mod cuda;
pub mod elements;
pub mod launch;
#[cfg(feature = "llvm")]
pub mod llvm;
pub mod specialize;
