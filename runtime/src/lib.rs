//! The guardless runtime: loading compiled artifacts, launching kernels through cudarc, cuBLAS
//! matmuls, unbacked sizes at run time, and the CPU backend through LLVM. It is filled by the GPU
//! runtime and CPU backend issues; today it only re-exports the code generator it will drive.

pub use guardless_codegen as codegen;
