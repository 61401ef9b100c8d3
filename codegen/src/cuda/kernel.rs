//! A kernel's code for one index type: its members' bodies per pass, rendered with the
//! variant's vector loads and stores, persistent row caches and reduction trees; the variants'
//! launch shapes only change the template around them (`render_variant`).

use std::fmt::Write;

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{Body, BufferId, BufferKind, Program, ReductionKind};
use guardless_ir::sym::{cuda_symbol, CPrinter, Expr, SymbolId};

use super::body::{self, compute_type, identity, storage_type, Read, Scope};
use super::params::{kernel_buffers, kernel_params, size_symbols, KernelShape};
use super::tree::{self, combine_partials, finish_reduction, shuffle_type};
use super::{hoist, local_symbols, persistent, split_blocks, Param};
use crate::schedule::config::{member_map, IndexType, Strategy, Variant};
use crate::schedule::{Kernel, Residence, Role};

/// A kernel's code for one index type: parameters, declarations, the bodies of its passes. The
/// variants' launch shapes only change the template around them.
#[derive(Clone)]
pub(super) struct Bodies {
    pub(super) params_c: Vec<String>,
    pub(super) params: Vec<Param>,
    /// Launches per kernel execution (1 unless split).
    pub(super) phases: usize,
    pub(super) decls: String,
    pub(super) pass_ctx: Vec<tera::Value>,
    pub(super) pointwise_body: String,
    /// Pointwise vector variants: register arrays, the 16-byte loads at the start of a chunk and
    /// the 16-byte stores at its end.
    pub(super) vector_decls: String,
    pub(super) vector_loads: String,
    pub(super) vector_stores: String,
    /// Persistent reductions: the register arrays holding the row.
    pub(super) persistent_decls: String,
    pub(super) rows_c: String,
    pub(super) len_c: String,
    pub(super) row_decompose: String,
    pub(super) lin_decompose: String,
}

/// A kernel's index arithmetic in kernel terms, shared by its variants: the derived parameters,
/// and each member's indices after substitution, simplification and hoisting.
pub(super) struct KernelSymbols {
    pub(super) hoister: hoist::Hoister,
    pub(super) memo: rustc_hash::FxHashMap<(usize, Expr), Expr>,
    /// Derived parameters' expressions as text (long for concatenation offsets).
    pub(super) texts: rustc_hash::FxHashMap<SymbolId, String>,
    /// The graph symbols the kernel's code uses.
    pub(super) symbols: Option<Vec<SymbolId>>,
    /// Run-time sizes an int32 variant divides its linear index by: parameter `gl_fdK` is
    /// `fast_divisors[K]`'s magic numbers (`Param::FastDivisor`).
    pub(super) fast_divisors: Vec<Expr>,
}

