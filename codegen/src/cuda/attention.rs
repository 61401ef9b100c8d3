//! Fused attention on the device (`templates/attention.cu`): a block per tile of rows — a query
//! position of each query head sharing one key/value head, position-major, so a decode step's
//! query heads of a group share their block and each key and value is read once for them —
//! with the tile of keys and of values in shared memory, the scores and the online softmax in
//! shared memory and registers (f32; f64 for f64), the output rescaled as each row's maximum
//! grows and divided by its sum once. With a causal mask a block stops at its last row's
//! position. Operands are read through their layouts (a transposed view, a broadcast mask).
//! The head dimensions must be constants of at most 256 (128 for f64): the tiles are sized by
//! them; any other attention runs on the host.

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BufferId, BufferKind, ExternKernel, Program};
use guardless_ir::sym::{cuda_symbol, CPrinter, Expr};
use tera::Tera;

use super::library::{c_of, context, locals, parameters, with_workspace};
use super::{hoist, Param, Part};

/// Threads per block (four warps).
pub const THREADS: i64 = 128;

/// The tile of an attention step: rows per block and keys per step.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Tile {
    pub rows: i64,
    pub keys: i64,
}

/// The tile for head dimensions `d` (queries, keys) and `dv` (values) in `dtype`, or `None`
/// when the device has no form for them. Shared memory: the rows' queries, a tile of keys
/// (padded by one column against bank conflicts) and of values, the scores: under 48 KiB.
pub fn tile(dtype: DType, d: i64, dv: i64) -> Option<Tile> {
    let widest = d.max(dv);
    if d < 1 || dv < 1 {
        return None;
    }
    match dtype {
        DType::F64 if widest <= 128 => Some(Tile { rows: 8, keys: 16 }),
        DType::F32 | DType::F16 | DType::BF16 if widest <= 128 => Some(Tile { rows: 16, keys: 32 }),
        DType::F32 | DType::F16 | DType::BF16 if widest <= 256 => Some(Tile { rows: 8, keys: 16 }),
        _ => None,
    }
}

/// Blocks of a launch: one per tile of rows of each key/value head of each batch entry.
pub fn blocks(t: Tile, batch: i64, heads: i64, kv_heads: i64, lq: i64) -> i64 {
    if kv_heads <= 0 {
        return 0;
    }
    let rows = (heads / kv_heads).max(0).saturating_mul(lq.max(0));
    batch
        .max(0)
        .saturating_mul(kv_heads)
        .saturating_mul((rows + t.rows - 1) / t.rows)
}

