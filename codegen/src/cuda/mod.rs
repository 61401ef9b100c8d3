//! CUDA C for a schedule: one translation unit per graph — the common header, then one
//! `extern "C"` function per kernel variant — rendered from the Tera templates in `templates/`
//! (embedded in the binary). Dynamic sizes are `long long` parameters; static ones constants.

pub mod attention;
mod body;
pub mod grouped_mm;
mod hoist;
mod kernel;
mod library;
pub mod lines;
pub(crate) mod params;
mod persistent;
pub mod scatter;
pub mod select;
mod tree;

use std::fmt::Write;

use guardless_ir::loop_ir::{BufferKind, ExternKernel, Program};
use guardless_ir::sym::{CPrinter, SymbolId};
use rustc_hash::FxHashSet;
use serde::Serialize;
use tera::{Context, Tera};

use crate::schedule::config::{IndexType, KernelConfig, Strategy, Variant};
use crate::schedule::{Kernel, Schedule, Step};
pub use body::storage_type;
use kernel::{render_bodies, Bodies, KernelSymbols};

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
const ATTENTION: &str = include_str!("../../../templates/attention.cu");
const ATTENTION_MERGE: &str = include_str!("../../../templates/attention_merge.cu");
const PAGED_SEQUENCES: &str = include_str!("../../../templates/paged_sequences.cu");

/// What a `Param::FastDivisor` passes for a divisor of value `d`: the magic multiplier `m` in the
/// low 32 bits and the shift `s` in the high ones, so that `x / d == (hi32(x·m) + x) >> s` for
/// every `0 <= x < 2^31` (`s = ceil(log2 d)`, `m = floor(2^32·(2^s − d)/d) + 1`). `d` outside
/// `[1, 2^31)` gives 0: such a size never reaches an int32 variant's decomposition (a zero size
/// launches nothing; larger extents select the int64 variants).
pub fn fast_divisor(d: i64) -> u64 {
    if !(1..1 << 31).contains(&d) {
        return 0;
    }
    let d = d as u64;
    let s = 64 - (d - 1).leading_zeros() as u64;
    let m = ((1u64 << 32) * ((1u64 << s) - d)) / d + 1;
    m | (s << 32)
}

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
    /// `long long`: the magic multiplier and shift (`fast_divisor`) that divide by the size `expr`
    /// (evaluated like `Derived`) without a division instruction (`gl_fdiv` in common.cuh): an
    /// int32 variant's index decomposition over a run-time size.
    FastDivisor {
        name: String,
        expr: String,
    },
    /// `int*` where the first data-dependent error code is written.
    Error,
    /// `long long`: the function's error codes are this plus 1, 2, …; the messages are the
    /// module's `errors` from index `base` on (codes are 1-based: code `c` is `errors[c - 1]`).
    ErrorBase {
        base: usize,
    },
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
    /// the radix sort in phases (few long lines). Attention: of rows, over every key.
    Tiled,
    /// Attention over few rows and many keys: a block per tile of rows and share of the keys,
    /// partial results into the workspace.
    Split,
    /// Attention: the shares' partial results merged into the output.
    Merge,
}

const _: () = assert!(
    Part::Copy as usize == 0
        && Part::Count as usize == 1
        && Part::Scan as usize == 2
        && Part::Write as usize == 3
        && Part::Block as usize == 4
        && Part::Tiled as usize == 5
        && Part::Split as usize == 6
        && Part::Merge as usize == 7
);

impl Part {
    pub const ALL: [Part; 8] = [
        Part::Copy,
        Part::Count,
        Part::Scan,
        Part::Write,
        Part::Block,
        Part::Tiled,
        Part::Split,
        Part::Merge,
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
            Part::Split => "split",
            Part::Merge => "merge",
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
    /// Every function, `(name, text)`, in the order of `source`.
    pub functions: Vec<(String, String)>,
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
        ("attention.cu", ATTENTION),
        ("attention_merge.cu", ATTENTION_MERGE),
        ("paged_sequences.cu", PAGED_SEQUENCES),
        ("line_block.cu", LINE_BLOCK),
        ("lines.cu", LINES),
        ("radix.cu", RADIX),
    ] {
        t.add_raw_template(name, text)
            .unwrap_or_else(|e| panic!("template {name}: {e}"));
    }
    t
}

