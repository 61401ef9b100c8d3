//! `_grouped_mm` (MoE experts) on the device: one thread per output element, a dot product over
//! the inner dimension accumulated in f32 (f64 for f64) and rounded once, the operands read
//! through their layouts. The group of a row (or a column, or the inner slice) comes from the
//! offsets, scanned per thread (there are few groups); the first thread checks them and raises
//! ATen's error when they decrease or pass the grouped dimension, and every bound is clamped so
//! that bad offsets never read out of bounds. cuBLAS has no grouped form with data-dependent
//! group sizes. The MoE forms (row groups, batches) are tiled instead (`templates/grouped_mm.cu`):
//! a block per `TILE_M × TILE_N` output tile of one group's rows, found by walking the groups'
//! tile counts, with the inner dimension in steps through shared memory. In bf16 and f16 the
//! tile multiplies on the tensor cores (WMMA fragments of 16 × 16 × 16, f32 accumulators; each
//! warp two fragments of one fragment row; the result through shared memory so that stores
//! check the tile's bounds); in f32 and f64 each thread keeps the additions of the
//! thread-per-element form, in the same order, for `PER × PER` outputs.

use std::fmt::Write;

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BufferId, BufferKind, Check, ExternKernel, Program};
use guardless_ir::sym::{cuda_symbol, CPrinter, Expr};
use tera::Tera;

use super::library::{c_of, context, decompose, locals, parameters, per_element};
use super::{hoist, Param, Part};

/// Threads per block: a thread per output element, or per `PER × PER` outputs of a tile.
pub const THREADS: i64 = 256;
/// A tile of the tiled kernel: rows × columns of the output, and the step along the inner
/// dimension; each of the 16 × 16 threads computes `PER × PER` outputs.
pub const TILE_M: i64 = 64;
pub const TILE_N: i64 = 64;
pub const TILE_K: i64 = 16;
/// The step along the inner dimension of the tensor-core form (bf16, f16): two fragments deep.
pub const MMA_TILE_K: i64 = 32;
const PER: i64 = 4;

// The tensor-core form: the tile's 16 × 16 fragments shared evenly by whole warps, each warp's
// fragments in one fragment row.
const _: () = assert!(
    THREADS % 32 == 0
        && (TILE_M / 16) * (TILE_N / 16) % (THREADS / 32) == 0
        && (TILE_N / 16) % ((TILE_M / 16) * (TILE_N / 16) / (THREADS / 32)) == 0
);

