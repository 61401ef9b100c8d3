//! guardless: a compiler backend for PyTorch graphs with symbolic sizes, targeting NVIDIA GPUs.
//!
//! The pipeline reads as its crates: [`ir`] (symbolic shapes; later the graph format, ATen lowering
//! and the loop-level IR) → [`codegen`] (scheduler, CUDA C, NVRTC) → [`runtime`] (launch, memory,
//! CPU backend). This facade re-exports them and hosts the `guardless` command-line tool.

pub mod cli;

pub use guardless_codegen as codegen;
pub use guardless_ir as ir;
pub use guardless_runtime as runtime;
