//! NVRTC through cudarc: one translation unit → CUBIN for a real architecture (and its PTX), the
//! compile log, and registers and spills per kernel from ptxas's report (`-v`, and
//! `--warn-on-spills` to name them in the log). A spill does not fail the compile here:
//! [`crate::build`] gives the kernel a smaller configuration and compiles again.

use std::ffi::CString;
use std::path::PathBuf;

use cudarc::nvrtc::{result, sys};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum NvrtcError {
    #[error(
        "NVRTC (libnvrtc.so.13) was not found: run `ci/setup` and `source .tools/env`, or put the \
         CUDA 13.0 NVRTC library on LD_LIBRARY_PATH"
    )]
    Missing,
    #[error("the CUDA headers were not found: set GUARDLESS_CUDA_INCLUDE (ci/setup writes it to .tools/env)")]
    NoHeaders,
    #[error("NVRTC failed ({status}):\n{log}")]
    Compile { status: String, log: String },
}

/// What one compilation produced.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub ptx: String,
    pub log: String,
    /// Per kernel (entry name): registers used and bytes spilled (stores + loads).
    pub kernels: Vec<KernelResources>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    pub spill_bytes: u32,
    /// Static shared memory per block.
    pub shared_bytes: u32,
}

/// The NVRTC version, e.g. (13, 0).
pub fn version() -> Result<(i32, i32), NvrtcError> {
    ensure_loaded()?;
    let (mut major, mut minor) = (0, 0);
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| NvrtcError::Compile {
            status: format!("{e:?}"),
            log: String::new(),
        })?;
    Ok((major, minor))
}

/// Whether NVRTC can be loaded (cudarc panics on first use otherwise).
pub fn ensure_loaded() -> Result<(), NvrtcError> {
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(NvrtcError::Missing)
    }
}

/// The CUDA include directory: `GUARDLESS_CUDA_INCLUDE`, else `$CUDA_HOME/include`, else
/// `/usr/local/cuda/include`.
pub fn cuda_include() -> Result<PathBuf, NvrtcError> {
    let candidates = [
        std::env::var_os("GUARDLESS_CUDA_INCLUDE").map(PathBuf::from),
        std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("include")),
        Some(PathBuf::from("/usr/local/cuda/include")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("cuda_bf16.h").exists())
        .ok_or(NvrtcError::NoHeaders)
}

/// The options for `arch` (e.g. `sm_90`). Not `--minimal`: it made no difference beyond the
/// run-to-run noise on the decoder layer (docs/benchmarks.md).
pub fn options(arch: &str, include: &std::path::Path) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        format!("--include-path={}", include.display()),
        "--std=c++17".into(),
        "--ptxas-options=--warn-on-spills".into(),
        "--ptxas-options=-v".into(),
    ]
}

fn c_string(v: Vec<std::ffi::c_char>) -> String {
    let bytes: Vec<u8> = v
        .into_iter()
        .map(|c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles `source` (named `name` in messages) with `options`.
pub fn compile(source: &str, name: &str, options: &[String]) -> Result<Compiled, NvrtcError> {
    ensure_loaded()?;
    let nul = |what: &str| NvrtcError::Compile {
        status: "refused".into(),
        log: format!("the {what} holds a NUL character"),
    };
    let src = CString::new(source).map_err(|_| nul("source"))?;
    let cname = CString::new(name).map_err(|_| nul("translation unit's name"))?;
    let prog = result::create_program(src.as_c_str(), Some(cname.as_c_str())).map_err(|e| {
        NvrtcError::Compile {
            status: format!("{e:?}"),
            log: String::new(),
        }
    })?;
    let compiled = unsafe { result::compile_program(prog, options) };
    let log = unsafe { result::get_program_log(prog) }
        .map(c_string)
        .unwrap_or_default();
    let out = match compiled {
        Err(e) => Err(NvrtcError::Compile {
            status: format!("{e:?}"),
            log: log.clone(),
        }),
        Ok(()) => {
            let ptx = unsafe { result::get_ptx(prog) }
                .map(c_string)
                .unwrap_or_default();
            let cubin = unsafe { cubin(prog) }.map_err(|e| NvrtcError::Compile {
                status: e,
                log: log.clone(),
            });
            cubin.map(|cubin| Compiled {
                cubin,
                ptx,
                kernels: resources(&log),
                log: log.clone(),
            })
        }
    };
    let _ = unsafe { result::destroy_program(prog) };
    out
}

unsafe fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, String> {
    let mut size = 0usize;
    sys::nvrtcGetCUBINSize(prog, &mut size)
        .result()
        .map_err(|e| format!("{e:?}"))?;
    let mut buf = vec![0 as std::ffi::c_char; size];
    sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr())
        .result()
        .map_err(|e| format!("{e:?}"))?;
    Ok(buf.into_iter().map(|c| c as u8).collect())
}

/// Registers and spills per function from ptxas's `-v` report:
/// `ptxas info    : Compiling entry function 'NAME' for 'sm_90'`, then
/// `… N bytes spill stores, M bytes spill loads` and `ptxas info    : Used R registers, …, S bytes
/// smem`.
pub fn resources(log: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(KernelResources {
                name,
                registers: 0,
                spill_bytes: 0,
                shared_bytes: 0,
            });
        } else if let Some(k) = out.last_mut() {
            let num_before = |pat: &str| -> Option<u32> {
                let i = line.find(pat)?;
                line[..i].split_whitespace().last()?.parse().ok()
            };
            if line.contains("spill stores") {
                k.spill_bytes += num_before(" bytes spill stores").unwrap_or(0)
                    + num_before(" bytes spill loads").unwrap_or(0);
            }
            if let Some(r) = num_before(" registers") {
                k.registers = r;
            }
            if let Some(b) = num_before(" bytes smem") {
                k.shared_bytes = b;
            }
        }
    }
    out
}

/// The `.version` line of a PTX text (e.g. `9.0`).
pub fn ptx_version(ptx: &str) -> Option<&str> {
    ptx.lines()
        .find_map(|l| l.trim().strip_prefix(".version "))
        .map(str::trim)
}
