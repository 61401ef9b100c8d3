//! CUDA C for a schedule: one translation unit per graph — the common header, then one
//! `extern "C"` function per kernel variant — rendered from the Tera templates in `templates/`
//! (embedded in the binary). Dynamic sizes are `long long` parameters; static ones constants.

mod body;
pub mod grouped_mm;
mod hoist;
mod library;
pub mod lines;
pub mod scatter;
pub mod select;

use std::fmt::Write;

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BufferId, BufferKind, Program, ReductionKind};
use guardless_ir::sym::{cuda_symbol, CPrinter, Expr, SymbolId};
use rustc_hash::FxHashSet;
use serde::Serialize;
use tera::{Context, Tera};

use crate::schedule::config::{member_map, persistent_limit, IndexType, Strategy, Variant};
use crate::schedule::{Kernel, Residence, Role, Schedule, Step};
pub use body::storage_type;
use body::{compute_type, identity, Read, Scope};

/// Stands for the function name while a variant is compared with the ones before it.
const ENTRY: &str = "GL_ENTRY_NAME";

const COMMON: &str = include_str!("../../../templates/common.cuh");
const POINTWISE: &str = include_str!("../../../templates/pointwise.cu");
const REDUCTION: &str = include_str!("../../../templates/reduction.cu");
const PER_ELEMENT: &str = include_str!("../../../templates/per_element.cu");
const SELECT: &str = include_str!("../../../templates/select.cu");
const LINES: &str = include_str!("../../../templates/lines.cu");
const RADIX: &str = include_str!("../../../templates/radix.cu");
const LINE_BLOCK: &str = include_str!("../../../templates/line_block.cu");
const GROUPED_MM: &str = include_str!("../../../templates/grouped_mm.cu");

/// A kernel parameter, in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Param {
    Buffer {
        buffer: String,
        written: bool,
    },
    Symbol {
        name: String,
    },
    /// A size expression (no loop variable) the launcher evaluates: `expr` in the graph format's
    /// syntax over the graph's symbols.
    Derived {
        name: String,
        expr: String,
    },
    /// `int*` where the first data-dependent error code is written.
    Error,
    /// Split reductions: `char*` scratch of `bytes` (an expression of the sizes) for the blocks'
    /// partial results; the launcher provides it.
    Workspace {
        bytes: String,
    },
    /// Split reductions: which launch of the function this is (`0..phases`).
    Phase,
}

/// What a function computes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "of", rename_all = "snake_case")]
pub enum EntryOf {
    /// Variant `variant` of schedule kernel `kernel`.
    Kernel { kernel: usize, variant: usize },
    /// A function of the library step computing `buffer` (see [`Part`]).
    Library { buffer: String, part: Part },
}

/// The functions of a library step done on the device, in launch order: a scatter (`index_put`)
/// is `copy` then `write`; a select (`nonzero`, `masked_select`) is `count`, `scan`, then
/// `write`; a scan or a sort is `write` (a thread per line) or `block` (a block per line: few or
/// long lines), a sort also `tiled` (a block per tile of a line: few long lines).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// Scatter: the base read through its layout into the (contiguous) result.
    Copy,
    /// Select: each block's count of the elements kept.
    Count,
    /// Select: the blocks' counts turned into their first output positions, and the total.
    Scan,
    /// Scatter: the values written or added at their targets. Select: the kept elements (or
    /// their indices) written at their positions.
    Write,
    /// A block per line. Sort: a stable radix sort through the workspace. Scan: tiles of runs
    /// summed by threads, their totals scanned across the block.
    Block,
    /// A block per tile. Grouped matmul: of the output, in one group's rows. Sort: of a line,
    /// the radix sort in phases (few long lines).
    Tiled,
}

const _: () = assert!(
    Part::Copy as usize == 0
        && Part::Count as usize == 1
        && Part::Scan as usize == 2
        && Part::Write as usize == 3
        && Part::Block as usize == 4
        && Part::Tiled as usize == 5
);

impl Part {
    pub const ALL: [Part; 6] = [
        Part::Copy,
        Part::Count,
        Part::Scan,
        Part::Write,
        Part::Block,
        Part::Tiled,
    ];

    /// The part's position in [`Part::ALL`] (its declaration order; checked below).
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Part::Copy => "copy",
            Part::Count => "count",
            Part::Scan => "scan",
            Part::Write => "write",
            Part::Block => "block",
            Part::Tiled => "tiled",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    #[serde(flatten)]
    pub of: EntryOf,
    pub name: String,
    /// The translation unit (and so the CUBIN) holding the function.
    pub unit: usize,
    pub params: Vec<Param>,
    /// The function to launch (variants with identical code share the first one's).
    /// `generated == false`: this variant has no generated code; the launcher skips it and takes
    /// the next variant whose predicate holds.
    pub generated: bool,
    /// Launches of the function per execution of the kernel, `gl_phase` = 0, 1, … in order (a
    /// split reduction: one per pass, plus one to combine the last pass's partial results).
    pub phases: usize,
}

