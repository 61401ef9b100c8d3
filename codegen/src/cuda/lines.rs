//! Library steps that work line by line along one dimension — `cumsum` (scan) and `sort`/`topk`
//! — on the device. A line is the input's elements `(o·len + j)·inner + i` for `j < len`, read
//! from its contiguous storage as the host reads it.
//!
//! A scan keeps its running sum in double (integers: long long) and rounds each output once, as
//! the host does. A thread per line (`write`) adds in the host's order, bit for bit; the
//! `block` function, for few or long lines ([`scan_form`]), gives a line a block: tiles of
//! `THREADS` runs of [`SCAN_ITEMS`], each run summed by its thread and the runs' totals scanned
//! across the block — the same sums in another order (integers exact). For few lines of several
//! tiles the `tiled` function gives each tile a block, in three launches: the tiles' totals,
//! their exclusive sums (a block a line), the tiles scanned after them.
//!
//! A short sort is a selection: the `t`-th output is the first element, in the order, that
//! comes after the `(t − 1)`-th — `keep · len` comparisons per line, no scratch. Past a few
//! thousand comparisons ([`sort_by_selection`]) the launcher runs the `block` function instead: a block per line,
//! a stable least-significant-digit radix sort of 8-bit digits of keys whose unsigned order is
//! the host's (`gl_sort_key`: NaN above every number, −0.0 equal to 0.0; inverted for
//! descending; a pass whose digit every key of the line shares is skipped), through 16 bytes
//! of workspace per element (32-bit keys and positions; 24 or 32
//! with 64-bit keys, or lines that may pass 2³¹). A pass counts the line's digits
//! (shared-memory atomics) and places tiles of [`RADIX_ROWS`] × `THREADS` elements in order: an
//! element's place is its digit's next position, plus the tile's elements of that digit in
//! earlier rows and warps (per-warp counts, prefix-summed per digit), plus those of earlier
//! lanes of its warp (`__match_any_sync`) — four barriers a tile. For few long lines
//! ([`sort_by_tiles`]) the `tiled` function spreads a line's tiles over blocks instead,
//! launched in [`phases`]: the keys; per pass each tile's digit counts, each tile's first
//! position of each digit (a block a line), each tile placed; the gather. Both are
//! `templates/radix.cu`.

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BufferId, BufferKind, Program, ScanKind};
use guardless_ir::sym::{CPrinter, Expr};
use tera::Tera;

use super::library::{c_of, context, parameters, with_workspace};
use super::{hoist, Param, Part};

const INF: &str = "__longlong_as_double(0x7ff0000000000000LL)";
const NEG_INF: &str = "(-__longlong_as_double(0x7ff0000000000000LL))";

/// Threads per block; a thread per line.
pub const THREADS: i64 = 256;
/// The most comparisons per line (`keep · len`) a selection sort does; above it, the radix sort
/// runs. Up to [`SORT_WORK_MANY`] while there are lines enough for a thread each to keep the GPU
/// busy ([`MANY_LINES`]); else up to [`SORT_WORK_FEW`], since one thread's comparisons follow one
/// another and a block's radix sort of a few thousand elements is over sooner.
pub const SORT_WORK_MANY: i64 = 1 << 16;
pub const SORT_WORK_FEW: i64 = 1 << 12;
pub const MANY_LINES: i64 = 1 << 12;

/// Whether a sort keeping `keep` of each of `lines` lines of `len` is a selection (a thread per
/// line) rather than a radix sort. A speed choice from the actual sizes; both give the same
/// order.
pub fn sort_by_selection(lines: i64, keep: i64, len: i64) -> bool {
    let work = keep.saturating_mul(len);
    work <= SORT_WORK_FEW || (work <= SORT_WORK_MANY && lines >= MANY_LINES)
}
/// Elements each thread of a block-per-line scan sums in order (a tile is `THREADS` of them).
pub const SCAN_ITEMS: i64 = 8;
/// Rows of `THREADS` elements in a tile of the radix sort (each thread holds one of each).
pub const RADIX_ROWS: i64 = 4;
/// Elements in a tile of the radix sort.
pub const RADIX_TILE: i64 = RADIX_ROWS * THREADS;

/// Whether a radix sort of `lines` lines of `len` elements spreads each line's tiles over
/// blocks (`tiled`, in phases) rather than a block per line walking them in turn: for few long
/// lines (a sampler's batch of vocabularies), which a block a line would leave on a few SMs.
/// A speed choice from the actual sizes; both give the same order.
pub fn sort_by_tiles(lines: i64, len: i64) -> bool {
    lines < 512 && len >= 4 * RADIX_TILE
}

// The radix sort's 256 digit counts are spread evenly over the threads, and warps are whole.
const _: () = assert!(256 % THREADS == 0 && THREADS % 32 == 0);

