//! Every variant of every kernel of every example graph (backed and unbacked), run in the CUDA
//! emulation — built with AddressSanitizer and UndefinedBehaviorSanitizer — at sizes where the
//! launcher picks it on its own: past every persistent-row limit, on both sides of every boundary
//! between variants (row-count buckets, int32 and int64 indices, vector widths by divisibility),
//! and with the vector variants' buffers misaligned so that their scalar fallbacks run. Sizes up to
//! the symbols' ranges (past 2^31 elements: mapped memory, touched only where sampled); each run
//! checks the rows of a few sampled blocks against the loop-IR interpreter (`emu::sampled`).

mod emu;
mod examples;

use emu::sampled::{check_variant, root, selected};
use guardless_codegen::cuda::{generate, CudaModule, Param};
use guardless_codegen::schedule::{schedule, Schedule};
use guardless_ir::graph::Graph;
use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use guardless_ir::sym::{Bindings, Expr, SymbolId};
use rustc_hash::{FxHashMap, FxHashSet};

/// The base size symbols a kernel's launch depends on (derived ones expanded).
fn kernel_symbols(p: &Program, s: &Schedule, m: &CudaModule, ki: usize) -> Vec<SymbolId> {
    let k = &s.kernels[ki];
    let mut es: Vec<Expr> = vec![k.rows, k.row_len];
    // What the functions take: sizes, derived sizes, buffers (their layouts).
    let mut env = p.env.clone();
    for e in m
        .entries
        .iter()
        .filter(|e| e.kernel_variant().is_some_and(|(k, _)| k == ki))
    {
        for prm in &e.params {
            match prm {
                Param::Symbol { name } => es.push(p.env.symbol(name).unwrap()),
                Param::Derived { expr, .. }
                | Param::FastDivisor { expr, .. }
                | Param::Workspace { bytes: expr } => es.push(env.parse(expr).unwrap()),
                Param::Buffer { buffer, .. } => {
                    let b = p.buffers.iter().find(|b| &b.name == buffer).unwrap();
                    es.extend(b.layout.sizes.iter().chain(&b.layout.strides).copied());
                    es.push(b.layout.offset);
                }
                Param::Error | Param::ErrorBase { .. } | Param::Phase => {}
            }
        }
    }
    let pool = env.pool();
    for v in &k.variants {
        es.push(v.predicate);
        es.push(v.grid);
    }
    for m in &k.members {
        let b = &p.buffers[m.buffer.index()];
        es.extend(b.layout.sizes.iter().chain(&b.layout.strides).copied());
        es.push(b.layout.offset);
        if let BufferKind::Computed { loops, .. } = &b.kind {
            es.extend(loops.ranges.iter().copied());
            if let Some((_, rr, _)) = &loops.reduction {
                es.extend(rr.iter().copied());
            }
        }
    }
    let mut out: Vec<SymbolId> = Vec::new();
    let mut todo = pool.free_symbols_of(&es);
    let mut seen = FxHashSet::default();
    let locals: FxHashSet<SymbolId> = k.vars.iter().filter_map(|&v| pool.as_symbol(v)).collect();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) || locals.contains(&id) {
            continue;
        }
        match env.symbol_definition(id) {
            Some(def) => todo.extend(pool.free_symbols(def)),
            None => out.push(id),
        }
    }
    // Loop variables of members (not the kernel's own) have no range worth searching.
    out.retain(|&id| p.env.symbol_range(id).hi < (1i128 << 40));
    out.sort_by_key(|&id| p.env.symbol_name(id).to_string());
    out
}