pub(super) fn render_bodies(
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
    let errors_from = errors.len();
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

    let buffers = kernel_buffers(p, k);
    let symbols = size_symbols(p, k, &buffers, &locals, syms);

    let hoister = &mut syms.hoister;
    let fast_divisors = &mut syms.fast_divisors;
    let c_of = |p: &mut Program, h: &mut hoist::Hoister, e: Expr| {
        let e = h.hoist(&mut p.env, e);
        p.env.to_c(e, &printer)
    };
    // A linear index split into the kernel's variables, innermost first. In an int32 variant a
    // run-time size divides by multiplication (`gl_fdiv`, the launcher's magic numbers): no
    // integer division instruction per element; constant sizes are the compiler's to divide.
    let decompose = |p: &mut Program,
                     h: &mut hoist::Hoister,
                     fast: &mut Vec<Expr>,
                     (lin, vars, sizes): (&str, &[Expr], &[Expr]),
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
                continue;
            }
            let size = c_of(p, h, sizes[j]);
            if idx == "int" && p.env.pool().as_const(sizes[j]).is_none() {
                let k = match fast.iter().position(|&f| f == sizes[j]) {
                    Some(k) => k,
                    None => {
                        fast.push(sizes[j]);
                        fast.len() - 1
                    }
                };
                let _ = writeln!(
                    out,
                    "{indent}const int gl_q{j}_{lin} = (int)gl_fdiv((unsigned)gl_rest_{lin}, gl_fd{k}); const int {name} = gl_rest_{lin} - gl_q{j}_{lin} * ({size}); gl_rest_{lin} = gl_q{j}_{lin};"
                );
            } else {
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
    // A scalar looped or split reduction over one dimension loads a thread's `lpt` elements of
    // each contiguous input together (predicated on the row's end) before using any of them:
    // `lpt` loads in flight instead of one load, a branch and its use at a time.
    let prefetch = reduction
        && !vectorize
        && k.inner.len() == 1
        && matches!(c.strategy, Strategy::Looped | Strategy::Split { .. })
        && lpt > 1;
    let mut prefetched: Vec<(&'static str, String)> = Vec::new();
    // Persistent vector passes: the per-step arrays of every step's loaded words.
    let mut hoisted_decls = String::new();
    // Cached loads kept in their loaded words: how later passes read them.
    let mut raw_cached: rustc_hash::FxHashMap<String, String> = rustc_hash::FxHashMap::default();
    // A persistent variant keeps the row in registers: each thread's share of an input read in
    // several passes is loaded once (first pass) into `gl_cN[chunk][lane]` and read from there
    // after. A thread handles at most `steps` chunks of `lpt` elements (the row bound).
    let (cached, steps) = if reduction && c.strategy == Strategy::Persistent {
        persistent::cached_loads(p, k, c, &member_vars, lpt)
    } else {
        (Vec::new(), 0)
    };
    // Nothing kept in registers: the looped code is the persistent variant's code.
    let persistent = !cached.is_empty();
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
            let mut to_cache: Vec<(usize, String, String)> = Vec::new();
            if persistent {
                for (i, buffer, index, _) in body::unmasked_loads(body) {
                    let key = (buffer, persistent::load_key(p, &member_vars[mi], index));
                    if let Some(x) = cached.iter().find(|x| x.key == key) {
                        let slot = format!("{}[gl_j][gl_l]", x.name);
                        if x.first_pass == pass {
                            to_cache.push((i, x.name.clone(), slot));
                        } else {
                            let read = raw_cached.get(&x.name).cloned().unwrap_or(slot);
                            vloads.insert(i, read);
                        }
                    }
                }
            }
            if let (true, Some(v)) = (prefetch, innermost) {
                let memory = |b: BufferId| matches!(read(b), Read::Memory(_));
                let out = Prefetch {
                    arrays: &mut prefetched,
                    values: &mut vloads,
                };
                prefetch_member(
                    p,
                    hoister,
                    (body, &member_vars[mi]),
                    (v, &printer),
                    (&memory, pointers),
                    out,
                );
            } else if let (true, Some(v)) = (vectorize, innermost) {
                let bound = bound_vars(p, body);
                for (i, buffer, index, _) in body::unmasked_loads(body) {
                    if vloads.contains_key(&i) || k.scalar_buffers.contains(&buffer) {
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
                    let (word, words) = vector_words(chunk * dt.size() as i64);
                    let t = storage_type(dt);
                    let ptr = &pointers[buffer.index()];
                    let at = p.env.to_c(at, &printer);
                    // A persistent variant's first pass loads every step's words of the row
                    // before the steps' work (one array per step, kept for later passes); later
                    // passes (a weight beside the cached row) load a step at a time, which keeps
                    // the registers of 5 blocks per SM for rms_norm rather than 3.
                    let hoist = persistent && pass == 0;
                    let (decls, step) = if hoist {
                        (&mut hoisted_decls, "[gl_j]")
                    } else {
                        (&mut vector_decls, "")
                    };
                    let dims = if hoist {
                        format!("[{steps}][{words}]")
                    } else {
                        format!("[{words}]")
                    };
                    let _ = writeln!(decls, "      {word} {name}{dims};");
                    let _ = writeln!(
                        vector_loads,
                        "        for (int gl_w = 0; gl_w < {words}; ++gl_w) {name}{step}[gl_w] = reinterpret_cast<const {word}*>({ptr} + (long long)({at}))[gl_w];"
                    );
                    vloads.insert(
                        i,
                        format!("gl_ld(reinterpret_cast<const {t}*>({name}{step}), gl_l)"),
                    );
                }
            }
            // A stored elementwise member moves as a vector when its own index is contiguous.
            let vstore = match (vectorize, innermost, m.role, m.stored) {
                (true, Some(v), Role::Elementwise, Some(_))
                    if !k.scalar_buffers.contains(&m.buffer) =>
                {
                    contiguous(
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
                    let (word, words) = vector_words(chunk * buf.dtype.size() as i64);
                    let _ = writeln!(vector_decls, "      {word} {name}[{words}];");
                    let at = p.env.to_c(at, &printer);
                    let ptr = &pointers[m.buffer.index()];
                    let _ = writeln!(
                        vector_stores,
                        "        for (int gl_w = 0; gl_w < {words}; ++gl_w) reinterpret_cast<{word}*>({ptr} + (long long)({at}))[gl_w] = {name}[gl_w];"
                    );
                    format!("reinterpret_cast<{}*>({name})", storage_type(buf.dtype))
                })
                }
                _ => None,
            };
            // A cached load that moved as 16-byte words stays in its per-step words (every step's
            // are loaded first, and kept): later passes read them there, not from a widened copy
            // (a bf16 row takes half the registers); others go to the cache.
            for (i, name, slot) in to_cache {
                match vloads.get(&i) {
                    Some(words) => {
                        raw_cached.entry(name).or_insert_with(|| words.clone());
                    }
                    None => {
                        let _ = writeln!(cache_stores, "{indent}{slot} = m{}_{i};", m.buffer.0);
                    }
                }
            }
            let mut sc = Scope {
                env: &mut p.env,
                printer: &printer,
                idx,
                read: &read,
                vars: &member_vars[mi],
                errors,
                errors_from: Some(errors_from),
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
                        let better = tree::better(kind);
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
        // So are the row's registers of a persistent variant (indexed by step and lane), and
        // the prefetched elements.
        let unroll = if vectorized_pass || persistent || !prefetched.is_empty() {
            "#pragma unroll"
        } else {
            unroll
        };
        pc.insert("unroll".into(), unroll.into());
        let (prefetch_decls, prefetch_loads) = prefetch_text(&std::mem::take(&mut prefetched), lpt);
        pc.insert("prefetch_decls".into(), prefetch_decls.into());
        pc.insert(
            "hoisted_decls".into(),
            std::mem::take(&mut hoisted_decls).into(),
        );
        pc.insert("prefetch".into(), prefetch_loads.into());
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
            decompose(
                p,
                hoister,
                fast_divisors,
                ("gl_r", inner_vars, &k.inner),
                "        ",
            )
            .into(),
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
    let row_decompose = decompose(
        p,
        hoister,
        fast_divisors,
        ("gl_row", outer_vars, &k.outer),
        "  ",
    );
    let lin_decompose = decompose(
        p,
        hoister,
        fast_divisors,
        ("gl_lin", outer_vars, &k.outer),
        "        ",
    );
    let (mut params_c, mut params, decls, phases) = kernel_params(
        p,
        k,
        KernelShape {
            buffers: &buffers,
            pointers,
            symbols: &symbols,
            idx,
            blocks,
            reductions,
            passes,
        },
        syms,
    );
    if errors.len() > errors_from {
        // The function's error codes count from this parameter, so that one function serves
        // every kernel of its structure, each with its own messages.
        params_c.push("long long gl_err_base".into());
        params.push(Param::ErrorBase { base: errors_from });
    }
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

/// A scalar reduction pass's prefetched loads: (storage type, the load of element `gl_l` of the
/// thread's chunk) per register array `gl_pN`, and what each prefetched load of a member body
/// reads instead.
struct Prefetch<'a> {
    arrays: &'a mut Vec<(&'static str, String)>,
    values: &'a mut rustc_hash::FxHashMap<usize, String>,
}

/// Prefetches a member's unmasked loads from memory that are contiguous in the row's one
/// variable `v`: each becomes a register array of the thread's elements, filled where the
/// element is in the row by loads issued together at the start of the thread's chunk; the body
/// reads the array. Loads of the same address share one array.
fn prefetch_member(
    p: &mut Program,
    h: &mut hoist::Hoister,
    (body, vars): (&Body, &[(SymbolId, Expr)]),
    (v, printer): (Expr, &CPrinter),
    (memory, pointers): (&dyn Fn(BufferId) -> bool, &[String]),
    out: Prefetch,
) {
    let bound = bound_vars(p, body);
    for (i, buffer, index, _) in body::unmasked_loads(body) {
        if out.values.contains_key(&i) || !memory(buffer) {
            continue;
        }
        let Some(at) = unit_stride(p, h, vars, (index, &bound), v) else {
            continue;
        };
        let at = p.env.to_c(at, printer);
        let load = format!("{}[(long long)({at}) + gl_l]", pointers[buffer.index()]);
        let k = match out.arrays.iter().position(|(_, l)| *l == load) {
            Some(k) => k,
            None => {
                let t = storage_type(p.buffers[buffer.index()].dtype);
                out.arrays.push((t, load));
                out.arrays.len() - 1
            }
        };
        out.values.insert(i, format!("gl_ld(gl_p{k}, gl_l)"));
    }
}

/// The register arrays of a pass's prefetched loads, and the loads that fill them.
fn prefetch_text(arrays: &[(&str, String)], lpt: i64) -> (String, String) {
    let (mut decls, mut loads) = (String::new(), String::new());
    for (k, (t, load)) in arrays.iter().enumerate() {
        let _ = writeln!(decls, "    {t} gl_p{k}[{lpt}];");
        let _ = writeln!(
            loads,
            "#pragma unroll\n      for (int gl_l = 0; gl_l < {lpt}; ++gl_l) if (gl_c + gl_l < gl_len) gl_p{k}[gl_l] = {load};"
        );
    }
    (decls, loads)
}

/// Variables a body binds from loaded values (gathers, embeddings): they exist only inside the
/// element loop, so a load whose address uses one cannot move ahead of it.
fn bound_vars(p: &Program, body: &Body) -> Vec<SymbolId> {
    body.ops
        .iter()
        .filter_map(|&(op, _)| match op {
            guardless_ir::loop_ir::Op::Bind { var, .. } => p.env.pool().as_symbol(var),
            _ => None,
        })
        .collect()
}

/// How a chunk of `bytes` bytes moves: 16-byte words, or one 8- or 4-byte word (bf16 values four
/// to a vector beside f32 ones: one 8-byte access instead of four 2-byte ones).
fn vector_words(bytes: i64) -> (&'static str, i64) {
    match bytes {
        4 => ("unsigned", 1),
        8 => ("uint2", 1),
        _ => ("uint4", bytes / 16),
    }
}

/// The index of `e` at the start of a chunk (in the kernel's variables) when `e` is contiguous in
/// the innermost variable `v` and a chunk of `vector` elements of `size` bytes is whole 16-byte
/// words, or one 8- or 4-byte word; `None` otherwise.
fn contiguous(
    p: &mut Program,
    h: &mut hoist::Hoister,
    vars: &[(SymbolId, Expr)],
    (e, bound): (Expr, &[SymbolId]),
    v: Expr,
    vector: i64,
    size: usize,
) -> Option<Expr> {
    let bytes = vector * size as i64;
    if bytes % 16 != 0 && bytes != 8 && bytes != 4 {
        return None;
    }
    unit_stride(p, h, vars, (e, bound), v)
}

/// The index of `e` at the start of a chunk (in the kernel's variables) when `e` steps by one
/// element with the innermost variable `v` and uses no variable bound in the body; `None`
/// otherwise.
fn unit_stride(
    p: &mut Program,
    h: &mut hoist::Hoister,
    vars: &[(SymbolId, Expr)],
    (e, bound): (Expr, &[SymbolId]),
    v: Expr,
) -> Option<Expr> {
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