/// Elements in a tile of the block-per-line and tiled scans.
pub const SCAN_TILE: i64 = SCAN_ITEMS * THREADS;

/// How a scan of `lines` lines of `len` elements, `inner` apart, runs: a thread per line
/// (`Write`), a block per line (`Block`) or a block per tile of a line (`Tiled`, in three
/// phases). A thread per line walks `len` elements one after another, which only pays when there
/// are lines enough to fill the GPU (2¹⁵ threads and more); then a block a line only wins for
/// long contiguous lines, which one thread would read alone. Few lines of several tiles (a
/// sampler's batch of vocabularies) are spread over blocks by tiles. A speed choice from the
/// actual sizes: every form computes the same sums (in its own order).
pub fn scan_form(lines: i64, len: i64, inner: i64) -> Part {
    if lines < 64 && len >= 4 * SCAN_TILE {
        Part::Tiled
    } else if (lines < 1 << 15 && len >= 64) || (inner == 1 && len >= 1024) {
        Part::Block
    } else {
        Part::Write
    }
}

/// A radix key of element `gl_v` of `dtype` (as `gl_ld` reads it), and the key bits that vary:
/// `[lo, hi)` (the bits above `hi` are zero).
fn radix_key(dtype: DType) -> (&'static str, u32, u32) {
    match dtype {
        DType::F64 => ("gl_sort_key(gl_v)", 0, 64),
        DType::F32 => ("gl_sort_key(gl_v)", 0, 32),
        // A 10-bit mantissa: the float's low 13 bits are zero.
        DType::F16 => ("gl_sort_key(gl_v)", 12, 32),
        DType::BF16 => ("gl_sort_key(gl_v)", 16, 32),
        DType::I64 => ("(unsigned long long)gl_v ^ (1ull << 63)", 0, 64),
        DType::I32 => ("(unsigned long long)((unsigned)gl_v ^ 0x80000000u)", 0, 32),
        DType::I8 => ("(unsigned long long)(gl_v + 128)", 0, 8),
        DType::U8 => ("(unsigned long long)gl_v", 0, 8),
        DType::Bool => ("(unsigned long long)gl_v", 0, 2),
    }
}

