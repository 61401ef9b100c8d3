//! `nonzero` and `masked_select` on the device: a stream compaction in three functions, which
//! keeps the elements in row-major order, as the host does. Block `b` owns elements
//! `[b·CHUNK, (b + 1)·CHUNK)`. `count` writes each block's number of kept elements to the
//! workspace; `scan` (one block) turns those into each block's first output position and writes
//! the total after them; the launcher reads the total back (8 bytes: the count symbol, checked
//! against its range, sizes the output), then `write` scans each tile of its block's elements
//! in shared memory and writes the kept ones (their values, or their indices) at their positions.

use std::fmt::Write;

use guardless_ir::loop_ir::{BufferKind, Program};
use guardless_ir::sym::{CPrinter, Expr};
use tera::Tera;

use super::library::{c_of, context, decompose, locals, parameters, with_workspace};
use super::{hoist, Param, Part};

/// Threads per block.
pub const THREADS: i64 = 256;
/// Elements per block (16 tiles of `THREADS`).
pub const CHUNK: i64 = 4096;

/// The three functions of select step `id` (text with the entry name to substitute,
/// parameters), in launch order.
pub(super) fn render(
    p: &mut Program,
    tera: &Tera,
    entry: &str,
    id: guardless_ir::loop_ir::BufferId,
    pointers: &[String],
) -> [(Part, String, Vec<Param>); 3] {
    let buf = p.buffers[id.index()].clone();
    let BufferKind::Select { input, mask, .. } = buf.kind else {
        panic!("{} is not a select", buf.name)
    };
    let printer = CPrinter::cuda("long long", "i64");
    let layout = p.buffers[input.index()].layout.clone();
    let rank = layout.sizes.len();
    let vars: Vec<Expr> = layout
        .sizes
        .iter()
        .map(|&n| p.env.new_index_var("gl_s", n))
        .collect();
    let numel = layout.numel(&mut p.env);
    let in_index = layout.index(&mut p.env, &vars);
    let mask_index = mask.map(|m| {
        let l = p.buffers[m.index()].layout.clone();
        l.index(&mut p.env, &vars)
    });
    let mut h = hoist::Hoister::new(&p.env, locals(p, &vars, &[]));
    let numel_c = c_of(p, &mut h, numel, &printer);
    let split = decompose(p, &mut h, &vars, &layout.sizes, &printer);
    let in_c = c_of(p, &mut h, in_index, &printer);
    let (inp, out) = (&pointers[input.index()], &pointers[id.index()]);
    let keep = match (mask, mask_index) {
        (Some(m), Some(mi)) => {
            let mi = c_of(p, &mut h, mi, &printer);
            format!("(gl_ld({}, {mi}) != 0)", pointers[m.index()])
        }
        _ => format!("(gl_ld({inp}, {in_c}) != 0)"),
    };
    // What a kept element writes at output position `gl_pos`.
    let mut store = String::new();
    if mask.is_some() {
        let _ = writeln!(store, "      {out}[gl_pos] = {inp}[{in_c}];");
    } else {
        for (d, &v) in vars.iter().enumerate() {
            let _ = writeln!(
                store,
                "      {out}[gl_pos * {rank} + {d}] = {};",
                guardless_ir::sym::cuda_symbol(&p.env.text(v))
            );
        }
    }
    let mut buffers = vec![(input, false)];
    buffers.extend(mask.map(|m| (m, false)));
    let mut exprs = vec![numel, in_index];
    exprs.extend(layout.sizes.iter().copied());
    exprs.extend(mask_index);
    let with_out: Vec<_> = std::iter::once((id, true)).chain(buffers.clone()).collect();
    let (count_c, count_params, mut decls) =
        parameters(p, &h, &buffers, &[&exprs[..]], &vars, pointers);
    let (write_c, write_params, _) = parameters(p, &h, &with_out, &[&exprs[..]], &vars, pointers);
    decls.push_str("  long long* gl_work = reinterpret_cast<long long*>(gl_work_bytes);\n");
    // Every function takes the workspace (block counts, then the total).
    let bytes = format!("8*((({})+{})//{CHUNK})+8", p.env.text(numel), CHUNK - 1);
    let (count_c, count_params) = with_workspace((count_c, count_params), bytes.clone());
    let (write_c, write_params) = with_workspace((write_c, write_params), bytes);
    let render = |part: Part, params_c: &[String]| {
        let mut ctx = context(&buf, entry, THREADS, params_c, &decls);
        ctx.insert("part", part.name());
        ctx.insert("chunk", &CHUNK);
        ctx.insert("numel", &numel_c);
        ctx.insert("decompose", &split);
        ctx.insert("keep", &keep);
        ctx.insert("store", &store);
        tera.render("select.cu", &ctx)
            .map(|t| t + "\n")
            .expect("select template")
    };
    [
        (
            Part::Count,
            render(Part::Count, &count_c),
            count_params.clone(),
        ),
        (Part::Scan, render(Part::Scan, &count_c), count_params),
        (Part::Write, render(Part::Write, &write_c), write_params),
    ]
}