/// The one function of attention step `id`, or `None` when it runs on the host.
pub(super) fn render(
    p: &mut Program,
    tera: &Tera,
    entry: &str,
    id: BufferId,
    pointers: &[String],
) -> Option<[(Part, String, Vec<Param>); 3]> {
    let buf = p.buffers[id.index()].clone();
    let BufferKind::Extern {
        kernel: ExternKernel::Attention(spec),
        inputs,
    } = &buf.kind
    else {
        return None;
    };
    let (q, k, v, m) = (inputs[0], inputs[1], inputs[2], inputs.get(3).copied());
    let layout = |p: &Program, b: BufferId| p.buffers[b.index()].layout.clone();
    let (lq_, lk_, lv_) = (layout(p, q), layout(p, k), layout(p, v));
    let (d, dv) = (
        p.env.pool().as_const(lq_.sizes[3])?,
        p.env.pool().as_const(lv_.sizes[3])?,
    );
    let t = tile(buf.dtype, d, dv)?;
    let printer = CPrinter::cuda("long long", "i64");
    let mut var = |prefix: &str, size: Expr| p.env.new_index_var(prefix, size);
    let (b, kh, h) = (
        var("gl_b", lq_.sizes[0]),
        var("gl_kh", lk_.sizes[1]),
        var("gl_h", lq_.sizes[1]),
    );
    let (pos, key) = (var("gl_pos", lq_.sizes[2]), var("gl_key", lk_.sizes[2]));
    let (td, c) = (var("gl_d", lq_.sizes[3]), var("gl_c", lv_.sizes[3]));
    let q_index = lq_.index(&mut p.env, &[b, h, pos, td]);
    let k_index = lk_.index(&mut p.env, &[b, kh, key, td]);
    let v_index = lv_.index(&mut p.env, &[b, kh, key, c]);
    let out_index = buf.layout.index(&mut p.env, &[b, h, pos, c]);
    let m_index = m.map(|m| layout(p, m).index(&mut p.env, &[b, h, pos, key]));
    let sizes = [
        lq_.sizes[0], // batch
        lq_.sizes[1], // heads
        lk_.sizes[1], // kv heads
        lq_.sizes[2], // query length
        lk_.sizes[2], // key length
    ];
    let vars = [b, kh, h, pos, key, td, c];
    let mut h_ = hoist::Hoister::new(&p.env, locals(p, &vars, &[]));
    let [batch_c, heads_c, kv_heads_c, lq_c, lk_c] = sizes.map(|e| c_of(p, &mut h_, e, &printer));
    let [q_c, k_c, v_c, out_c] =
        [q_index, k_index, v_index, out_index].map(|e| c_of(p, &mut h_, e, &printer));
    let m_c = m_index.map(|e| c_of(p, &mut h_, e, &printer));
    let mut exprs = vec![q_index, k_index, v_index, out_index];
    exprs.extend(sizes);
    exprs.extend(m_index);
    let mut buffers = vec![(id, true), (q, false), (k, false), (v, false)];
    buffers.extend(m.map(|m| (m, false)));
    let (params_c, params, decls) = parameters(p, &h_, &buffers, &[&exprs[..]], &vars, pointers);
    let mut ctx = context(&buf, entry, THREADS, &params_c, &decls);
    let f64_ = buf.dtype == DType::F64;
    let name = |e: Expr| cuda_symbol(&p.env.text(e));
    for (key_, e) in [
        ("b", b),
        ("kh", kh),
        ("h", h),
        ("pos", pos),
        ("key", key),
        ("t", td),
        ("c", c),
    ] {
        ctx.insert(key_, &name(e));
    }
    for (key_, s) in [
        ("batch", batch_c),
        ("heads", heads_c),
        ("kv_heads", kv_heads_c),
        ("lq", lq_c),
        ("lk", lk_c),
        ("q_index", q_c),
        ("k_index", k_c),
        ("v_index", v_c),
        ("out_index", out_c),
        ("m_index", m_c.unwrap_or_default()),
    ] {
        ctx.insert(key_, &s);
    }
    for (key_, b) in [("q", q), ("k", k), ("v", v), ("out", id)] {
        ctx.insert(key_, &pointers[b.index()]);
    }
    ctx.insert(
        "m",
        &m.map(|m| pointers[m.index()].clone()).unwrap_or_default(),
    );
    let mask = match m {
        None => "none",
        Some(m) if p.buffers[m.index()].dtype == DType::Bool => "bool",
        Some(_) => "add",
    };
    ctx.insert("mask", mask);
    ctx.insert("causal", &spec.causal);
    // The scale as a literal that keeps every bit (f64), or rounded once to f32.
    let scale = spec.scale(d);
    let scale = if f64_ {
        format!("{scale:e}")
    } else {
        format!("{:e}f", scale as f32)
    };
    ctx.insert("scale", &scale);
    let warps = THREADS / 32;
    for (key_, n) in [
        ("br", t.rows),
        ("tk", t.keys),
        ("d", d),
        ("dv", dv),
        ("br_last", t.rows - 1),
        ("br_d", t.rows * d),
        ("d_pad", d + 1),
        ("tk_d", t.keys * d),
        ("tk_dv", t.keys * dv),
        ("rows_per_pass", THREADS / t.keys),
        ("warps", warps),
        ("rpt", t.rows / warps),
        ("cpt", (dv + 31) / 32),
        ("tk_last", t.keys - 1),
        ("dv_1", dv + 1),
        ("dv_2", dv + 2),
        ("target_blocks", TARGET_BLOCKS),
        ("min_keys", MIN_KEYS),
        ("max_splits", MAX_SPLITS),
    ] {
        ctx.insert(key_, &n);
    }
    ctx.insert("acc", if f64_ { "double" } else { "float" });
    ctx.insert(
        "ninf",
        if f64_ {
            "__longlong_as_double(0xfff0000000000000LL)"
        } else {
            "__int_as_float(0xff800000)"
        },
    );
    // The maximum propagates NaN (a NaN score makes its row NaN, as in PyTorch).
    ctx.insert("fmax", "gl_max");
    ctx.insert("exp", if f64_ { "exp" } else { "expf" });
    ctx.insert(
        "splits_doc",
        &format!(
            "{TARGET_BLOCKS} blocks need, at most one per {MIN_KEYS} keys and {MAX_SPLITS} in all"
        ),
    );
    let render = |ctx: &tera::Context, template: &str| {
        tera.render(template, ctx)
            .map(|t| t + "\n")
            .expect("attention template")
    };
    ctx.insert("split", &false);
    let tiled = render(&ctx, "attention.cu");
    // The split form's partials: at most MAX_SPLITS shares of one tile of rows per key/value
    // head of each batch entry, `dv` outputs and two statistics each.
    let size = if f64_ { 8 } else { 4 };
    let per = p
        .env
        .pool_mut()
        .constant(MAX_SPLITS * t.rows * (dv + 2) * size);
    let heads = p.env.pool_mut().mul(lq_.sizes[0], lk_.sizes[1]);
    let bytes = p.env.pool_mut().mul(per, heads);
    let bytes = p.env.text(bytes);
    let (split_c, split_params) = with_workspace((params_c.clone(), params.clone()), bytes);
    ctx.insert("params", &split_c.join(", "));
    ctx.insert("split", &true);
    let split = render(&ctx, "attention.cu");
    ctx.insert("threads", &MERGE_THREADS);
    let merge = render(&ctx, "attention_merge.cu");
    Some([
        (Part::Tiled, tiled, params),
        (Part::Split, split, split_params.clone()),
        (Part::Merge, merge, split_params),
    ])
}

