//! The GPU runtime: a graph compiled once (CUDA from the code generator, CUBIN from NVRTC through
//! the disk cache, or loaded from a compiled artifact directory) and run at every size by the
//! launcher (`launch`) on the CUDA driver.

mod device;
mod lt;

use std::path::Path;
use std::sync::Arc;

use cudarc::driver::CudaContext;
use guardless_codegen::build::{build, replay, Fallback};
use guardless_codegen::cache::Cache;
use guardless_codegen::cuda::generate;
use guardless_codegen::schedule::schedule;
use guardless_ir::loop_ir::Program;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;

pub use device::{CudaDevice, DeviceMemory};

use crate::launch::{Executable, Inputs, LaunchError, Session, SessionOptions};

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver: libcuda.so.1 is not on the library path (a GPU machine has it)")]
    NoDriver,
    #[error("CUDA driver: {0}")]
    Driver(String),
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    #[error("artifact {dir}: {message}")]
    Artifact { dir: String, message: String },
    #[error(transparent)]
    Launch(#[from] LaunchError),
}

/// The fallbacks `kernels.json` of a compiled artifact records (none when it has no such file
/// or no such list: an artifact compiled without spills).
fn artifact_fallbacks(dir: &Path) -> Result<Vec<Fallback>, String> {
    let path = dir.join("kernels.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(Vec::new());
    };
    let index: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("kernels.json: {e}"))?;
    match index.get("fallbacks") {
        None => Ok(Vec::new()),
        Some(f) => {
            serde_json::from_value(f.clone()).map_err(|e| format!("kernels.json: fallbacks: {e}"))
        }
    }
}

/// Whether a CUDA driver and at least one GPU are present (never panics without a driver).
pub fn available() -> bool {
    driver_present() && CudaContext::device_count().is_ok_and(|n| n > 0)
}

/// Whether `libcuda.so` loads: checked before any driver call, which panics without it.
pub fn driver_present() -> bool {
    // Only tries to load the library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn context() -> Result<(Arc<CudaContext>, String), CudaError> {
    if !driver_present() {
        return Err(CudaError::NoDriver);
    }
    let ctx = CudaContext::new(0).map_err(|e| CudaError::Driver(format!("{e:?}")))?;
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| CudaError::Driver(format!("{e:?}")))?;
    Ok((ctx, format!("sm_{major}{minor}")))
}

/// A graph compiled for the GPU: its launcher and its loaded kernels.
pub struct CudaProgram {
    pub exe: Executable,
    pub device: CudaDevice,
    /// The architecture the CUBIN is for (the device's own).
    pub arch: String,
    /// Whether NVRTC ran (false: every unit came from the disk cache or an artifact).
    pub compiled: bool,
}

impl CudaProgram {
    /// Schedules, generates and compiles `program` for the first GPU (through the disk cache).
    pub fn compile(program: Program) -> Result<CudaProgram, CudaError> {
        let (ctx, arch) = context()?;
        let mut program = program;
        let mut s = schedule(&mut program);
        // A kernel that spills is compiled again with a smaller configuration (build::build).
        let built = build(&mut program, &mut s, &Cache::from_env(), &arch)
            .map_err(|e| CudaError::Nvrtc(e.to_string()))?;
        let compiled = built.units.iter().any(|(_, cached)| !cached);
        let cubins: Vec<Vec<u8>> = built.units.into_iter().map(|(c, _)| c.cubin).collect();
        let exe = Executable::from_parts(program, s, built.module)?;
        let device =
            CudaDevice::new(ctx, &cubins, &exe.module.entries).map_err(CudaError::Driver)?;
        Ok(CudaProgram {
            exe,
            device,
            arch,
            compiled,
        })
    }

    /// Loads a compiled artifact (`guardless compile --emit cuda,ptx --out-dir DIR`) without
    /// running NVRTC: the graph is scheduled again (milliseconds), its CUDA must be the text the
    /// artifact holds, and the CUBIN is the artifact's.
    pub fn load_artifact(dir: &Path, program: Program) -> Result<CudaProgram, CudaError> {
        let bad = |message: String| CudaError::Artifact {
            dir: dir.display().to_string(),
            message,
        };
        let (ctx, arch) = context()?;
        let mut program = program;
        let mut s = schedule(&mut program);
        // The configurations the compile fell back to (spills), applied to the fresh schedule.
        let fallbacks = artifact_fallbacks(dir).map_err(bad)?;
        replay(&mut program, &mut s, &fallbacks).map_err(|e| bad(format!("kernels.json: {e}")))?;
        let module = generate(&mut program, &s);
        let exe = Executable::from_parts(program, s, module)?;
        let source = std::fs::read_to_string(dir.join("kernels.cu"))
            .map_err(|e| bad(format!("kernels.cu: {e}")))?;
        if source != exe.module.source {
            return Err(bad(
                "kernels.cu differs from what this build generates for the graph: compile the artifact again".into(),
            ));
        }
        let n = exe.module.units.len();
        let mut cubins = Vec::with_capacity(n);
        for i in 0..n {
            let name = if n > 1 {
                format!("kernels.{i}.cubin")
            } else {
                "kernels.cubin".to_string()
            };
            cubins.push(std::fs::read(dir.join(&name)).map_err(|e| bad(format!("{name}: {e}")))?);
        }
        let device = CudaDevice::new(ctx, &cubins, &exe.module.entries)
            .map_err(|e| bad(format!("{e} (was it compiled for {arch}?)")))?;
        Ok(CudaProgram {
            exe,
            device,
            arch,
            compiled: false,
        })
    }

    /// The launcher's program and the device, borrowed apart: a [`Session`] holds the first
    /// and takes the second at each call.
    pub fn parts(&mut self) -> (&Executable, &mut CudaDevice) {
        (&self.exe, &mut self.device)
    }

    /// Runs once on host tensors and copies the outputs back.
    pub fn run(
        &mut self,
        inputs: &[HostTensor],
        bindings: &Bindings,
        options: &SessionOptions,
    ) -> Result<Vec<HostTensor>, LaunchError> {
        let mut s = Session::new(
            &mut self.device,
            &self.exe,
            Inputs::Host(inputs),
            bindings,
            options,
        )?;
        s.execute(&mut self.device)?;
        s.outputs(&mut self.device)
    }
}
