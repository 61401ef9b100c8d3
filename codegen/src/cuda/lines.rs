//! Library steps that work line by line along one dimension — `cumsum` (scan) and `sort`/`topk`
//! — on the device: one thread per line, walking it in order, so that the results are the
//! host's bit for bit (the same additions in the same order, rounded to the stored type after
//! each; the same stable order, NaN above every number). A line is the input's elements
//! `(o·len + j)·inner + i` for `j < len`, read from its contiguous storage as the host reads
//! it.
//!
//! Sorting is a selection: the `t`-th output is the first element, in the order, that comes
//! after the `(t − 1)`-th — `keep · len` comparisons per line, no scratch. The launcher runs it
//! on the device only when that work is small ([`SORT_WORK`]); longer sorts stay on the host.

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use guardless_ir::sym::{CPrinter, Expr};
use tera::Tera;

use super::library::{c_of, context, parameters};
use super::{hoist, Param, Part};

/// Threads per block; a thread per line.
pub const THREADS: i64 = 256;
/// The most comparisons per line (`keep · len`) a device sort does; above it, the host sorts.
pub const SORT_WORK: i64 = 1 << 16;

/// The one function of scan or sort step `id`.
pub(super) fn render(
    p: &mut Program,
    tera: &Tera,
    entry: &str,
    id: BufferId,
    pointers: &[String],
) -> [(Part, String, Vec<Param>); 1] {
    let buf = p.buffers[id.index()].clone();
    let (input, dim, sort) = match &buf.kind {
        BufferKind::Scan { input, dim } => (*input, *dim, None),
        BufferKind::Sort {
            input,
            dim,
            descending,
            take,
            indices,
        } => (*input, *dim, Some((*descending, *take, *indices))),
        _ => panic!("{} is neither a scan nor a sort", buf.name),
    };
    let printer = CPrinter::cuda("long long", "i64");
    let sizes = p.buffers[input.index()].layout.sizes.clone();
    let one = p.env.pool_mut().one();
    let product =
        |p: &mut Program, s: &[Expr]| s.iter().fold(one, |acc, &x| p.env.pool_mut().mul(acc, x));
    let outer = product(p, &sizes[..dim]);
    let inner = product(p, &sizes[dim + 1..]);
    let len = sizes[dim];
    let keep = sort.and_then(|(_, take, _)| take).unwrap_or(len);
    let mut h = hoist::Hoister::new(&p.env, Default::default());
    let lines = p.env.pool_mut().mul(outer, inner);
    let [lines_c, inner_c, len_c, keep_c] =
        [lines, inner, len, keep].map(|e| c_of(p, &mut h, e, &printer));
    let exprs = [lines, inner, len, keep];
    let (params_c, params, decls) = parameters(
        p,
        &h,
        &[(id, true), (input, false)],
        &[&exprs[..]],
        &[],
        pointers,
    );
    let mut ctx = context(&buf, entry, THREADS, &params_c, &decls);
    ctx.insert("lines", &lines_c);
    ctx.insert("inner", &inner_c);
    ctx.insert("len", &len_c);
    ctx.insert("keep", &keep_c);
    ctx.insert("out", &pointers[id.index()]);
    ctx.insert("input", &pointers[input.index()]);
    let acc = match buf.dtype {
        DType::F64 => "double",
        d if d.is_float() => "float",
        _ => "long long",
    };
    ctx.insert("acc", acc);
    match sort {
        None => ctx.insert("mode", "scan"),
        Some((descending, _, indices)) => {
            ctx.insert("mode", "sort");
            ctx.insert("descending", &descending);
            ctx.insert("indices", &indices);
        }
    }
    let text = tera
        .render("lines.cu", &ctx)
        .map(|t| t + "\n")
        .expect("lines template");
    [(Part::Write, text, params)]
}
