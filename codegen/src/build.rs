//! CUDA C for a schedule, compiled: the module is generated and its translation units compiled
//! through the disk cache; a kernel variant that spills registers (ptxas's report) is given the
//! next smaller configuration ([`KernelConfig::smaller`]) and the module is compiled again, until
//! nothing spills. A spill costs a compile round, never the compile: only a function with no
//! smaller configuration left (or a library function already given more registers) fails it.

use guardless_ir::loop_ir::{BufferId, Program};
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
#[serde(untagged)]
pub enum Fallback {
    /// Variant `variant` of kernel `kernel` took `steps` smaller configurations.
    Kernel {
        kernel: usize,
        variant: usize,
        steps: usize,
    },
    /// The functions of library step `library` (a buffer index) were built with the registers
    /// of one block per multiprocessor.
    Library { library: usize },
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
            let mut kernels: Vec<_> = steps.into_iter().collect();
            kernels.sort_unstable();
            let mut fallbacks: Vec<Fallback> = kernels
                .into_iter()
                .map(|((kernel, variant), steps)| Fallback::Kernel {
                    kernel,
                    variant,
                    steps,
                })
                .collect();
            fallbacks.extend(
                s.relaxed_library
                    .iter()
                    .map(|b| Fallback::Library { library: b.index() }),
            );
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
                    // Its functions get the registers of one block per multiprocessor, once.
                    let found = p.buffers.iter().position(|b| &b.name == buffer);
                    let id = found.map(|i| BufferId(i as u32));
                    match id.filter(|id| !s.relaxed_library.contains(id)) {
                        Some(id) => {
                            s.relaxed_library.push(id);
                        }
                        None => {
                            let nodes = found
                                .map(|i| p.buffers[i].origins.join(", "))
                                .unwrap_or_default();
                            return Err(BuildError::Spills {
                                function: e.name.clone(),
                                nodes,
                                bytes,
                                arch: arch.into(),
                                tried: " with the registers of one block per multiprocessor".into(),
                            });
                        }
                    }
                }
            }
        }
        // Only library steps spilled: they are relaxed now.
        module = if targets.is_empty() {
            generate(p, s)
        } else {
            shrink(p, s, &module, &targets, &mut steps, arch)?
        };
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
        let (kernel, variant, steps) = match *f {
            Fallback::Kernel {
                kernel,
                variant,
                steps,
            } => (kernel, variant, steps),
            Fallback::Library { library } => {
                if library >= p.buffers.len() {
                    return Err(format!(
                        "fallback for library step {library}: no such buffer"
                    ));
                }
                s.relaxed_library.push(BufferId(library as u32));
                continue;
            }
        };
        let k = s
            .kernels
            .get_mut(kernel)
            .ok_or_else(|| format!("fallback for kernel {kernel}: no such kernel"))?;
        let name = k.name.clone();
        if variant >= k.variants.len() {
            return Err(format!("fallback for {name}: no variant {variant}"));
        }
        for _ in 0..steps {
            if !shrink_variant(p, k, variant, "(recorded fallback)") {
                return Err(format!(
                    "fallback for {name}_v{variant}: {steps} steps, but the configuration has fewer"
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
