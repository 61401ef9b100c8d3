//! Differential fuzzing of the backends: random graphs (`differential::random`: chains of views,
//! pointwise math, reductions, normalizations, matmuls, concatenations over unbacked sizes) through
//! the scheduler (fusion, memory plan) on the CPU backend — native kernels with the `llvm` feature —
//! and through the generated CUDA on the CPU emulation of CUDA, against the op-level reference at
//! sizes from 0 to far past the hints, storage poisoned. A failure prints the graph's JSON.
//! `GUARDLESS_FUZZ_GRAPHS` (default 36) sets the number of graphs.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::random::{self, Kind};
use guardless_ir::graph::Graph;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::cpu::{CpuProgram, RunOptions};
use guardless_runtime::launch::{Executable, Inputs};
use guardless_runtime::specialize::{Specializations, SpecializeError};

fn graphs(default: u64) -> u64 {
    std::env::var("GUARDLESS_FUZZ_GRAPHS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The panic message of a caught panic.
fn message(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// One run of a random graph: what it is (for messages), the symbol values, their bindings and
/// the inputs.
struct Run {
    what: String,
    values: Vec<(&'static str, i64)>,
    b: Bindings,
    inputs: Vec<HostTensor>,
}

/// Each [`random::VALUES`] entry as bindings of `g`'s symbols, with random inputs.
fn each_size(g: &Graph, seed: u64) -> Vec<Run> {
    random::VALUES
        .iter()
        .enumerate()
        .map(|(k, &[u0, u1])| {
            let values: Vec<(&str, i64)> = [("u0", u0), ("u1", u1)]
                .into_iter()
                .filter(|(n, _)| g.env.symbol_id(n).is_some())
                .collect();
            let what = format!("random graph {seed} at {values:?}");
            let b = differential::bindings_of(&what, g, &values);
            let inputs = differential::random_inputs(g, &b, seed * 8 + k as u64, (-3, 7));
            let b = reference::bind_inputs(g, &inputs, &b).unwrap();
            Run {
                what,
                values,
                b,
                inputs,
            }
        })
        .collect()
}

#[test]
fn random_graphs_run_on_the_cpu_backend() {
    let options = RunOptions {
        poison: true,
        threads: 2,
    };
    let (mut compared, mut runs) = (0, 0);
    for seed in 0..graphs(36) {
        let (g, text) = random::graph("random graph", &random::choices(seed, 400), 4, 14);
        let run = std::panic::catch_unwind(|| {
            let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
            let mut compared = 0;
            for Run {
                what,
                values,
                b,
                inputs,
            } in each_size(&g, seed)
            {
                let want = reference::run(&g, &inputs, &b);
                let got = cpu.run(&inputs, &b, &options);
                let ideal = || reference::run_unrounded(&g, &inputs, &b).unwrap();
                compared += usize::from(differential::judge_accurate(
                    &what,
                    got,
                    want,
                    &values,
                    false,
                    Some(&ideal),
                ));
            }
            compared
        });
        match run {
            Ok(c) => compared += c,
            Err(e) => panic!("{}\n{text}", message(e)),
        }
        runs += random::VALUES.len();
    }
    // Most runs are compared, not refused by both.
    assert!(
        compared * 10 >= runs * 9,
        "only {compared} of {runs} runs compared"
    );
}

/// The same random graphs with backed symbols, called as a user calls a backed artifact: through
/// its specializations, which check their guards at every call and recompile (with the hints
/// moved to the call's sizes) when none holds. Sizes forwards then backwards, so that later calls
/// reuse earlier specializations. A call the reference refuses (sizes a split does not give the
/// pieces for, a backed size that neither broadcasts nor matches) must be refused too: by a
/// failed assert, a failed recompile or an error of the run.
#[test]
fn random_backed_graphs_run_on_the_cpu_backend() {
    let options = RunOptions {
        poison: true,
        threads: 2,
    };
    let (mut recompiles, mut refused) = (0, 0);
    let n = graphs(36).div_ceil(2);
    for seed in 0..n {
        let [a, b] = random::VALUES[seed as usize % random::VALUES.len()];
        let kinds = match seed % 3 {
            0 => [Kind::Backed(a), Kind::Backed(b)],
            1 => [Kind::Backed(4096), Kind::Unbacked],
            _ => [Kind::Unbacked, Kind::Backed(b)],
        };
        let choices = random::choices(seed, 400);
        let (g, text) = random::graph_of("random graph", &choices, 4, 14, kinds);
        let compile = |g: Graph| {
            let p = lower(&g).map_err(|e| e.to_string())?;
            CpuProgram::compile(p).map_err(|e| e.to_string())
        };
        let run = std::panic::catch_unwind(|| {
            let runs = each_size(&g, seed);
            let (mut specs, mut refused) = (None, 0);
            let mut at_hints = Some(compile(g.clone()));
            for r in runs.iter().chain(runs.iter().rev()) {
                let want = reference::run(&g, &r.inputs, &r.b);
                refused += usize::from(want.is_err());
                // The first specialization is for the hints, as a backed compile's; hints the
                // graph is invalid at (the reference fails there too) give way to the first
                // call's sizes the graph is valid at.
                let specs = match (&mut specs, at_hints.take()) {
                    (Some(s), _) => s,
                    (None, Some(Ok(first))) => {
                        specs.insert(Specializations::new(g.clone(), first).with_limit(16))
                    }
                    (None, failed) => {
                        if let Some(Err(e)) = failed {
                            invalid_at_hints(&g, seed, &e);
                        }
                        let mut again = g.clone();
                        again.env.rehint_backed(&r.b).unwrap();
                        match compile(again) {
                            Ok(first) => {
                                specs.insert(Specializations::new(g.clone(), first).with_limit(16))
                            }
                            Err(e) => {
                                assert!(want.is_err(), "{}: {e}, the reference runs", r.what);
                                continue;
                            }
                        }
                    }
                };
                match specs.select(&r.b, compile) {
                    Ok(sel) => {
                        let got = sel.artifact.run(&r.inputs, &r.b, &options);
                        differential::judge(&r.what, got, want, &r.values, false);
                    }
                    Err(e @ (SpecializeError::Values(_) | SpecializeError::Compile(_))) => {
                        assert!(want.is_err(), "{}: {e}, the reference runs", r.what);
                    }
                    Err(e) => panic!("{}: {e}", r.what),
                }
            }
            (specs.map_or(0, |s| s.recompiles()), refused)
        });
        match run {
            Ok((r, f)) => {
                recompiles += r;
                refused += f;
            }
            Err(e) => panic!("{}\n{text}", message(e)),
        }
    }
    // Some sizes break the guards of a specialization for others, some are invalid for a graph.
    assert!(
        recompiles > 0 && refused > 0,
        "{recompiles} recompiles, {refused} invalid calls"
    );
}

/// Asserts that the reference fails for `g` at its symbols' hints, where compiling failed with
/// `e`.
fn invalid_at_hints(g: &Graph, seed: u64, e: &str) {
    let mut env = g.env.clone();
    let values: Vec<(&str, i64)> = random::SYMBOLS
        .iter()
        .filter_map(|&(n, ..)| {
            let id = env.symbol_id(n)?;
            let e = env.pool_mut().symbol_expr(id);
            Some((n, env.optimization_hint(e)))
        })
        .collect();
    let what = format!("random graph {seed} at its hints {values:?}");
    let b = differential::bindings_of(&what, g, &values);
    let inputs = differential::random_inputs(g, &b, seed, (-3, 7));
    let b = reference::bind_inputs(g, &inputs, &b).unwrap();
    assert!(
        reference::run(g, &inputs, &b).is_err(),
        "{what}: compiling failed ({e}), the reference runs"
    );
}

/// Several random graphs in one (their chains side by side): one C++ build of the emulation for
/// many chains.
#[test]
fn random_graphs_run_on_the_emulated_device() {
    // A twelfth as many as the CPU backend's: each of these has 16 chains. A size where the
    // reference refuses the inputs (one chain invalid there) must be refused by the device too.
    let (mut compared, mut runs) = (0, 0);
    for seed in 0..graphs(36).div_ceil(12) {
        let (g, text) = random::graph("random graph", &random::choices(1000 + seed, 2000), 16, 14);
        let run = std::panic::catch_unwind(|| {
            let exe = Executable::new(lower(&g).unwrap()).unwrap();
            let mut dev = emulated::Emu::new("random", &exe);
            let mut compared = 0;
            for Run {
                what, b, inputs, ..
            } in each_size(&g, seed)
            {
                let got = emulated::run(&mut dev, &exe, Inputs::Host(&inputs), &b);
                let want = match reference::run(&g, &inputs, &b) {
                    Ok(w) => w,
                    Err(w) => {
                        let e = got.err().map(|e| e.to_string());
                        assert!(
                            e.as_deref().is_some_and(
                                |e| differential::failure_class(e) == "a refusal of the inputs"
                            ),
                            "{what}: the reference refuses ({w}), the device: {e:?}"
                        );
                        continue;
                    }
                };
                let (got, ..) = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(got.len(), want.len());
                for (i, (gt, w)) in got.iter().zip(&want).enumerate() {
                    differential::assert_close(&format!("{what} output {i}"), gt, w);
                }
                compared += 1;
            }
            compared
        });
        match run {
            Ok(c) => compared += c,
            Err(e) => panic!("{}\n{text}", message(e)),
        }
        runs += random::VALUES.len();
    }
    println!("emulated: {compared} of {runs} runs compared");
    // Graphs of 16 chains: a size is compared only when every chain is valid there (20 of 20
    // when written).
    assert!(
        compared * 10 >= runs * 9,
        "only {compared} of {runs} runs compared"
    );
}

/// Backed random graphs through the generated CUDA on the emulation: specialized at the hints
/// `(1, 1)` (every size 1 broadcasts, reductions over them are of one element) and `(13, 5)`, run
/// at each size whose guards hold where the graph is valid (the hints' at least).
#[test]
fn random_backed_graphs_run_on_the_emulated_device() {
    // At (13, 5) most broadcasts against a constant are invalid, so fewer chains per graph.
    for (k, [h0, h1], chains) in [(1u64, random::VALUES[1], 16), (3, random::VALUES[3], 4)] {
        let kinds = [Kind::Backed(h0), Kind::Backed(h1)];
        // The first seed whose graph is valid at its hints: it compiles, and some size passes its
        // guards where the reference runs (at least the hints' own).
        let (text, exe, runs) = (2000 + 100 * k..)
            .take(20)
            .find_map(|seed| {
                let choices = random::choices(seed, 2000);
                let (g, text) = random::graph_of("random graph", &choices, chains, 14, kinds);
                let exe = Executable::new(lower(&g).ok()?).ok()?;
                let runs: Vec<(Run, Vec<HostTensor>)> = each_size(&g, seed)
                    .into_iter()
                    .filter(|r| exe.program.env.check_bindings(&r.b).is_ok())
                    .filter_map(|r| {
                        let want = reference::run(&g, &r.inputs, &r.b).ok()?;
                        Some((r, want))
                    })
                    .collect();
                (!runs.is_empty()).then_some((text, exe, runs))
            })
            .expect("a graph valid at its hints among 20");
        let run = std::panic::catch_unwind(|| {
            let mut dev = emulated::Emu::new("random_backed", &exe);
            for (
                Run {
                    what, b, inputs, ..
                },
                want,
            ) in &runs
            {
                let (got, ..) = emulated::run(&mut dev, &exe, Inputs::Host(inputs), b)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(got.len(), want.len());
                for (i, (gt, w)) in got.iter().zip(want).enumerate() {
                    differential::assert_close(&format!("{what} output {i}"), gt, w);
                }
            }
        });
        if let Err(e) = run {
            panic!("{}\n{text}", message(e));
        }
    }
}
