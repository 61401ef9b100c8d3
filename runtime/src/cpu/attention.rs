//! Fused attention on the host (`ExternKernel::Attention`): FlashAttention's loop without the
//! score matrix in memory. A work item is one batch entry, one key/value head and a tile of
//! `TILE_Q` query positions of every query head that reads that key/value head (grouped-query
//! attention reads each key and value once per tile, for all of its query heads). Keys go by in
//! tiles of `TILE_K`: the tile of keys and of values is widened into f32 (f64 for f64) scratch,
//! the scores of the item's rows are one small product, hidden keys (the causal mask, a boolean
//! mask) are -inf, and an online softmax rescales each row's running sum and output when its
//! maximum grows; the output is divided by the sum once at the end. Tiles entirely above the
//! causal diagonal are never visited. Memory beyond the output: a few tiles per thread, whatever
//! the lengths. Products go through matrixmultiply; the exponentials through a polynomial that
//! the compiler vectorizes (AVX2 + FMA when the CPU has them).

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::Attention;
use rayon::prelude::*;

/// Query positions per work item (times the query heads of a key/value head).
const TILE_Q: usize = 32;
/// Keys per step of the online softmax.
const TILE_K: usize = 256;
/// Multiply-adds below which the whole step runs on the calling thread.
const PARALLEL_WORK: usize = 1 << 16;

/// A 4-dimensional operand `[B, H, L, D]` in storage: element `(b, h, l, d)` at
/// `offset + b·strides[0] + h·strides[1] + l·strides[2] + d·strides[3]` (elements of `dtype`).
#[derive(Copy, Clone, Debug)]
pub struct Operand {
    pub ptr: *const u8,
    pub dtype: DType,
    pub offset: isize,
    pub strides: [isize; 4],
}

// Safety: operands are read only, each by the work items that need them.
unsafe impl Send for Operand {}
unsafe impl Sync for Operand {}

impl Operand {
    /// The element at `at` (in elements from the storage's start), widened.
    #[inline(always)]
    pub(crate) unsafe fn get<T: Real>(&self, at: isize) -> T {
        let p = self.ptr;
        match self.dtype {
            DType::F32 => T::of_f32(*(p as *const f32).offset(at)),
            DType::F64 => T::of_f64(*(p as *const f64).offset(at)),
            DType::F16 => T::of_f32(half::f16::from_bits(*(p as *const u16).offset(at)).to_f32()),
            DType::BF16 => T::of_f32(half::bf16::from_bits(*(p as *const u16).offset(at)).to_f32()),
            DType::Bool | DType::U8 => T::of_f32(f32::from(*p.offset(at))),
            DType::I8 => T::of_f32(f32::from(*(p as *const i8).offset(at))),
            DType::I32 => T::of_f64(f64::from(*(p as *const i32).offset(at))),
            DType::I64 => T::of_f64(*(p as *const i64).offset(at) as f64),
        }
    }

    /// Elements `at + i·stride` for `i < dst.len()`, widened into `dst` (one dtype dispatch per
    /// row; a unit stride of f32 is a plain copy the compiler vectorizes).
    #[inline(always)]
    unsafe fn row<T: Real>(&self, at: isize, stride: isize, dst: &mut [T]) {
        let p = self.ptr;
        match self.dtype {
            DType::F32 => {
                let p = (p as *const f32).offset(at);
                if stride == 1 {
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = T::of_f32(*p.add(i));
                    }
                } else {
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = T::of_f32(*p.offset(i as isize * stride));
                    }
                }
            }
            DType::BF16 => {
                let p = (p as *const u16).offset(at);
                for (i, d) in dst.iter_mut().enumerate() {
                    let bits = u32::from(*p.offset(i as isize * stride)) << 16;
                    *d = T::of_f32(f32::from_bits(bits));
                }
            }
            _ => {
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = self.get::<T>(at + i as isize * stride);
                }
            }
        }
    }

    /// Whether the operand holds the compute type `T` itself (f32 for f32, f64 for f64).
    fn direct<T: Real>(&self) -> bool {
        self.dtype == T::DTYPE
    }

    /// The address of element `at`, as the compute type (see [`Operand::direct`]).
    unsafe fn element<T: Real>(&self, at: isize) -> *const T {
        (self.ptr as *const T).offset(at)
    }

    #[inline(always)]
    pub fn at(&self, b: usize, h: usize, l: usize, d: usize) -> isize {
        self.offset
            + b as isize * self.strides[0]
            + h as isize * self.strides[1]
            + l as isize * self.strides[2]
            + d as isize * self.strides[3]
    }
}

/// The output `[B, Hq, Lq, Dv]`, written in place.
#[derive(Copy, Clone, Debug)]
pub struct Output {
    pub ptr: *mut u8,
    pub dtype: DType,
    pub offset: isize,
    pub strides: [isize; 4],
}

