//! Kernel configurations. Each size-dependent choice is (a) proved from ranges, (b) taken from the
//! optimization hints while the kernel stays correct for every value, or (c) a set of variants
//! with launch-time predicates on the actual sizes. Every variant of a reduction uses the same
//! lanes (the fixed reduction order below), so which one runs never changes the result.
//!
//! Reduction order: a row is split into `lanes` lanes; lane `l` accumulates elements `l, l +
//! lanes, …` in order, and the lanes combine in a balanced binary tree (lane pairs `2i, 2i + 1`
//! first). Variants differ only in how lanes map to threads and blocks.

use guardless_ir::loop_ir::{BufferId, BufferKind, Layout, Program, ReductionKind};
use guardless_ir::sym::{Expr, ShapeEnv, SymbolId};
use rustc_hash::FxHashSet;

use super::deps::loads;
use super::{Kernel, Role};

/// Rows of at most this many elements are kept in registers (persistent reduction)…
pub const PERSISTENT_MAX: i64 = 8192;
/// …as long as each thread holds at most this many of a row's elements per cached input.
pub const PERSISTENT_PER_THREAD: i64 = 32;

/// The longest row a persistent variant with `threads_per_row` threads holds in registers.
pub fn persistent_limit(threads_per_row: i64) -> i64 {
    PERSISTENT_MAX.min(threads_per_row * PERSISTENT_PER_THREAD)
}
/// Streaming multiprocessors of the target (H100/H200).
pub const SMS: i64 = 132;
/// Row counts the variants are tuned for, besides the hint.
pub const BUCKETS: [i64; 3] = [1, 64, 4096];
/// Split reductions (few long rows): threads per block (a full block, not a warp)…
pub const SPLIT_THREADS: i64 = 256;
/// …at most this many blocks per row (the looped variant, which has the same lanes, then has
/// `SPLIT_THREADS * SPLIT_MAX_BLOCKS` ≤ 1024 threads per row)…
pub const SPLIT_MAX_BLOCKS: i64 = 4;
/// …and each thread's lanes are this many 16-byte words of the row, loaded together (several
/// loads in flight per thread before any is used)…
pub const SPLIT_WORDS: i64 = 4;
/// …but at most this many lanes (16 f32 are four words, 16 bf16 two), and no more than
/// `SPLIT_LANE_REGISTERS` hold (`lane_registers`): a looped variant's 1024 threads have 64
/// registers each, and a scalar one holds registers per lane for each accumulator and each
/// prefetched input.
pub const SPLIT_MAX_LANES: i64 = 16;
/// Rows at least this long are split when few (≤ SMS / 4 at the hint and at launch).
pub const SPLIT_MIN_LEN: i64 = 32768;

/// Registers a split variant's thread may give its lanes' state (accumulators, positions,
/// prefetched elements) in its looped variant's 64.
pub const SPLIT_LANE_REGISTERS: i64 = 48;

