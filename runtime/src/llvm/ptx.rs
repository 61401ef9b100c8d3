//! A second PTX path, a cross-check of the code generator rather than the GPU path: the same
//! kernel functions the CPU JIT runs, compiled by LLVM's NVPTX backend (PTX ISA 8.5, the most
//! LLVM 19 emits, which the CUDA 13.0 driver accepts), one GPU thread per row. Math without an
//! NVPTX instruction uses the hardware's approximate `ex2`/`lg2`/`sin`/`cos` (and `exp` the inline
//! polynomial), so results agree with the CUDA path to approximation error, not bit for bit.

use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetTriple,
};
use inkwell::values::{FloatValue, FunctionValue};
use inkwell::{FloatPredicate, IntPredicate, OptimizationLevel};
use rustc_hash::FxHashMap;

use guardless_codegen::schedule::Schedule;
use guardless_ir::loop_ir::Program;

use super::ops::call_intrinsic;
use super::{declare_helpers, emit_kernel, llvm, LlvmError};

type R<T> = Result<T, inkwell::builder::BuilderError>;

/// The PTX of a schedule's kernels: `<name>_rows(ptrs, syms, rows, err)` per kernel.
pub struct PtxModule {
    pub ptx: String,
    pub kernels: Vec<String>,
    /// Error code `i + 1` means `errors[i]`: buffer, graph nodes, message.
    pub errors: Vec<(String, String, String)>,
}

/// Compiles every kernel of `s` for `arch` (`sm_90`) through LLVM's NVPTX backend.
pub fn generate(p: &mut Program, s: &Schedule, arch: &str) -> Result<PtxModule, LlvmError> {
    Target::initialize_nvptx(&InitializationConfig::default());
    let triple = TargetTriple::create("nvptx64-nvidia-cuda");
    let target = Target::from_triple(&triple).map_err(llvm)?;
    let machine = target
        .create_target_machine(
            &triple,
            arch,
            "+ptx85",
            OptimizationLevel::Aggressive,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| LlvmError::Llvm(format!("no NVPTX target machine for {arch}")))?;
    let cx = Context::create();
    let module = cx.create_module("guardless_ptx");
    module.set_triple(&triple);
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    let helpers = declare_helpers(&cx, &module);
    define_helpers(&cx, &module, &helpers).map_err(llvm)?;
    let mut errors = Vec::new();
    let mut kernels = Vec::new();
    for (ki, k) in s.kernels.iter().enumerate() {
        let name = format!("k{ki}_{}", k.name);
        let attrs = [("target-cpu", arch), ("target-features", "+ptx85")];
        let (f, _, _) = emit_kernel(
            &cx,
            &module,
            &helpers,
            p,
            k,
            &name,
            &attrs,
            false,
            false,
            &mut errors,
        )?;
        f.set_linkage(Linkage::Internal);
        let rows = format!("{name}_rows");
        wrapper(&cx, &module, f, &rows).map_err(llvm)?;
        kernels.push(rows);
    }
    module.verify().map_err(llvm)?;
    module
        .run_passes("default<O3>", &machine, PassBuilderOptions::create())
        .map_err(llvm)?;
    let buf = machine
        .write_to_memory_buffer(&module, FileType::Assembly)
        .map_err(llvm)?;
    let ptx = String::from_utf8_lossy(buf.as_slice())
        .trim_end_matches('\0')
        .to_string();
    Ok(PtxModule {
        ptx,
        kernels,
        errors,
    })
}

fn sreg<'c>(module: &Module<'c>, b: &Builder<'c>, name: &str) -> R<inkwell::values::IntValue<'c>> {
    Ok(call_intrinsic(module, b, name, &[], &[])?.into_int_value())
}