// Safety: work items write disjoint rows.
unsafe impl Send for Output {}
unsafe impl Sync for Output {}

/// The sizes of one call: batch, query heads, key/value heads, query length, key length, head
/// dimension of queries and keys, head dimension of values.
#[derive(Copy, Clone, Debug)]
pub struct Sizes {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub lq: usize,
    pub lk: usize,
    pub d: usize,
    pub dv: usize,
}

/// The operands of one call.
#[derive(Copy, Clone, Debug)]
pub struct Operands {
    pub q: Operand,
    pub k: Operand,
    pub v: Operand,
    pub mask: Option<Operand>,
    pub out: Output,
}

/// Computes the attention of `ops` (sizes `s`; `s.heads` a multiple of `s.kv_heads`) on up to
/// `threads` threads of rayon's pool.
///
/// # Safety
/// Every element the operands' layouts address at sizes `s` lies inside its storage, and the
/// output's rows are distinct elements.
pub unsafe fn attention(spec: Attention, s: Sizes, ops: Operands, threads: usize) {
    if s.batch == 0 || s.heads == 0 || s.lq == 0 || s.dv == 0 {
        return;
    }
    let group = s.heads / s.kv_heads.max(1);
    let tiles = s.lq.div_ceil(TILE_Q);
    let items = s.batch * s.kv_heads * tiles;
    let run = |scratch: &mut Scratch, item: usize| {
        let (b, rest) = (item / (s.kv_heads * tiles), item % (s.kv_heads * tiles));
        let (kh, tile) = (rest / tiles, rest % tiles);
        let q0 = tile * TILE_Q;
        let rows = Rows {
            b,
            kh,
            group,
            q0,
            tq: TILE_Q.min(s.lq - q0),
            from: 0,
            lk: s.lk,
            shift: 0,
            pages: None,
        };
        // Safety: the caller's promise, for this item's rows.
        unsafe {
            match ops.mask {
                Some(mask) => {
                    for part in visible_parts(mask, rows, spec.causal) {
                        run_item(spec, s, ops, part, scratch)
                    }
                }
                None => run_item(spec, s, ops, rows, scratch),
            }
        }
    };
    let work = s.batch * s.heads * s.lq * s.lk * (s.d + s.dv);
    for_each_item(items, threads > 1 && work >= PARALLEL_WORK, run);
}

/// Whether a mask element hides its key: `false` in a boolean mask; in an additive one -inf, or
/// the mask dtype's lowest finite value — what transformers fills its masks with
/// (`torch.finfo(dtype).min`): added to a score, its weight is exactly 0 beside any key the mask
/// leaves visible. (NaN hides nothing.)
#[inline(always)]
unsafe fn hides(mask: &Operand, at: isize) -> bool {
    let p = mask.ptr;
    match mask.dtype {
        DType::Bool | DType::U8 => *p.offset(at) == 0,
        DType::F32 => *(p as *const f32).offset(at) <= f32::MIN,
        DType::F64 => *(p as *const f64).offset(at) <= f64::MIN,
        DType::F16 => half::f16::from_bits(*(p as *const u16).offset(at)) <= half::f16::MIN,
        DType::BF16 => half::bf16::from_bits(*(p as *const u16).offset(at)) <= half::bf16::MIN,
        DType::I8 | DType::I32 | DType::I64 => false,
    }
}

/// The first and one past the last of keys `0..keys` that the mask row at `at` (key stride
/// `step`) leaves visible, scanned from each end (one dtype dispatch per row).
unsafe fn visible_ends(
    mask: &Operand,
    at: isize,
    step: isize,
    keys: usize,
) -> Option<(usize, usize)> {
    #[inline(always)]
    fn ends(keys: usize, hidden: impl Fn(usize) -> bool) -> Option<(usize, usize)> {
        let lo = (0..keys).find(|&j| !hidden(j))?;
        let hi = (lo..keys).rev().find(|&j| !hidden(j)).unwrap_or(lo);
        Some((lo, hi + 1))
    }
    let element = |j: usize| at + j as isize * step;
    match mask.dtype {
        DType::F32 => {
            let p = mask.ptr as *const f32;
            ends(keys, |j| unsafe { *p.offset(element(j)) <= f32::MIN })
        }
        DType::Bool | DType::U8 => ends(keys, |j| unsafe { *mask.ptr.offset(element(j)) == 0 }),
        _ => ends(keys, |j| unsafe { hides(mask, element(j)) }),
    }
}