/// The registers one lane holds in the kernel's heaviest pass: each reduction's accumulator (two
/// for 8-byte values), an arg-reduction's 64-bit position, and each input read from memory
/// (prefetched when scalar).
fn lane_registers(p: &Program, k: &Kernel) -> i64 {
    let passes = k.members.iter().map(|m| m.pass).max().unwrap_or(0) + 1;
    let words = |size: usize| if size > 4 { 2 } else { 1 };
    (0..passes)
        .map(|pass| {
            let mut regs = 0;
            let mut inputs: Vec<BufferId> = Vec::new();
            for m in k.members.iter().filter(|m| m.pass == pass) {
                let BufferKind::Computed { loops, body } = &p.buffers[m.buffer.index()].kind else {
                    continue;
                };
                if m.role == Role::Reduction {
                    let d = body.dtype(body.result.expect("a result"));
                    regs += words(d.size());
                    if let Some((kind, _, _)) = &loops.reduction {
                        if matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin) {
                            regs += 2;
                        }
                    }
                }
                for (b, _) in loads(body) {
                    if !inputs.contains(&b) && !k.members.iter().any(|x| x.buffer == b) {
                        inputs.push(b);
                        regs += words(p.buffers[b.index()].dtype.size());
                    }
                }
            }
            regs
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

/// The blocks each row of a reduction is split over when the hints say few long rows; `None`
/// when they do not (the kernel then has no split variant).
fn split_at_hint(rows_h: i64, len_h: i64) -> Option<i64> {
    (rows_h * 4 <= SMS && len_h >= SPLIT_MIN_LEN)
        .then(|| next_pow2(SMS / rows_h.max(1)).clamp(2, SPLIT_MAX_BLOCKS))
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Strategy {
    Pointwise,
    /// The whole row in registers, one pass over memory.
    Persistent,
    /// The row streamed in chunks, once per pass.
    Looped,
    /// A row's lanes spread over `blocks` blocks; partial trees, then a finishing kernel.
    Split {
        blocks: i64,
    },
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum IndexType {
    I32,
    I64,
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Strategy::Pointwise => f.write_str("pointwise"),
            Strategy::Persistent => f.write_str("persistent"),
            Strategy::Looped => f.write_str("looped"),
            Strategy::Split { blocks } => write!(f, "split {blocks}"),
        }
    }
}

impl std::fmt::Display for IndexType {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            IndexType::I32 => "int32",
            IndexType::I64 => "int64",
        })
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KernelConfig {
    pub strategy: Strategy,
    /// Threads per block.
    pub threads: i64,
    /// Reductions: threads that share a row; rows per block = threads / threads_per_row.
    pub threads_per_row: i64,
    /// Pointwise: elements per thread.
    pub elements_per_thread: i64,
    /// Elements per vector access (1: scalar).
    pub vector: i64,
    pub index: IndexType,
    /// Reductions: the lanes of the reduction order (the same in every variant).
    pub lanes: i64,
    /// Persistent reductions: registers per thread that may hold the row's cached inputs (what
    /// does not fit is read again from memory); 0 otherwise.
    pub row_cache: i64,
    /// The function is compiled for one resident block per multiprocessor
    /// (`__launch_bounds__(threads, 1)`) rather than for ptxas's own occupancy target, which for
    /// a block of 128 threads aims at 32 registers and spills a kernel that needs 35 (a pooling
    /// window's nine predicates); the spill fallback's last step.
    pub registers_relaxed: bool,
}

/// The registers per thread a persistent variant of `threads` threads may spend on the row:
/// a block gets 65536 / threads registers per thread (at most 255); the row may take half of
/// them in a vector variant, an eighth in a scalar one, whose per-element addressing takes the
/// rest (the decoder layer's attention softmax, 32 cached values per thread, spilled at a
/// quarter).
pub fn row_cache_budget(threads: i64, vector: i64) -> i64 {
    let registers = (65536 / threads.max(1)).min(255);
    if vector > 1 {
        (registers / 2 - 16).max(0)
    } else {
        registers / 8
    }
}

impl KernelConfig {
    /// The next configuration to try when this one spills registers (ptxas's report), and what
    /// changed; `None` when there is nothing left to give up. Each step keeps the variant correct
    /// wherever its predicate holds and its reduction order (the lanes) unchanged, so the
    /// results stay bitwise those of the other variants: a persistent row keeps half as many
    /// registers (none: every pass reads memory, the looped code), a pointwise thread handles one
    /// vector instead of several, vector accesses become scalar, and last the function may use
    /// the registers of one block per multiprocessor.
    pub fn smaller(&self) -> Option<(KernelConfig, String)> {
        let mut c = self.clone();
        let what = if c.strategy == Strategy::Persistent {
            c.row_cache = if c.row_cache >= 32 {
                c.row_cache / 2
            } else {
                0
            };
            if c.row_cache == 0 {
                c.strategy = Strategy::Looped;
                "persistent → looped (no row cache)".to_string()
            } else {
                format!("row cache {} → {} registers", self.row_cache, c.row_cache)
            }
        } else if c.strategy == Strategy::Pointwise && c.elements_per_thread > c.vector {
            c.elements_per_thread = c.vector;
            format!(
                "{} → {} elements per thread",
                self.elements_per_thread, c.elements_per_thread
            )
        } else if c.vector > 1 {
            c.elements_per_thread = (c.elements_per_thread / c.vector).max(1);
            c.vector = 1;
            format!("vector {} → scalar", self.vector)
        } else if !c.registers_relaxed {
            c.registers_relaxed = true;
            "registers for one block per multiprocessor".to_string()
        } else {
            return None;
        };
        Some((c, what))
    }
}

#[derive(Clone, Debug)]
pub struct Variant {
    pub config: KernelConfig,
    /// Launched when this holds (and no earlier variant's does); the last is always `true`.
    pub predicate: Expr,
    /// Buffers whose base address must be 16-byte aligned (vector variants).
    pub aligned: Vec<BufferId>,
    /// Grid size (blocks) as an expression of the sizes.
    pub grid: Expr,
    /// The row count this variant was tuned for.
    pub tuned_for: i64,
}

impl Variant {
    /// Gives the variant of a kernel over `rows` × `row_len` the configuration `c`, and the grid
    /// that launches it.
    pub fn reconfigure(&mut self, env: &mut ShapeEnv, rows: Expr, row_len: Expr, c: KernelConfig) {
        self.grid = grid_of(env, &c, rows, row_len);
        self.config = c;
    }

    /// ` and 16-byte aligned a, b` for a vector variant, else empty: the rest of its condition.
    pub fn aligned_text(&self, p: &Program) -> String {
        if self.aligned.is_empty() {
            return String::new();
        }
        let names: Vec<&str> = self
            .aligned
            .iter()
            .map(|b| p.buffers[b.index()].name.as_str())
            .collect();
        format!(" and 16-byte aligned {}", names.join(", "))
    }
}

fn next_pow2(v: i64) -> i64 {
    (v.max(1) as u64).next_power_of_two() as i64
}

/// The loop variables of every buffer and the variables bound by gathers.
/// The loop variables of the program's computed buffers (and the variables their bodies bind),
/// gathered once per schedule: `update` looks only at buffers added since the last call.
#[derive(Default)]
pub struct LoopSymbols {
    set: FxHashSet<SymbolId>,
    scanned: usize,
}

impl LoopSymbols {
    fn update(&mut self, p: &Program) -> &mut FxHashSet<SymbolId> {
        add_loop_symbols(p, self.scanned, &mut self.set);
        self.scanned = p.buffers.len();
        &mut self.set
    }
}

fn add_loop_symbols(p: &Program, from: usize, out: &mut FxHashSet<SymbolId>) {
    let pool = p.env.pool();
    let mut add = |e: &Expr| {
        if let Some(id) = pool.as_symbol(*e) {
            out.insert(id);
        }
    };
    for b in &p.buffers[from..] {
        let (loops, body) = match &b.kind {
            BufferKind::Computed { loops, body } | BufferKind::Scatter { loops, body, .. } => {
                (loops, body)
            }
            _ => continue,
        };
        loops.vars.iter().for_each(&mut add);
        if let Some((_, _, rv)) = &loops.reduction {
            rv.iter().for_each(&mut add);
        }
        for (op, _) in &body.ops {
            if let guardless_ir::loop_ir::Op::Bind { var, .. } = op {
                add(var);
            }
        }
    }
}

/// How an access moves in a vector variant.
enum AccessKind {
    /// The same element for the whole vector: one scalar read.
    Broadcast,
    /// Contiguous in the innermost variable, its other strides affine in the sizes.
    Vector,
    /// Element by element, and why.
    Scalar(String),
}

fn access_kind(
    env: &mut ShapeEnv,
    index: Expr,
    v: Expr,
    loop_syms: &FxHashSet<SymbolId>,
) -> AccessKind {
    let vid = env.pool().as_symbol(v).expect("a loop variable");
    let zero = env.pool_mut().zero();
    let base = env
        .pool_mut()
        .substitute(index, &|id| (id == vid).then_some(zero));
    let diff = env.pool_mut().sub(index, base);
    if env.simplify(diff) == zero {
        return AccessKind::Broadcast;
    }
    match vector_conditions(env, index, v, 1, loop_syms) {
        Ok(_) => AccessKind::Vector,
        Err(why) => AccessKind::Scalar(why),
    }
}

/// The conditions under which `index` reads `vector` consecutive elements starting at a multiple
/// of `vector` as `v` steps by `vector`: contiguous in `v`, every other stride and the offset
/// multiples of `vector`. `Err` when no condition on the sizes makes it so.
fn vector_conditions(
    env: &mut ShapeEnv,
    index: Expr,
    v: Expr,
    vector: i64,
    loop_syms: &FxHashSet<SymbolId>,
) -> Result<Vec<Expr>, String> {
    let vid = env.pool().as_symbol(v).expect("a loop variable");
    let zero = env.pool_mut().zero();
    let base = env
        .pool_mut()
        .substitute(index, &|id| (id == vid).then_some(zero));
    let base = env.simplify(base);
    let diff = env.pool_mut().sub(index, base);
    let diff = env.simplify(diff);
    if diff == zero {
        // The same element for the whole vector: one scalar read.
        return Ok(Vec::new());
    }
    if diff != v {
        return Err("not contiguous in the innermost dimension".into());
    }
    let vars: Vec<SymbolId> = env
        .pool()
        .free_symbols(base)
        .into_iter()
        .filter(|s| loop_syms.contains(s))
        .collect();
    let constant = env
        .pool_mut()
        .substitute(base, &|id| vars.contains(&id).then_some(zero));
    let constant = env.simplify(constant);
    let mut parts = vec![constant];
    let mut rebuilt = constant;
    for &k in &vars {
        let one = env.pool_mut().one();
        let at1 = env.pool_mut().substitute(base, &|id| {
            if id == k {
                Some(one)
            } else if vars.contains(&id) {
                Some(zero)
            } else {
                None
            }
        });
        let stride = env.pool_mut().sub(at1, constant);
        let stride = env.simplify(stride);
        let ke = env.pool_mut().symbol_expr(k);
        let term = env.pool_mut().mul(stride, ke);
        rebuilt = env.pool_mut().add(rebuilt, term);
        parts.push(stride);
    }
    let check = env.pool_mut().sub(base, rebuilt);
    if env.simplify(check) != zero {
        return Err("not affine in the loop variables".into());
    }
    let mut conds = Vec::new();
    for s in parts {
        if env.statically_known_multiple_of(s, vector) {
            continue;
        }
        if env
            .pool()
            .free_symbols(s)
            .iter()
            .any(|id| loop_syms.contains(id))
        {
            return Err("a stride depends on a loop variable".into());
        }
        let w = env.pool_mut().constant(vector);
        let m = env.pool_mut().modulo(s, w);
        conds.push(env.pool_mut().eq(m, zero));
    }
    Ok(conds)
}

/// Whether every condition holds at the optimization hints.
fn hold_at_hints(env: &mut ShapeEnv, conds: &[Expr]) -> bool {
    conds.iter().all(|&c| env.optimization_hint(c) != 0)
}

fn and_all(env: &mut ShapeEnv, conds: &[Expr]) -> Expr {
    if conds.is_empty() {
        env.pool_mut().bool(true)
    } else {
        let c = env.pool_mut().and(conds);
        env.simplify(c)
    }
}

/// Adds the variants and the reasons for each choice to `k`.
pub fn configure(p: &mut Program, mut k: Kernel, loop_symbols: &mut LoopSymbols) -> Kernel {
    let lane_regs = lane_registers(p, &k);
    let env = &mut p.env;
    let reduction = !k.inner.is_empty();
    let (rows, row_len) = (k.rows, k.row_len);
    let rows_h = env.optimization_hint(rows);
    let len_h = env.optimization_hint(row_len);
    let rows_r = env.bound(rows);
    let len_r = env.bound(row_len);
    let mut reasons = Vec::new();
    let (rows_t, len_t) = (env.text(rows), env.text(row_len));

    // Accessed buffers: stores of the members, loads of their bodies.
    let mut accesses: Vec<(BufferId, Expr, bool)> = Vec::new(); // (buffer, index in group vars, store)
    let mut itemsize = 1usize;
    let group_vars = group_vars(p, &k);
    // (The kernel's own variables join the program's: no other kernel's indices use them.)
    let loop_syms = loop_symbols.update(p);
    let env = &mut p.env;
    for v in &group_vars {
        loop_syms.insert(env.pool().as_symbol(*v).expect("a symbol"));
    }
    // Members kept in registers are not memory accesses.
    let in_registers = |b: BufferId| {
        k.members
            .iter()
            .any(|m| m.buffer == b && m.stored.is_none())
    };
    for m in &k.members {
        let b = &p.buffers[m.buffer.index()];
        let BufferKind::Computed { loops, body } = &b.kind else {
            continue;
        };
        let map = member_map(env, loops, &k, m.role, &group_vars);
        if m.stored.is_some() {
            itemsize = itemsize.max(b.dtype.size());
            let store = b.layout.clone().index(env, &loops.vars);
            let s = subst(env, store, &map);
            accesses.push((m.buffer, s, true));
        }
        for (buf, index) in loads(body) {
            if in_registers(buf) {
                continue;
            }
            itemsize = itemsize.max(p.buffers[buf.index()].dtype.size());
            let s = subst(env, index, &map);
            accesses.push((buf, s, false));
        }
    }
    // Which accesses move as vectors: those contiguous in the innermost variable whose other
    // strides are affine in the sizes. A buffer accessed otherwise (a gather, a transpose) stays
    // scalar while the kernel's other accesses still move as vectors; a read of one element for
    // the whole vector (a row's position, a broadcast weight) is one scalar read either way.
    let innermost_var = group_vars.last().copied();
    let mut scalar_buffers: Vec<BufferId> = Vec::new();
    let mut vectorizable: Vec<bool> = vec![false; accesses.len()];
    // The widest access that changes along the vector (scalar ones included).
    let mut widest_varying = 0;
    if let Some(v) = innermost_var {
        for (i, &(buf, index, _)) in accesses.iter().enumerate() {
            let kind = access_kind(env, index, v, loop_syms);
            if !matches!(kind, AccessKind::Broadcast) {
                widest_varying = widest_varying.max(p.buffers[buf.index()].dtype.size());
            }
            match kind {
                AccessKind::Broadcast => {}
                AccessKind::Vector => vectorizable[i] = true,
                AccessKind::Scalar(why) => {
                    if !scalar_buffers.contains(&buf) {
                        reasons.push(format!(
                            "vector: {} stays scalar, {why}",
                            p.buffers[buf.index()].name
                        ));
                        scalar_buffers.push(buf);
                    }
                }
            }
        }
    }
    for (i, &(buf, _, _)) in accesses.iter().enumerate() {
        vectorizable[i] &= !scalar_buffers.contains(&buf);
    }
    // 16 bytes of the widest access that changes along the vector (a read of one element for
    // the whole vector does not narrow it); narrower accesses move as 8- or 4-byte words.
    let vector_max = (16
        / if widest_varying > 0 {
            widest_varying
        } else {
            itemsize
        }
        .max(1)) as i64;
    // A split reduction's threads own several words of the row each (its chunk).
    let split = if reduction {
        split_at_hint(rows_h, len_h)
    } else {
        None
    };
    let chunk = if split.is_some() {
        let fit = SPLIT_LANE_REGISTERS / lane_regs;
        let fit = if fit >= 1 { 1 << fit.ilog2() } else { 1 };
        (vector_max * SPLIT_WORDS)
            .min(SPLIT_MAX_LANES)
            .min(fit)
            .max(vector_max)
    } else {
        vector_max
    };

    // Vector width: speculative divisibility of the innermost dimension and every vector access.
    let innermost_size = *k.inner.last().or(k.outer.last()).unwrap_or(&rows);
    let (mut vec_conds, mut vec_ok) = (
        Vec::new(),
        innermost_var.is_some()
            && vector_max > 1
            && (vectorizable.contains(&true) || scalar_buffers.is_empty()),
    );
    if let Some(v) = innermost_var.filter(|_| vec_ok) {
        // A thread's chunk lies within one line of the innermost dimension.
        let w = env.pool_mut().constant(chunk);
        let zero = env.pool_mut().zero();
        if !env.statically_known_multiple_of(innermost_size, chunk) {
            let m = env.pool_mut().modulo(innermost_size, w);
            vec_conds.push(env.pool_mut().eq(m, zero));
        }
        for (&(buf, index, _), _) in accesses.iter().zip(&vectorizable).filter(|(_, &vz)| vz) {
            match vector_conditions(env, index, v, vector_max, loop_syms) {
                Ok(c) => vec_conds.extend(c),
                Err(why) => {
                    reasons.push(format!(
                        "vector: scalar accesses, {} {why}",
                        p.buffers[buf.index()].name
                    ));
                    vec_ok = false;
                    break;
                }
            }
        }
    }
    let mut unique = Vec::new();
    for c in vec_conds {
        if !unique.contains(&c) {
            unique.push(c);
        }
    }
    let vec_conds = unique;
    let vec_conds: Vec<Expr> = vec_conds.into_iter().map(|c| env.simplify(c)).collect();
    // Buffers the caller passes may be views at any offset: their alignment is checked at launch.
    // Buffers of the memory plan are allocated aligned.
    let mut external: Vec<BufferId> = Vec::new();
    for (&(b, _, _), _) in accesses.iter().zip(&vectorizable).filter(|(_, &vz)| vz) {
        let mut root = b;
        while let BufferKind::View { base } = p.buffers[root.index()].kind {
            root = base;
        }
        if matches!(p.buffers[root.index()].kind, BufferKind::Input(_)) && !external.contains(&b) {
            external.push(b);
        }
    }
    let vec_choices: Vec<(i64, Vec<Expr>)> = if !vec_ok {
        vec![(1, vec![])]
    } else if vec_conds.is_empty() {
        if external.is_empty() {
            reasons.push(format!(
                "vector: {vector_max} elements (16 bytes), proved: every access is contiguous and aligned for all sizes"
            ));
            vec![(vector_max, vec![])]
        } else {
            reasons.push(format!(
                "vector: {vector_max} elements (16 bytes), proved for all sizes; scalar variant when an input is not 16-byte aligned"
            ));
            vec![(vector_max, vec![]), (1, vec![])]
        }
    } else if hold_at_hints(env, &vec_conds) {
        let c = and_all(env, &vec_conds);
        reasons.push(format!(
            "vector: {vector_max} elements speculatively (hint: {} holds at the hints), scalar variant otherwise",
            env.text(c)
        ));
        vec![(vector_max, vec_conds.clone()), (1, vec![])]
    } else {
        let never: Vec<Expr> = vec_conds
            .iter()
            .copied()
            .filter(|&c| env.statically_known_false(c))
            .collect();
        if never.is_empty() {
            let c = and_all(env, &vec_conds);
            reasons.push(format!(
                "vector: scalar (hint: {} fails at the hints)",
                env.text(c)
            ));
        } else {
            reasons.push(format!(
                "vector: scalar, proved: a size or stride is never a multiple of {vector_max} elements"
            ));
        }
        vec![(1, vec![])]
    };

    // Index type: 32-bit when every extent provably fits.
    let mut extents: Vec<Expr> = Vec::new();
    let total = env.pool_mut().mul(rows, row_len);
    extents.push(total);
    let mut seen = FxHashSet::default();
    for &(buf, _, _) in &accesses {
        if seen.insert(buf) {
            let l = &p.buffers[buf.index()].layout;
            extents.push(extent(env, l));
        }
    }
    let limit = env.pool_mut().constant(i32::MAX as i64);
    let index_choices: Vec<(IndexType, Vec<Expr>)> = if extents.iter().all(|&e| env.fits_in_i32(e))
    {
        reasons.push("index: int32, proved: every extent fits for all sizes in range".into());
        vec![(IndexType::I32, vec![])]
    } else {
        let mut conds: Vec<Expr> = Vec::new();
        for &e in &extents {
            let c = env.pool_mut().le(e, limit);
            let c = env.simplify(c);
            if !env.statically_known_true(c) && !conds.contains(&c) {
                conds.push(c);
            }
        }
        if conds.iter().any(|&c| env.statically_known_false(c)) {
            reasons.push("index: int64, proved: an extent exceeds 2^31 - 1".into());
            vec![(IndexType::I64, vec![])]
        } else {
            reasons.push(
                "index: int32 when every extent ≤ 2^31 - 1 at launch, int64 otherwise (not provable from ranges)"
                    .into(),
            );
            vec![(IndexType::I32, conds), (IndexType::I64, vec![])]
        }
    };

    // Strategy, threads and lanes.
    let vector = vec_choices[0].0;
    let (strategies, threads_per_row, lanes) = if reduction {
        // Each thread owns 16 bytes of lanes (vector loads or not), so the lanes and the reduction
        // order do not depend on what alignment allows. At most 512 threads per row leaves 128
        // registers per thread. A split kernel's threads own `SPLIT_WORDS` words each, and its
        // row's threads fill `blocks` full blocks.
        let vector = vector_max;
        let many_rows = rows_h >= 4 * SMS;
        let per_thread = if many_rows { 4 } else { 1 };
        let tpr = match split {
            Some(blocks) => blocks * SPLIT_THREADS,
            None => next_pow2(
                len_h.max(1).saturating_add(vector * per_thread - 1) / (vector * per_thread),
            )
            .clamp(32, 512),
        };
        reasons.push(format!(
            "threads per row: {tpr} (hint: rows {rows_t} ≈ {rows_h}, {}; row length {len_t} ≈ {len_h})",
            if split.is_some() {
                "few long rows: each thread loads its lanes' words (16 bytes each) at once"
            } else if many_rows {
                "many rows: 4 vectors per thread"
            } else {
                "few rows: one vector per thread"
            }
        ));
        let lanes = tpr * chunk;
        reasons.push(format!(
            "lanes: {lanes}, the reduction order of every variant"
        ));
        let limit = persistent_limit(tpr);
        let max = env.pool_mut().constant(limit);
        let fits = env.pool_mut().le(row_len, max);
        let strategies: Vec<(Strategy, Vec<Expr>)> = if len_r.hi <= limit as i128 {
            reasons.push(format!(
                "strategy: persistent, proved: row length {len_t} ≤ {limit} (≤ {PERSISTENT_PER_THREAD} per thread) for all sizes in range"
            ));
            vec![(Strategy::Persistent, vec![])]
        } else if len_h <= limit {
            reasons.push(format!(
                "strategy: persistent when {len_t} ≤ {limit} at launch (hint {len_h}), looped otherwise"
            ));
            vec![
                (Strategy::Persistent, vec![fits]),
                (Strategy::Looped, vec![]),
            ]
        } else if let Some(blocks) = split {
            let few = env.pool_mut().constant(SMS / 4);
            let c1 = env.pool_mut().le(rows, few);
            let long = env.pool_mut().constant(SPLIT_MIN_LEN);
            let c2 = env.pool_mut().ge(row_len, long);
            reasons.push(format!(
                "strategy: split over {blocks} blocks of {SPLIT_THREADS} threads when {rows_t} ≤ {} and {len_t} ≥ {SPLIT_MIN_LEN} (hint: few long rows), looped otherwise",
                SMS / 4
            ));
            vec![
                (Strategy::Split { blocks }, vec![c1, c2]),
                (Strategy::Looped, vec![]),
            ]
        } else {
            reasons.push(format!(
                "strategy: looped (hint: row length {len_h} > {limit})"
            ));
            vec![(Strategy::Looped, vec![])]
        };
        (strategies, tpr, lanes)
    } else {
        (vec![(Strategy::Pointwise, vec![])], 1, 0)
    };

    // Row-count buckets: launch shapes tuned for 1, 64, 4096 rows and the hint, within range.
    let mut buckets: Vec<i64> = BUCKETS
        .iter()
        .copied()
        .chain(std::iter::once(rows_h))
        .filter(|&b| (rows_r.lo..=rows_r.hi).contains(&(b as i128)))
        .collect();
    if buckets.is_empty() {
        buckets.push(rows_h);
    }
    buckets.sort_unstable();
    buckets.dedup();
    let shape_of = |b: i64, vector: i64| -> (i64, i64) {
        if reduction {
            // Short rows share a block when there are many of them.
            let per_block = if threads_per_row < 256 && b >= 1024 {
                256 / threads_per_row
            } else {
                1
            };
            (threads_per_row * per_block, 1)
        } else {
            let threads = if b <= 4096 { 128 } else { 256 };
            let ept = vector * if b >= 1 << 20 { 2 } else { 1 };
            (threads, ept)
        }
    };
    // (smallest bucket, largest bucket, launch shape): equal shapes merge.
    let mut shapes: Vec<(i64, i64, (i64, i64))> = Vec::new();
    for &b in &buckets {
        let s = shape_of(b, vector);
        match shapes.last_mut() {
            Some(last) if last.2 == s => last.1 = b,
            _ => shapes.push((b, b, s)),
        }
    }
    if shapes.len() > 1 {
        let list: Vec<String> = shapes
            .iter()
            .map(|(lo, hi, _)| {
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}–{hi}")
                }
            })
            .collect();
        reasons.push(format!(
            "buckets: launch shapes for {rows_t} in {} (the hint is {rows_h}), chosen at launch",
            list.join(", ")
        ));
    }
    // The variants: buckets × strategy × vector × index, in priority order.
    let mut variants = Vec::new();
    for (bi, &(lo, hi, (threads, ept_base))) in shapes.iter().enumerate() {
        let tuned = if (lo..=hi).contains(&rows_h) {
            rows_h
        } else {
            lo
        };
        let bucket_cond = if bi + 1 < shapes.len() {
            // Up to the geometric midpoint with the next bucket.
            let next = shapes[bi + 1].0;
            let mid = ((hi.max(1) as f64 * next as f64).sqrt()) as i64;
            let m = env.pool_mut().constant(mid);
            vec![env.pool_mut().le(rows, m)]
        } else {
            vec![]
        };
        for (strategy, sc) in &strategies {
            for (vector, vc) in &vec_choices {
                for (index, ic) in &index_choices {
                    let conds: Vec<Expr> = bucket_cond
                        .iter()
                        .chain(sc)
                        .chain(vc)
                        .chain(ic)
                        .copied()
                        .collect();
                    let ept = if reduction {
                        1
                    } else {
                        ept_base / vector_max.max(1) * vector
                    };
                    // A split variant's block holds its share of a row's threads.
                    let threads = match strategy {
                        Strategy::Split { blocks } => (threads_per_row / blocks).max(1),
                        _ => threads,
                    };
                    let row_cache = if *strategy == Strategy::Persistent {
                        row_cache_budget(threads, *vector)
                    } else {
                        0
                    };
                    let config = KernelConfig {
                        strategy: *strategy,
                        threads,
                        threads_per_row: if reduction { threads_per_row } else { 1 },
                        elements_per_thread: ept.max(1),
                        vector: *vector,
                        index: *index,
                        lanes,
                        row_cache,
                        registers_relaxed: false,
                    };
                    let grid = grid_of(env, &config, rows, row_len);
                    let aligned = if *vector > 1 && vec_choices.len() > 1 {
                        external.clone()
                    } else {
                        Vec::new()
                    };
                    let predicate = and_all(env, &conds);
                    variants.push(Variant {
                        config,
                        predicate,
                        aligned,
                        grid,
                        tuned_for: tuned,
                    });
                }
            }
        }
    }
    // Variants the launcher can never pick are dropped. The last one is the most general in
    // every dimension (last bucket, looped, scalar, int64): its predicate is `true`.
    let before = variants.len();
    let variants = reachable(env, variants);
    if variants.len() < before {
        reasons.push(format!(
            "variants: {} of {before} dropped: never selected (their conditions never hold, or an earlier variant's hold whenever theirs do)",
            before - variants.len()
        ));
    }
    debug_assert!(variants
        .last()
        .is_some_and(|v| env.pool().as_bool(v.predicate) == Some(true) && v.aligned.is_empty()));
    k.variants = variants;
    k.reasons = reasons;
    k.vars = group_vars;
    k.scalar_buffers = scalar_buffers;
    k
}