/// Whether variants whose generated code is the same share one function (the default), or each
/// variant is rendered on its own and gets its own function (for tests that check that sharing
/// never changes what a variant runs).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Sharing {
    Shared,
    PerVariant,
}

/// Renders every kernel and variant of `s`.
pub fn generate(p: &mut Program, s: &Schedule) -> CudaModule {
    generate_with(p, s, Sharing::Shared)
}

/// Renders every kernel and variant of `s`, sharing functions between variants as `sharing` says.
pub fn generate_with(p: &mut Program, s: &Schedule, sharing: Sharing) -> CudaModule {
    let tera = engine();
    let mut ctx = Context::new();
    ctx.insert("helpers_i32", &CPrinter::cuda("int", "i32").helpers());
    ctx.insert("helpers_i64", &CPrinter::cuda("long long", "i64").helpers());
    let header = tera
        .render("common.cuh", &ctx)
        .expect("the common header renders");
    let mut source = header.clone();
    let mut functions: Vec<(String, String)> = Vec::new();
    let pointers = pointer_names(p);
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    // Variants whose code comes out the same (they differ only in what the launch does, or in a
    // choice this generator does not act on yet) share one function.
    let mut seen: rustc_hash::FxHashMap<String, String> = rustc_hash::FxHashMap::default();
    for (ki, k) in s.kernels.iter().enumerate() {
        let _ = writeln!(source);
        // Per configuration: the function's text, parameters and launches per execution. The
        // whole configuration is the key (strategy, index type, launch shape, vector width):
        // everything the generated code depends on besides the kernel itself. A key that left
        // the strategy out once gave a looped variant the persistent function of the same
        // launch shape, which reads only the first steps of a row.
        type Rendered = (String, (Vec<Param>, usize));
        let mut rendered: Vec<(KernelConfig, Rendered)> = Vec::new();
        // Index arithmetic does not depend on the variant: hoisted and simplified once per kernel.
        let mut syms = KernelSymbols {
            hoister: hoist::Hoister::new(&p.env, local_symbols(p, k)),
            memo: rustc_hash::FxHashMap::default(),
            texts: rustc_hash::FxHashMap::default(),
            symbols: None,
            fast_divisors: Vec::new(),
        };
        for (vi, v) in k.variants.iter().enumerate() {
            let name = format!("{}_v{vi}", k.name);
            let c = &v.config;
            let done = rendered
                .iter()
                .find(|(done, _)| done == c)
                .filter(|_| sharing == Sharing::Shared);
            let (text, (params, phases)) = match done {
                Some((_, done)) => done.clone(),
                None => {
                    let b = render_bodies(p, k, v, &pointers, &mut syms, &mut errors);
                    let r = (
                        render_variant(p, &tera, k, v, ENTRY, &b),
                        (b.params.clone(), b.phases),
                    );
                    rendered.push((c.clone(), r.clone()));
                    r
                }
            };
            // Compared by structure: without the comments (which describe the variant) and with
            // the names of parameters and locals abstracted, so that the same kernel of another
            // layer (other buffers, other loop variables) is the same function.
            let name = emit_shared(&text, name, sharing, &mut seen, &mut source, &mut functions);
            entries.push(Entry {
                of: EntryOf::Kernel {
                    kernel: ki,
                    variant: vi,
                },
                unit: 0,
                name,
                params,
                generated: true,
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
            BufferKind::Extern {
                kernel: ExternKernel::Attention(_) | ExternKernel::PagedAttention(_),
                ..
            } => match attention::render(p, &tera, ENTRY, b, &pointers, &mut errors) {
                Some(f) => ("attention", f.to_vec()),
                None => continue,
            },
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
        let relaxed = s.relaxed_library.contains(&b);
        for (part, text, params) in parts {
            let text = if relaxed {
                registers_relaxed(&text)
            } else {
                text
            };
            let phases = lines::phases(p, &p.buffers[b.index()], part);
            let name = format!("{kind}{}_{}", &pointers[b.index()][1..], part.name());
            // The same step of another layer (other buffers, other symbols) is the same
            // function, as kernels are (error codes are literals: steps raising different
            // messages differ).
            let name = emit_shared(&text, name, sharing, &mut seen, &mut source, &mut functions);
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
        functions,
        entries,
        errors,
    }
}

/// Emits function `text` (named [`ENTRY`]) as `name` into `source` and `functions`, unless one of
/// the same structure ([`structural_key`]) was emitted before and `sharing` allows sharing: then
/// it is that one. Returns the name to launch.
fn emit_shared(
    text: &str,
    name: String,
    sharing: Sharing,
    seen: &mut rustc_hash::FxHashMap<String, String>,
    source: &mut String,
    functions: &mut Vec<(String, String)>,
) -> String {
    let code = structural_key(text);
    if sharing == Sharing::Shared {
        if let Some(first) = seen.get(&code) {
            return first.clone();
        }
    }
    seen.insert(code, name.clone());
    let f = text.replace(ENTRY, &name);
    source.push_str(&f);
    functions.push((name.clone(), f));
    name
}

/// `text` with every `__launch_bounds__(threads)` given a second number, 1: ptxas may then give
/// each thread the registers of one block per multiprocessor (the spill fallback of a library
/// step's functions, as `KernelConfig::registers_relaxed` is a kernel's).
fn registers_relaxed(text: &str) -> String {
    const BOUNDS: &str = "__launch_bounds__(";
    let mut out = String::with_capacity(text.len() + 8);
    let mut rest = text;
    while let Some(at) = rest.find(BOUNDS) {
        let (head, tail) = rest.split_at(at + BOUNDS.len());
        out.push_str(head);
        let close = tail.find(')').unwrap_or(tail.len());
        let threads = &tail[..close];
        out.push_str(threads);
        if !threads.contains(',') {
            out.push_str(", 1");
        }
        rest = &tail[close..];
    }
    out.push_str(rest);
    out
}

/// Whether `ident` is a name the generator derives from the program — a pointer parameter
/// (`p_x`, `p3_w_in`), a size parameter (`gl_sym_n`) or its local (`s_n`, loop and bound
/// variables `s_k17`, derived sizes `s_gl_d8`), a member's values (`m12_3`, `m12_acc`), register
/// arrays (`gl_v12_0`, `gl_c0`, `gl_s1`, `gl_d2`). Every such name is a parameter or a local of
/// the function it appears in (none is defined by the header or the templates), so renaming them
/// consistently does not change what the function computes.
fn program_name(ident: &str) -> bool {
    let digits_then = |rest: &str, then: &str| {
        let d = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        d > 0 && rest[d..].starts_with(then)
    };
    if let Some(rest) = ident.strip_prefix('p') {
        return rest.starts_with('_') || digits_then(rest, "_");
    }
    if let Some(rest) = ident.strip_prefix('m') {
        return digits_then(rest, "_");
    }
    if ident.starts_with("s_") || ident.starts_with("gl_sym_") {
        return true;
    }
    ["gl_v", "gl_c", "gl_s", "gl_d"].iter().any(|pre| {
        ident
            .strip_prefix(pre)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// The identity of a function's code: its text without comments, every name the generator derives
/// from the program (see [`program_name`]) replaced by its order of first appearance. Two functions
/// with the same key compute the same thing from their parameters in the same order (kernels of
/// identical layers: other buffers, other loop variables, other derived sizes of the same
/// expressions, error codes counted from their own `gl_err_base`).
pub fn structural_key(text: &str) -> String {
    let code = without_comments(text);
    let mut out = String::with_capacity(code.len());
    let mut names: rustc_hash::FxHashMap<&str, usize> = rustc_hash::FxHashMap::default();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let ident = &code[start..i];
            if program_name(ident) {
                let next = names.len();
                let k = *names.entry(ident).or_insert(next);
                let _ = write!(out, "$ {k}");
            } else {
                out.push_str(ident);
            }
        } else if c.is_ascii_digit() {
            // A number (with its suffixes: 64LL, 1e-6f) is kept whole, not read as a name.
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                i += 1;
            }
            out.push_str(&code[start..i]);
        } else {
            let ch = code[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// A function's text without its comment lines (which describe the variant, not the code).
pub fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
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
    ctx.insert("name", &crate::text::comment(&k.name));
    ctx.insert("entry", entry);
    ctx.insert("nodes", &crate::text::comment(&k.origins.join(", ")));
    ctx.insert("params", &params_c.join(", "));
    ctx.insert("symbols", &decls);
    ctx.insert("idx", idx);
    ctx.insert("index", if idx == "int" { "int32" } else { "int64" });
    ctx.insert("threads", &c.threads);
    let bounds = if c.registers_relaxed {
        format!("{}, 1", c.threads)
    } else {
        c.threads.to_string()
    };
    ctx.insert("bounds", &bounds);
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

/// A C identifier for each buffer's pointer: `p_` and its name when that is an identifier no
/// other buffer's name becomes, else `p`, the buffer's number and its name made an identifier
/// (`p7_mlp_up` for `mlp.up`: no `p_` name has a digit after the `p`).
fn pointer_names(p: &Program) -> Vec<String> {
    let idents: Vec<String> = p
        .buffers
        .iter()
        .map(|b| crate::text::identifier(&b.name))
        .collect();
    let mut count: rustc_hash::FxHashMap<&str, usize> = rustc_hash::FxHashMap::default();
    for i in &idents {
        *count.entry(i.as_str()).or_default() += 1;
    }
    idents
        .iter()
        .zip(&p.buffers)
        .enumerate()
        .map(|(k, (i, b))| {
            if *i == b.name && count[i.as_str()] == 1 {
                format!("p_{i}")
            } else {
                format!("p{k}_{i}")
            }
        })
        .collect()
}

/// The blocks a split variant spreads each row over; 0 for any other strategy.
fn split_blocks(c: &crate::schedule::config::KernelConfig) -> i64 {
    match c.strategy {
        Strategy::Split { blocks } => blocks,
        _ => 0,
    }
}

#[cfg(test)]
mod fast_division {
    use super::fast_divisor;

    /// `gl_fdiv` in common.cuh, as the device computes it.
    fn fdiv(x: u32, p: u64) -> u32 {
        let hi = ((x as u64 * (p & 0xffff_ffff)) >> 32) as u32;
        (hi + x) >> (p >> 32)
    }

    #[test]
    fn the_magic_numbers_divide_every_index_exactly() {
        let mut divisors: Vec<i64> = (1..=4096).collect();
        for k in 12..31 {
            divisors.extend([(1i64 << k) - 1, 1 << k, (1 << k) + 1, 3 << (k - 2)]);
        }
        divisors.push((1 << 31) - 1);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for &d in &divisors {
            let p = fast_divisor(d);
            let mut xs: Vec<u32> =
                vec![0, 1, (d - 1) as u32, d as u32, (1 << 31) - 1, (1 << 31) - 2];
            xs.extend((1..4).map(|q| (q * d - 1).min((1 << 31) - 1) as u32));
            for _ in 0..200 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                xs.push((rng % (1 << 31)) as u32);
            }
            for x in xs {
                assert_eq!(fdiv(x, p), x / d as u32, "{x} / {d}");
            }
        }
        assert_eq!(fast_divisor(0), 0);
        assert_eq!(fast_divisor(1 << 31), 0);
    }
}