/// The keys `lo..hi` from the first to the last that the mask (and the causal mask, when
/// `causal`) leaves visible to position `pos` of any of the item's query heads; `None` when
/// they hide every key.
unsafe fn visible_span(
    mask: &Operand,
    r: &Rows,
    pos: usize,
    causal: bool,
) -> Option<(usize, usize)> {
    let keys = if causal { r.sees(pos) } else { r.lk };
    // A mask broadcast over heads is read once per position.
    let heads = if mask.strides[1] == 0 { 1 } else { r.group };
    let mut span: Option<(usize, usize)> = None;
    for h in 0..heads {
        let at = mask.at(r.b, r.kh * r.group + h, pos, 0);
        if let Some((lo, hi)) = visible_ends(mask, at, mask.strides[3], keys) {
            span = Some(span.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        }
    }
    span
}

/// Keys' worth of work a separate part of a tile costs beyond its keys (loading its queries,
/// finishing its rows).
const PART_COST: usize = 64;

/// The item `r` cut into parts of consecutive positions, each over the keys from the first to
/// the last that its rows' mask leaves visible: keys every row of a part hides are never read.
/// A batch of packed sequences (continuous batching) has a block-diagonal mask: a decode token
/// sees its own sequence's keys only, and the item's rows are its parts. A position is added
/// to the part before it while one pass over their keys together costs no more than two
/// (`PART_COST`). A position whose rows see no key keeps every key (the softmax of a row all
/// hidden is PyTorch's, not skipped). Skipping a hidden key leaves out a weight that is exactly
/// 0; the sums of the visible keys' weights go by in other tiles, so the result may differ from
/// the whole pass's in its last bits.
unsafe fn visible_parts(mask: Operand, r: Rows, causal: bool) -> Vec<Rows> {
    let mut parts: Vec<Rows> = Vec::new();
    for i in 0..r.tq {
        let (lo, hi) = visible_span(&mask, &r, r.q0 + i, causal).unwrap_or((0, r.lk));
        if let Some(p) = parts.last_mut() {
            let (a, b) = (p.from.min(lo), p.lk.max(hi));
            if (p.tq + 1) * (b - a) <= p.tq * (p.lk - p.from) + (hi - lo) + PART_COST {
                p.tq += 1;
                (p.from, p.lk) = (a, b);
                continue;
            }
        }
        parts.push(Rows {
            q0: r.q0 + i,
            tq: 1,
            from: lo,
            lk: hi,
            ..r
        });
    }
    parts
}

/// Runs `run` on items `0..items`, in parallel (one item per task) when `parallel`.
fn for_each_item(items: usize, parallel: bool, run: impl Fn(&mut Scratch, usize) + Sync) {
    if parallel && items > 1 {
        (0..items)
            .into_par_iter()
            .with_max_len(1)
            .for_each(|item| SCRATCH.with(|t| run(&mut t.borrow_mut(), item)));
    } else {
        SCRATCH.with(|t| (0..items).for_each(|item| run(&mut t.borrow_mut(), item)));
    }
}

/// One work item in the compute type of its operands.
unsafe fn run_item(spec: Attention, s: Sizes, ops: Operands, rows: Rows, scratch: &mut Scratch) {
    if ops.q.dtype == DType::F64 {
        item_f64(spec, s, ops, rows, &mut scratch.f64)
    } else {
        item_f32(spec, s, ops, rows, &mut scratch.f32)
    }
}

/// One sequence of a paged attention call: its query tokens `start..start + queries` (of the
/// flattened batch) and its keys `0..keys`, found through row `index` of the block table.
#[derive(Copy, Clone, Debug)]
pub struct Sequence {
    pub index: usize,
    pub start: usize,
    pub queries: usize,
    pub keys: usize,
}

/// A paged call's block table: `table.at(s, i, 0, 0)` holds block `i` of sequence `s`, whose
/// rows are `block_size` consecutive key positions.
#[derive(Copy, Clone, Debug)]
pub struct Pages {
    pub table: Operand,
    pub block_size: usize,
}

/// Paged attention (`ExternKernel::PagedAttention`): `ops.q` and `ops.out` address
/// `[1, Hq, T, D]` (a token is a position), the caches `[num_blocks, Hkv, block_size, D]` (a
/// block is a batch entry, a block's row a position); work items are tiles of each sequence's
/// queries per key/value head, causal with bottom-right alignment. `s.lq` is the number of
/// tokens; `s.lk` is unused.
///
/// # Safety
/// As [`attention`]; besides, the sequences were checked against the operands: their queries
/// within `s.lq`, their keys within their table row, the table's blocks within the caches.
pub unsafe fn paged_attention(
    spec: Attention,
    s: Sizes,
    ops: Operands,
    pages: Pages,
    seqs: &[Sequence],
    threads: usize,
) {
    let group = s.heads / s.kv_heads.max(1);
    // (sequence, first query) per tile, for each key/value head.
    let tiles: Vec<(usize, usize)> = seqs
        .iter()
        .enumerate()
        .flat_map(|(i, q)| (0..q.queries).step_by(TILE_Q).map(move |t| (i, t)))
        .collect();
    let items = tiles.len() * s.kv_heads;
    let run = |scratch: &mut Scratch, item: usize| {
        let (kh, (i, first)) = (item / tiles.len(), tiles[item % tiles.len()]);
        let q = seqs[i];
        let rows = Rows {
            b: 0,
            kh,
            group,
            q0: q.start + first,
            tq: TILE_Q.min(q.queries - first),
            from: 0,
            lk: q.keys,
            shift: q.keys as isize - q.queries as isize - q.start as isize,
            pages: Some((pages, q.index)),
        };
        // Safety: the caller's promise, for this item's rows.
        unsafe { run_item(spec, s, ops, rows, scratch) }
    };
    let work: usize =
        seqs.iter().map(|q| q.queries * q.keys).sum::<usize>() * s.heads * (s.d + s.dv);
    for_each_item(items, threads > 1 && work >= PARALLEL_WORK, run);
}

/// The rows of one work item: batch entry `b`, key/value head `kh`, query positions
/// `q0..q0 + tq` of each of its `group` query heads (row `hh·tq + i` is head `kh·group + hh`,
/// position `q0 + i`), over keys `from..lk`. Causal: position `p` sees keys `0..=p + shift`.
/// Keys of a paged call are found through row `.1` of the block table.
#[derive(Copy, Clone, Debug)]
struct Rows {
    b: usize,
    kh: usize,
    group: usize,
    q0: usize,
    tq: usize,
    from: usize,
    lk: usize,
    shift: isize,
    pages: Option<(Pages, usize)>,
}

impl Rows {
    /// The keys the row at position `pos` sees under a causal mask.
    fn sees(&self, pos: usize) -> usize {
        (pos as isize + self.shift + 1).clamp(0, self.lk as isize) as usize
    }

    /// Rows `j0..j0 + m` (`m ≤ KEYS`) of the key or value operand `o` at this item's head, each
    /// `buf.len() / KEYS` elements: in place, or widened into `buf`'s parts (see [`row_at`]).
    /// The rows `AHEAD` keys further on (below `keys`) are prefetched.
    #[inline(always)]
    unsafe fn rows_at<'a, T: Real>(
        &self,
        o: &Operand,
        j0: usize,
        m: usize,
        keys: usize,
        buf: &'a mut [T],
    ) -> [&'a [T]; KEYS] {
        let len = buf.len() / KEYS;
        let mut rows: [&[T]; KEYS] = [&[]; KEYS];
        // (A head dim of 0 has no elements: empty rows.)
        for (i, part) in buf.chunks_exact_mut(len.max(1)).take(m).enumerate() {
            if j0 + i + AHEAD < keys {
                let (b, l) = self.key(j0 + i + AHEAD);
                prefetch(o, o.at(b, self.kh, l, 0), len);
            }
            let (b, l) = self.key(j0 + i);
            rows[i] = row_at(o, o.at(b, self.kh, l, 0), part);
        }
        rows
    }

    /// The (batch entry, position) of key `j` in the key and value operands.
    #[inline(always)]
    unsafe fn key(&self, j: usize) -> (usize, usize) {
        match self.pages {
            None => (self.b, j),
            Some((p, seq)) => {
                let at = p.table.at(seq, j / p.block_size, 0, 0);
                (p.table.get::<f64>(at) as usize, j % p.block_size)
            }
        }
    }
}