/// The variants the launcher can pick, in order: not those whose predicate can never hold, nor
/// those shadowed by an earlier variant whose predicate holds wherever theirs does and whose
/// alignment needs are no stricter (within a row-count bucket that keeps rows short, the
/// persistent strategy and int32 indices may be proved, and their alternatives never run).
fn reachable(env: &mut ShapeEnv, variants: Vec<Variant>) -> Vec<Variant> {
    let mut kept: Vec<Variant> = Vec::with_capacity(variants.len());
    for v in variants {
        if env.statically_known_false(v.predicate) {
            continue;
        }
        let covers = |u: &Variant| u.aligned.iter().all(|a| v.aligned.contains(a));
        let candidates: Vec<Expr> = kept
            .iter()
            .filter(|u| covers(u))
            .map(|u| u.predicate)
            .collect();
        if candidates.is_empty() {
            kept.push(v);
            continue;
        }
        let shadowed = if env.pool().as_bool(v.predicate) == Some(true) {
            candidates
                .iter()
                .any(|&c| env.pool().as_bool(c) == Some(true))
        } else {
            env.assuming(v.predicate, |e| {
                candidates.iter().any(|&c| e.statically_known_true(c))
            })
            .unwrap_or(true)
        };
        if !shadowed {
            kept.push(v);
        }
    }
    kept
}