impl Entry {
    /// `(kernel, variant)` when this is a kernel's variant.
    pub fn kernel_variant(&self) -> Option<(usize, usize)> {
        match self.of {
            EntryOf::Kernel { kernel, variant } => Some((kernel, variant)),
            EntryOf::Library { .. } => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct CudaModule {
    /// The whole translation unit: the header, then every function.
    pub source: String,
    /// The same functions split into translation units of about equal size (each with the
    /// header) that NVRTC compiles in parallel; `Entry::unit` says where each function is.
    pub units: Vec<String>,
    pub entries: Vec<Entry>,
    /// Error code `k` (from 1) is `errors[k - 1]`.
    pub errors: Vec<String>,
}

fn engine() -> Tera {
    let mut t = Tera::default();
    t.autoescape_on(vec![]);
    for (name, text) in [
        ("common.cuh", COMMON),
        ("pointwise.cu", POINTWISE),
        ("reduction.cu", REDUCTION),
        ("per_element.cu", PER_ELEMENT),
        ("select.cu", SELECT),
        ("grouped_mm.cu", GROUPED_MM),
        ("line_block.cu", LINE_BLOCK),
        ("lines.cu", LINES),
        ("radix.cu", RADIX),
    ] {
        t.add_raw_template(name, text)
            .unwrap_or_else(|e| panic!("template {name}: {e}"));
    }
    t
}

/// Renders every kernel and variant of `s`.
pub fn generate(p: &mut Program, s: &Schedule) -> CudaModule {
    let tera = engine();
    let mut ctx = Context::new();
    ctx.insert("helpers_i32", &CPrinter::cuda("int", "i32").helpers());
    ctx.insert("helpers_i64", &CPrinter::cuda("long long", "i64").helpers());
    let header = tera
        .render("common.cuh", &ctx)
        .expect("the common header renders");
    let mut source = header.clone();
    let mut functions: Vec<(String, String)> = Vec::new();
    let pointers: Vec<String> = p.buffers.iter().map(|b| pointer_name(&b.name)).collect();
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    // Variants whose code comes out the same (they differ only in what the launch does, or in a
    // choice this generator does not act on yet) share one function.
    let mut seen: rustc_hash::FxHashMap<String, String> = rustc_hash::FxHashMap::default();
    type Shape = (IndexType, i64, i64, i64, i64, i64, i64);
    for (ki, k) in s.kernels.iter().enumerate() {
        let _ = writeln!(source);
        // Per launch shape: the function's text, parameters and launches per execution.
        type Rendered = (String, (Vec<Param>, usize));
        let mut rendered: Vec<(Shape, Rendered)> = Vec::new();
        let mut bodies: Vec<((IndexType, i64, bool, i64), Bodies)> = Vec::new();
        // Index arithmetic does not depend on the variant: hoisted and simplified once per kernel.
        let mut syms = KernelSymbols {
            hoister: hoist::Hoister::new(&p.env, local_symbols(p, k)),
            memo: rustc_hash::FxHashMap::default(),
            texts: rustc_hash::FxHashMap::default(),
            symbols: None,
        };
        for (vi, v) in k.variants.iter().enumerate() {
            let mut name = format!("{}_v{vi}", k.name);
            let generated = true;
            let split = split_blocks(&v.config);
            let (params, phases) = if generated {
                // Only these choices change the code; variants that agree on them are rendered once.
                let c = &v.config;
                let pointwise_vector = c.vector;
                let shape = (
                    c.index,
                    c.threads,
                    c.threads_per_row,
                    c.lanes,
                    c.elements_per_thread,
                    pointwise_vector,
                    split,
                );
                let (text, params) = match rendered.iter().find(|(s, _)| *s == shape) {
                    Some((_, done)) => done.clone(),
                    None => {
                        let key = (
                            c.index,
                            pointwise_vector,
                            c.strategy == Strategy::Persistent,
                            split,
                        );
                        let b = match bodies.iter().find(|(i, _)| *i == key) {
                            Some((_, b)) => b.clone(),
                            None => {
                                let b = render_bodies(p, k, v, &pointers, &mut syms, &mut errors);
                                bodies.push((key, b.clone()));
                                b
                            }
                        };
                        let r = (
                            render_variant(p, &tera, k, v, ENTRY, &b),
                            (b.params.clone(), b.phases),
                        );
                        rendered.push((shape, r.clone()));
                        r
                    }
                };
                // Compared without the comments, which describe the variant.
                let code: String = text
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .collect::<Vec<_>>()
                    .join("\n");
                match seen.get(&code) {
                    Some(first) => name = first.clone(),
                    None => {
                        seen.insert(code, name.clone());
                        let f = text.replace(ENTRY, &name);
                        source.push_str(&f);
                        functions.push((name.clone(), f));
                    }
                }
                params
            } else {
                (Vec::new(), 0)
            };
            entries.push(Entry {
                of: EntryOf::Kernel {
                    kernel: ki,
                    variant: vi,
                },
                unit: 0,
                name,
                params,
                generated,
                phases,
            });
        }
    }
    // Library steps done on the device: scatters and selects.
    for step in &s.steps {
        let Step::Library(b) = *step else { continue };
        let (kind, parts) = match p.buffers[b.index()].kind {
            BufferKind::Scatter { .. } => (
                "scatter",
                scatter::render(p, &tera, ENTRY, b, &pointers, &mut errors).to_vec(),
            ),
            BufferKind::Select { .. } => (
                "select",
                select::render(p, &tera, ENTRY, b, &pointers).to_vec(),
            ),
            BufferKind::Extern { .. } => {
                match grouped_mm::render(p, &tera, ENTRY, b, &pointers, &mut errors) {
                    Some(f) => ("grouped_mm", f.to_vec()),
                    None => continue,
                }
            }
            BufferKind::Scan { .. } => ("scan", lines::render(p, &tera, ENTRY, b, &pointers)),
            BufferKind::Sort { .. } => ("sort", lines::render(p, &tera, ENTRY, b, &pointers)),
            _ => continue,
        };
        let buffer = p.buffers[b.index()].name.clone();
        let _ = writeln!(source);
        for (part, text, params) in parts {
            let phases = lines::phases(p, &p.buffers[b.index()], part);
            let name = format!("{kind}_{}_{}", &pointers[b.index()][2..], part.name());
            let f = text.replace(ENTRY, &name);
            source.push_str(&f);
            functions.push((name.clone(), f));
            entries.push(Entry {
                of: EntryOf::Library {
                    buffer: buffer.clone(),
                    part,
                },
                name,
                unit: 0,
                params,
                generated: true,
                phases,
            });
        }
    }
    // Balanced by size, largest first, into as many units as there are cores (a small module
    // stays one unit: the header costs ~0.1 s per unit).
    let cores = std::thread::available_parallelism()
        .map_or(1, |c| c.get())
        .min(8);
    let total: usize = functions.iter().map(|f| f.1.len()).sum();
    let count = if total < 64 * 1024 {
        1
    } else {
        cores.min(functions.len()).max(1)
    };
    let mut order: Vec<usize> = (0..functions.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(functions[i].1.len()));
    let mut sizes = vec![0usize; count];
    let mut unit_of: rustc_hash::FxHashMap<String, usize> = rustc_hash::FxHashMap::default();
    for i in order {
        let u = (0..count)
            .min_by_key(|&u| sizes[u])
            .expect("at least one unit");
        sizes[u] += functions[i].1.len();
        unit_of.insert(functions[i].0.clone(), u);
    }
    let mut units = vec![header; count];
    for (name, f) in &functions {
        units[unit_of[name]].push_str(f);
    }
    for e in entries.iter_mut() {
        e.unit = unit_of.get(&e.name).copied().unwrap_or(0);
    }
    CudaModule {
        source,
        units,
        entries,
        errors,
    }
}

/// Loop and bound variables of a kernel's members (everything that is not a size symbol).
fn local_symbols(p: &Program, k: &Kernel) -> FxHashSet<SymbolId> {
    let pool = p.env.pool();
    let mut out: FxHashSet<SymbolId> = k.vars.iter().filter_map(|&v| pool.as_symbol(v)).collect();
    for m in &k.members {
        if let BufferKind::Computed { loops, body } = &p.buffers[m.buffer.index()].kind {
            out.extend(loops.vars.iter().filter_map(|&v| pool.as_symbol(v)));
            if let Some((_, _, rv)) = &loops.reduction {
                out.extend(rv.iter().filter_map(|&v| pool.as_symbol(v)));
            }
            for (op, _) in &body.ops {
                if let guardless_ir::loop_ir::Op::Bind { var, .. } = op {
                    out.extend(pool.as_symbol(*var));
                }
            }
        }
    }
    out
}

/// Whether `body` divides floats that change from element to element (the division depends on a
/// load of memory or of an elementwise value): a division of a row value by a constant (RMSNorm's
/// mean) is loop-invariant and hoisted by the compiler.
fn divides_per_element(
    body: &guardless_ir::loop_ir::Body,
    row_value: &dyn Fn(BufferId) -> bool,
) -> bool {
    use guardless_ir::loop_ir::{BinaryOp, Op};
    let mut varies = vec![false; body.ops.len()];
    for (i, &(op, d)) in body.ops.iter().enumerate() {
        let mut any = false;
        op.for_each_operand(|v| any |= varies[v.0 as usize]);
        varies[i] = match op {
            Op::Load { buffer, .. } => !row_value(buffer) || any,
            Op::Index(..) | Op::Bind { .. } => true,
            Op::Constant(_) => false,
            _ => any,
        };
        if let Op::Binary(BinaryOp::Div, _, _) = op {
            if d.is_float() && varies[i] {
                return true;
            }
        }
    }
    false
}

/// An input of a persistent reduction read in several passes, kept in registers.
struct CachedLoad {
    /// The buffer and the index (in the kernel's variables).
    key: (BufferId, Expr),
    /// The pass that loads it; the others read `name[step][lane]`.
    first_pass: usize,
    passes: Vec<usize>,
    name: String,
    ty: &'static str,
}

/// A kernel's code for one index type: parameters, declarations, the bodies of its passes. The
/// variants' launch shapes only change the template around them.
#[derive(Clone)]
struct Bodies {
    params_c: Vec<String>,
    params: Vec<Param>,
    /// Launches per kernel execution (1 unless split).
    phases: usize,
    decls: String,
    pass_ctx: Vec<tera::Value>,
    pointwise_body: String,
    /// Pointwise vector variants: register arrays, the 16-byte loads at the start of a chunk and
    /// the 16-byte stores at its end.
    vector_decls: String,
    vector_loads: String,
    vector_stores: String,
    /// Persistent reductions: the register arrays holding the row.
    persistent_decls: String,
    rows_c: String,
    len_c: String,
    row_decompose: String,
    lin_decompose: String,
}

/// A kernel's index arithmetic in kernel terms, shared by its variants: the derived parameters,
/// and each member's indices after substitution, simplification and hoisting.
struct KernelSymbols {
    hoister: hoist::Hoister,
    memo: rustc_hash::FxHashMap<(usize, Expr), Expr>,
    /// Derived parameters' expressions as text (long for concatenation offsets).
    texts: rustc_hash::FxHashMap<SymbolId, String>,
    /// The graph symbols the kernel's code uses.
    symbols: Option<Vec<SymbolId>>,
}

fn render_bodies(
    p: &mut Program,
    k: &Kernel,
    v: &Variant,
    pointers: &[String],
    syms: &mut KernelSymbols,
    errors: &mut Vec<String>,
) -> Bodies {
    let c = &v.config;
    let (idx, suffix) = match c.index {
        IndexType::I32 => ("int", "i32"),
        IndexType::I64 => ("long long", "i64"),
    };
    let printer = CPrinter::cuda(idx, suffix);
    let locals = local_symbols(p, k);
    let reduction = !k.inner.is_empty();
    // Lanes each thread owns (the same in every variant: vector width only changes the loads).
    let lpt = (c.lanes / c.threads_per_row.max(1)).max(1);
    let passes = k.members.iter().map(|m| m.pass).max().unwrap_or(0) + 1;
    // A split reduction spreads each row's lanes over `blocks` blocks of `c.threads` threads:
    // each block reduces its lanes to a partial result (a subtree of the lanes' balanced tree),
    // written to the workspace; the next launch combines the `blocks` partials in tree order, so
    // the result is bitwise the other variants'. Slot (row, reduction, block) holds 16 bytes: the
    // value, then an arg-reduction's position.
    let blocks = split_blocks(c);
    let reductions = k
        .members
        .iter()
        .filter(|m| m.role == Role::Reduction)
        .count();
    let mut reduction_index = 0;

    // Buffers: stored members are written; loads from outside the kernel, or of members stored
    // in an earlier pass, are read from memory.
    let member_of: rustc_hash::FxHashMap<BufferId, usize> = k
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| (m.buffer, i))
        .collect();
    let mut buffers: Vec<(BufferId, bool)> = Vec::new();
    let mut slot: rustc_hash::FxHashMap<BufferId, usize> = rustc_hash::FxHashMap::default();
    let mut note = |b: BufferId, written: bool| match slot.get(&b) {
        Some(&i) => buffers[i].1 |= written,
        None => {
            slot.insert(b, buffers.len());
            buffers.push((b, written));
        }
    };
    for m in &k.members {
        if m.stored.is_some() {
            note(m.buffer, true);
        }
        if let BufferKind::Computed { body, .. } = &p.buffers[m.buffer.index()].kind {
            for (op, _) in &body.ops {
                if let guardless_ir::loop_ir::Op::Load { buffer, .. } = op {
                    if k.residence(*buffer, m.pass) == Residence::Memory {
                        note(*buffer, false);
                    }
                }
            }
        }
    }
    // Size symbols the kernel needs.
    let mut exprs: Vec<Expr> = vec![k.rows, k.row_len];
    exprs.extend(k.outer.iter().chain(&k.inner).copied());
    for m in &k.members {
        let b = &p.buffers[m.buffer.index()];
        exprs.extend(b.layout.sizes.iter().chain(&b.layout.strides).copied());
        exprs.push(b.layout.offset);
        if let BufferKind::Computed { body, loops } = &b.kind {
            exprs.extend(loops.ranges.iter().copied());
            if let Some((_, rr, _)) = &loops.reduction {
                exprs.extend(rr.iter().copied());
            }
            for (op, _) in &body.ops {
                match op {
                    guardless_ir::loop_ir::Op::Load { index, .. } => exprs.push(*index),
                    guardless_ir::loop_ir::Op::Index(e, _) => exprs.push(*e),
                    guardless_ir::loop_ir::Op::Bind { size, .. } => exprs.push(*size),
                    _ => {}
                }
            }
        }
    }
    for &(b, _) in &buffers {
        let l = &p.buffers[b.index()].layout;
        exprs.extend(l.strides.iter().copied());
        exprs.push(l.offset);
    }
    // One walk over all of them (their subexpressions are shared), once per kernel.
    let symbols = match &syms.symbols {
        Some(s) => s.clone(),
        None => {
            let mut symbols: Vec<SymbolId> = p
                .env
                .pool()
                .free_symbols_of(&exprs)
                .into_iter()
                .filter(|id| !locals.contains(id))
                .collect();
            symbols.sort_by_key(|&id| p.env.symbol_name(id).to_string());
            syms.symbols = Some(symbols.clone());
            symbols
        }
    };

    let hoister = &mut syms.hoister;
    let c_of = |p: &mut Program, h: &mut hoist::Hoister, e: Expr| {
        let e = h.hoist(&mut p.env, e);
        p.env.to_c(e, &printer)
    };
    let decompose = |p: &mut Program,
                     h: &mut hoist::Hoister,
                     lin: &str,
                     vars: &[Expr],
                     sizes: &[Expr],
                     indent: &str| {
        let mut out = String::new();
        if vars.is_empty() {
            return out;
        }
        let _ = writeln!(out, "{indent}{idx} gl_rest_{lin} = {lin};");
        for j in (0..vars.len()).rev() {
            let name = cuda_symbol(&p.env.text(vars[j]));
            if j == 0 {
                let _ = writeln!(out, "{indent}const {idx} {name} = gl_rest_{lin};");
            } else {
                let size = c_of(p, h, sizes[j]);
                let _ = writeln!(
                    out,
                    "{indent}const {idx} {name} = gl_rest_{lin} % ({size}); gl_rest_{lin} /= ({size});"
                );
            }
        }
        out
    };
    let (outer_vars, inner_vars) = k.vars.split_at(k.outer.len());

    // The member bodies, per pass.
    let member_vars: Vec<Vec<(SymbolId, Expr)>> = k
        .members
        .iter()
        .map(|m| match &p.buffers[m.buffer.index()].kind {
            BufferKind::Computed { loops, .. } => {
                let loops = loops.clone();
                member_map(&mut p.env, &loops, k, m.role, &k.vars)
            }
            _ => Vec::new(),
        })
        .collect();
    let row_name = |b: BufferId| format!("m{}_row", b.0);
    let val_name = |b: BufferId| format!("m{}_val", b.0);
    let mut pass_ctx: Vec<tera::Value> = Vec::new();
    let mut pointwise_body = String::new();
    // 16-byte accesses: in a pointwise vector variant, a thread's chunk of `vector` elements lies
    // in one row, starts at a multiple of `vector` and every access contiguous in the innermost
    // variable starts aligned (the variant's predicate), so such loads and stores move whole chunks.
    // In a reduction, the chunk is a thread's lanes of one pass step (`lpt` consecutive elements
    // of the row; the vector predicate makes the row length a multiple of it).
    let vectorize = c.vector > 1;
    let chunk = if reduction { lpt } else { c.vector };
    let innermost = k.vars.last().copied();
    let (mut vector_decls, mut vector_loads, mut vector_stores) =
        (String::new(), String::new(), String::new());
    // A persistent variant keeps the row in registers: each thread's share of an input read in
    // several passes is loaded once (first pass) into `gl_cN[chunk][lane]` and read from there
    // after. A thread handles at most `steps` chunks of `lpt` elements (the row bound).
    let mut persistent = reduction && c.strategy == Strategy::Persistent;
    let steps = if persistent {
        let bound = p
            .env
            .bound(k.row_len)
            .hi
            .min(persistent_limit(c.threads_per_row) as i128);
        ((bound.max(1) as i64) + c.lanes - 1) / c.lanes.max(1)
    } else {
        0
    };
    let load_key = |p: &mut Program, mi: usize, index: Expr| {
        let vars = &member_vars[mi];
        let e = p.env.pool_mut().substitute_pairs(index, vars);
        p.env.simplify(e)
    };
    let mut cached: Vec<CachedLoad> = Vec::new();
    if persistent {
        for (mi, m) in k.members.iter().enumerate() {
            let BufferKind::Computed { body, .. } = &p.buffers[m.buffer.index()].kind.clone()
            else {
                continue;
            };
            for &(op, d) in &body.ops {
                let guardless_ir::loop_ir::Op::Load {
                    buffer,
                    index,
                    mask: None,
                } = op
                else {
                    continue;
                };
                if member_of.contains_key(&buffer) {
                    continue;
                }
                let key = (buffer, load_key(p, mi, index));
                match cached.iter_mut().find(|x| x.key == key) {
                    Some(x) => {
                        x.first_pass = x.first_pass.min(m.pass);
                        if !x.passes.contains(&m.pass) {
                            x.passes.push(m.pass);
                        }
                    }
                    None => cached.push(CachedLoad {
                        key,
                        first_pass: m.pass,
                        passes: vec![m.pass],
                        name: format!("gl_c{}", cached.len()),
                        ty: compute_type(d),
                    }),
                }
            }
        }
        cached.retain(|x| x.passes.len() > 1);
        // An IEEE float division is a subroutine call whose spills fail the compile once the
        // row's steps are unrolled around it; such kernels re-read the row instead (for now).
        let divides = k
            .members
            .iter()
            .any(|m| match &p.buffers[m.buffer.index()].kind {
                BufferKind::Computed { body, .. } => {
                    divides_per_element(body, &|b| k.residence(b, m.pass) == Residence::RowValue)
                }
                _ => false,
            });
        if divides {
            cached.clear();
        }
        // Within the register file: a block of `threads` gets 65536 / threads registers per
        // thread (at most 255); the row may take half of them in a vector variant, an eighth in
        // a scalar one (whose per-element addressing takes the rest: the decoder layer's
        // attention softmax, 32 cached values per thread, spilled at a quarter). What does not
        // fit is re-read.
        let registers = (65536 / c.threads.max(1)).min(255);
        let budget = if c.vector > 1 {
            (registers / 2 - 16).max(0)
        } else {
            registers / 8
        };
        let mut used = 0;
        cached.retain(|_| {
            let fits = used + steps * lpt <= budget;
            if fits {
                used += steps * lpt;
            }
            fits
        });
    }
    // Nothing kept in registers: the looped code is the persistent variant's code.
    if cached.is_empty() {
        persistent = false;
    }
    let mut persistent_decls = String::new();
    for x in &cached {
        let _ = writeln!(persistent_decls, "  {} {}[{steps}][{lpt}];", x.ty, x.name);
    }
    for pass in 0..passes {
        let (mut init, mut body_text, mut finish) = (String::new(), String::new(), String::new());
        let (mut block_finish, mut combine, mut after) =
            (String::new(), String::new(), String::new());
        for (mi, m) in k.members.iter().enumerate() {
            let buf = p.buffers[m.buffer.index()].clone();
            let BufferKind::Computed { loops, body } = &buf.kind else {
                continue;
            };
            if m.pass != pass {
                continue;
            }
            let read = |b: BufferId| -> Read {
                match k.residence(b, pass) {
                    Residence::RowValue => Read::Register(row_name(b)),
                    Residence::Element => Read::Register(val_name(b)),
                    Residence::Memory => Read::Memory(pointers[b.index()].clone()),
                }
            };
            let store_index = buf.layout.index(&mut p.env, &loops.vars);
            let what = format!("{} ({})", buf.name, buf.origins.join(", "));
            let indent = match m.role {
                Role::RowValue => "  ",
                _ if reduction => "        ",
                _ => "        ",
            };
            // Which loads of this member move as vectors, and what each element reads instead.
            let mut vloads: rustc_hash::FxHashMap<usize, String> = rustc_hash::FxHashMap::default();
            // Persistent: loads cached in an earlier pass are register reads; the first pass
            // stores what it loads.
            let mut cache_stores = String::new();
            if persistent {
                for (i, &(op, _)) in body.ops.iter().enumerate() {
                    let guardless_ir::loop_ir::Op::Load {
                        buffer,
                        index,
                        mask: None,
                    } = op
                    else {
                        continue;
                    };
                    let key = (buffer, load_key(p, mi, index));
                    if let Some(x) = cached.iter().find(|x| x.key == key) {
                        let slot = format!("{}[gl_j][gl_l]", x.name);
                        if x.first_pass == pass {
                            let _ = writeln!(cache_stores, "{indent}{slot} = m{}_{i};", m.buffer.0);
                        } else {
                            vloads.insert(i, slot);
                        }
                    }
                }
            }
            if let (true, Some(v)) = (vectorize, innermost) {
                // Variables bound in the body from loaded indices (gather, embedding) exist only
                // inside the element loop: a load whose address uses one cannot move ahead of it.
                let bound: Vec<SymbolId> = body
                    .ops
                    .iter()
                    .filter_map(|&(op, _)| match op {
                        guardless_ir::loop_ir::Op::Bind { var, .. } => p.env.pool().as_symbol(var),
                        _ => None,
                    })
                    .collect();
                for (i, &(op, _)) in body.ops.iter().enumerate() {
                    let guardless_ir::loop_ir::Op::Load {
                        buffer,
                        index,
                        mask: None,
                    } = op
                    else {
                        continue;
                    };
                    if vloads.contains_key(&i) {
                        continue;
                    }
                    if !matches!(read(buffer), Read::Memory(_)) {
                        continue;
                    }
                    let dt = p.buffers[buffer.index()].dtype;
                    let Some(at) = contiguous(
                        p,
                        hoister,
                        &member_vars[mi],
                        (index, &bound),
                        v,
                        chunk,
                        dt.size(),
                    ) else {
                        continue;
                    };
                    let name = format!("gl_v{}_{i}", m.buffer.0);
                    let words = chunk * dt.size() as i64 / 16;
                    let t = storage_type(dt);
                    let ptr = &pointers[buffer.index()];
                    let _ = writeln!(vector_decls, "      uint4 {name}[{words}];");
                    let at = p.env.to_c(at, &printer);
                    let _ = writeln!(
                        vector_loads,
                        "        for (int gl_w = 0; gl_w < {words}; ++gl_w) {name}[gl_w] = reinterpret_cast<const uint4*>({ptr} + (long long)({at}))[gl_w];"
                    );
                    vloads.insert(
                        i,
                        format!("gl_ld(reinterpret_cast<const {t}*>({name}), gl_l)"),
                    );
                }
            }
            // A stored elementwise member moves as a vector when its own index is contiguous.
            let vstore = match (vectorize, innermost, m.role, m.stored) {
                (true, Some(v), Role::Elementwise, Some(_)) => contiguous(
                    p,
                    hoister,
                    &member_vars[mi],
                    (store_index, &[]),
                    v,
                    chunk,
                    buf.dtype.size(),
                )
                .map(|at| {
                    let name = format!("gl_s{}", m.buffer.0);
                    let words = chunk * buf.dtype.size() as i64 / 16;
                    let _ = writeln!(vector_decls, "      uint4 {name}[{words}];");
                    let at = p.env.to_c(at, &printer);
                    let ptr = &pointers[m.buffer.index()];
                    let _ = writeln!(
                        vector_stores,
                        "        for (int gl_w = 0; gl_w < {words}; ++gl_w) reinterpret_cast<uint4*>({ptr} + (long long)({at}))[gl_w] = {name}[gl_w];"
                    );
                    format!("reinterpret_cast<{}*>({name})", storage_type(buf.dtype))
                }),
                _ => None,
            };
            let mut sc = Scope {
                env: &mut p.env,
                printer: &printer,
                idx,
                read: &read,
                vars: &member_vars[mi],
                errors,
                what,
                hoist: hoister,
                memo: &mut syms.memo,
                member: mi,
                vector_loads: &vloads,
            };
            let prefix = format!("m{}_", m.buffer.0);
            let (mut stmts, result) = body::render(body, &prefix, &mut sc, indent);
            stmts.push_str(&cache_stores);
            let store = |sc: &mut Scope, value: &str| -> String {
                let vars = sc.vars;
                let at = sc.env.pool_mut().substitute_pairs(store_index, vars);
                let at = sc.env.simplify(at);
                let at = sc.hoist.hoist(sc.env, at);
                format!(
                    "gl_st({}, (long long)({}), {value});",
                    pointers[m.buffer.index()],
                    sc.env.to_c(at, sc.printer)
                )
            };
            let ct = compute_type(body.dtype(body.result.expect("result")));
            match m.role {
                Role::Elementwise => {
                    let mut t = stmts;
                    let _ = writeln!(t, "{indent}const {ct} {} = {result};", val_name(m.buffer));
                    if m.stored.is_some() {
                        let cast = body::cast(
                            &result,
                            body.dtype(body.result.expect("result")),
                            buf.dtype,
                        );
                        let st = match &vstore {
                            Some(staged) => format!("gl_st({staged}, gl_l, {cast});"),
                            None => store(&mut sc, &cast),
                        };
                        let _ = writeln!(t, "{indent}{st}");
                    }
                    if reduction {
                        body_text.push_str(&t);
                    } else {
                        pointwise_body.push_str(&t);
                    }
                }
                Role::RowValue => {
                    let mut t = stmts;
                    let _ = writeln!(t, "  const {ct} {} = {result};", row_name(m.buffer));
                    if m.stored.is_some() {
                        let cast = body::cast(
                            &result,
                            body.dtype(body.result.expect("result")),
                            buf.dtype,
                        );
                        let st = store(&mut sc, &cast);
                        let _ = writeln!(t, "  if (gl_active && gl_tid == 0) {{ {st} }}");
                    }
                    init.push_str(&t);
                }
                Role::Reduction => {
                    let (kind, _, _) = loops.reduction.clone().expect("a reduction");
                    let d = body.dtype(body.result.expect("result"));
                    let acc = format!("m{}_acc", m.buffer.0);
                    let pos = format!("m{}_pos", m.buffer.0);
                    let arg = matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin);
                    let vec = lpt;
                    if arg {
                        let _ = writeln!(
                            init,
                            "  {ct} {acc}[{vec}];\n  long long {pos}[{vec}];\n#pragma unroll\n  for (int l = 0; l < {vec}; ++l) {{ {acc}[l] = {}; {pos}[l] = 9223372036854775807LL; }}",
                            identity(kind, d)
                        );
                    } else {
                        let _ = writeln!(
                            init,
                            "  {ct} {acc}[{vec}];\n#pragma unroll\n  for (int l = 0; l < {vec}; ++l) {{ {acc}[l] = {}; }}",
                            identity(kind, d)
                        );
                    }
                    let mut t = stmts;
                    if arg {
                        let better = if kind == ReductionKind::ArgMax {
                            "gl_better_max"
                        } else {
                            "gl_better_min"
                        };
                        let _ = writeln!(
                            t,
                            "{indent}if ({pos}[gl_l] == 9223372036854775807LL || {better}({result}, {acc}[gl_l])) {{ {acc}[gl_l] = {result}; {pos}[gl_l] = (long long)gl_r; }}"
                        );
                    } else {
                        let _ = writeln!(
                            t,
                            "{indent}{acc}[gl_l] = {};",
                            body::combine(kind, &format!("{acc}[gl_l]"), &result)
                        );
                    }
                    body_text.push_str(&t);
                    finish.push_str(&finish_reduction(
                        kind,
                        d,
                        &acc,
                        &pos,
                        lpt,
                        c.threads_per_row,
                    ));
                    let value = if arg { pos.clone() } else { acc.clone() };
                    let rt = if arg { "long long" } else { ct };
                    let define = format!("  const {rt} {} = {value}[0];\n", row_name(m.buffer));
                    finish.push_str(&define);
                    let stored = m.stored.is_some().then(|| {
                        let from = if arg { DType::I64 } else { d };
                        let cast = body::cast(&row_name(m.buffer), from, buf.dtype);
                        store(&mut sc, &cast)
                    });
                    if let Some(st) = &stored {
                        let _ = writeln!(finish, "  if (gl_active && gl_tid == 0) {{ {st} }}");
                    }
                    if blocks > 0 {
                        let r = reduction_index;
                        block_finish
                            .push_str(&finish_reduction(kind, d, &acc, &pos, lpt, c.threads));
                        let _ = writeln!(
                            block_finish,
                            "  if (gl_active && threadIdx.x == 0) {{ char* w = gl_work + ((long long)gl_row * {reductions} + {r}) * {blocks} * 16 + (long long)gl_part * 16; *({sct}*)w = {acc}[0];{} }}",
                            if arg { format!(" *(long long*)(w + 8) = {pos}[0];") } else { String::new() },
                            sct = shuffle_type(d),
                        );
                        combine.push_str(&combine_partials(
                            kind, d, &acc, &pos, r, reductions, blocks,
                        ));
                        after.push_str(&define);
                        if let Some(st) = &stored {
                            let _ = writeln!(
                                after,
                                "  if (gl_active && gl_phase == {} && gl_part == 0 && threadIdx.x == 0) {{ {st} }}",
                                pass + 1
                            );
                        }
                        reduction_index += 1;
                    }
                }
            }
        }
        let mut pc = tera::Map::new();
        // Accumulator arrays need the lane loop unrolled (static indices); elementwise-only
        // passes stay rolled, which keeps register pressure low.
        let accumulates = k
            .members
            .iter()
            .any(|m| m.pass == pass && m.role == Role::Reduction);
        let unroll = if accumulates {
            "#pragma unroll"
        } else {
            "#pragma unroll 1"
        };
        // Staged vector registers are indexed by lane: the loop must unroll.
        let vectorized_pass = reduction && !(vector_loads.is_empty() && vector_stores.is_empty());
        // So are the row's registers of a persistent variant (indexed by step and lane).
        let unroll = if vectorized_pass || persistent {
            "#pragma unroll"
        } else {
            unroll
        };
        pc.insert("unroll".into(), unroll.into());
        pc.insert("vectorized".into(), vectorized_pass.into());
        pc.insert("persistent".into(), persistent.into());
        pc.insert("steps".into(), steps.into());
        if reduction {
            pc.insert(
                "vector_decls".into(),
                std::mem::take(&mut vector_decls).into(),
            );
            pc.insert(
                "vector_loads".into(),
                std::mem::take(&mut vector_loads).into(),
            );
            pc.insert(
                "vector_stores".into(),
                std::mem::take(&mut vector_stores).into(),
            );
        }
        pc.insert("init".into(), init.into());
        pc.insert(
            "decompose".into(),
            decompose(p, hoister, "gl_r", inner_vars, &k.inner, "        ").into(),
        );
        pc.insert("body".into(), body_text.into());
        pc.insert("finish".into(), finish.into());
        pc.insert("block_finish".into(), block_finish.into());
        pc.insert("combine".into(), combine.into());
        pc.insert("after".into(), after.into());
        pass_ctx.push(tera::Value::Object(pc));
    }

    let rows_c = c_of(p, hoister, k.rows);
    let len_c = c_of(p, hoister, k.row_len);
    let row_decompose = decompose(p, hoister, "gl_row", outer_vars, &k.outer, "  ");
    let lin_decompose = decompose(p, hoister, "gl_lin", outer_vars, &k.outer, "        ");
    let mut params_c = Vec::new();
    let mut params = Vec::new();
    for &(b, written) in &buffers {
        let t = storage_type(p.buffers[b.index()].dtype);
        let q = if written { "" } else { "const " };
        params_c.push(format!("{q}{t}* __restrict__ {}", pointers[b.index()]));
        params.push(Param::Buffer {
            buffer: p.buffers[b.index()].name.clone(),
            written,
        });
    }
    let mut decls = String::new();
    for &id in &symbols {
        let n = p.env.symbol_name(id).to_string();
        params_c.push(format!("long long gl_sym_{n}"));
        params.push(Param::Symbol { name: n.clone() });
        let _ = writeln!(
            decls,
            "  const {idx} {} = ({idx})gl_sym_{n};",
            cuda_symbol(&n)
        );
    }
    for &(id, e) in &syms.hoister.derived {
        let n = p.env.symbol_name(id).to_string();
        params_c.push(format!("long long gl_sym_{n}"));
        let expr = syms
            .texts
            .entry(id)
            .or_insert_with(|| p.env.text(e))
            .clone();
        params.push(Param::Derived {
            name: n.clone(),
            expr,
        });
        let _ = writeln!(
            decls,
            "  const {idx} {} = ({idx})gl_sym_{n};",
            cuda_symbol(&n)
        );
    }
    let mut phases = 1;
    if blocks > 0 {
        let rows = p.env.text(k.rows);
        params_c.push("char* __restrict__ gl_work".into());
        params.push(Param::Workspace {
            bytes: format!("{}*({rows})", 16 * blocks * reductions.max(1) as i64),
        });
        params_c.push("long long gl_phase".into());
        params.push(Param::Phase);
        let last_reduces = k
            .members
            .iter()
            .any(|m| m.pass == passes - 1 && m.role == Role::Reduction);
        phases = passes + usize::from(last_reduces);
    }
    params_c.push("int* __restrict__ gl_error".into());
    params.push(Param::Error);
    Bodies {
        params_c,
        params,
        phases,
        decls,
        pass_ctx,
        pointwise_body,
        vector_decls,
        vector_loads,
        vector_stores,
        persistent_decls,
        rows_c,
        len_c,
        row_decompose,
        lin_decompose,
    }
}

/// One variant: the kernel's bodies in the template of its launch shape.
fn render_variant(
    p: &Program,
    tera: &Tera,
    k: &Kernel,
    v: &Variant,
    entry: &str,
    b: &Bodies,
) -> String {
    let c = &v.config;
    let idx = match c.index {
        IndexType::I32 => "int",
        IndexType::I64 => "long long",
    };
    let reduction = !k.inner.is_empty();
    let lpt = (c.lanes / c.threads_per_row.max(1)).max(1);
    let smem_bytes =
        (c.threads / c.threads_per_row.max(1)).max(1) * (c.threads_per_row / 32).max(1) * 16;
    let (params_c, decls, rows_c, len_c) = (&b.params_c, &b.decls, &b.rows_c, &b.len_c);
    let (row_decompose, lin_decompose) = (&b.row_decompose, &b.lin_decompose);
    let (pass_ctx, pointwise_body) = (&b.pass_ctx, &b.pointwise_body);
    let mut ctx = Context::new();
    ctx.insert("name", &k.name);
    ctx.insert("entry", entry);
    ctx.insert("nodes", &k.origins.join(", "));
    ctx.insert("params", &params_c.join(", "));
    ctx.insert("symbols", &decls);
    ctx.insert("idx", idx);
    ctx.insert("index", if idx == "int" { "int32" } else { "int64" });
    ctx.insert("threads", &c.threads);
    ctx.insert("vector", &c.vector);
    let text = if reduction {
        let strategy = match c.strategy {
            Strategy::Persistent => "persistent",
            _ => "looped",
        };
        ctx.insert("strategy", strategy);
        ctx.insert("rows_text", &p.env.text(k.rows));
        ctx.insert("len_text", &p.env.text(k.row_len));
        ctx.insert("rows", &rows_c);
        ctx.insert("len", &len_c);
        ctx.insert("tpr", &c.threads_per_row);
        ctx.insert("lanes", &c.lanes);
        ctx.insert("lpt", &lpt);
        ctx.insert("rows_per_block", &(c.threads / c.threads_per_row).max(1));
        ctx.insert("smem_bytes", &smem_bytes);
        ctx.insert("decompose_row", &row_decompose);
        ctx.insert("passes", &pass_ctx);
        ctx.insert("persistent_decls", &b.persistent_decls);
        // A split variant (blocks > 0) launches per pass; see the template.
        ctx.insert("blocks", &split_blocks(c));
        ctx.insert("phases", &b.phases);
        tera.render("reduction.cu", &ctx)
    } else {
        ctx.insert("numel_text", &p.env.text(k.rows));
        ctx.insert("numel", &rows_c);
        ctx.insert("ept", &c.elements_per_thread);
        ctx.insert("chunks", &(c.elements_per_thread / c.vector).max(1));
        ctx.insert("decompose", &lin_decompose);
        ctx.insert("body", &pointwise_body);
        ctx.insert("vectorized", &(c.vector > 1));
        ctx.insert("vector_decls", &b.vector_decls);
        ctx.insert("vector_loads", &b.vector_loads);
        ctx.insert("vector_stores", &b.vector_stores);
        tera.render("pointwise.cu", &ctx)
    }
    .unwrap_or_else(|e| panic!("kernel template: {e:?}"));
    text + "\n"
}

/// The index of `e` at the start of a chunk (in the kernel's variables) when `e` is contiguous in
/// the innermost variable `v` and a chunk of `vector` elements of `size` bytes is whole 16-byte
/// words; `None` otherwise.
fn contiguous(
    p: &mut Program,
    h: &mut hoist::Hoister,
    vars: &[(SymbolId, Expr)],
    (e, bound): (Expr, &[SymbolId]),
    v: Expr,
    vector: i64,
    size: usize,
) -> Option<Expr> {
    if (vector * size as i64) % 16 != 0 {
        return None;
    }
    let env = &mut p.env;
    let s = env.pool_mut().substitute_pairs(e, vars);
    let s = env.simplify(s);
    if env.pool().free_symbols(s).iter().any(|x| bound.contains(x)) {
        return None;
    }
    let vid = env.pool().as_symbol(v)?;
    let zero = env.pool_mut().zero();
    let base = env
        .pool_mut()
        .substitute(s, &|id| (id == vid).then_some(zero));
    let diff = env.pool_mut().sub(s, base);
    if env.simplify(diff) != v {
        return None;
    }
    Some(h.hoist(env, s))
}

/// A C identifier for a buffer's pointer.
fn pointer_name(buffer_name: &str) -> String {
    let clean: String = buffer_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("p_{clean}")
}

/// Combines a thread's lanes, then the row's threads, in the balanced-tree order; leaves the
/// row's result in element 0 of the accumulators (and positions) of every thread of the row.
/// The blocks a split variant spreads each row over; 0 for any other strategy.
fn split_blocks(c: &crate::schedule::config::KernelConfig) -> i64 {
    match c.strategy {
        Strategy::Split { blocks } => blocks,
        _ => 0,
    }
}

/// The type a reduction's value travels in between threads (shuffles take int, not bool).
fn shuffle_type(d: DType) -> &'static str {
    match compute_type(d) {
        "bool" => "int",
        t => t,
    }
}