unsafe fn item_f32(spec: Attention, s: Sizes, ops: Operands, rows: Rows, scratch: &mut Tiles<f32>) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        return item_avx2(spec, s, ops, rows, scratch);
    }
    item::<f32, false>(spec, s, ops, rows, scratch)
}

unsafe fn item_f64(spec: Attention, s: Sizes, ops: Operands, rows: Rows, scratch: &mut Tiles<f64>) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        return item_avx2(spec, s, ops, rows, scratch);
    }
    item::<f64, false>(spec, s, ops, rows, scratch)
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// [`item`] compiled for AVX2 with fused multiply-adds (`mul_add` is one instruction here; without
/// the feature it would be a call).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn item_avx2<T: Real>(
    spec: Attention,
    s: Sizes,
    ops: Operands,
    rows: Rows,
    scratch: &mut Tiles<T>,
) {
    item::<T, true>(spec, s, ops, rows, scratch)
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// A thread's working memory, kept across the work items (and calls) it runs (a fresh tile of scores per
/// item was an allocation the size of a page mapping, zeroed, every time).
#[derive(Default)]
struct Scratch {
    f32: Tiles<f32>,
    f64: Tiles<f64>,
}

/// The tiles of one work item (see [`item`]).
#[derive(Default)]
struct Tiles<T> {
    q: Vec<T>,
    out: Vec<T>,
    top: Vec<T>,
    sum: Vec<T>,
    kt: Vec<T>,
    vt: Vec<T>,
    scores: Vec<T>,
}

/// `v` holding `n` copies of `x` (its allocation reused).
fn refill<T: Copy>(v: &mut Vec<T>, n: usize, x: T) -> &mut [T] {
    v.clear();
    v.resize(n, x);
    v
}

/// One work item: the online softmax over the key tiles its rows can see. `FMA`: products are
/// accumulated by fused multiply-adds.
#[inline(always)]
unsafe fn item<T: Real, const FMA: bool>(
    spec: Attention,
    s: Sizes,
    ops: Operands,
    r: Rows,
    t: &mut Tiles<T>,
) {
    let (d, dv) = (s.d, s.dv);
    let n = r.group * r.tq;
    let head = |row: usize| r.kh * r.group + row / r.tq;
    let pos = |row: usize| r.q0 + row % r.tq;
    let scale = T::of_f64(spec.scale(d as i64));
    // The rows' queries, scaled.
    let q = refill(&mut t.q, n * d, T::ZERO);
    // (A head dim of 0 has no query elements: every score is 0.)
    for (row, line) in q.chunks_exact_mut(d.max(1)).enumerate() {
        ops.q.row(
            ops.q.at(r.b, head(row), pos(row), 0),
            ops.q.strides[3],
            line,
        );
        line.iter_mut().for_each(|x| *x *= scale);
    }
    let out = refill(&mut t.out, n * dv, T::ZERO);
    let top = refill(&mut t.top, n, T::NEG_INFINITY);
    let sum = refill(&mut t.sum, n, T::ZERO);
    // Tiles of keys and values in the compute type, only for operands of another dtype or
    // (paged) rows found one by one.
    let (k_direct, v_direct) = (
        ops.k.direct::<T>() && r.pages.is_none(),
        ops.v.direct::<T>() && r.pages.is_none(),
    );
    // Few rows (a decode step's query heads of a group): each key and value row is used where
    // it lies, once per row, by dot products and scaled additions — no tile copied, no product
    // call per tile. More rows: tiles through the matrix product.
    let by_row = n <= BY_ROW;
    let (kt_len, vt_len) = match by_row {
        true => (KEYS * d, KEYS * dv),
        false => (
            if k_direct { 0 } else { TILE_K * d },
            if v_direct { 0 } else { TILE_K * dv },
        ),
    };
    let kt = refill(&mut t.kt, kt_len, T::ZERO);
    let vt = refill(&mut t.vt, vt_len, T::ZERO);
    let scores = refill(&mut t.scores, n * TILE_K, T::ZERO);
    // The causal mask hides every key past the item's last query position.
    let keys = if spec.causal {
        r.sees(r.q0 + r.tq - 1)
    } else {
        r.lk
    };
    let boolean = ops.mask.is_some_and(|m| m.dtype == DType::Bool);
    for k0 in (r.from..keys).step_by(TILE_K) {
        let tk = TILE_K.min(keys - k0);
        let (k, v) = (&ops.k, &ops.v);
        // scores[row][j] = q[row] · k[j]
        if by_row {
            // KEYS keys at a time: each query row is read once for them, and each score is
            // its own chain of fused multiply-adds.
            for j in (0..tk).step_by(KEYS) {
                let m = KEYS.min(tk - j);
                let key = r.rows_at(k, k0 + j, m, keys, kt);
                for row in 0..n {
                    let qr = &q[row * d..(row + 1) * d];
                    let line = &mut scores[row * TILE_K + j..row * TILE_K + j + m];
                    if m == KEYS {
                        line.copy_from_slice(&dot4::<T, FMA>(qr, key));
                    } else {
                        for (x, key) in line.iter_mut().zip(key) {
                            *x = dot::<T, FMA>(qr, key);
                        }
                    }
                }
            }
        } else {
            // Keys of the compute type are read in place (the product takes strides); others
            // are widened into the tile first.
            let keys_at = match k_direct {
                true => (
                    k.element::<T>(k.at(r.b, r.kh, k0, 0)),
                    k.strides[3],
                    k.strides[2],
                ),
                false => {
                    for j in 0..tk {
                        let (b, l) = r.key(k0 + j);
                        let at = k.at(b, r.kh, l, 0);
                        k.row(at, k.strides[3], &mut kt[j * d..(j + 1) * d]);
                    }
                    (kt.as_ptr(), 1, d as isize)
                }
            };
            T::product(
                (n, d, tk),
                (q.as_ptr(), d as isize, 1),
                keys_at,
                T::ZERO,
                (scores.as_mut_ptr(), TILE_K as isize),
            );
        }
        for row in 0..n {
            let line = &mut scores[row * TILE_K..row * TILE_K + tk];
            if let Some(m) = ops.mask {
                let at = m.at(r.b, head(row), pos(row), k0);
                for (j, x) in line.iter_mut().enumerate() {
                    let mv = m.get::<T>(at + j as isize * m.strides[3]);
                    *x = if !boolean {
                        *x + mv
                    } else if mv == T::ZERO {
                        T::NEG_INFINITY
                    } else {
                        *x
                    };
                }
            }
            if spec.causal && k0 + tk > r.sees(pos(row)) {
                let first_hidden = r.sees(pos(row)).saturating_sub(k0);
                line[first_hidden..].fill(T::NEG_INFINITY);
            }
            let new_top = maximum(line, top[row]);
            if new_top == T::NEG_INFINITY {
                // Nothing visible yet: the row's weights for this tile are all 0.
                line.fill(T::ZERO);
                continue;
            }
            let shrink = (top[row] - new_top).exp_fast();
            top[row] = new_top;
            line.iter_mut().for_each(|x| *x = (*x - new_top).exp_fast());
            sum[row] = sum[row] * shrink + total(line);
            if shrink != T::ONE {
                out[row * dv..(row + 1) * dv]
                    .iter_mut()
                    .for_each(|o| *o *= shrink);
            }
        }
        // out[row] += weights[row] · v
        if by_row {
            // KEYS value rows at a time: each output row is read and written once for them.
            for j in (0..tk).step_by(KEYS) {
                let m = KEYS.min(tk - j);
                let value = r.rows_at(v, k0 + j, m, keys, vt);
                for row in 0..n {
                    let w = &scores[row * TILE_K + j..row * TILE_K + j + m];
                    let o = &mut out[row * dv..(row + 1) * dv];
                    // A weight of 0 (a hidden key) adds nothing, not 0 · a value that may be
                    // infinite.
                    if m == KEYS && w.iter().all(|&w| w != T::ZERO) {
                        add_scaled4::<T, FMA>(o, [w[0], w[1], w[2], w[3]], value);
                    } else {
                        for (&w, value) in w.iter().zip(value) {
                            if w != T::ZERO {
                                add_scaled::<T, FMA>(o, w, value);
                            }
                        }
                    }
                }
            }
        } else {
            let values_at = match v_direct {
                true => (
                    v.element::<T>(v.at(r.b, r.kh, k0, 0)),
                    v.strides[2],
                    v.strides[3],
                ),
                false => {
                    for j in 0..tk {
                        let (b, l) = r.key(k0 + j);
                        let at = v.at(b, r.kh, l, 0);
                        v.row(at, v.strides[3], &mut vt[j * dv..(j + 1) * dv]);
                    }
                    (vt.as_ptr(), dv as isize, 1)
                }
            };
            T::product(
                (n, tk, dv),
                (scores.as_ptr(), TILE_K as isize, 1),
                values_at,
                T::ONE,
                (out.as_mut_ptr(), dv as isize),
            );
        }
    }
    for row in 0..n {
        // A row with no visible key is 0, as in PyTorch.
        let inv = if sum[row] != T::ZERO {
            T::ONE / sum[row]
        } else {
            T::ZERO
        };
        let at = ops.out.offset
            + r.b as isize * ops.out.strides[0]
            + head(row) as isize * ops.out.strides[1]
            + pos(row) as isize * ops.out.strides[2];
        for c in 0..dv {
            T::put(
                ops.out,
                at + c as isize * ops.out.strides[3],
                out[row * dv + c] * inv,
            );
        }
    }
}

/// Rows of a work item at most which keys and values are used row by row (see [`item`]).
const BY_ROW: usize = 8;

/// The row of `o` at element `at`, `buf.len()` long: in place when it holds the compute type
/// contiguously, else widened into `buf`.
#[inline(always)]
unsafe fn row_at<'a, T: Real>(o: &Operand, at: isize, buf: &'a mut [T]) -> &'a [T] {
    if o.direct::<T>() && o.strides[3] == 1 {
        std::slice::from_raw_parts(o.element::<T>(at), buf.len())
    } else {
        o.row(at, o.strides[3], buf);
        buf
    }
}

