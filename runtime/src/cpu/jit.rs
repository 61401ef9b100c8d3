//! The LLVM JIT: every kernel of a schedule becomes a native function, optimized at O3 for the
//! host CPU (its vector units), compiled once per program.

use std::mem::ManuallyDrop;

use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine};
use inkwell::values::AnyValue;
use inkwell::OptimizationLevel;

use guardless_codegen::schedule::Schedule;
use guardless_ir::loop_ir::{BufferId, Program};
use rustc_hash::FxHashMap;

use super::shared_object::{self, CacheUse};
pub use crate::llvm::kernel::{shape_of, KernelShape};
use crate::llvm::{llvm, LlvmError as JitError};
use guardless_codegen::cache::Cache;

/// `k(ptrs, syms, begin, end, err)`: rows `[begin, end)`; `ptrs[i]` is the storage of the
/// kernel's buffer `buffers[k][i]`, `syms[s]` symbol `s`'s value; on a data-dependent failure
/// `err[0]` is set to the error's code (`errors[k][code - 1]`) and `err[1..4]` to the values its
/// message shows. `scratch` holds the kernel's row cache: `cache_slots[k]` × 8 bytes × row
/// length, per thread.
pub type KernelFn = unsafe extern "C" fn(*const *mut u8, *const i64, i64, i64, *mut i64, *mut u8);

/// The compiled kernels of one program, by schedule kernel. Kernels of the same structure (the
/// same kernel of identical layers: other buffers, the same sizes) share one function, each
/// with its own pointer table and error messages. The engine owns the machine code; it is
/// dropped before the context it was built in.
pub struct Jit {
    /// What holds the machine code: LLVM's JIT, or a shared object from the disk cache.
    code: ManuallyDrop<Code>,
    context: ManuallyDrop<Box<Context>>,
    /// Whether the code came from the disk cache, was stored in it, or neither (and why).
    pub cache: CacheUse,
    pub kernels: Vec<KernelFn>,
    /// Distinct functions compiled (at most the kernels').
    pub functions: usize,
    /// Row-cache slots of each kernel.
    pub cache_slots: Vec<usize>,
    /// Each kernel's pointer table: the buffers its function's `ptrs[i]` are.
    pub buffers: Vec<Vec<BufferId>>,
    /// Each kernel's errors: code `i + 1` means `errors[k][i]`: buffer, graph nodes, message.
    pub errors: Vec<Vec<(String, String, String)>>,
    /// By buffer: the updates of a write scatter (`llvm::scatter`), called like a kernel over
    /// the scatter's points.
    pub scatters: FxHashMap<BufferId, Native>,
}

/// A native function that is not a schedule kernel, with its pointer table and errors.
pub struct Native {
    pub function: KernelFn,
    pub buffers: Vec<BufferId>,
    pub errors: Vec<(String, String, String)>,
}

