//! Code generation for guardless: the scheduler (fusion, memory planning, kernel configurations from
//! size hints), CUDA C rendered from the `templates/` directory, and NVRTC compilation. It is filled by
//! the scheduler and CUDA code generation issues; today it only re-exports the IR it will consume.

pub use guardless_ir as ir;