/// Keys ahead of the one in use whose rows are prefetched on the row-by-row path: a paged
/// cache's blocks lie anywhere, where the hardware's prefetcher does not follow.
const AHEAD: usize = 4;

/// Asks for the cache lines of the `len` elements of `o`'s row at element `at` (unit stride).
#[inline(always)]
unsafe fn prefetch(o: &Operand, at: isize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let size = o.dtype.size();
        let first = o.ptr.wrapping_offset(at * size as isize);
        for line in (0..len * size).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(line) as *const i8);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (o, at, len);
}

/// Keys (and value rows) the row-by-row path takes together.
const KEYS: usize = 4;

/// `acc + x · y`: fused when `FMA` (the caller is compiled with the instruction).
#[inline(always)]
fn madd<T: Real, const FMA: bool>(x: T, y: T, acc: T) -> T {
    if FMA {
        x.mul_add(y, acc)
    } else {
        acc + x * y
    }
}

/// `a · b`, in `LANES` partial sums.
#[inline(always)]
fn dot<T: Real, const FMA: bool>(a: &[T], b: &[T]) -> T {
    let mut s = [T::ZERO; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .fold(T::ZERO, |acc, (&x, &y)| madd::<T, FMA>(x, y, acc));
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            s[l] = madd::<T, FMA>(x[l], y[l], s[l]);
        }
    }
    s.iter().fold(tail, |acc, &x| acc + x)
}

