//! `index_put` on the device: two functions per scatter step. `copy` reads the base through its
//! layout into the contiguous result (the launcher uses a plain device copy instead when the base
//! is dense in the same order); `write` runs the step's body once per point and stores the value
//! at its target, or adds it atomically (`accumulate`). Targets come from indices the body checks
//! (an out-of-range index is an error code, as in every kernel), and the write is also bounded by
//! the result's size, so no thread writes outside it.
//!
//! Duplicate targets without `accumulate`: one of the values lands, which one is unspecified — as
//! PyTorch documents for `index_put_` on CUDA. The host implementation (the reference) writes the
//! last. With `accumulate`, every value is added, in an unspecified order.

use std::fmt::Write;

use guardless_ir::loop_ir::{BufferId, BufferKind, Op, Program};
use guardless_ir::sym::{CPrinter, Expr, SymbolId};
use rustc_hash::{FxHashMap, FxHashSet};
use tera::{Context, Tera};

use super::body::{self, storage_type, Read, Scope};
use super::{hoist, Param, ScatterPart};

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
) -> [(ScatterPart, String, Vec<Param>); 2] {
    let buf = p.buffers[id.index()].clone();
    let BufferKind::Scatter {
        base,
        loops,
        body,
        target,
        accumulate,
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
        function(
            tera,
            entry,
            &buf.name,
            &nodes,
            &format!("copy of {} into the result", p.buffers[base.index()].name),
            &params_c,
            &symbols,
            &count,
            &decompose,
            &store,
        )
        .map(|t| (ScatterPart::Copy, t, params))
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
        let op = if *accumulate {
            "gl_atomic_add"
        } else {
            "gl_st"
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
        let mode = if *accumulate { "added" } else { "written" };
        function(
            tera,
            entry,
            &buf.name,
            &nodes,
            &format!("values {mode} at their targets in the result"),
            &params_c,
            &symbols,
            &count,
            &decompose,
            &store,
        )
        .map(|t| (ScatterPart::Write, t, params))
    };
    [
        copy.expect("scatter template"),
        write.expect("scatter template"),
    ]
}

/// The symbols of `vars` and `binds`: what the hoister must keep in the kernel.
fn locals(p: &Program, vars: &[Expr], binds: &[Expr]) -> FxHashSet<SymbolId> {
    vars.iter()
        .chain(binds)
        .filter_map(|&v| p.env.pool().as_symbol(v))
        .collect()
}

fn c_of(p: &mut Program, h: &mut hoist::Hoister, e: Expr, printer: &CPrinter) -> String {
    let e = p.env.simplify(e);
    let e = h.hoist(&mut p.env, e);
    p.env.to_c(e, printer)
}

/// `gl_lin` split into `vars` over `sizes`, row-major.
fn decompose(
    p: &mut Program,
    h: &mut hoist::Hoister,
    vars: &[Expr],
    sizes: &[Expr],
    printer: &CPrinter,
) -> String {
    let mut out = String::new();
    if vars.is_empty() {
        return out;
    }
    let _ = writeln!(out, "  long long gl_rest = gl_lin;");
    for j in (0..vars.len()).rev() {
        let name = p.env.text(vars[j]);
        if j == 0 {
            let _ = writeln!(out, "  const long long {name} = gl_rest;");
        } else {
            let size = c_of(p, h, sizes[j], printer);
            let _ = writeln!(
                out,
                "  const long long {name} = gl_rest % ({size}); gl_rest /= ({size});"
            );
        }
    }
    out
}

/// Parameters: the buffers, the graph symbols `exprs` use (less the kernel's own variables), the
/// hoisted sizes, the error flag. Also the declarations of the symbols inside the function.
fn parameters(
    p: &Program,
    h: &hoist::Hoister,
    buffers: &[(BufferId, bool)],
    exprs: &[&[Expr]],
    vars: &[Expr],
    pointers: &[String],
) -> (Vec<String>, Vec<Param>, String) {
    let (mut params_c, mut params) = (Vec::new(), Vec::new());
    for &(b, written) in buffers {
        let q = if written { "" } else { "const " };
        let t = storage_type(p.buffers[b.index()].dtype);
        params_c.push(format!("{q}{t}* __restrict__ {}", pointers[b.index()]));
        params.push(Param::Buffer {
            buffer: p.buffers[b.index()].name.clone(),
            written,
        });
    }
    let own: FxHashSet<SymbolId> = vars
        .iter()
        .filter_map(|&v| p.env.pool().as_symbol(v))
        .chain(h.derived.iter().map(|&(s, _)| s))
        .collect();
    let all: Vec<Expr> = exprs.iter().flat_map(|e| e.iter().copied()).collect();
    let mut symbols: Vec<SymbolId> = p
        .env
        .pool()
        .free_symbols_of(&all)
        .into_iter()
        .filter(|s| !own.contains(s))
        .collect();
    symbols.sort_by_key(|&s| p.env.symbol_name(s).to_string());
    let mut decls = String::new();
    for s in symbols {
        let n = p.env.symbol_name(s).to_string();
        params_c.push(format!("long long gl_sym_{n}"));
        params.push(Param::Symbol { name: n.clone() });
        let _ = writeln!(decls, "  const long long {n} = gl_sym_{n};");
    }
    for &(s, e) in &h.derived {
        let n = p.env.symbol_name(s).to_string();
        params_c.push(format!("long long gl_sym_{n}"));
        params.push(Param::Derived {
            name: n.clone(),
            expr: p.env.text(e),
        });
        let _ = writeln!(decls, "  const long long {n} = gl_sym_{n};");
    }
    params_c.push("int* __restrict__ gl_error".into());
    params.push(Param::Error);
    (params_c, params, decls)
}

#[allow(clippy::too_many_arguments)]
fn function(
    tera: &Tera,
    entry: &str,
    name: &str,
    nodes: &str,
    what: &str,
    params_c: &[String],
    symbols: &str,
    count: &str,
    decompose: &str,
    body: &str,
) -> Result<String, tera::Error> {
    let mut ctx = Context::new();
    ctx.insert("name", name);
    ctx.insert("nodes", nodes);
    ctx.insert("what", what);
    ctx.insert("entry", entry);
    ctx.insert("threads", &THREADS);
    ctx.insert("params", &params_c.join(", "));
    ctx.insert("symbols", symbols);
    ctx.insert("count", count);
    ctx.insert("decompose", decompose);
    ctx.insert("body", body);
    tera.render("scatter.cu", &ctx).map(|t| t + "\n")
}
