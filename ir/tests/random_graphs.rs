//! Differential fuzzing of the lowering: random graphs (`differential::random`: chains of views,
//! pointwise math, reductions, normalizations, matmuls, concatenations over unbacked sizes) lowered
//! and interpreted, against the op-level reference, at sizes from 0 to far past the hints. A
//! failure shrinks to a short graph and prints its JSON. `PROPTEST_CASES` overrides the case count,
//! `PROPTEST_RNG_SEED` the fixed seed (CI runs the same cases every time; explore with others).

mod differential;

use differential::random;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

fn config() -> ProptestConfig {
    let default = ProptestConfig::default();
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        rng_seed: match std::env::var("PROPTEST_RNG_SEED") {
            Ok(_) => default.rng_seed,
            Err(_) => RngSeed::Fixed(20_261_202),
        },
        ..default
    }
}

/// Runs `text`'s graph at every [`random::VALUES`] entry; on a mismatch, panics with the graph.
fn check(g: &guardless_ir::graph::Graph, text: &str, seed: u64) {
    for (k, [u0, u1]) in random::VALUES.into_iter().enumerate() {
        let run = std::panic::catch_unwind(|| {
            let values: Vec<(&str, i64)> = [("u0", u0), ("u1", u1)]
                .into_iter()
                .filter(|(n, _)| g.env.symbol_id(n).is_some())
                .collect();
            differential::differential("random graph", g, &values, seed * 8 + k as u64, false)
        });
        if let Err(e) = run {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("at u0 = {u0}, u1 = {u1}: {msg}\n{text}");
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_graphs_lower_to_what_the_reference_computes(
        choices in proptest::collection::vec(any::<u32>(), 0..160),
        seed in 0u64..1000,
    ) {
        let (g, text) = random::graph("random graph", &choices, 3, 10);
        check(&g, &text, seed);
    }
}

/// Fixed graphs, longer than proptest's: the same ones every run.
#[test]
fn seeded_random_graphs_lower_to_what_the_reference_computes() {
    for seed in 0..24 {
        let (g, text) = random::graph("random graph", &random::choices(seed, 400), 4, 14);
        check(&g, &text, seed);
    }
}
