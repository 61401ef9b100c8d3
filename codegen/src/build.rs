//! CUDA C for a schedule, compiled: the module is generated and its translation units compiled
//! through the disk cache; a kernel variant that spills registers (ptxas's report) is given the
//! next smaller configuration ([`KernelConfig::smaller`]) and the module is compiled again, until
//! nothing spills. A spill costs a compile round, never the compile: only a function with no
//! smaller configuration left (or a library function, which has one configuration) fails it.

use guardless_ir::loop_ir::Program;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::cache::Cache;
use crate::cuda::{generate, structural_key, CudaModule, EntryOf};
use crate::nvrtc::{Compiled, NvrtcError};
use crate::schedule::{Kernel, Schedule};

#[derive(Debug, Error)]
pub enum BuildError {
    #[error(transparent)]
    Nvrtc(#[from] NvrtcError),
    #[error("{function} (nodes {nodes}) spills {bytes} bytes of registers on {arch}{tried}")]
    Spills {
        function: String,
        nodes: String,
        bytes: u32,
        arch: String,
        tried: String,
    },
}

/// A variant compiled with a smaller configuration than the scheduler chose: `steps` calls of
/// [`KernelConfig::smaller`](crate::schedule::config::KernelConfig::smaller) from the chosen one.
/// A compiled artifact records these so that loading it generates the same code.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fallback {
    pub kernel: usize,
    pub variant: usize,
    pub steps: usize,
}

/// A compiled module.
pub struct Built {
    pub module: CudaModule,
    /// Per translation unit: the compilation and whether it came from the cache.
    pub units: Vec<(Compiled, bool)>,
    pub fallbacks: Vec<Fallback>,
}

/// Generates `s`'s CUDA and compiles it for `arch` through `cache`, shrinking the configuration of
/// every variant whose function spills (the kernel's reasons say what changed and why) until none
/// does.
pub fn build(
    p: &mut Program,
    s: &mut Schedule,
    cache: &Cache,
    arch: &str,
) -> Result<Built, BuildError> {
    let mut steps: FxHashMap<(usize, usize), usize> = FxHashMap::default();
    let mut module = generate(p, s);
    loop {
        let units = cache.compile_units(&module.units, arch)?;
        let spilled: FxHashMap<&str, u32> = units
            .iter()
            .flat_map(|(c, _)| &c.kernels)
            .filter(|r| r.spill_bytes > 0)
            .map(|r| (r.name.as_str(), r.spill_bytes))
            .collect();
        if spilled.is_empty() {
            let mut fallbacks: Vec<Fallback> = steps
                .into_iter()
                .map(|((kernel, variant), steps)| Fallback {
                    kernel,
                    variant,
                    steps,
                })
                .collect();
            fallbacks.sort_by_key(|f| (f.kernel, f.variant));
            return Ok(Built {
                module,
                units,
                fallbacks,
            });
        }
        let mut targets: Vec<((usize, usize), u32)> = Vec::new();
        for e in &module.entries {
            let Some(&bytes) = spilled.get(e.name.as_str()) else {
                continue;
            };
            match e.of {
                EntryOf::Kernel { kernel, variant } => targets.push(((kernel, variant), bytes)),
                EntryOf::Library { ref buffer, .. } => {
                    let nodes = p
                        .buffers
                        .iter()
                        .find(|b| &b.name == buffer)
                        .map(|b| b.origins.join(", "))
                        .unwrap_or_default();
                    return Err(BuildError::Spills {
                        function: e.name.clone(),
                        nodes,
                        bytes,
                        arch: arch.into(),
                        tried: String::new(),
                    });
                }
            }
        }
        module = shrink(p, s, &module, &targets, &mut steps, arch)?;
    }
}

/// Gives every variant of `targets` (with the bytes its function spilled) smaller configurations
/// until its function's code changes, and returns the module generated with them.
fn shrink(
    p: &mut Program,
    s: &mut Schedule,
    module: &CudaModule,
    targets: &[((usize, usize), u32)],
    steps: &mut FxHashMap<(usize, usize), usize>,
    arch: &str,
) -> Result<CudaModule, BuildError> {
    let before: Vec<Option<String>> = targets
        .iter()
        .map(|&((k, v), _)| function_key(module, k, v))
        .collect();
    let mut pending: Vec<usize> = (0..targets.len()).collect();
    loop {
        for &i in &pending {
            let ((ki, vi), bytes) = targets[i];
            let k = &mut s.kernels[ki];
            let why = format!("spilled {bytes} bytes on {arch} (ptxas)");
            if !shrink_variant(p, k, vi, &why) {
                let tried = steps.get(&(ki, vi)).copied().unwrap_or(0);
                return Err(BuildError::Spills {
                    function: format!("{}_v{vi}", k.name),
                    nodes: k.origins.join(", "),
                    bytes,
                    arch: arch.into(),
                    tried: format!(" in every configuration ({tried} smaller ones tried)"),
                });
            }
            *steps.entry((ki, vi)).or_default() += 1;
        }
        let module = generate(p, s);
        pending.retain(|&i| {
            let ((k, v), _) = targets[i];
            function_key(&module, k, v) == before[i]
        });
        if pending.is_empty() {
            return Ok(module);
        }
    }
}

/// The structure of the function variant `v` of kernel `k` runs.
fn function_key(m: &CudaModule, k: usize, v: usize) -> Option<String> {
    let e = m.entries.iter().find(|e| {
        e.of == EntryOf::Kernel {
            kernel: k,
            variant: v,
        }
    })?;
    let (_, text) = m.functions.iter().find(|(name, _)| name == &e.name)?;
    Some(structural_key(text))
}

/// Applies `fallbacks` (from an earlier [`build`]) to a fresh schedule of the same graph, so that
/// generating it gives the code that was compiled.
pub fn replay(p: &mut Program, s: &mut Schedule, fallbacks: &[Fallback]) -> Result<(), String> {
    for f in fallbacks {
        let k = s
            .kernels
            .get_mut(f.kernel)
            .ok_or_else(|| format!("fallback for kernel {}: no such kernel", f.kernel))?;
        let name = k.name.clone();
        if f.variant >= k.variants.len() {
            return Err(format!("fallback for {name}: no variant {}", f.variant));
        }
        for _ in 0..f.steps {
            if !shrink_variant(p, k, f.variant, "(recorded fallback)") {
                return Err(format!(
                    "fallback for {name}_v{}: {} steps, but the configuration has fewer",
                    f.variant, f.steps
                ));
            }
        }
    }
    Ok(())
}

/// Gives variant `vi` of `k` its next smaller configuration and says why in the kernel's reasons
/// (`spills: v0 {why}; {what changed}`); false when it has none.
fn shrink_variant(p: &mut Program, k: &mut Kernel, vi: usize, why: &str) -> bool {
    let Some((smaller, what)) = k.variants[vi].config.smaller() else {
        return false;
    };
    let (rows, row_len) = (k.rows, k.row_len);
    k.variants[vi].reconfigure(&mut p.env, rows, row_len, smaller);
    k.reasons.push(format!("spills: v{vi} {why}; {what}"));
    true
}
