//! Fused attention on the device (`templates/attention.cu`): a block per tile of rows — a query
//! position of each query head sharing one key/value head, position-major, so a decode step's
//! query heads of a group share their block and each key and value is read once for them —
//! with the tile of keys and of values in shared memory, the scores and the online softmax in
//! shared memory and registers (f32; f64 for f64), the output rescaled as each row's maximum
//! grows and divided by its sum once. In f16 and bf16 both products run on the tensor cores
//! (`mma.sync` through `gl_mma` in `templates/common.cuh`, which the CPU emulation replaces):
//! the scores from the staged queries and keys, the output from the probabilities split in two
//! parts of the narrow type (rounded value and remainder: no precision lost to it) and the values. With a causal mask a block stops at its last row's
//! position. Operands are read through their layouts (a transposed view, a broadcast mask).
//! The head dimensions must be constants of at most 256 (128 for f64): the tiles are sized by
//! them; any other attention runs on the host.

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BufferId, BufferKind, ExternKernel, PagedCheck, Program};
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
/// when the device has no form for them. Shared memory: the rows' queries, a tile of keys and
/// of values, the scores: under 48 KiB. f16 and bf16 take the tensor-core form (16 × 32 tiles,
/// operands staged in their own type: [`tensor_cores`]); f32 and f64 are staged in their type,
/// keys padded by one column against bank conflicts.
pub fn tile(dtype: DType, d: i64, dv: i64) -> Option<Tile> {
    let widest = d.max(dv);
    if d < 1 || dv < 1 {
        return None;
    }
    match dtype {
        DType::F64 if widest <= 128 => Some(Tile { rows: 8, keys: 16 }),
        DType::F16 | DType::BF16 if widest <= 256 => Some(Tile { rows: 16, keys: 32 }),
        DType::F32 if widest <= 128 => Some(Tile { rows: 16, keys: 32 }),
        DType::F32 if widest <= 256 => Some(Tile { rows: 8, keys: 16 }),
        _ => None,
    }
}

/// Whether attention in `dtype` runs its products on the tensor cores (`mma.sync` m16n8k16 with
/// f32 accumulators: f16 and bf16). The tile is then 16 rows (a fragment's) × 32 keys (8 for each
/// of the four warps); head dims are padded with zeros to whole fragments (16 columns of the
/// queries and keys, 8 of the values).
pub fn tensor_cores(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16)
}