/// Blocks to launch for a configuration.
fn grid_of(env: &mut ShapeEnv, c: &KernelConfig, rows: Expr, row_len: Expr) -> Expr {
    let pool = env.pool_mut();
    let g = match c.strategy {
        Strategy::Pointwise => {
            let per_block = pool.constant(c.threads * c.elements_per_thread);
            let total = pool.mul(rows, row_len);
            pool.ceildiv(total, per_block)
        }
        Strategy::Persistent | Strategy::Looped => {
            let per_block = pool.constant((c.threads / c.threads_per_row).max(1));
            pool.ceildiv(rows, per_block)
        }
        Strategy::Split { blocks } => {
            let b = pool.constant(blocks);
            pool.mul(rows, b)
        }
    };
    env.simplify(g)
}

/// The largest storage index + 1 a layout reaches (its extent).
fn extent(env: &mut ShapeEnv, l: &Layout) -> Expr {
    let pool = env.pool_mut();
    let mut e = pool.add(l.offset, pool.one());
    for (&s, &st) in l.sizes.iter().zip(&l.strides) {
        let one = pool.one();
        let last = pool.sub(s, one);
        let t = pool.mul(last, st);
        e = pool.add(e, t);
    }
    env.simplify(e)
}

/// The kernel's variables (outer then inner), taken from its first member of the widest role.
fn group_vars(p: &mut Program, k: &Kernel) -> Vec<Expr> {
    let n = k.outer.len() + k.inner.len();
    let names: Vec<Expr> = (0..n)
        .map(|i| {
            let size = if i < k.outer.len() {
                k.outer[i]
            } else {
                k.inner[i - k.outer.len()]
            };
            p.env.new_index_var("k", size)
        })
        .collect();
    names
}

