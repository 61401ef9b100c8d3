//! Kernels of a schedule as LLVM IR, shared by the CPU JIT (`cpu::jit`) and the NVPTX
//! cross-check (`ptx`): each kernel a function over a range of rows (see `kernel`), values with
//! the interpreter's semantics (see `emit`), math helpers declared here and defined per target.

pub mod emit;
pub mod kernel;
pub mod ops;
pub mod ptx;
pub mod scatter;

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::values::FunctionValue;
use rustc_hash::FxHashMap;

use guardless_ir::loop_ir::{BufferId, Program};

#[derive(Debug, thiserror::Error)]
pub enum LlvmError {
    #[error("LLVM: {0}")]
    Llvm(String),
}

pub fn llvm<E: std::fmt::Display>(e: E) -> LlvmError {
    LlvmError::Llvm(e.to_string())
}

/// The math the bodies call that LLVM has no target-independent instruction for: unary f32 and
/// f64 functions (name, whether f64), `pow`, `atan2`, integer `pow`. Declared pure; each target defines
/// or maps them.
pub const UNARY_HELPERS: [(&str, bool); 40] = [
    ("gl_expf", false),
    ("gl_exp", true),
    ("gl_logf", false),
    ("gl_log", true),
    ("gl_log1pf", false),
    ("gl_log1p", true),
    ("gl_sinf", false),
    ("gl_sin", true),
    ("gl_cosf", false),
    ("gl_cos", true),
    ("gl_tanhf", false),
    ("gl_tanh", true),
    ("gl_erff", false),
    ("gl_erf", true),
    ("gl_expm1f", false),
    ("gl_expm1", true),
    ("gl_log2f", false),
    ("gl_log2", true),
    ("gl_log10f", false),
    ("gl_log10", true),
    ("gl_exp2f", false),
    ("gl_exp2", true),
    ("gl_tanf", false),
    ("gl_tan", true),
    ("gl_atanf", false),
    ("gl_atan", true),
    ("gl_asinf", false),
    ("gl_asin", true),
    ("gl_acosf", false),
    ("gl_acos", true),
    ("gl_sinhf", false),
    ("gl_sinh", true),
    ("gl_coshf", false),
    ("gl_cosh", true),
    ("gl_asinhf", false),
    ("gl_asinh", true),
    ("gl_acoshf", false),
    ("gl_acosh", true),
    ("gl_atanhf", false),
    ("gl_atanh", true),
];

/// Whether helper `name` works on f64 (else f32).
pub fn helper_is_wide(name: &str) -> bool {
    matches!(name, "gl_pow" | "gl_atan2" | "gl_hypot" | "gl_ipow")
        || UNARY_HELPERS.iter().any(|&(n, w)| n == name && w)
}

pub fn declare_helpers<'c>(
    cx: &'c Context,
    module: &Module<'c>,
) -> FxHashMap<&'static str, FunctionValue<'c>> {
    let mut helpers = FxHashMap::default();
    let (f32t, f64t, i64t) = (cx.f32_type(), cx.f64_type(), cx.i64_type());
    for (name, wide) in UNARY_HELPERS {
        let t = if wide { f64t } else { f32t };
        helpers.insert(
            name,
            module.add_function(name, t.fn_type(&[t.into()], false), None),
        );
    }
    for (name, t) in [
        ("gl_powf", f32t),
        ("gl_pow", f64t),
        ("gl_atan2f", f32t),
        ("gl_atan2", f64t),
        ("gl_hypotf", f32t),
        ("gl_hypot", f64t),
    ] {
        let f = module.add_function(name, t.fn_type(&[t.into(), t.into()], false), None);
        helpers.insert(name, f);
    }
    let f = module.add_function(
        "gl_ipow",
        i64t.fn_type(&[i64t.into(), i64t.into()], false),
        None,
    );
    helpers.insert("gl_ipow", f);
    // Pure functions (memory(none) is the attribute value 0): calls move and vanish freely.
    for f in helpers.values() {
        for attr in ["nounwind", "willreturn", "memory"] {
            let kind = Attribute::get_named_enum_kind_id(attr);
            f.add_attribute(AttributeLoc::Function, cx.create_enum_attribute(kind, 0));
        }
    }
    helpers
}

