//! Helpers shared by the functions of library steps (scatter, select): index arithmetic in
//! 64-bit, hoisted sizes, parameters, and the rendering of a one-thread-per-element function.

use std::fmt::Write;

use guardless_ir::loop_ir::{Buffer, BufferId, Program};
use guardless_ir::sym::{cuda_symbol, CPrinter, Expr, SymbolId};
use rustc_hash::FxHashSet;
use tera::{Context, Tera};

use super::body::storage_type;
use super::{hoist, Param};

/// The symbols of `vars` and `binds`: what the hoister must keep in the kernel.
pub(super) fn locals(p: &Program, vars: &[Expr], binds: &[Expr]) -> FxHashSet<SymbolId> {
    vars.iter()
        .chain(binds)
        .filter_map(|&v| p.env.pool().as_symbol(v))
        .collect()
}

pub(super) fn c_of(p: &mut Program, h: &mut hoist::Hoister, e: Expr, printer: &CPrinter) -> String {
    let e = p.env.simplify(e);
    let e = h.hoist(&mut p.env, e);
    p.env.to_c(e, printer)
}

/// `gl_lin` split into `vars` over `sizes`, row-major.
pub(super) fn decompose(
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
        let name = cuda_symbol(&p.env.text(vars[j]));
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
pub(super) fn parameters(
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
        let _ = writeln!(decls, "  const long long {} = gl_sym_{n};", cuda_symbol(&n));
    }
    for &(s, e) in &h.derived {
        let n = p.env.symbol_name(s).to_string();
        params_c.push(format!("long long gl_sym_{n}"));
        params.push(Param::Derived {
            name: n.clone(),
            expr: p.env.text(e),
        });
        let _ = writeln!(decls, "  const long long {} = gl_sym_{n};", cuda_symbol(&n));
    }
    params_c.push("int* __restrict__ gl_error".into());
    params.push(Param::Error);
    (params_c, params, decls)
}

/// What every library-step template takes: the buffer's name and graph nodes (for the comment),
/// the function's name, threads per block, its parameters and the declarations of its symbols.
/// `params` with the workspace (`bytes`, an expression's text) inserted before the error flag,
/// the last parameter: `char* gl_work_bytes` in the function.
pub(super) fn with_workspace(
    (mut params_c, mut params): (Vec<String>, Vec<Param>),
    bytes: String,
) -> (Vec<String>, Vec<Param>) {
    let at = params_c.len() - 1;
    params_c.insert(at, "char* __restrict__ gl_work_bytes".into());
    params.insert(at, Param::Workspace { bytes });
    (params_c, params)
}

pub(super) fn context(
    buf: &Buffer,
    entry: &str,
    threads: i64,
    params_c: &[String],
    symbols: &str,
) -> Context {
    let mut ctx = Context::new();
    ctx.insert("name", &crate::text::comment(&buf.name));
    ctx.insert("nodes", &crate::text::comment(&buf.origins.join(", ")));
    ctx.insert("entry", entry);
    ctx.insert("threads", &threads);
    ctx.insert("params", &params_c.join(", "));
    ctx.insert("symbols", symbols);
    ctx
}

/// A function of one thread per element (`per_element.cu`): `count` threads, `gl_lin` split
/// by `decompose`, then `body`; `what` says what it computes.
pub(super) fn per_element(
    tera: &Tera,
    mut ctx: Context,
    what: &str,
    count: &str,
    decompose: &str,
    body: &str,
) -> String {
    ctx.insert("what", what);
    ctx.insert("count", count);
    ctx.insert("decompose", decompose);
    ctx.insert("body", body);
    tera.render("per_element.cu", &ctx)
        .map(|t| t + "\n")
        .expect("the per-element template renders")
}