/// A member's loop variables → the kernel's variables (size-1 dimensions → 0).
pub fn member_map(
    env: &mut ShapeEnv,
    loops: &guardless_ir::loop_ir::Loops,
    k: &Kernel,
    role: Role,
    vars: &[Expr],
) -> Vec<(SymbolId, Expr)> {
    let zero = env.pool_mut().zero();
    let mut out = Vec::new();
    let mut assign =
        |env: &mut ShapeEnv, vs: &[Expr], sizes: &[Expr], base: usize, limit: usize| {
            let mut pos = base;
            for (v, &s) in vs.iter().zip(sizes) {
                let one = env.pool_mut().one();
                let c = env.pool_mut().eq(s, one);
                let id = env.pool().as_symbol(*v).expect("loop vars are symbols");
                if env.statically_known_true(c) || pos >= limit {
                    out.push((id, zero));
                } else {
                    out.push((id, vars[pos]));
                    pos += 1;
                }
            }
        };
    let outer_n = k.outer.len();
    let all = vars.len();
    match (&loops.reduction, role) {
        (Some((_, rr, rv)), _) => {
            assign(env, &loops.vars, &loops.ranges, 0, outer_n);
            assign(env, rv, rr, outer_n, all);
        }
        (None, Role::RowValue) => assign(env, &loops.vars, &loops.ranges, 0, outer_n),
        (None, _) => assign(env, &loops.vars, &loops.ranges, 0, all),
    }
    out
}

fn subst(env: &mut ShapeEnv, e: Expr, map: &[(SymbolId, Expr)]) -> Expr {
    let s = env.pool_mut().substitute_pairs(e, map);
    env.simplify(s)
}