/// Emits kernel `k` as `void name(ptr ptrs, ptr syms, i64 begin, i64 end, ptr err, ptr scratch)`
/// over rows `[begin, end)`, with the given function attributes (target CPU and features). With
/// `row_cache`, values a later pass needs again are kept in `scratch` (8 bytes × row length per
/// slot). `ptrs` is the program's pointer table (by buffer id), or with `own_table` the kernel's
/// own: then the buffers it holds, in order, are returned. Returns the function, its number of
/// row-cache slots and that table.
#[allow(clippy::too_many_arguments)]
pub fn emit_kernel<'c>(
    cx: &'c Context,
    module: &Module<'c>,
    helpers: &FxHashMap<&'static str, FunctionValue<'c>>,
    p: &mut Program,
    k: &guardless_codegen::schedule::Kernel,
    name: &str,
    attributes: &[(&str, &str)],
    row_cache: bool,
    own_table: bool,
    errors: &mut Vec<(String, String, String)>,
) -> Result<(FunctionValue<'c>, usize, Vec<BufferId>), LlvmError> {
    let ptr = cx.ptr_type(inkwell::AddressSpace::default());
    let i64t = cx.i64_type();
    let fty = cx.void_type().fn_type(
        &[
            ptr.into(),
            ptr.into(),
            i64t.into(),
            i64t.into(),
            ptr.into(),
            ptr.into(),
        ],
        false,
    );
    let function = module.add_function(name, fty, None);
    for (k, v) in attributes {
        function.add_attribute(AttributeLoc::Function, cx.create_string_attribute(k, v));
    }
    let nounwind = Attribute::get_named_enum_kind_id("nounwind");
    function.add_attribute(
        AttributeLoc::Function,
        cx.create_enum_attribute(nounwind, 0),
    );
    let noalias = Attribute::get_named_enum_kind_id("noalias");
    for i in [0u32, 1, 4, 5] {
        function.add_attribute(AttributeLoc::Param(i), cx.create_enum_attribute(noalias, 0));
    }
    let (members, slots) = kernel::plan_members(p, k, row_cache);
    let entry_bb = cx.append_basic_block(function, "entry");
    let start_bb = cx.append_basic_block(function, "start");
    let b = cx.create_builder();
    let entry = cx.create_builder();
    entry.position_at_end(entry_bb);
    b.position_at_end(start_bb);
    let params = function.get_params();
    let p_ref: &Program = p;
    let mut e = emit::Emitter {
        cx,
        module,
        b: &b,
        entry: &entry,
        function,
        env: &p_ref.env,
        ptrs: params[0].into_pointer_value(),
        syms: params[1].into_pointer_value(),
        err: params[4].into_pointer_value(),
        locals: FxHashMap::default(),
        sym_cache: FxHashMap::default(),
        ptr_cache: FxHashMap::default(),
        slots: own_table.then(Vec::new),
        memo: FxHashMap::default(),
        errors,
        current: (String::new(), String::new()),
        fail_blocks: FxHashMap::default(),
        helpers,
    };
    let begin = params[2].into_int_value();
    let end = params[3].into_int_value();
    {
        let mut ke = kernel::KernelEmitter::new(&mut e, p_ref, k, members);
        ke.scratch = (slots > 0).then(|| params[5].into_pointer_value());
        ke.emit(begin, end).map_err(llvm)?;
    }
    b.build_return(None).map_err(llvm)?;
    entry.build_unconditional_branch(start_bb).map_err(llvm)?;
    let table = e.slots.take().unwrap_or_default();
    Ok((function, slots, table))
}