/// `a · b[k]` for each of the `KEYS` rows `b[k]` (each at least as long as `a`), each in `LANES`
/// partial sums: `a` is read once for all of them.
#[inline(always)]
fn dot4<T: Real, const FMA: bool>(a: &[T], b: [&[T]; KEYS]) -> [T; KEYS] {
    let b = b.map(|b| &b[..a.len()]);
    let whole = a.len() / LANES * LANES;
    let mut s = [[T::ZERO; LANES]; KEYS];
    for c in (0..whole).step_by(LANES) {
        let x = &a[c..c + LANES];
        for (s, b) in s.iter_mut().zip(b) {
            let y = &b[c..c + LANES];
            for l in 0..LANES {
                s[l] = madd::<T, FMA>(x[l], y[l], s[l]);
            }
        }
    }
    let mut out = [T::ZERO; KEYS];
    for ((o, s), b) in out.iter_mut().zip(&s).zip(b) {
        let tail = (whole..a.len()).fold(T::ZERO, |acc, i| madd::<T, FMA>(a[i], b[i], acc));
        *o = s.iter().fold(tail, |acc, &x| acc + x);
    }
    out
}

/// `y += w · x`.
#[inline(always)]
fn add_scaled<T: Real, const FMA: bool>(y: &mut [T], w: T, x: &[T]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = madd::<T, FMA>(w, x, *y);
    }
}