/// The one function of grouped matmul `id`.
pub(super) fn render(
    p: &mut Program,
    tera: &Tera,
    entry: &str,
    id: BufferId,
    pointers: &[String],
    errors: &mut Vec<String>,
) -> Option<[(Part, String, Vec<Param>); 1]> {
    let buf = p.buffers[id.index()].clone();
    let BufferKind::Extern {
        kernel: ExternKernel::GroupedMm,
        inputs,
    } = &buf.kind
    else {
        return None;
    };
    let (a, m, offs) = (inputs[0], inputs[1], inputs.get(2).copied());
    let (la, lm) = (
        p.buffers[a.index()].layout.clone(),
        p.buffers[m.index()].layout.clone(),
    );
    let (ra, rm) = (la.sizes.len(), lm.sizes.len());
    let printer = CPrinter::cuda("long long", "i64");
    let out_sizes = buf.layout.sizes.clone();
    let o: Vec<Expr> = out_sizes
        .iter()
        .map(|&n| p.env.new_index_var("gl_o", n))
        .collect();
    let k = p.env.new_index_var("gl_k", la.sizes[ra - 1]);
    // The group: ranges over the operand's group dimension.
    let groups = match (ra, rm) {
        (2, 3) => lm.sizes[0],
        (3, 2) | (3, 3) => la.sizes[0],
        _ => out_sizes[0],
    };
    let g = p.env.new_index_var("gl_g", groups);
    // Operand indices, the inner extent, the grouped dimension's size, what picks the group.
    let (ia, im, inner, limit, grouped): (Vec<Expr>, Vec<Expr>, Expr, Option<Expr>, &str) =
        match (ra, rm, offs) {
            (3, 3, None) => (
                vec![o[0], o[1], k],
                vec![o[0], k, o[2]],
                la.sizes[2],
                None,
                "none",
            ),
            (2, 3, Some(_)) => (
                vec![o[0], k],
                vec![g, k, o[1]],
                la.sizes[1],
                Some(la.sizes[0]),
                "row",
            ),
            (2, 2, Some(_)) => (
                vec![o[1], k],
                vec![k, o[2]],
                la.sizes[1],
                Some(la.sizes[1]),
                "inner",
            ),
            (3, 2, Some(_)) => (
                vec![g, o[0], k],
                vec![k, o[1]],
                la.sizes[2],
                Some(lm.sizes[1]),
                "column",
            ),
            _ => return None,
        };
    let index_a = la.index(&mut p.env, &ia);
    let index_m = lm.index(&mut p.env, &im);
    let numel = buf.layout.numel(&mut p.env);
    let store_at = buf.layout.index(&mut p.env, &o);
    let mut vars = o.clone();
    vars.extend([k, g]);
    let mut h = hoist::Hoister::new(&p.env, locals(p, &vars, &[]));
    let count = c_of(p, &mut h, numel, &printer);
    let split = decompose(p, &mut h, &o, &out_sizes, &printer);
    let [a_c, m_c, inner_c, store_c] =
        [index_a, index_m, inner, store_at].map(|e| c_of(p, &mut h, e, &printer));
    let limit_c = limit.map(|l| c_of(p, &mut h, l, &printer));
    let groups_c = offs.map(|b| {
        let n = p.buffers[b.index()].layout.sizes[0];
        c_of(p, &mut h, n, &printer)
    });
    let acc = if buf.dtype == DType::F64 {
        "double"
    } else {
        "float"
    };
    let (pa, pm, out) = (
        &pointers[a.index()],
        &pointers[m.index()],
        &pointers[id.index()],
    );
    let (kv, gv) = (cuda_symbol(&p.env.text(k)), cuda_symbol(&p.env.text(g)));
    if grouped == "none" || grouped == "row" {
        let mut exprs = vec![index_a, index_m, inner, store_at];
        exprs.extend(out_sizes.iter().copied());
        exprs.extend(limit);
        exprs.extend(offs.map(|b| p.buffers[b.index()].layout.sizes[0]));
        let sizes_c: Vec<String> = out_sizes
            .iter()
            .map(|&e| c_of(p, &mut h, e, &printer))
            .collect();
        let mut buffers = vec![(id, true), (a, false), (m, false)];
        buffers.extend(offs.map(|b| (b, false)));
        let (params_c, params, decls) = parameters(p, &h, &buffers, &[&exprs[..]], &vars, pointers);
        let mut ctx = context(&buf, entry, THREADS, &params_c, &decls);
        if let (Some(offs), Some(limit), Some(groups)) = (offs, &limit_c, &groups_c) {
            let po = &pointers[offs.index()];
            let code = offsets_error(&buf, errors);
            ctx.insert("groups", groups);
            ctx.insert("limit", limit);
            ctx.insert("offs", po);
            ctx.insert(
                "check",
                &check_offsets(po, code, "blockIdx.x == 0 && threadIdx.x == 0"),
            );
            ctx.insert("group_var", &gv);
        } else {
            ctx.insert("batches", &sizes_c[0]);
            ctx.insert("rows", &sizes_c[1]);
            ctx.insert("group_var", &cuda_symbol(&p.env.text(o[0])));
        }
        let (row, col) = match grouped {
            "row" => (o[0], o[1]),
            _ => (o[1], o[2]),
        };
        ctx.insert("grouped", grouped);
        ctx.insert("cols", sizes_c.last().expect("an output of rank 2 or 3"));
        ctx.insert("inner", &inner_c);
        // 16-bit floats multiply on the tensor cores (f32 accumulators, as cuBLAS does).
        let mma = matches!(buf.dtype, DType::BF16 | DType::F16)
            && [a, m]
                .iter()
                .all(|b| p.buffers[b.index()].dtype == buf.dtype);
        let tk = if mma { MMA_TILE_K } else { TILE_K };
        for (key, v) in [("tm", TILE_M), ("tn", TILE_N), ("tk", tk), ("per", PER)] {
            ctx.insert(key, &v);
        }
        ctx.insert("mma", &mma);
        // Consecutive threads load consecutive elements of memory: along k, unless an operand
        // is contiguous along its other dimension only (a weight passed transposed, as
        // `w.permute(0, 2, 1)`).
        let unit = |p: &Program, e: Expr| p.env.pool().as_const(e) == Some(1);
        let a_rows_fastest = unit(p, la.strides[ra - 2]) && !unit(p, la.strides[ra - 1]);
        let b_k_fastest = unit(p, lm.strides[rm - 2]) && !unit(p, lm.strides[rm - 1]);
        ctx.insert("a_rows_fastest", &a_rows_fastest);
        ctx.insert("b_k_fastest", &b_k_fastest);
        ctx.insert("frags", &(TILE_M * TILE_N / 256 / (THREADS / 32)));
        ctx.insert("elem", super::body::storage_type(buf.dtype));
        let zero = match buf.dtype {
            DType::BF16 => "__float2bfloat16_rn(0.0f)",
            _ => "__float2half_rn(0.0f)",
        };
        ctx.insert("elem_zero", zero);
        ctx.insert("tn_threads", &(TILE_N / PER));
        ctx.insert("acc", acc);
        ctx.insert("row", &cuda_symbol(&p.env.text(row)));
        ctx.insert("col", &cuda_symbol(&p.env.text(col)));
        ctx.insert("k", &kv);
        ctx.insert("a", pa);
        ctx.insert("b", pm);
        ctx.insert("out", out);
        ctx.insert("a_index", &a_c);
        ctx.insert("b_index", &m_c);
        ctx.insert("store_index", &store_c);
        let text = tera
            .render("grouped_mm.cu", &ctx)
            .map(|t| t + "\n")
            .expect("grouped_mm template");
        return Some([(Part::Tiled, text, params)]);
    }
    let mut body = String::new();
    if let (Some(offs), Some(limit), Some(groups)) = (offs, &limit_c, &groups_c) {
        let po = &pointers[offs.index()];
        let code = offsets_error(&buf, errors);
        let _ = writeln!(body, "  const long long gl_groups = {groups};");
        let _ = writeln!(body, "  const long long gl_limit = {limit};");
        let _ = write!(body, "{}", check_offsets(po, code, "gl_lin == 0"));
        // The group (or the inner slice) of this element; bounds clamped to [0, limit].
        let _ = writeln!(body, "  long long {gv} = -1, gl_lo = 0, gl_hi = 0;");
        let at = match grouped {
            "row" => cuda_symbol(&p.env.text(o[0])),
            "column" => cuda_symbol(&p.env.text(o[1])),
            _ => String::new(),
        };
        let _ = writeln!(body, "  {{");
        let _ = writeln!(body, "    long long gl_start = 0;");
        let _ = writeln!(
            body,
            "    for (long long gl_i = 0; gl_i < gl_groups; ++gl_i) {{"
        );
        let _ = writeln!(body, "      long long gl_end = (long long){po}[gl_i];");
        let _ = writeln!(body, "      gl_end = gl_end < gl_start ? gl_start : (gl_end > gl_limit ? gl_limit : gl_end);");
        if grouped == "inner" {
            let o0 = cuda_symbol(&p.env.text(o[0]));
            let _ = writeln!(body, "      if (gl_i == {o0}) {{ {gv} = gl_i; gl_lo = gl_start; gl_hi = gl_end; break; }}");
        } else {
            let _ = writeln!(
                body,
                "      if ({at} >= gl_start && {at} < gl_end) {{ {gv} = gl_i; break; }}"
            );
        }
        let _ = writeln!(body, "      gl_start = gl_end;");
        let _ = writeln!(body, "    }}");
        let _ = writeln!(body, "  }}");
        if grouped != "inner" {
            let _ = writeln!(body, "  if ({gv} >= 0) {{ gl_lo = 0; gl_hi = {inner_c}; }}");
        }
    } else {
        let _ = writeln!(
            body,
            "  const long long {gv} = 0, gl_lo = 0, gl_hi = {inner_c};"
        );
    }
    let _ = writeln!(body, "  {acc} gl_acc = 0;");
    let _ = writeln!(
        body,
        "  for (long long {kv} = gl_lo; {kv} < gl_hi; ++{kv}) {{"
    );
    let _ = writeln!(
        body,
        "    gl_acc += ({acc})gl_ld({pa}, {a_c}) * ({acc})gl_ld({pm}, {m_c});"
    );
    let _ = writeln!(body, "  }}");
    let _ = writeln!(body, "  gl_st({out}, {store_c}, gl_acc);");

    let mut buffers = vec![(id, true), (a, false), (m, false)];
    buffers.extend(offs.map(|b| (b, false)));
    let mut exprs = vec![numel, index_a, index_m, inner, store_at];
    exprs.extend(limit);
    exprs.extend(offs.map(|b| p.buffers[b.index()].layout.sizes[0]));
    let (params_c, params, decls) = parameters(p, &h, &buffers, &[&exprs[..]], &vars, pointers);
    let ctx = context(&buf, entry, THREADS, &params_c, &decls);
    let what = format!("grouped matmul ({grouped} groups): a thread per output element");
    let text = per_element(tera, ctx, &what, &count, &split, &body);
    Some([(Part::Write, text, params)])
}

/// Registers ATen's error for bad offsets of `buf`; its code.
fn offsets_error(buf: &guardless_ir::loop_ir::Buffer, errors: &mut Vec<String>) -> usize {
    errors.push(format!(
        "{} ({}): {}",
        buf.name,
        buf.origins.join(", "),
        Check::GroupOffsets.message()
    ));
    errors.len()
}

/// The check, by the one thread where `first` holds, that the offsets at `po` never decrease
/// and stay within `gl_limit` (error `code` otherwise).
fn check_offsets(po: &str, code: usize, first: &str) -> String {
    format!(
        "  if ({first}) {{
    long long gl_start = 0;
    for (long long gl_i = 0; gl_i < gl_groups; ++gl_i) {{
      const long long gl_end = (long long){po}[gl_i];
      if (gl_end < gl_start || gl_end > gl_limit) gl_fail(gl_error, {code});
      gl_start = gl_end;
    }}
  }}
"
    )
}
