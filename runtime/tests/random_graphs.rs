//! Differential fuzzing of the backends: random graphs (`differential::random`: chains of views,
//! pointwise math, reductions, normalizations, matmuls, concatenations over unbacked sizes) through
//! the scheduler (fusion, memory plan) on the CPU backend — native kernels with the `llvm` feature —
//! and through the generated CUDA on the CPU emulation of CUDA, against the op-level reference at
//! sizes from 0 to far past the hints, storage poisoned. A failure prints the graph's JSON.
//! `GUARDLESS_FUZZ_GRAPHS` (default 48) sets the number of graphs.

#[path = "../../ir/tests/differential/mod.rs"]
mod differential;
#[path = "../../codegen/tests/emu/mod.rs"]
mod emu;
mod emulated;

use differential::random;
use guardless_ir::graph::Graph;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::HostTensor;
use guardless_runtime::cpu::{CpuProgram, RunOptions};
use guardless_runtime::launch::{Executable, Inputs};

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
    for seed in 0..graphs(48) {
        let (g, text) = random::graph("random graph", &random::choices(seed, 400), 4, 14);
        let run = std::panic::catch_unwind(|| {
            let cpu = CpuProgram::compile(lower(&g).unwrap()).unwrap();
            for Run {
                what,
                values,
                b,
                inputs,
            } in each_size(&g, seed)
            {
                let want = reference::run(&g, &inputs, &b);
                let got = cpu.run(&inputs, &b, &options);
                differential::judge(&what, got, want, &values, false);
            }
        });
        if let Err(e) = run {
            panic!("{}\n{text}", message(e));
        }
    }
}

/// Several random graphs in one (their chains side by side): one C++ build of the emulation for
/// many chains.
#[test]
fn random_graphs_run_on_the_emulated_device() {
    // A twelfth as many as the CPU backend's: each of these has 16 chains.
    for seed in 0..graphs(48).div_ceil(12) {
        let (g, text) = random::graph("random graph", &random::choices(1000 + seed, 2000), 16, 14);
        let run = std::panic::catch_unwind(|| {
            let exe = Executable::new(lower(&g).unwrap()).unwrap();
            let mut dev = emulated::Emu::new("random", &exe);
            for Run {
                what, b, inputs, ..
            } in each_size(&g, seed)
            {
                let Ok(want) = reference::run(&g, &inputs, &b) else {
                    continue;
                };
                let (got, ..) = emulated::run(&mut dev, &exe, Inputs::Host(&inputs), &b)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(got.len(), want.len());
                for (i, (gt, w)) in got.iter().zip(&want).enumerate() {
                    differential::assert_close(&format!("{what} output {i}"), gt, w);
                }
            }
        });
        if let Err(e) = run {
            panic!("{}\n{text}", message(e));
        }
    }
}