/// `y += w[0] · x[0] + … + w[KEYS-1] · x[KEYS-1]`, added in that order (each `x[k]` at least as
/// long as `y`): `y` is read and written once.
#[inline(always)]
fn add_scaled4<T: Real, const FMA: bool>(y: &mut [T], w: [T; KEYS], x: [&[T]; KEYS]) {
    let x = x.map(|x| &x[..y.len()]);
    for (i, y) in y.iter_mut().enumerate() {
        let mut acc = *y;
        for k in 0..KEYS {
            acc = madd::<T, FMA>(w[k], x[k][i], acc);
        }
        *y = acc;
    }
}

/// Lanes of the partial maxima and sums below: independent chains the compiler keeps in one
/// vector register (a single running value is a sequential chain it may not reorder).
const LANES: usize = 8;

/// The largest of `xs` and `start`; NaN if any is NaN.
#[inline(always)]
fn maximum<T: Real>(xs: &[T], start: T) -> T {
    let mut m = [start; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            m[l] = m[l].max(c[l]);
        }
    }
    let tail = chunks.remainder().iter().fold(start, |a, &x| a.max(x));
    m.iter().fold(tail, |a, &x| a.max(x))
}

/// The sum of `xs`, in `LANES` partial sums.
#[inline(always)]
fn total<T: Real>(xs: &[T]) -> T {
    let mut s = [T::ZERO; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            s[l] += c[l];
        }
    }
    let tail = chunks.remainder().iter().fold(T::ZERO, |a, &x| a + x);
    s.iter().fold(tail, |a, &x| a + x)
}

