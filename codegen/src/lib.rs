//! Code generation for guardless: the scheduler (fusion, memory planning, kernel configurations from
//! size hints) and the launch manifest; CUDA C from `templates/` and NVRTC come next.

pub mod build;
pub mod cache;
pub mod cuda;
pub mod nvrtc;
pub mod report;
pub mod schedule;
pub mod text;

pub use guardless_ir as ir;