/// A split reduction's row value from the workspace: the `blocks` partials of reduction `r`
/// combined pairwise in tree order (as the lanes' tree would), into `acc[0]` (and `pos[0]`).
fn combine_partials(
    kind: ReductionKind,
    d: DType,
    acc: &str,
    pos: &str,
    r: usize,
    reductions: usize,
    blocks: i64,
) -> String {
    let arg = matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin);
    let ct = shuffle_type(d);
    let better = if kind == ReductionKind::ArgMax {
        "gl_better_max"
    } else {
        "gl_better_min"
    };
    let merge = if arg {
        format!("if ({better}(cv[l + s], cv[l]) || (!{better}(cv[l], cv[l + s]) && cq[l + s] < cq[l])) {{ cv[l] = cv[l + s]; cq[l] = cq[l + s]; }}")
    } else {
        format!("cv[l] = {};", body::combine(kind, "cv[l]", "cv[l + s]"))
    };
    let mut out = String::new();
    let _ = writeln!(out, "    if (gl_active) {{");
    let _ = writeln!(
        out,
        "      {ct} cv[{blocks}];{}\n      const char* w = gl_work + ((long long)gl_row * {reductions} + {r}) * {blocks} * 16;",
        if arg { format!(" long long cq[{blocks}];") } else { String::new() }
    );
    let _ = writeln!(
        out,
        "#pragma unroll\n      for (int b = 0; b < {blocks}; ++b) {{ cv[b] = *(const {ct}*)(w + b * 16);{} }}",
        if arg { " cq[b] = *(const long long*)(w + b * 16 + 8);" } else { "" }
    );
    let _ = writeln!(
        out,
        "#pragma unroll\n      for (int s = 1; s < {blocks}; s <<= 1)\n#pragma unroll\n        for (int l = 0; l + s < {blocks}; l += 2 * s) {{ {merge} }}"
    );
    let _ = writeln!(
        out,
        "      {acc}[0] = cv[0];{}\n    }}",
        if arg {
            format!(" {pos}[0] = cq[0];")
        } else {
            String::new()
        }
    );
    out
}