/// Candidate bindings: for each symbol (the others at a small value) and for all together, both
/// sides of every change of the selected variant, found on several divisibility lattices.
fn candidates(
    p: &Program,
    s: &Schedule,
    m: &CudaModule,
    ki: usize,
    syms: &[SymbolId],
    modes: &[FxHashSet<BufferId>],
) -> (Vec<Bindings>, Vec<usize>) {
    let range = |id: SymbolId| {
        let r = p.env.symbol_range(id);
        (r.lo.max(0) as i64, r.hi.min(1 << 40) as i64)
    };
    let base = |id: SymbolId| {
        let (lo, hi) = range(id);
        17i64.clamp(lo, hi)
    };
    let mut out: Vec<Bindings> = Vec::new();
    // Candidates on either side of a boundary (all buffers aligned; odd values and multiples of 16).
    let mut edges: Vec<usize> = Vec::new();
    let mut seen: FxHashMap<Vec<i64>, usize> = FxHashMap::default();
    let mut axes: Vec<Vec<SymbolId>> = syms.iter().map(|&s| vec![s]).collect();
    if syms.len() > 1 {
        axes.push(syms.to_vec());
    }
    for axis in axes {
        let (lo, hi) = axis
            .iter()
            .map(|&id| range(id))
            .fold((0, i64::MAX), |(l, h), (a, b)| (l.max(a), h.min(b)));
        if lo > hi {
            continue;
        }
        let bind = |t: i64| -> Option<Bindings> {
            let mut b = Bindings::new();
            for &id in syms {
                b.set(id, if axis.contains(&id) { t } else { base(id) });
            }
            p.env.check_bindings(&b).ok().map(|_| b)
        };
        let sel = |t: i64| -> Option<Vec<Option<usize>>> {
            let b = bind(t)?;
            Some(
                modes
                    .iter()
                    .map(|mis| selected(p, s, m, ki, &b, mis))
                    .collect(),
            )
        };
        let mut push = |t: i64, out: &mut Vec<Bindings>| -> Option<usize> {
            let b = bind(t)?;
            let key: Vec<i64> = syms.iter().map(|&id| b.get(id).unwrap()).collect();
            Some(*seen.entry(key).or_insert_with(|| {
                out.push(b);
                out.len() - 1
            }))
        };
        for t in lo..=(lo + 3).min(hi) {
            push(t, &mut out);
        }
        // A geometric grid over the range, on lattices of odd values and of multiples of 2^j.
        let mut grid = vec![lo];
        let mut g = lo.max(1) as f64;
        while (g as i64) < hi {
            g = (g * 1.04).max(g + 1.0);
            grid.push((g as i64).min(hi));
        }
        for step in [1i64, 2, 4, 8, 16, 64] {
            let on = |t: i64| -> Option<i64> {
                let v = if step == 1 {
                    t | 1
                } else {
                    (t + step - 1) / step * step
                };
                (v <= hi).then_some(v)
            };
            let points: Vec<i64> = grid.iter().filter_map(|&t| on(t)).collect();
            for w in points.windows(2) {
                let (mut a, mut z) = (w[0], w[1]);
                let sa = sel(a);
                if sa == sel(z) || sa.is_none() {
                    continue;
                }
                // The last point of the lattice selecting as `a` does, then the first that doesn't.
                let st = if step == 1 { 2 } else { step };
                while z - a > st {
                    let mid = a + ((z - a) / st / 2).max(1) * st;
                    if sel(mid) == sa {
                        a = mid;
                    } else {
                        z = mid;
                    }
                }
                let sides = [push(a, &mut out), push(z, &mut out)];
                if (step == 1 || step == 16) && sel(a).map(|s| s[0]) != sel(z).map(|s| s[0]) {
                    edges.extend(sides.into_iter().flatten());
                }
            }
        }
    }
    edges.sort();
    edges.dedup();
    (out, edges)
}

/// A binding's cost: its largest value (small sizes are quicker to check).
fn cost(b: &Bindings, syms: &[SymbolId]) -> i64 {
    syms.iter()
        .map(|&id| b.get(id).unwrap_or(0))
        .max()
        .unwrap_or(0)
}

const TEST: &str = "every_variant_of_every_example_runs_where_the_launcher_selects_it";