enum Code {
    Engine(#[allow(dead_code)] ExecutionEngine<'static>),
    Loaded(#[allow(dead_code)] shared_object::Loaded),
}

// The engine is only read after construction (function addresses); the kernels are plain code.
unsafe impl Send for Jit {}
unsafe impl Sync for Jit {}

impl Drop for Jit {
    fn drop(&mut self) {
        unsafe {
            ManuallyDrop::drop(&mut self.code);
            ManuallyDrop::drop(&mut self.context);
        }
    }
}

macro_rules! math_helpers {
    ($(($name:ident, $t:ty, $f:expr)),* $(,)?) => {
        $(extern "C" fn $name(x: $t) -> $t { ($f)(x) })*
        /// Name and address.
        fn unary_helpers() -> Vec<(&'static str, usize)> {
            vec![$((stringify!($name), $name as extern "C" fn($t) -> $t as usize)),*]
        }
    };
}

math_helpers!(
    (gl_expf, f32, f32::exp),
    (gl_exp, f64, f64::exp),
    (gl_logf, f32, f32::ln),
    (gl_log, f64, f64::ln),
    (gl_log1pf, f32, f32::ln_1p),
    (gl_log1p, f64, f64::ln_1p),
    (gl_sinf, f32, f32::sin),
    (gl_sin, f64, f64::sin),
    (gl_cosf, f32, f32::cos),
    (gl_cos, f64, f64::cos),
    (gl_tanhf, f32, f32::tanh),
    (gl_tanh, f64, f64::tanh),
    (gl_erff, f32, libm::erff),
    (gl_erf, f64, libm::erf),
    (gl_expm1f, f32, f32::exp_m1),
    (gl_expm1, f64, f64::exp_m1),
    (gl_log2f, f32, f32::log2),
    (gl_log2, f64, f64::log2),
    (gl_log10f, f32, f32::log10),
    (gl_log10, f64, f64::log10),
    (gl_exp2f, f32, f32::exp2),
    (gl_exp2, f64, f64::exp2),
    (gl_tanf, f32, f32::tan),
    (gl_tan, f64, f64::tan),
    (gl_atanf, f32, f32::atan),
    (gl_atan, f64, f64::atan),
    (gl_asinf, f32, f32::asin),
    (gl_asin, f64, f64::asin),
    (gl_acosf, f32, f32::acos),
    (gl_acos, f64, f64::acos),
    (gl_sinhf, f32, f32::sinh),
    (gl_sinh, f64, f64::sinh),
    (gl_coshf, f32, f32::cosh),
    (gl_cosh, f64, f64::cosh),
    (gl_asinhf, f32, f32::asinh),
    (gl_asinh, f64, f64::asinh),
    (gl_acoshf, f32, f32::acosh),
    (gl_acosh, f64, f64::acosh),
    (gl_atanhf, f32, f32::atanh),
    (gl_atanh, f64, f64::atanh),
);

extern "C" fn gl_powf(x: f32, y: f32) -> f32 {
    x.powf(y)
}
extern "C" fn gl_pow(x: f64, y: f64) -> f64 {
    x.powf(y)
}
extern "C" fn gl_atan2f(y: f32, x: f32) -> f32 {
    y.atan2(x)
}
extern "C" fn gl_atan2(y: f64, x: f64) -> f64 {
    y.atan2(x)
}
extern "C" fn gl_hypotf(x: f32, y: f32) -> f32 {
    x.hypot(y)
}
extern "C" fn gl_hypot(x: f64, y: f64) -> f64 {
    x.hypot(y)
}
extern "C" fn gl_ipow(x: i64, y: i64) -> i64 {
    if y < 0 {
        0
    } else {
        x.wrapping_pow(y.min(u32::MAX as i64) as u32)
    }
}

/// The host's target machine; `shared`: position-independent code for a shared object.
fn host_machine(shared: bool) -> Result<TargetMachine, JitError> {
    Target::initialize_native(&InitializationConfig::default()).map_err(JitError::Llvm)?;
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).map_err(llvm)?;
    target
        .create_target_machine(
            &triple,
            &TargetMachine::get_host_cpu_name().to_string(),
            &TargetMachine::get_host_cpu_features().to_string(),
            OptimizationLevel::Aggressive,
            if shared {
                RelocMode::PIC
            } else {
                RelocMode::Default
            },
            if shared {
                CodeModel::Default
            } else {
                CodeModel::JITDefault
            },
        )
        .ok_or_else(|| JitError::Llvm("no target machine for the host".into()))
}

/// The name each kernel's function has while its code is compared with the earlier ones'.
const PROBE: &str = "gl_kernel_probe";

/// The Rust functions the kernels' math helpers are, by name.
fn helper_addresses() -> Vec<(&'static str, usize)> {
    let mut mappings: Vec<(&'static str, usize)> = unary_helpers();
    let binary: [(&'static str, extern "C" fn(f32, f32) -> f32); 3] = [
        ("gl_powf", gl_powf),
        ("gl_atan2f", gl_atan2f),
        ("gl_hypotf", gl_hypotf),
    ];
    let wide: [(&'static str, extern "C" fn(f64, f64) -> f64); 3] = [
        ("gl_pow", gl_pow),
        ("gl_atan2", gl_atan2),
        ("gl_hypot", gl_hypot),
    ];
    mappings.extend(binary.iter().map(|&(n, f)| (n, f as usize)));
    mappings.extend(wide.iter().map(|&(n, f)| (n, f as usize)));
    mappings.push((
        "gl_ipow",
        gl_ipow as extern "C" fn(i64, i64) -> i64 as usize,
    ));
    mappings
}

/// Why a program was not cached when the cache has no directory.
const NO_CACHE_DIR: &str =
    "no disk cache (GUARDLESS_CACHE_DIR is set and empty, or neither XDG_CACHE_HOME nor HOME is)";

impl Jit {
    /// Compiles every kernel of `s` through the disk cache where [`Cache::from_env`] says. `p`
    /// is mutable only to build index expressions.
    pub fn compile(p: &mut Program, s: &Schedule) -> Result<Jit, JitError> {
        Self::compile_with(p, s, &Cache::from_env())
    }

    /// Compiles every kernel of `s`: from `cache` when an earlier process stored the same code
    /// for this CPU; else optimized, linked into a shared object and stored there; without a
    /// cache directory or a linker, by LLVM's in-process JIT.
    pub fn compile_with(p: &mut Program, s: &Schedule, cache: &Cache) -> Result<Jit, JitError> {
        let context = Box::new(Context::create());
        // The context lives (boxed, so at a fixed address) as long as the engine built from it.
        let cx: &'static Context = unsafe { &*(context.as_ref() as *const Context) };
        let module = cx.create_module("guardless");
        let machine = host_machine(cache.dir().is_some())?;
        module.set_triple(&machine.get_triple());
        module.set_data_layout(&machine.get_target_data().get_data_layout());

        let helpers = crate::llvm::declare_helpers(cx, &module);
        let mappings = helper_addresses();
        let cpu = TargetMachine::get_host_cpu_name().to_string();
        let features = TargetMachine::get_host_cpu_features().to_string();
        let mut errors = Vec::new();
        let mut names = Vec::new();
        let mut cache_slots = Vec::new();
        let mut buffers = Vec::new();
        // Functions by their IR (the name left out): a kernel whose code is an earlier kernel's
        // is deleted before optimization and calls the earlier function with its own table.
        // Functions are named by their order (no graph text in the code or the cache key).
        let mut by_code: FxHashMap<String, String> = FxHashMap::default();
        for k in &s.kernels {
            let mut own_errors = Vec::new();
            let (f, slots, table) = crate::llvm::emit_kernel(
                cx,
                &module,
                &helpers,
                p,
                k,
                PROBE,
                &[("target-cpu", &cpu), ("target-features", &features)],
                true,
                true,
                &mut own_errors,
            )?;
            let code = f.print_to_string().to_string();
            match by_code.get(&code) {
                Some(first) => {
                    unsafe { f.delete() };
                    names.push(first.clone());
                }
                None => {
                    let name = format!("gl_kernel{}", by_code.len());
                    f.as_global_value().set_name(&name);
                    by_code.insert(code, name.clone());
                    names.push(name);
                }
            }
            cache_slots.push(slots);
            buffers.push(table);
            errors.push(own_errors);
        }
        let mut scatters = Vec::new();
        for step in &s.steps {
            let guardless_codegen::schedule::Step::Library(id) = *step else {
                continue;
            };
            let name = format!("gl_scatter{}", scatters.len());
            let mut own_errors = Vec::new();
            if let Some((_, table)) = crate::llvm::scatter::emit_scatter(
                cx,
                &module,
                &helpers,
                p,
                id,
                &name,
                &[("target-cpu", &cpu), ("target-features", &features)],
                &mut own_errors,
            )? {
                scatters.push((id, name, table, own_errors));
            }
        }
        module.verify().map_err(llvm)?;
        let mut functions: Vec<String> = by_code.values().cloned().collect();
        functions.sort();
        functions.extend(scatters.iter().map(|s| s.1.clone()));

        let (code, used) = native_code(cx, &module, &machine, cache, &mappings, &functions)?;
        let address = |name: &str| -> Result<usize, JitError> {
            match &code {
                Code::Engine(engine) => engine.get_function_address(name).map_err(llvm),
                Code::Loaded(loaded) => loaded
                    .addresses
                    .get(name)
                    .copied()
                    .ok_or_else(|| JitError::Llvm(format!("no function {name}"))),
            }
        };
        let mut kernels = Vec::with_capacity(names.len());
        for name in &names {
            kernels.push(unsafe { std::mem::transmute::<usize, KernelFn>(address(name)?) });
        }
        let mut natives = FxHashMap::default();
        for (id, name, buffers, errors) in scatters {
            let function = unsafe { std::mem::transmute::<usize, KernelFn>(address(&name)?) };
            natives.insert(
                id,
                Native {
                    function,
                    buffers,
                    errors,
                },
            );
        }
        Ok(Jit {
            code: ManuallyDrop::new(code),
            context: ManuallyDrop::new(context),
            cache: used,
            kernels,
            functions: by_code.len(),
            cache_slots,
            buffers,
            errors,
            scatters: natives,
        })
    }
}

/// Runs LLVM's optimizer over `module`; writes it to `GUARDLESS_LLVM_IR` when that is set.
fn optimize(module: &Module<'static>, machine: &TargetMachine) -> Result<(), JitError> {
    module
        .run_passes("default<O3>", machine, PassBuilderOptions::create())
        .map_err(llvm)?;
    // For inspecting what LLVM made of the kernels (vectorized loops, calls left).
    if let Some(path) = std::env::var_os("GUARDLESS_LLVM_IR") {
        module.print_to_file(path).map_err(llvm)?;
    }
    Ok(())
}

/// The machine code of the verified, unoptimized `module` (whose `functions` the caller will
/// look up): loaded from `cache`, or optimized, linked, stored there and loaded, or — without a
/// cache directory or when linking or loading fails — optimized and JIT-compiled; with how.
fn native_code(
    cx: &'static Context,
    module: &Module<'static>,
    machine: &TargetMachine,
    cache: &Cache,
    mappings: &[(&'static str, usize)],
    functions: &[String],
) -> Result<(Code, CacheUse), JitError> {
    if cache.dir().is_none() {
        optimize(module, machine)?;
        return Ok((
            jit_engine(module, mappings)?,
            CacheUse::Off(NO_CACHE_DIR.into()),
        ));
    }
    let key = shared_object::key(&module.print_to_string().to_string(), machine);
    // An entry that does not load (corrupt, or another machine's) is rebuilt.
    let hit = shared_object::lookup(cache, &key)
        .and_then(|so| shared_object::load(cache, &so, mappings, functions).ok());
    if let Some(loaded) = hit {
        return Ok((Code::Loaded(loaded), CacheUse::Hit));
    }
    optimize(module, machine)?;
    let helper_names: Vec<&str> = mappings.iter().map(|m| m.0).collect();
    let stored = shared_object::build(cx, module, machine, &helper_names, cache).and_then(|so| {
        let loaded = shared_object::load(cache, &so, mappings, functions)?;
        // A cache that cannot be written only costs the next process.
        let _ = shared_object::store(cache, &key, &so);
        Ok(loaded)
    });
    Ok(match stored {
        Ok(loaded) => (Code::Loaded(loaded), CacheUse::Stored),
        Err(why) => (jit_engine(module, mappings)?, CacheUse::Off(why)),
    })
}

/// LLVM's in-process JIT of the optimized `module`, the helpers mapped to their Rust functions.
fn jit_engine(
    module: &Module<'static>,
    mappings: &[(&'static str, usize)],
) -> Result<Code, JitError> {
    let engine = module
        .create_jit_execution_engine(OptimizationLevel::Aggressive)
        .map_err(llvm)?;
    // Helpers the optimizer did not delete (unused declarations go).
    for &(name, addr) in mappings {
        if let Some(live) = module.get_function(name) {
            engine.add_global_mapping(&live, addr);
        }
    }
    Ok(Code::Engine(engine))
}