/// The functions of scan or sort step `id`: a scan's, or a sort's selection (`write`) and radix
/// sort (`radix`).
pub(super) fn render(
    p: &mut Program,
    tera: &Tera,
    entry: &str,
    id: BufferId,
    pointers: &[String],
) -> Vec<(Part, String, Vec<Param>)> {
    let buf = p.buffers[id.index()].clone();
    let (input, dim, sort, scan) = match &buf.kind {
        BufferKind::Scan { input, dim, kind } => (*input, *dim, None, *kind),
        BufferKind::Sort {
            input,
            dim,
            descending,
            take,
            indices,
        } => (
            *input,
            *dim,
            Some((*descending, *take, *indices)),
            ScanKind::Sum,
        ),
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
    let input_dtype = p.buffers[input.index()].dtype;
    ctx.insert("lines", &lines_c);
    ctx.insert("inner", &inner_c);
    ctx.insert("len", &len_c);
    ctx.insert("keep", &keep_c);
    ctx.insert("out", &pointers[id.index()]);
    ctx.insert("input", &pointers[input.index()]);
    // Kept wide and rounded once each: per-addition rounding loses a long bf16 line's small terms
    // altogether.
    let float = buf.dtype.is_float();
    let acc = if float { "double" } else { "long long" };
    // The identity, which combined with the first element gives it bit for bit.
    let (op, zero, what) = match (scan, float) {
        (ScanKind::Sum, true) => ("GlScanSum", "-0.0", "sums"),
        (ScanKind::Sum, false) => ("GlScanSum", "0", "sums"),
        (ScanKind::Prod, true) => ("GlScanProd", "1.0", "products"),
        (ScanKind::Prod, false) => ("GlScanProd", "1", "products"),
        (ScanKind::Max, true) => ("GlScanMax", NEG_INF, "maxima"),
        (ScanKind::Max, false) => ("GlScanMax", "(-9223372036854775807LL - 1)", "maxima"),
        (ScanKind::Min, true) => ("GlScanMin", INF, "minima"),
        (ScanKind::Min, false) => ("GlScanMin", "9223372036854775807LL", "minima"),
        (ScanKind::LogSumExp, _) => ("GlScanLogSumExp", NEG_INF, "log-sum-exps"),
    };
    ctx.insert("acc", acc);
    ctx.insert("zero", zero);
    ctx.insert("op", op);
    ctx.insert("what", what);
    ctx.insert("items", &SCAN_ITEMS);
    let render = |ctx: &tera::Context| {
        tera.render("lines.cu", ctx)
            .map(|t| t + "\n")
            .expect("lines template")
    };
    let (l, n) = (p.env.text(lines), p.env.text(len));
    // A workspace, and for the functions launched in phases, the phase; before the error flag.
    let with_phases = |bytes: String| {
        let (mut c, mut params) = with_workspace((params_c.clone(), params.clone()), bytes);
        let at = c.len() - 1;
        c.insert(at, "long long gl_phase".into());
        params.insert(at, Param::Phase);
        (c, params)
    };
    let Some((descending, _, indices)) = sort else {
        ctx.insert("mode", "scan");
        let by_thread = render(&ctx);
        ctx.insert("mode", "scan_block");
        ctx.insert("tile", &0);
        let by_block = render(&ctx);
        // Each tile's total: 8 bytes a tile of 2048 (1 byte an element is more), and 8 a line.
        let mut parts = vec![
            (Part::Write, by_thread, params.clone()),
            (Part::Block, by_block, params.clone()),
        ];
        // A log-sum-exp's double exp and log1p over a tile's runs spill registers in the
        // three-phase function: its few long lines take a block each instead.
        if scan != ScanKind::LogSumExp {
            let (tiles_c, tiles_params) = with_phases(format!("({l})*({n}) + 8*({l})"));
            ctx.insert("params", &tiles_c.join(", "));
            ctx.insert("mode", "scan_tiles");
            ctx.insert("tile", &SCAN_TILE);
            parts.push((Part::Tiled, render(&ctx), tiles_params));
        }
        return parts;
    };
    ctx.insert("mode", "sort");
    ctx.insert("descending", &descending);
    ctx.insert("indices", &indices);
    let selection = render(&ctx);
    // The radix sorts: the same context, the workspace (keys and positions, twice; for tiles,
    // then the tiles' digit counts and key bits) added.
    let (key, lo, hi) = radix_key(input_dtype);
    // Keys of 32 bits when they fit; positions of 32 bits when every length does.
    let key_bytes: i64 = if hi <= 32 { 4 } else { 8 };
    let pos_bytes: i64 = if p.env.bound(len).hi < 1 << 31 { 4 } else { 8 };
    ctx.insert("key_bytes", &key_bytes);
    ctx.insert("pos_bytes", &pos_bytes);
    ctx.insert(
        "key_t",
        if key_bytes == 4 {
            "unsigned"
        } else {
            "unsigned long long"
        },
    );
    ctx.insert("pos_t", if pos_bytes == 4 { "int" } else { "long long" });
    let per_element = 2 * (key_bytes + pos_bytes);
    ctx.insert("key", key);
    ctx.insert("lo", &lo);
    ctx.insert("hi", &hi);
    ctx.insert("passes", &radix_passes(input_dtype));
    ctx.insert("rows", &RADIX_ROWS);
    ctx.insert("warps", &(THREADS / 32));
    let radix = |ctx: &mut tera::Context, mode: &str, bytes: String| {
        let (radix_c, radix_params) = if mode == "tiles" {
            with_phases(bytes)
        } else {
            with_workspace((params_c.clone(), params.clone()), bytes)
        };
        ctx.insert("params", &radix_c.join(", "));
        ctx.insert("mode", mode);
        ctx.insert("tile", &if mode == "tiles" { RADIX_TILE } else { 0 });
        let text = tera
            .render("radix.cu", ctx)
            .map(|t| t + "\n")
            .expect("radix template");
        (text, radix_params)
    };
    let block_bytes = format!("{per_element}*(({l})*({n}))");
    let (block, block_params) = radix(&mut ctx, "block", block_bytes);
    // Per line: 258 words a tile of 1024 (digit counts, the tile's or and and: under 3 bytes an
    // element, with one tile more), one (the bits that vary).
    let tiles_bytes = format!("{}*(({l})*({n})) + 2072*({l})", per_element + 3);
    let (tiles, tiles_params) = radix(&mut ctx, "tiles", tiles_bytes);
    vec![
        (Part::Write, selection, params),
        (Part::Block, block, block_params),
        (Part::Tiled, tiles, tiles_params),
    ]
}

/// The passes of 8-bit digits a radix sort of `dtype` keys makes.
fn radix_passes(dtype: DType) -> u32 {
    let (_, lo, hi) = radix_key(dtype);
    (hi - lo).div_ceil(8)
}

/// How many times the launcher launches `part` of scan or sort `buf` (of `program`): the
/// tiled radix sort's phases (the keys; three a pass; the gather), the tiled scan's three (the
/// tiles' totals; their exclusive sums; the tiles), else once.
pub fn phases(program: &Program, buf: &guardless_ir::loop_ir::Buffer, part: Part) -> usize {
    match (&buf.kind, part) {
        (BufferKind::Sort { input, .. }, Part::Tiled) => {
            3 * radix_passes(program.buffers[input.index()].dtype) as usize + 2
        }
        (BufferKind::Scan { .. }, Part::Tiled) => 3,
        _ => 1,
    }
}