/// The staged columns of the queries and keys, and of the values: whole fragments on the tensor
/// cores (multiples of 16 and 8), else the head dims.
fn staged_columns(dtype: DType, (d, dv): (i64, i64)) -> (i64, i64) {
    if tensor_cores(dtype) {
        ((d + 15) / 16 * 16, (dv + 7) / 8 * 8)
    } else {
        (d, dv)
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

/// The index variables and operand indexes of one attention step, as the templates use them.
struct Indexing {
    /// (template key, variable) pairs.
    vars: Vec<(&'static str, Expr)>,
    /// (template key, index or size expression) pairs.
    exprs: Vec<(&'static str, Expr)>,
    /// (template key, buffer) pairs: the pointers the templates read (the output first).
    pointers: Vec<(&'static str, BufferId)>,
}

impl Indexing {
    /// The expression of template key `key`.
    fn expr(&self, key: &str) -> Option<Expr> {
        self.exprs.iter().find(|e| e.0 == key).map(|e| e.1)
    }
}

/// The template's constants: the tile's and head dimensions' numbers, the split limits, the
/// scale (a literal that keeps every bit in f64, or rounded once to f32), the compute type and
/// its functions.
fn insert_constants(
    ctx: &mut tera::Context,
    t: Tile,
    scale: f64,
    (d, dv): (i64, i64),
    block_size: i64,
    dtype: DType,
) {
    let f64_ = dtype == DType::F64;
    let mma = tensor_cores(dtype);
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
        ("block_size", block_size),
    ] {
        ctx.insert(key_, &n);
    }
    // The staged operands: whole fragments on the tensor cores (each row 8 elements longer, so a
    // fragment's 8 rows fall in distinct banks), else the head dims (keys one longer).
    let (d_cols, dv_cols) = staged_columns(dtype, (d, dv));
    let (q_pad, k_pad, v_pad) = if mma {
        (d_cols + 8, d_cols + 8, dv_cols + 8)
    } else {
        (d, d + 1, dv)
    };
    // This thread's outputs: fragments of 4 (tensor cores), else rows × columns.
    let (o_rows, o_cols) = if mma {
        ((dv_cols / 8 + warps - 1) / warps, 4)
    } else {
        (t.rows / warps, (dv + 31) / 32)
    };
    for (key_, n) in [
        ("d_cols", d_cols),
        ("dv_cols", dv_cols),
        ("q_pad", q_pad),
        ("k_pad", k_pad),
        ("v_pad", v_pad),
        ("o_rows", o_rows),
        ("o_cols", o_cols),
    ] {
        ctx.insert(key_, &n);
    }
    let acc = if f64_ { "double" } else { "float" };
    let elem = if dtype == DType::F16 {
        "__half"
    } else {
        "__nv_bfloat16"
    };
    ctx.insert("mma", &mma);
    ctx.insert("elem", elem);
    ctx.insert("stage", if mma { elem } else { acc });
    ctx.insert(
        "to_stage",
        if mma {
            if dtype == DType::F16 {
                "__float2half_rn"
            } else {
                "__float2bfloat16_rn"
            }
        } else {
            ""
        },
    );
    ctx.insert("acc", acc);
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
}

/// How a tile of keys or values is staged into shared memory (the template's `staged`).
#[derive(serde::Serialize)]
struct Staged {
    /// For the comment: "The keys", "The values".
    what: &'static str,
    /// The shared array, its columns (the head dim padded), the head dim.
    shared: &'static str,
    cols: i64,
    dim: i64,
    /// The column's index variable, the element's index, the pointer.
    col: String,
    index: String,
    ptr: String,
    /// 16-byte words: on the tensor cores (staged in the operand's own type) with the head dim
    /// contiguous (its stride the constant 1); alignment is checked per word at run time.
    vector: bool,
}

/// The keys' and the values' staging of attention step `ix`.
fn staged_operands(
    p: &Program,
    ix: &Indexing,
    exprs_c: &[(&str, String)],
    pointers: &[String],
    dtype: DType,
    (d, dv): (i64, i64),
) -> [Staged; 2] {
    let mma = tensor_cores(dtype);
    let pointer = |key_: &str| {
        let b = ix.pointers.iter().find(|x| x.0 == key_).expect("operand").1;
        (pointers[b.index()].clone(), b)
    };
    let c_expr = |key_: &str| {
        exprs_c
            .iter()
            .find(|e| e.0 == key_)
            .expect("index")
            .1
            .clone()
    };
    let var = |key_: &str| {
        let e = ix.vars.iter().find(|v| v.0 == key_).expect("variable").1;
        cuda_symbol(&p.env.text(e))
    };
    let contiguous = |b: BufferId| {
        let l = &p.buffers[b.index()].layout;
        l.strides
            .last()
            .is_some_and(|&s| p.env.pool().as_const(s) == Some(1))
    };
    let (d_cols, dv_cols) = staged_columns(dtype, (d, dv));
    let ((k, kb), (v, vb)) = (pointer("k"), pointer("v"));
    [
        Staged {
            what: "The keys",
            shared: "gl_k",
            cols: d_cols,
            dim: d,
            col: var("t"),
            index: c_expr("k_index"),
            ptr: k,
            vector: mma && contiguous(kb),
        },
        Staged {
            what: "The values",
            shared: "gl_v",
            cols: dv_cols,
            dim: dv,
            col: var("c"),
            index: c_expr("v_index"),
            ptr: v,
            vector: mma && contiguous(vb),
        },
    ]
}

/// The ordinary form: `q [B, Hq, Lq, D]`, `k [B, Hkv, Lk, D]`, `v [B, Hkv, Lk, Dv]`, an
/// optional mask `[B, Hq, Lq, Lk]`.
fn dense(p: &mut Program, id: BufferId, inputs: &[BufferId]) -> Indexing {
    let (q, k, v, m) = (inputs[0], inputs[1], inputs[2], inputs.get(3).copied());
    let layout = |p: &Program, b: BufferId| p.buffers[b.index()].layout.clone();
    let (lq_, lk_, lv_, lo) = (layout(p, q), layout(p, k), layout(p, v), layout(p, id));
    let mut var = |prefix: &str, size: Expr| p.env.new_index_var(prefix, size);
    let (b, kh, h) = (
        var("gl_b", lq_.sizes[0]),
        var("gl_kh", lk_.sizes[1]),
        var("gl_h", lq_.sizes[1]),
    );
    let (pos, key) = (var("gl_pos", lq_.sizes[2]), var("gl_key", lk_.sizes[2]));
    let (td, c) = (var("gl_d", lq_.sizes[3]), var("gl_c", lv_.sizes[3]));
    let mut exprs = vec![
        ("q_index", lq_.index(&mut p.env, &[b, h, pos, td])),
        ("k_index", lk_.index(&mut p.env, &[b, kh, key, td])),
        ("v_index", lv_.index(&mut p.env, &[b, kh, key, c])),
        ("out_index", lo.index(&mut p.env, &[b, h, pos, c])),
        ("batch", lq_.sizes[0]),
        ("heads", lq_.sizes[1]),
        ("kv_heads", lk_.sizes[1]),
        ("lq", lq_.sizes[2]),
        ("lk", lk_.sizes[2]),
    ];
    let mut pointers = vec![("out", id), ("q", q), ("k", k), ("v", v)];
    if let Some(m) = m {
        exprs.push(("m_index", layout(p, m).index(&mut p.env, &[b, h, pos, key])));
        pointers.push(("m", m));
    }
    let vars = vec![
        ("b", b),
        ("kh", kh),
        ("h", h),
        ("pos", pos),
        ("key", key),
        ("t", td),
        ("c", c),
    ];
    Indexing {
        vars,
        exprs,
        pointers,
    }
}

/// The paged form: `q [T, Hq, D]` (a position is a token), the caches `[num_blocks,
/// block_size, Hkv, D|Dv]` (a key's cache block and row), the block table `[S, max_blocks]`,
/// `context_lens [S]`, `query_start [S + 1]`.
fn paged(p: &mut Program, id: BufferId, inputs: &[BufferId]) -> Indexing {
    let [q, k, v, table, lens, starts] = inputs[..] else {
        unreachable!("paged attention has six operands")
    };
    let layout = |p: &Program, b: BufferId| p.buffers[b.index()].layout.clone();
    let (lq_, lk_, lv_, lo) = (layout(p, q), layout(p, k), layout(p, v), layout(p, id));
    let (lt, ll, ls) = (layout(p, table), layout(p, lens), layout(p, starts));
    let mut var = |prefix: &str, size: Expr| p.env.new_index_var(prefix, size);
    let (kh, h) = (var("gl_kh", lk_.sizes[2]), var("gl_h", lq_.sizes[1]));
    let (pos, key) = (var("gl_pos", lq_.sizes[0]), var("gl_key", lt.sizes[1]));
    let (td, c) = (var("gl_d", lq_.sizes[2]), var("gl_c", lv_.sizes[3]));
    let (blk, row) = (var("gl_blk", lk_.sizes[0]), var("gl_row", lk_.sizes[1]));
    let (sq, page) = (var("gl_sq", ls.sizes[0]), var("gl_page", lt.sizes[1]));
    let exprs = vec![
        ("q_index", lq_.index(&mut p.env, &[pos, h, td])),
        ("k_index", lk_.index(&mut p.env, &[blk, row, kh, td])),
        ("v_index", lv_.index(&mut p.env, &[blk, row, kh, c])),
        ("out_index", lo.index(&mut p.env, &[pos, h, c])),
        ("starts_index", ls.index(&mut p.env, &[sq])),
        ("lens_index", ll.index(&mut p.env, &[sq])),
        ("table_index", lt.index(&mut p.env, &[sq, page])),
        ("heads", lq_.sizes[1]),
        ("kv_heads", lk_.sizes[2]),
        ("tokens", lq_.sizes[0]),
        ("seqs", lt.sizes[0]),
        ("width", lt.sizes[1]),
        ("cache_blocks", lk_.sizes[0]),
    ];
    let vars = vec![
        ("kh", kh),
        ("h", h),
        ("pos", pos),
        ("key", key),
        ("t", td),
        ("c", c),
        ("cache_block", blk),
        ("cache_row", row),
        ("sq", sq),
        ("page", page),
    ];
    let pointers = vec![
        ("out", id),
        ("q", q),
        ("k", k),
        ("v", v),
        ("table", table),
        ("lens", lens),
        ("starts", starts),
    ];
    Indexing {
        vars,
        exprs,
        pointers,
    }
}

/// The functions of attention step `id` (the tiled one, the split one and the merge), or
/// `None` when it runs on the host. A paged step registers its data errors in `errors`.
pub(super) fn render(
    p: &mut Program,
    tera: &Tera,
    entry: &str,
    id: BufferId,
    pointers: &[String],
    errors: &mut Vec<String>,
) -> Option<[(Part, String, Vec<Param>); 3]> {
    let buf = p.buffers[id.index()].clone();
    let BufferKind::Extern { kernel, inputs } = &buf.kind else {
        return None;
    };
    let (spec, paged_) = match *kernel {
        ExternKernel::Attention(a) => (a, false),
        ExternKernel::PagedAttention(a) => (a.as_attention(), true),
        _ => return None,
    };
    let head_dim = |b: BufferId| {
        let l = &p.buffers[b.index()].layout;
        p.env.pool().as_const(l.sizes[l.sizes.len() - 1])
    };
    let (d, dv) = (head_dim(inputs[0])?, head_dim(inputs[2])?);
    let t = tile(buf.dtype, d, dv)?;
    // The cache's rows per block: a constant (the tile's table reads are per key).
    let block_size = match paged_ {
        true => p
            .env
            .pool()
            .as_const(p.buffers[inputs[1].index()].layout.sizes[1])
            .filter(|&b| b > 0)?,
        false => 0,
    };
    let ix = if paged_ {
        paged(p, id, inputs)
    } else {
        dense(p, id, inputs)
    };
    let printer = CPrinter::cuda("long long", "i64");
    let vars: Vec<Expr> = ix.vars.iter().map(|v| v.1).collect();
    let mut h_ = hoist::Hoister::new(&p.env, locals(p, &vars, &[]));
    let exprs_c: Vec<(&str, String)> = ix
        .exprs
        .iter()
        .map(|&(key_, e)| (key_, c_of(p, &mut h_, e, &printer)))
        .collect();
    let all: Vec<Expr> = ix.exprs.iter().map(|e| e.1).collect();
    let buffers: Vec<(BufferId, bool)> = ix.pointers.iter().map(|&(_, b)| (b, b == id)).collect();
    let (params_c, params, decls) = parameters(p, &h_, &buffers, &[&all[..]], &vars, pointers);
    let mut ctx = context(&buf, entry, THREADS, &params_c, &decls);
    for (key_, e) in &ix.vars {
        ctx.insert(*key_, &cuda_symbol(&p.env.text(*e)));
    }
    for (key_, e) in &exprs_c {
        ctx.insert(*key_, e);
    }
    for (key_, b) in &ix.pointers {
        ctx.insert(*key_, &pointers[b.index()]);
    }
    let mask = match inputs.get(3) {
        Some(m) if !paged_ && p.buffers[m.index()].dtype == DType::Bool => "bool",
        Some(_) if !paged_ => "add",
        _ => "none",
    };
    ctx.insert("mask", mask);
    ctx.insert("causal", &spec.causal);
    ctx.insert("paged", &paged_);
    let f64_ = buf.dtype == DType::F64;
    insert_constants(&mut ctx, t, spec.scale(d), (d, dv), block_size, buf.dtype);
    let staged = staged_operands(p, &ix, &exprs_c, pointers, buf.dtype, (d, dv));
    ctx.insert("staged", &staged);
    let render = |ctx: &tera::Context, template: &str| {
        tera.render(template, ctx)
            .map(|t| t + "\n")
            .expect("attention template")
    };
    if paged_ {
        let what = format!("{} ({})", buf.name, buf.origins.join(", "));
        for (key_, check) in [
            ("start_error", PagedCheck::QueryStart),
            ("context_error", PagedCheck::ContextLength),
            ("block_error", PagedCheck::Block),
        ] {
            errors.push(format!("{what}: {}", check.message()));
            ctx.insert(key_, &errors.len());
        }
        let text = |e: Expr| crate::text::comment(&p.env.text(e));
        ctx.insert("seqs_doc", &text(ix.expr("seqs")?));
        ctx.insert("tokens_doc", &text(ix.expr("tokens")?));
        let sequences = render(&ctx, "paged_sequences.cu");
        ctx.insert("paged_sequences", sequences.trim_end());
    }
    ctx.insert("split", &false);
    let tiled = render(&ctx, "attention.cu");
    // The split form's partials, `dv` outputs and two statistics per row of a tile and share.
    // Dense: at most MAX_SPLITS shares of the one tile of each key/value head of each batch
    // entry. Paged: shares·blocks < 2·TARGET_BLOCKS whenever there is more than one share
    // (shares ≤ ⌈TARGET_BLOCKS / blocks⌉), whatever the batch.
    let size = if f64_ { 8 } else { 4 };
    let row_bytes = t.rows * (dv + 2) * size;
    let bytes = if paged_ {
        p.env.pool_mut().constant(2 * TARGET_BLOCKS * row_bytes)
    } else {
        let per = p.env.pool_mut().constant(MAX_SPLITS * row_bytes);
        let heads = p
            .env
            .pool_mut()
            .mul(ix.expr("batch")?, ix.expr("kv_heads")?);
        p.env.pool_mut().mul(per, heads)
    };
    let bytes = p.env.text(bytes);
    let (split_c, split_params) = with_workspace((params_c.clone(), params.clone()), bytes);
    ctx.insert("params", &split_c.join(", "));
    ctx.insert("split", &true);
    let split = render(&ctx, "attention.cu");
    ctx.insert("threads", &MERGE_THREADS);
    if paged_ {
        // The merge's check loop steps by its own block size.
        let sequences = render(&ctx, "paged_sequences.cu");
        ctx.insert("paged_sequences", sequences.trim_end());
    }
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
    if rows > t.rows {
        return 1;
    }
    shares(blocks(t, batch, heads, kv_heads, lq), lk)
}

/// Shares of the keys for `base` blocks over at most `keys` keys each (see [`splits`]).
fn shares(base: i64, keys: i64) -> i64 {
    if base <= 0 {
        return 1;
    }
    let wanted = (TARGET_BLOCKS + base - 1) / base;
    let most = (keys.max(0) + MIN_KEYS - 1) / MIN_KEYS;
    wanted.min(most).clamp(1, MAX_SPLITS)
}

/// The blocks of a paged launch: a tile slot per sequence and per `t.rows / group` tokens
/// (`tokens·group / t.rows + seqs`; a block whose slot its sequence does not need returns at
/// once), for each key/value head.
pub fn paged_blocks(t: Tile, tokens: i64, seqs: i64, heads: i64, kv_heads: i64) -> i64 {
    if kv_heads <= 0 || seqs <= 0 {
        return 0;
    }
    let group = (heads / kv_heads).max(0);
    let slots = tokens.max(0).saturating_mul(group) / t.rows + seqs;
    slots.saturating_mul(kv_heads)
}

/// Shares of the keys of a paged launch of `blocks` blocks whose sequences hold at most
/// `capacity` keys: as for [`splits`], whatever the queries per sequence (each share then
/// takes its part of its own sequence's keys).
pub fn paged_splits(blocks: i64, capacity: i64) -> i64 {
    shares(blocks, capacity)
}
