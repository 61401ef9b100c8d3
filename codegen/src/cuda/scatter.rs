//! `index_put` on the device: two functions per scatter step (`templates/per_element.cu`).
//! `copy` reads the base through its layout into the contiguous result (the launcher uses a plain
//! device copy instead when the base is dense in the same order); `write` runs the step's body once per point and stores the value
//! at its target, or combines it atomically (adds; multiplies, maximum, minimum through a
//! compare-and-swap loop). Targets come from indices the body checks
//! (an out-of-range index is an error code, as in every kernel), and the write is also bounded by
//! the result's size, so no thread writes outside it.
//!
//! Duplicate targets of a write: one of the values lands, which one is unspecified — as PyTorch
//! documents for `index_put_` on CUDA. The host implementation (the reference) writes the last.
//! Otherwise every value is combined, in an unspecified order.

use std::fmt::Write;

use guardless_ir::loop_ir::{BufferId, BufferKind, Op, Program, ScatterCombine};
use guardless_ir::sym::{CPrinter, Expr};
use rustc_hash::FxHashMap;
use tera::Tera;

use super::body::{self, Read, Scope};
use super::library::{c_of, context, decompose, locals, parameters, per_element};
use super::{hoist, Param, Part};

/// Threads per block; the launcher launches `ceil(count / THREADS)` blocks.
pub const THREADS: i64 = 256;

/// The two functions of scatter step `id` (text with the entry name to substitute, parameters).
pub(super) fn render(
    p: &mut Program,
    tera: &Tera,
    entry: &str,
    id: BufferId,
    pointers: &[String],
    errors: &mut Vec<String>,
) -> [(Part, String, Vec<Param>); 2] {
    let buf = p.buffers[id.index()].clone();
    let BufferKind::Scatter {
        base,
        loops,
        body,
        target,
        combine,
    } = &buf.kind
    else {
        panic!("{} is not a scatter", buf.name)
    };
    let printer = CPrinter::cuda("long long", "i64");
    let nodes = buf.origins.join(", ");
    let what = format!("{} ({nodes})", buf.name);
    let out = &pointers[id.index()];

    // copy: out[lin] = base[offset + Σ i_d · stride_d], lin decomposed over the base's sizes.
    let copy = {
        let layout = p.buffers[base.index()].layout.clone();
        let vars: Vec<Expr> = layout
            .sizes
            .iter()
            .map(|&n| p.env.new_index_var("gl_c", n))
            .collect();
        let index = layout.index(&mut p.env, &vars);
        let numel = layout.numel(&mut p.env);
        let mut h = hoist::Hoister::new(&p.env, locals(p, &vars, &[]));
        let count = c_of(p, &mut h, numel, &printer);
        let decompose = decompose(p, &mut h, &vars, &layout.sizes, &printer);
        let index = c_of(p, &mut h, index, &printer);
        let store = format!("  {out}[gl_lin] = {}[{index}];\n", pointers[base.index()]);
        let buffers = [(id, true), (*base, false)];
        let (params_c, params, symbols) = parameters(
            p,
            &h,
            &buffers,
            &[&[numel, layout.offset][..], &layout.strides, &layout.sizes],
            &vars,
            pointers,
        );
        let ctx = context(&buf, entry, THREADS, &params_c, &symbols);
        let text = per_element(
            tera,
            ctx,
            &format!("copy of {} into the result", p.buffers[base.index()].name),
            &count,
            &decompose,
            &store,
        );
        (Part::Copy, text, params)
    };

    // write: one thread per point of the loops.
    let write = {
        let numel = buf.layout.numel(&mut p.env);
        let points = loops.ranges.iter().fold(p.env.pool_mut().one(), |acc, &r| {
            p.env.pool_mut().mul(acc, r)
        });
        let binds: Vec<Expr> = body
            .ops
            .iter()
            .filter_map(|(op, _)| match op {
                Op::Bind { var, .. } => Some(*var),
                _ => None,
            })
            .collect();
        let mut h = hoist::Hoister::new(&p.env, locals(p, &loops.vars, &binds));
        let count = c_of(p, &mut h, points, &printer);
        let decompose = decompose(p, &mut h, &loops.vars, &loops.ranges, &printer);
        let reads: Vec<BufferId> = body
            .ops
            .iter()
            .filter_map(|(op, _)| match op {
                Op::Load { buffer, .. } => Some(*buffer),
                _ => None,
            })
            .collect();
        let read = |b: BufferId| Read::Memory(pointers[b.index()].clone());
        let mut memo = FxHashMap::default();
        let vector_loads = FxHashMap::default();
        let (stmts, value, target_c) = {
            let mut sc = Scope {
                env: &mut p.env,
                printer: &printer,
                idx: "long long",
                read: &read,
                vars: &[],
                errors,
                errors_from: None,
                what: what.clone(),
                hoist: &mut h,
                memo: &mut memo,
                member: 0,
                vector_loads: &vector_loads,
            };
            let (stmts, value) = body::render(body, "v", &mut sc, "  ");
            let target_c = sc.index(*target);
            (stmts, value, target_c)
        };
        errors.push(format!("{what}: a scatter target is outside the result"));
        let code = errors.len();
        let numel_c = c_of(p, &mut h, numel, &printer);
        let op = match combine {
            ScatterCombine::Write => "gl_st",
            ScatterCombine::Add => "gl_atomic_add",
            ScatterCombine::Mul => "gl_atomic_mul",
            ScatterCombine::Max => "gl_atomic_max",
            ScatterCombine::Min => "gl_atomic_min",
        };
        let mut store = stmts;
        let _ = writeln!(store, "  const long long gl_at = {target_c};");
        let _ = writeln!(
            store,
            "  if (gl_at < 0 || gl_at >= ({numel_c})) {{ gl_fail(gl_error, {code}); return; }}"
        );
        let _ = writeln!(store, "  {op}({out}, gl_at, {value});");
        let mut buffers = vec![(id, true)];
        for r in reads {
            if !buffers.iter().any(|&(b, _)| b == r) {
                buffers.push((r, false));
            }
        }
        let mut exprs = vec![points, numel, *target];
        exprs.extend(loops.ranges.iter().copied());
        for (op, _) in &body.ops {
            match op {
                Op::Load { index, .. } => exprs.push(*index),
                Op::Index(e, _) => exprs.push(*e),
                Op::Bind { size, .. } => exprs.push(*size),
                _ => {}
            }
        }
        let all_vars: Vec<Expr> = loops.vars.iter().chain(&binds).copied().collect();
        let (params_c, params, symbols) =
            parameters(p, &h, &buffers, &[&exprs[..]], &all_vars, pointers);
        let mode = match combine {
            ScatterCombine::Write => "written",
            ScatterCombine::Add => "added",
            ScatterCombine::Mul => "multiplied",
            ScatterCombine::Max => "combined by maximum",
            ScatterCombine::Min => "combined by minimum",
        };
        let ctx = context(&buf, entry, THREADS, &params_c, &symbols);
        let text = per_element(
            tera,
            ctx,
            &format!("values {mode} at their targets in the result"),
            &count,
            &decompose,
            &store,
        );
        (Part::Write, text, params)
    };
    [copy, write]
}
