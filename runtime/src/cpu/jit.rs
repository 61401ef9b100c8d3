//! The LLVM JIT: every kernel of a schedule becomes a native function, optimized at O3 for the
//! host CPU (its vector units), compiled once per program.

use std::mem::ManuallyDrop;

use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine};
use inkwell::values::AnyValue;
use inkwell::OptimizationLevel;

use guardless_codegen::schedule::Schedule;
use guardless_ir::loop_ir::{BufferId, Program};
use rustc_hash::FxHashMap;

pub use crate::llvm::kernel::{shape_of, KernelShape};
use crate::llvm::{llvm, LlvmError as JitError};

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
    engine: ManuallyDrop<ExecutionEngine<'static>>,
    context: ManuallyDrop<Box<Context>>,
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

// The engine is only read after construction (function addresses); the kernels are plain code.
unsafe impl Send for Jit {}
unsafe impl Sync for Jit {}

impl Drop for Jit {
    fn drop(&mut self) {
        unsafe {
            ManuallyDrop::drop(&mut self.engine);
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

fn host_machine() -> Result<TargetMachine, JitError> {
    Target::initialize_native(&InitializationConfig::default()).map_err(JitError::Llvm)?;
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).map_err(llvm)?;
    target
        .create_target_machine(
            &triple,
            &TargetMachine::get_host_cpu_name().to_string(),
            &TargetMachine::get_host_cpu_features().to_string(),
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| JitError::Llvm("no target machine for the host".into()))
}

/// The name each kernel's function has while its code is compared with the earlier ones'.
const PROBE: &str = "gl_kernel_probe";

impl Jit {
    /// Compiles every kernel of `s`. `p` is mutable only to build index expressions.
    pub fn compile(p: &mut Program, s: &Schedule) -> Result<Jit, JitError> {
        let context = Box::new(Context::create());
        // The context lives (boxed, so at a fixed address) as long as the engine built from it.
        let cx: &'static Context = unsafe { &*(context.as_ref() as *const Context) };
        let module = cx.create_module("guardless");
        let machine = host_machine()?;
        module.set_triple(&machine.get_triple());
        module.set_data_layout(&machine.get_target_data().get_data_layout());

        let helpers = crate::llvm::declare_helpers(cx, &module);
        let mut mappings: Vec<(&'static str, usize)> = unary_helpers();
        mappings.push((
            "gl_powf",
            gl_powf as extern "C" fn(f32, f32) -> f32 as usize,
        ));
        mappings.push(("gl_pow", gl_pow as extern "C" fn(f64, f64) -> f64 as usize));
        mappings.push((
            "gl_atan2f",
            gl_atan2f as extern "C" fn(f32, f32) -> f32 as usize,
        ));
        mappings.push((
            "gl_atan2",
            gl_atan2 as extern "C" fn(f64, f64) -> f64 as usize,
        ));
        mappings.push((
            "gl_hypotf",
            gl_hypotf as extern "C" fn(f32, f32) -> f32 as usize,
        ));
        mappings.push((
            "gl_hypot",
            gl_hypot as extern "C" fn(f64, f64) -> f64 as usize,
        ));
        mappings.push((
            "gl_ipow",
            gl_ipow as extern "C" fn(i64, i64) -> i64 as usize,
        ));

        let cpu = TargetMachine::get_host_cpu_name().to_string();
        let features = TargetMachine::get_host_cpu_features().to_string();
        let mut errors = Vec::new();
        let mut names = Vec::new();
        let mut cache_slots = Vec::new();
        let mut buffers = Vec::new();
        // Functions by their IR (the name left out): a kernel whose code is an earlier kernel's
        // is deleted before optimization and calls the earlier function with its own table.
        let mut by_code: FxHashMap<String, String> = FxHashMap::default();
        for (ki, k) in s.kernels.iter().enumerate() {
            let name = format!("k{ki}_{}", k.name);
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
            let name = format!("scatter{}", id.index());
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
        module
            .run_passes("default<O3>", &machine, PassBuilderOptions::create())
            .map_err(llvm)?;
        // For inspecting what LLVM made of the kernels (vectorized loops, calls left).
        if let Some(path) = std::env::var_os("GUARDLESS_LLVM_IR") {
            module.print_to_file(path).map_err(llvm)?;
        }
        let engine = module
            .create_jit_execution_engine(OptimizationLevel::Aggressive)
            .map_err(llvm)?;
        // Helpers the optimizer did not delete (unused declarations go).
        for &(name, addr) in &mappings {
            if let Some(live) = module.get_function(name) {
                engine.add_global_mapping(&live, addr);
            }
        }
        let mut kernels = Vec::with_capacity(names.len());
        for name in &names {
            let addr = engine.get_function_address(name).map_err(llvm)?;
            kernels.push(unsafe { std::mem::transmute::<usize, KernelFn>(addr) });
        }
        let mut natives = FxHashMap::default();
        for (id, name, buffers, errors) in scatters {
            let addr = engine.get_function_address(&name).map_err(llvm)?;
            let function = unsafe { std::mem::transmute::<usize, KernelFn>(addr) };
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
            engine: ManuallyDrop::new(engine),
            context: ManuallyDrop::new(context),
            kernels,
            functions: by_code.len(),
            cache_slots,
            buffers,
            errors,
            scatters: natives,
        })
    }
}