/// `__global__ void rows(ptrs, syms, i64 rows, err)`: thread `i` runs row `i` of `f`.
fn wrapper<'c>(cx: &'c Context, module: &Module<'c>, f: FunctionValue<'c>, name: &str) -> R<()> {
    let ptr = cx.ptr_type(inkwell::AddressSpace::default());
    let i64t = cx.i64_type();
    let ty = cx
        .void_type()
        .fn_type(&[ptr.into(), ptr.into(), i64t.into(), ptr.into()], false);
    let k = module.add_function(name, ty, None);
    // PTX_Kernel.
    k.set_call_conventions(71);
    let b = cx.create_builder();
    let entry = cx.append_basic_block(k, "entry");
    let run = cx.append_basic_block(k, "run");
    let done = cx.append_basic_block(k, "done");
    b.position_at_end(entry);
    let ctaid = sreg(module, &b, "llvm.nvvm.read.ptx.sreg.ctaid.x")?;
    let ntid = sreg(module, &b, "llvm.nvvm.read.ptx.sreg.ntid.x")?;
    let tid = sreg(module, &b, "llvm.nvvm.read.ptx.sreg.tid.x")?;
    let block = b.build_int_mul(
        b.build_int_z_extend(ctaid, i64t, "")?,
        b.build_int_z_extend(ntid, i64t, "")?,
        "",
    )?;
    let row = b.build_int_add(block, b.build_int_z_extend(tid, i64t, "")?, "")?;
    let p = k.get_params();
    let inside = b.build_int_compare(IntPredicate::SLT, row, p[2].into_int_value(), "")?;
    b.build_conditional_branch(inside, run, done)?;
    b.position_at_end(run);
    let next = b.build_int_add(row, i64t.const_int(1, false), "")?;
    b.build_call(
        f,
        &[
            p[0].into(),
            p[1].into(),
            row.into(),
            next.into(),
            p[3].into(),
            ptr.const_null().into(),
        ],
        "",
    )?;
    b.build_unconditional_branch(done)?;
    b.position_at_end(done);
    b.build_return(None)?;
    Ok(())
}