/// The compute type: f32 (for f32, f16 and bf16 operands) or f64.
pub(crate) trait Real:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::AddAssign
    + std::ops::MulAssign
{
    const ZERO: Self;
    const ONE: Self;
    const NEG_INFINITY: Self;
    /// The storage dtype of the compute type.
    const DTYPE: DType;
    fn of_f32(x: f32) -> Self;
    fn of_f64(x: f64) -> Self;
    fn max(self, other: Self) -> Self;
    /// `self · a + b`, rounded once.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// `e^x`, 0 for -inf.
    fn exp_fast(self) -> Self;
    /// `c = a·b + beta·c` for `a`: m×k, `b`: k×n, `c`: m×n, each `(pointer, row stride,
    /// column stride)` (`c` with unit column stride).
    unsafe fn product(
        mkn: (usize, usize, usize),
        a: (*const Self, isize, isize),
        b: (*const Self, isize, isize),
        beta: Self,
        c: (*mut Self, isize),
    );
    /// Stores `x` rounded to the output's dtype at element `at`.
    unsafe fn put(out: Output, at: isize, x: Self);
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    const NEG_INFINITY: f32 = f32::NEG_INFINITY;
    const DTYPE: DType = DType::F32;
    fn of_f32(x: f32) -> f32 {
        x
    }
    fn of_f64(x: f64) -> f32 {
        x as f32
    }
    #[inline(always)]
    fn max(self, other: f32) -> f32 {
        // Not f32::max: a NaN score stays NaN, as the reference's softmax gives.
        if other > self || other.is_nan() {
            other
        } else {
            self
        }
    }
    #[inline(always)]
    fn mul_add(self, a: f32, b: f32) -> f32 {
        f32::mul_add(self, a, b)
    }
    fn exp_fast(self) -> f32 {
        exp_f32(self)
    }
    unsafe fn product(
        (m, k, n): (usize, usize, usize),
        a: (*const f32, isize, isize),
        b: (*const f32, isize, isize),
        beta: f32,
        c: (*mut f32, isize),
    ) {
        // gemm's `alpha` scales what `c` held (read only when `read_dst`), `beta` the product.
        gemm::gemm(
            m,
            n,
            k,
            c.0,
            1,
            c.1,
            beta != 0.0,
            a.0,
            a.2,
            a.1,
            b.0,
            b.2,
            b.1,
            beta,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    unsafe fn put(out: Output, at: isize, x: f32) {
        let p = out.ptr;
        match out.dtype {
            DType::F16 => *(p as *mut u16).offset(at) = half::f16::from_f32(x).to_bits(),
            DType::BF16 => *(p as *mut u16).offset(at) = half::bf16::from_f32(x).to_bits(),
            DType::F64 => *(p as *mut f64).offset(at) = f64::from(x),
            _ => *(p as *mut f32).offset(at) = x,
        }
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    const NEG_INFINITY: f64 = f64::NEG_INFINITY;
    const DTYPE: DType = DType::F64;
    fn of_f32(x: f32) -> f64 {
        f64::from(x)
    }
    fn of_f64(x: f64) -> f64 {
        x
    }
    fn max(self, other: f64) -> f64 {
        if other > self || other.is_nan() {
            other
        } else {
            self
        }
    }
    fn mul_add(self, a: f64, b: f64) -> f64 {
        f64::mul_add(self, a, b)
    }
    fn exp_fast(self) -> f64 {
        self.exp()
    }
    unsafe fn product(
        (m, k, n): (usize, usize, usize),
        a: (*const f64, isize, isize),
        b: (*const f64, isize, isize),
        beta: f64,
        c: (*mut f64, isize),
    ) {
        matrixmultiply::dgemm(
            m, k, n, 1.0, a.0, a.1, a.2, b.0, b.1, b.2, beta, c.0, c.1, 1,
        );
    }
    unsafe fn put(out: Output, at: isize, x: f64) {
        *(out.ptr as *mut f64).offset(at) = x;
    }
}

/// `e^x` in f32 to about 2 ulp, branch-free so that loops over it vectorize: `x = n·ln 2 + r`
/// with `|r| ≤ ln 2 / 2`, `e^r` by a degree-6 polynomial, `2^n` through the exponent bits.
/// Below -87.3 (where `e^x` leaves the normal range) the result is 0; NaN stays NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Rounding to an integer by adding 1.5·2^23: the integer is then in the low mantissa bits
    // (integer operations that vectorize, where `as i32` checks for NaN per lane).
    const MAGIC: f32 = 12_582_912.0;
    let xc = x.clamp(-87.3, 88.3);
    let t = xc * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    // Taylor coefficients of e^r to r^6: the error at |r| = 0.347 is below 2^-24 relative.
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let ni = (t.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let scale = f32::from_bits(((ni + 127) as u32) << 23);
    let y = p * scale;
    if x < -87.3 {
        0.0
    } else if x.is_nan() {
        x
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::exp_f32;

    #[test]
    fn the_polynomial_exponential_is_within_a_few_ulp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (f64::from(exp_f32(x)), f64::from(x).exp());
            worst = worst.max(((got - want) / want).abs());
            x += 0.013;
        }
        assert!(
            worst < 4.0 * f64::from(f32::EPSILON),
            "relative error {worst}"
        );
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-100.0), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(0.0), 1.0);
    }
}