#[test]
fn every_variant_of_every_example_runs_where_the_launcher_selects_it() {
    // A sanitized child per example file, one per core at a time, the files taken in turn.
    if !emu::asan_loaded() {
        let only = std::env::var("GUARDLESS_VARIANTS_ONLY").ok();
        let files: Vec<String> = example_files()
            .into_iter()
            .filter(|f| only.as_deref().is_none_or(|o| f.contains(o)))
            .collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let outputs = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|sc| {
            for _ in 0..threads {
                sc.spawn(|| loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(file) = files.get(k) else { break };
                    let out = emu::sanitized(TEST, &[(FILE, file)]).expect("a child process");
                    outputs.lock().unwrap().push(out);
                });
            }
        });
        let outputs = outputs.into_inner().unwrap();
        let mut total = 0;
        for out in outputs {
            let stdout = String::from_utf8_lossy(&out.stdout);
            print!("{stdout}");
            let checked = stdout
                .lines()
                .find_map(|l| l.strip_prefix("variants checked: "))
                .and_then(|l| l.split(' ').next()?.parse::<usize>().ok());
            assert!(
                out.status.success() && checked.is_some(),
                "a sanitized run failed ({:?}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            total += checked.unwrap_or(0);
        }
        assert!(only.is_some() || total > 100, "only {total} variants");
        return;
    }
    let only = std::env::var("GUARDLESS_VARIANTS_ONLY").ok();
    let file_only = std::env::var(FILE).ok();
    let mut total = 0;
    let mut runs = 0;
    for file in example_files() {
        if only.as_deref().is_some_and(|o| !file.contains(o))
            || file_only.as_deref().is_some_and(|f| f != file)
        {
            continue;
        }
        let g = Graph::from_json(&examples::example(&file)).unwrap();
        total += check_every_variant(&file, &g, &mut runs);
    }
    println!("variants checked: {total} ({runs} runs)");
}

/// Runs every variant of every kernel of `g` where the launcher picks it (the cheapest sizes
/// that select it, aligned or misaligned, then both sides of every boundary) against the
/// interpreter; returns how many variants were covered, counting the runs in `runs`.
fn check_every_variant(file: &str, g: &Graph, runs: &mut usize) -> usize {
    let mut total = 0;
    let mut p = lower_of(g);
    let s = schedule(&mut p);
    let m = generate(&mut p, &s);
    let c = emu::build_sanitized(file, &p, &m);
    for ki in 0..s.kernels.len() {
        let k = &s.kernels[ki];
        let syms = kernel_symbols(&p, &s, &m, ki);
        let all_aligned: FxHashSet<BufferId> = FxHashSet::default();
        let vector_buffers: FxHashSet<BufferId> = k
            .variants
            .iter()
            .flat_map(|v| v.aligned.iter().map(|&a| root(&p, a)))
            .collect();
        let modes = [all_aligned, vector_buffers];
        let (cands, edges) = candidates(&p, &s, &m, ki, &syms, &modes);
        // Per variant: the cheapest candidate that selects it, in either mode.
        let mut best: FxHashMap<usize, (i64, usize, usize)> = FxHashMap::default();
        for (ci, b) in cands.iter().enumerate() {
            for (mi, mis) in modes.iter().enumerate() {
                if let Some(vi) = selected(&p, &s, &m, ki, b, mis) {
                    // A launch with no blocks checks nothing.
                    if p.env.evaluate(k.variants[vi].grid, b).unwrap_or(0) <= 0 {
                        continue;
                    }
                    let c = cost(b, &syms);
                    if best.get(&vi).is_none_or(|&(bc, _, _)| c < bc) {
                        best.insert(vi, (c, ci, mi));
                    }
                }
            }
        }
        // Every variant where it is cheapest to reach, then both sides of every boundary.
        let mut plan: Vec<(usize, usize, usize)> = Vec::new();
        for vi in 0..k.variants.len() {
            let Some(&(_, ci, mi)) = best.get(&vi) else {
                panic!(
                    "{file}: {} variant {vi} is selected at no size in range ({} candidates)",
                    k.name,
                    cands.len()
                );
            };
            plan.push((vi, ci, mi));
        }
        for &ci in &edges {
            if let Some(vi) = selected(&p, &s, &m, ki, &cands[ci], &modes[0]) {
                if !plan.iter().any(|&(v, c, _)| v == vi && c == ci) {
                    plan.push((vi, ci, 0));
                }
            }
        }
        let mut covered = FxHashSet::default();
        for (vi, ci, mi) in plan {
            let b = &cands[ci];
            let at: Vec<String> = syms
                .iter()
                .map(|&id| format!("{}={}", p.env.symbol_name(id), b.get(id).unwrap()))
                .collect();
            let r = check_variant(&p, &s, &m, &c, ki, vi, b, &modes[mi], 1 + *runs as u64)
                .unwrap_or_else(|e| panic!("{file} at {}: {e}", at.join(" ")));
            println!(
                "{file}: {} v{vi} at {}{}: {} of {} blocks, {} rows, {} elements",
                k.name,
                at.join(" "),
                if mi == 1 { " (misaligned)" } else { "" },
                r.blocks,
                r.grid,
                r.rows,
                r.elements
            );
            if covered.insert(vi) {
                total += 1;
            }
            *runs += 1;
        }
    }
    total
}