fn finish_reduction(
    kind: ReductionKind,
    d: DType,
    acc: &str,
    pos: &str,
    vec: i64,
    tpr: i64,
) -> String {
    let arg = matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin);
    // Shuffles take int, not bool.
    let ct = match compute_type(d) {
        "bool" => "int",
        t => t,
    };
    let better = if kind == ReductionKind::ArgMax {
        "gl_better_max"
    } else {
        "gl_better_min"
    };
    // (a, pa) ⊕ (b, pb) into (a, pa): b wins if better, or tied with an earlier position.
    let merge = |a: &str, pa: &str, b: &str, pb: &str| -> String {
        if arg {
            format!(
                "if ({better}({b}, {a}) || (!{better}({a}, {b}) && {pb} < {pa})) {{ {a} = {b}; {pa} = {pb}; }}"
            )
        } else {
            format!("{a} = {};", body::combine(kind, a, b))
        }
    };
    // Declarations and shuffles of the position travel with the value only for arg-reductions.
    let q = |text: &str| if arg { text.to_string() } else { String::new() };
    let mut out = String::new();
    let _ = writeln!(out, "  {{");
    let _ = writeln!(
        out,
        "#pragma unroll\n    for (int s = 1; s < {vec}; s <<= 1)\n#pragma unroll\n      for (int l = 0; l + s < {vec}; l += 2 * s) {{ {} }}",
        merge(&format!("{acc}[l]"), &format!("{pos}[l]"), &format!("{acc}[l + s]"), &format!("{pos}[l + s]"))
    );
    let _ = writeln!(
        out,
        "    {ct} v = {acc}[0];{}",
        q(&format!(" long long q = {pos}[0];"))
    );
    let shuffle = |w: &str, lane: &str| {
        format!(
            "{ct} w = __shfl_down_sync(0xffffffffu, {w}, {lane});{}",
            q(&format!(
                " long long r = __shfl_down_sync(0xffffffffu, q, {lane});"
            ))
        )
    };
    let warp = tpr.min(32);
    let _ = writeln!(
        out,
        "    for (int o = 1; o < {warp}; o <<= 1) {{ {} {} }}",
        shuffle("v", "o"),
        merge("v", "q", "w", "r")
    );
    if tpr > 32 {
        let warps = tpr / 32;
        let id = identity(kind, d);
        let _ = writeln!(
            out,
            "    {ct}* sv = ({ct}*)gl_smem_raw;{}\n    const int base = (threadIdx.x / {tpr}) * {warps};\n    if ((gl_tid & 31) == 0) {{ sv[base + gl_tid / 32] = v;{} }}\n    __syncthreads();\n    if (gl_tid < 32) {{\n      v = gl_tid < {warps} ? sv[base + gl_tid] : {id};{}\n      for (int o = 1; o < {warps}; o <<= 1) {{ {} {} }}\n      if (gl_tid == 0) {{ sv[base] = v;{} }}\n    }}\n    __syncthreads();\n    v = sv[base];{}\n    __syncthreads();",
            q(" long long* sq = (long long*)(gl_smem_raw + sizeof(gl_smem_raw) / 2);"),
            q(" sq[base + gl_tid / 32] = q;"),
            q(" q = gl_tid < WARPS ? sq[base + gl_tid] : 9223372036854775807LL;").replace("WARPS", &warps.to_string()),
            shuffle("v", "o"),
            merge("v", "q", "w", "r"),
            q(" sq[base] = q;"),
            q(" q = sq[base];"),
        );
    } else {
        let _ = writeln!(
            out,
            "    const int lead = (threadIdx.x % 32) / {tpr} * {tpr};\n    v = __shfl_sync(0xffffffffu, v, lead);{}",
            q(" q = __shfl_sync(0xffffffffu, q, lead);")
        );
    }
    let _ = writeln!(out, "    {acc}[0] = v;{}", q(&format!(" {pos}[0] = q;")));
    let _ = writeln!(out, "  }}");
    out
}