/// Blocks a split launch aims for: two per multiprocessor of a 132-SM GPU.
pub const TARGET_BLOCKS: i64 = 264;
/// The fewest keys a share of a split launch takes.
pub const MIN_KEYS: i64 = 256;
/// The most shares.
pub const MAX_SPLITS: i64 = 64;
/// Threads per block of the merge.
pub const MERGE_THREADS: i64 = 128;

/// Shares of the keys for a launch (1: no split): only when the rows of each key/value head fit
/// one block (decode, short queries) and the blocks would leave the GPU idle — as many as bring
/// the launch to [`TARGET_BLOCKS`], each of at least [`MIN_KEYS`] keys. The split function and
/// the merge compute the same count from the same sizes (`gl_attention_splits` in
/// `templates/common.cuh`).
pub fn splits(t: Tile, batch: i64, heads: i64, kv_heads: i64, lq: i64, lk: i64) -> i64 {
    if kv_heads <= 0 {
        return 1;
    }
    let rows = (heads / kv_heads).max(0).saturating_mul(lq.max(0));
    let base = blocks(t, batch, heads, kv_heads, lq);
    if rows > t.rows || base <= 0 {
        return 1;
    }
    let wanted = (TARGET_BLOCKS + base - 1) / base;
    let most = (lk.max(0) + MIN_KEYS - 1) / MIN_KEYS;
    wanted.min(most).clamp(1, MAX_SPLITS)
}