const SHARED_TEST: &str = "shared_graphs_run_every_variant_where_the_launcher_selects_it";

/// Graphs of tests/graphs whose kernels the examples do not have: vocabulary-wide softmaxes at
/// decode sizes (split over blocks when the rows are few, looped otherwise; f32 rows are chunks
/// of four 16-byte words per thread, bf16 rows two; their scalar variants, for misaligned
/// inputs, prefetch a thread's elements predicated on the row's end) and kernels whose accesses
/// have different widths (bf16 beside f32 in 8-byte words, a gathered or transposed operand read
/// element by element beside vector accesses).
const SHARED: [&str; 5] = [
    "vocab_softmax_f32",
    "vocab_softmax_bf16",
    "widths_mixed_dtypes",
    "widths_gathered_rows",
    "widths_transposed_operand",
];

/// Every variant of every kernel of `SHARED`'s graphs where the launcher picks it, sanitized.
#[test]
fn shared_graphs_run_every_variant_where_the_launcher_selects_it() {
    if let Some(out) = emu::sanitized(SHARED_TEST, &[]) {
        let stdout = String::from_utf8_lossy(&out.stdout);
        print!("{stdout}");
        // Each graph's variants (4 or 8), none selected at no size (that panics).
        let checked = stdout
            .lines()
            .find_map(|l| l.strip_prefix("variants checked: "))
            .and_then(|l| l.split(' ').next()?.parse::<usize>().ok())
            .unwrap_or(0);
        assert!(
            out.status.success() && checked >= 20,
            "the sanitized run failed ({:?}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let mut total = 0;
    let mut runs = 0;
    for name in SHARED {
        let path = format!("{}/../tests/graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        total += check_every_variant(name, &Graph::from_json(&text).unwrap(), &mut runs);
    }
    println!("variants checked: {total} ({runs} runs)");
}

/// The one example file a sanitized child checks.
const FILE: &str = "GUARDLESS_VARIANTS_FILE";

/// Every example graph file: `rms_norm.unbacked`, `rms_norm.backed`, …
fn example_files() -> Vec<String> {
    examples::example_names()
        .into_iter()
        .flat_map(|name| ["unbacked", "backed"].map(|kind| format!("{name}.{kind}")))
        .collect()
}

fn lower_of(g: &Graph) -> Program {
    guardless_ir::lower::lower(g).unwrap()
}