/// Bodies of the math helpers for NVPTX (internal, inlined).
fn define_helpers<'c>(
    cx: &'c Context,
    module: &Module<'c>,
    helpers: &FxHashMap<&'static str, FunctionValue<'c>>,
) -> R<()> {
    let b = cx.create_builder();
    let nv = |b: &Builder<'c>, name: &str, x: FloatValue<'c>| -> R<FloatValue<'c>> {
        Ok(call_intrinsic(module, b, name, &[], &[x.into()])?.into_float_value())
    };
    for (&name, &f) in helpers {
        f.set_linkage(Linkage::Internal);
        let bb = cx.append_basic_block(f, "entry");
        b.position_at_end(bb);
        if name == "gl_ipow" {
            ipow(cx, &b, f)?;
            continue;
        }
        let wide = super::helper_is_wide(name);
        let x = f.get_nth_param(0).expect("an argument").into_float_value();
        let t = x.get_type();
        let c = |v: f64| t.const_float(v);
        let to32 = |b: &Builder<'c>, v: FloatValue<'c>| -> R<FloatValue<'c>> {
            if wide {
                b.build_float_trunc(v, cx.f32_type(), "")
            } else {
                Ok(v)
            }
        };
        let back = |b: &Builder<'c>, v: FloatValue<'c>| -> R<FloatValue<'c>> {
            if wide {
                b.build_float_ext(v, cx.f64_type(), "")
            } else {
                Ok(v)
            }
        };
        let (ex2, lg2) = if wide {
            ("llvm.nvvm.ex2.approx.d", "llvm.nvvm.lg2.approx.d")
        } else {
            ("llvm.nvvm.ex2.approx.f", "llvm.nvvm.lg2.approx.f")
        };
        let exp = |b: &Builder<'c>, v: FloatValue<'c>| -> R<FloatValue<'c>> {
            if wide {
                nv(
                    b,
                    ex2,
                    b.build_float_mul(v, c(std::f64::consts::LOG2_E), "")?,
                )
            } else {
                super::ops::build_exp_f32(cx, module, b, v)
            }
        };
        let log = |b: &Builder<'c>, v: FloatValue<'c>| -> R<FloatValue<'c>> {
            b.build_float_mul(nv(b, lg2, v)?, c(std::f64::consts::LN_2), "")
        };
        let base = if wide {
            name
        } else {
            name.strip_suffix('f').expect("f32 helpers end in f")
        };
        let fabs = |b: &Builder<'c>, v: FloatValue<'c>| -> R<FloatValue<'c>> {
            Ok(
                call_intrinsic(module, b, "llvm.fabs", &[t.into()], &[v.into()])?
                    .into_float_value(),
            )
        };
        let sqrt = |b: &Builder<'c>, v: FloatValue<'c>| -> R<FloatValue<'c>> {
            Ok(
                call_intrinsic(module, b, "llvm.sqrt", &[t.into()], &[v.into()])?
                    .into_float_value(),
            )
        };
        let select =
            |b: &Builder<'c>, p, x: FloatValue<'c>, y: FloatValue<'c>| -> R<FloatValue<'c>> {
                Ok(b.build_select(p, x, y, "")?.into_float_value())
            };
        let lt = |b: &Builder<'c>, x, y| b.build_float_compare(FloatPredicate::OLT, x, y, "");
        let gt = |b: &Builder<'c>, x, y| b.build_float_compare(FloatPredicate::OGT, x, y, "");
        // atan by Cephes' reduction to |x| <= tan(pi/8) and its cubic in x² (about 1 ulp in f32).
        let atan = |b: &Builder<'c>, v: FloatValue<'c>| -> R<FloatValue<'c>> {
            use std::f64::consts::{FRAC_PI_2, FRAC_PI_4};
            let ax = fabs(b, v)?;
            let big = gt(b, ax, c(2.414_213_562_373_095))?;
            let mid = gt(b, ax, c(0.414_213_562_373_095))?;
            let inv = b.build_float_neg(b.build_float_div(c(1.0), ax, "")?, "")?;
            let moved = b.build_float_div(
                b.build_float_sub(ax, c(1.0), "")?,
                b.build_float_add(ax, c(1.0), "")?,
                "",
            )?;
            let xr = select(b, big, inv, select(b, mid, moved, ax)?)?;
            let y0 = select(b, big, c(FRAC_PI_2), select(b, mid, c(FRAC_PI_4), c(0.0))?)?;
            let z = b.build_float_mul(xr, xr, "")?;
            let mut p = c(8.053_744_495_38e-2);
            for k in [
                -1.387_768_560_32e-1,
                1.997_771_064_78e-1,
                -3.333_294_915_39e-1,
            ] {
                p = b.build_float_add(b.build_float_mul(p, z, "")?, c(k), "")?;
            }
            let q = b.build_float_mul(b.build_float_mul(p, z, "")?, xr, "")?;
            let r = b.build_float_add(y0, b.build_float_add(q, xr, "")?, "")?;
            select(b, lt(b, v, c(0.0))?, b.build_float_neg(r, "")?, r)
        };
        let half = |b: &Builder<'c>, v: FloatValue<'c>| b.build_float_mul(v, c(0.5), "");
        let r = match base {
            "gl_exp" => exp(&b, x)?,
            "gl_expm1" => b.build_float_sub(exp(&b, x)?, c(1.0), "")?,
            "gl_exp2" => nv(&b, ex2, x)?,
            "gl_log2" => nv(&b, lg2, x)?,
            "gl_log10" => b.build_float_mul(nv(&b, lg2, x)?, c(std::f64::consts::LOG10_2), "")?,
            "gl_tan" => {
                let x32 = to32(&b, x)?;
                let s = nv(&b, "llvm.nvvm.sin.approx.f", x32)?;
                let k = nv(&b, "llvm.nvvm.cos.approx.f", x32)?;
                back(&b, b.build_float_div(s, k, "")?)?
            }
            "gl_sinh" | "gl_cosh" => {
                let (e, f) = (exp(&b, x)?, exp(&b, b.build_float_neg(x, "")?)?);
                half(
                    &b,
                    if base == "gl_sinh" {
                        b.build_float_sub(e, f, "")?
                    } else {
                        b.build_float_add(e, f, "")?
                    },
                )?
            }
            "gl_asinh" => {
                let ax = fabs(&b, x)?;
                let r = sqrt(
                    &b,
                    b.build_float_add(b.build_float_mul(ax, ax, "")?, c(1.0), "")?,
                )?;
                let l = log(&b, b.build_float_add(ax, r, "")?)?;
                select(&b, lt(&b, x, c(0.0))?, b.build_float_neg(l, "")?, l)?
            }
            "gl_acosh" => {
                let r = sqrt(
                    &b,
                    b.build_float_sub(b.build_float_mul(x, x, "")?, c(1.0), "")?,
                )?;
                log(&b, b.build_float_add(x, r, "")?)?
            }
            "gl_atanh" => {
                let q = b.build_float_div(
                    b.build_float_add(c(1.0), x, "")?,
                    b.build_float_sub(c(1.0), x, "")?,
                    "",
                )?;
                half(&b, log(&b, q)?)?
            }
            "gl_atan" => atan(&b, x)?,
            // asin x = atan(x / sqrt(1 - x²)); acos x = 2 atan(sqrt((1 - x) / (1 + x))).
            "gl_asin" => {
                let d = b.build_float_mul(
                    b.build_float_sub(c(1.0), x, "")?,
                    b.build_float_add(c(1.0), x, "")?,
                    "",
                )?;
                atan(&b, b.build_float_div(x, sqrt(&b, d)?, "")?)?
            }
            "gl_acos" => {
                let q = b.build_float_div(
                    b.build_float_sub(c(1.0), x, "")?,
                    b.build_float_add(c(1.0), x, "")?,
                    "",
                )?;
                b.build_float_mul(c(2.0), atan(&b, sqrt(&b, q)?)?, "")?
            }
            "gl_atan2" => {
                // atan(y / x), moved by ±pi when x < 0; 0 at the origin.
                let xx = f
                    .get_nth_param(1)
                    .expect("two arguments")
                    .into_float_value();
                let a = atan(&b, b.build_float_div(x, xx, "")?)?;
                let up = b.build_float_compare(FloatPredicate::OGE, x, c(0.0), "")?;
                let turn = select(&b, up, c(std::f64::consts::PI), c(-std::f64::consts::PI))?;
                let turned = b.build_float_add(a, turn, "")?;
                let r = select(&b, lt(&b, xx, c(0.0))?, turned, a)?;
                let origin = b.build_and(
                    b.build_float_compare(FloatPredicate::OEQ, x, c(0.0), "")?,
                    b.build_float_compare(FloatPredicate::OEQ, xx, c(0.0), "")?,
                    "",
                )?;
                select(&b, origin, c(0.0), r)?
            }
            "gl_hypot" => {
                // m·√(1 + (n/m)²) with m = max(|x|, |y|), n = min: no overflow in the squares;
                // 0 when both are 0, infinity when either is (even against a NaN).
                let y = f
                    .get_nth_param(1)
                    .expect("two arguments")
                    .into_float_value();
                let (ax, ay) = (fabs(&b, x)?, fabs(&b, y)?);
                let bigger = b.build_float_compare(FloatPredicate::OGE, ax, ay, "")?;
                let (m, n) = (select(&b, bigger, ax, ay)?, select(&b, bigger, ay, ax)?);
                let q = b.build_float_div(n, m, "")?;
                let s = sqrt(
                    &b,
                    b.build_float_add(c(1.0), b.build_float_mul(q, q, "")?, "")?,
                )?;
                let r = b.build_float_mul(m, s, "")?;
                let zero = b.build_float_compare(FloatPredicate::OEQ, m, c(0.0), "")?;
                let r = select(&b, zero, c(0.0), r)?;
                let inf = b.build_or(
                    b.build_float_compare(FloatPredicate::OEQ, ax, c(f64::INFINITY), "")?,
                    b.build_float_compare(FloatPredicate::OEQ, ay, c(f64::INFINITY), "")?,
                    "",
                )?;
                select(&b, inf, c(f64::INFINITY), r)?
            }
            "gl_log" => log(&b, x)?,
            "gl_log1p" => log(&b, b.build_float_add(x, c(1.0), "")?)?,
            "gl_sin" => back(&b, nv(&b, "llvm.nvvm.sin.approx.f", to32(&b, x)?)?)?,
            "gl_cos" => back(&b, nv(&b, "llvm.nvvm.cos.approx.f", to32(&b, x)?)?)?,
            "gl_tanh" => {
                // 1 - 2 / (e^2x + 1): saturates to ±1 where e^2x overflows or vanishes.
                let e = exp(&b, b.build_float_mul(x, c(2.0), "")?)?;
                let q = b.build_float_div(c(2.0), b.build_float_add(e, c(1.0), "")?, "")?;
                b.build_float_sub(c(1.0), q, "")?
            }
            "gl_erf" => {
                // Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7).
                let neg = b.build_float_compare(FloatPredicate::OLT, x, c(0.0), "")?;
                let ax = b
                    .build_select(neg, b.build_float_neg(x, "")?, x, "")?
                    .into_float_value();
                let tt = b.build_float_div(
                    c(1.0),
                    b.build_float_add(c(1.0), b.build_float_mul(c(0.327_591_1), ax, "")?, "")?,
                    "",
                )?;
                let mut poly = c(1.061_405_429);
                for k in [-1.453_152_027, 1.421_413_741, -0.284_496_736, 0.254_829_592] {
                    poly = b.build_float_add(b.build_float_mul(poly, tt, "")?, c(k), "")?;
                }
                poly = b.build_float_mul(poly, tt, "")?;
                let x2 = b.build_float_neg(b.build_float_mul(ax, ax, "")?, "")?;
                let y =
                    b.build_float_sub(c(1.0), b.build_float_mul(poly, exp(&b, x2)?, "")?, "")?;
                b.build_select(neg, b.build_float_neg(y, "")?, y, "")?
                    .into_float_value()
            }
            "gl_pow" => {
                let y = f
                    .get_nth_param(1)
                    .expect("two arguments")
                    .into_float_value();
                let l = nv(&b, lg2, x)?;
                nv(&b, ex2, b.build_float_mul(y, l, "")?)?
            }
            other => unreachable!("helper {other}"),
        };
        b.build_return(Some(&r))?;
    }
    Ok(())
}

/// `x ** y` for integers by squaring (0 for negative `y`).
fn ipow<'c>(cx: &'c Context, b: &Builder<'c>, f: FunctionValue<'c>) -> R<()> {
    let i64t = cx.i64_type();
    let (x, y) = (
        f.get_nth_param(0).expect("x").into_int_value(),
        f.get_nth_param(1).expect("y").into_int_value(),
    );
    let entry = b.get_insert_block().expect("positioned");
    let head = cx.append_basic_block(f, "head");
    let body = cx.append_basic_block(f, "body");
    let done = cx.append_basic_block(f, "done");
    b.build_unconditional_branch(head)?;
    b.position_at_end(head);
    let r = b.build_phi(i64t, "r")?;
    let base = b.build_phi(i64t, "base")?;
    let e = b.build_phi(i64t, "e")?;
    r.add_incoming(&[(&i64t.const_int(1, false), entry)]);
    base.add_incoming(&[(&x, entry)]);
    e.add_incoming(&[(&y, entry)]);
    let (rv, bv, ev) = (
        r.as_basic_value().into_int_value(),
        base.as_basic_value().into_int_value(),
        e.as_basic_value().into_int_value(),
    );
    let more = b.build_int_compare(IntPredicate::SGT, ev, i64t.const_int(0, false), "")?;
    b.build_conditional_branch(more, body, done)?;
    b.position_at_end(body);
    let odd = b.build_int_compare(
        IntPredicate::NE,
        b.build_and(ev, i64t.const_int(1, false), "")?,
        i64t.const_int(0, false),
        "",
    )?;
    let times = b.build_int_mul(rv, bv, "")?;
    let r2 = b.build_select(odd, times, rv, "")?.into_int_value();
    let b2 = b.build_int_mul(bv, bv, "")?;
    let e2 = b.build_right_shift(ev, i64t.const_int(1, false), true, "")?;
    r.add_incoming(&[(&r2, body)]);
    base.add_incoming(&[(&b2, body)]);
    e.add_incoming(&[(&e2, body)]);
    b.build_unconditional_branch(head)?;
    b.position_at_end(done);
    let neg = b.build_int_compare(IntPredicate::SLT, y, i64t.const_int(0, false), "")?;
    let out = b.build_select(neg, i64t.const_int(0, false), rv, "")?;
    b.build_return(Some(&out))?;
    Ok(())
}
