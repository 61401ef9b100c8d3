//! Differential fuzzing of the lowering: random graphs (`differential::random`: chains of views,
//! pointwise math, reductions, normalizations, matmuls, concatenations over unbacked sizes) lowered
//! and interpreted, against the op-level reference, at sizes from 0 to far past the hints. A
//! failure shrinks to a short graph and prints its JSON. `PROPTEST_CASES` overrides the case count,
//! `PROPTEST_RNG_SEED` the fixed seed (CI runs the same cases every time; explore with others).

mod differential;

use differential::random::{self, Kind};
use guardless_ir::graph::Graph;
use guardless_ir::lower::lower;
use guardless_ir::reference;
use guardless_ir::sym::SymError;
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

/// The panic message of a caught panic.
fn message(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// `g`'s input symbols at one [`random::VALUES`] entry.
fn values_of(g: &Graph, [u0, u1]: [i64; 2]) -> Vec<(&'static str, i64)> {
    [("u0", u0), ("u1", u1)]
        .into_iter()
        .filter(|(n, _)| g.env.symbol_id(n).is_some())
        .collect()
}

/// Runs `text`'s graph at every [`random::VALUES`] entry; on a mismatch, panics with the graph.
/// Returns at how many of them both ran and were compared (the others both refused).
fn check(g: &Graph, text: &str, seed: u64) -> usize {
    let mut compared = 0;
    for (k, [u0, u1]) in random::VALUES.into_iter().enumerate() {
        let run = std::panic::catch_unwind(|| {
            let values = values_of(g, [u0, u1]);
            differential::differential("random graph", g, &values, seed * 8 + k as u64, false)
        });
        match run {
            Ok(both_ran) => compared += usize::from(both_ran),
            Err(e) => panic!("at u0 = {u0}, u1 = {u1}: {}\n{text}", message(e)),
        }
    }
    compared
}

/// Runs a graph with backed symbols as a caller does: each call takes the first lowering whose
/// guards hold for its sizes, else lowers again with the hints moved to them (a recompile), and
/// that lowering's own guards must hold; a lowering that fails must be for sizes the reference
/// fails at too. Every [`random::VALUES`] entry, forwards then backwards (later calls reuse
/// earlier specializations). Returns how many lowerings it took.
fn check_backed(g: &Graph, text: &str, seed: u64) -> usize {
    let mut lowered: Vec<_> = lower(g).into_iter().collect();
    let mut lowerings = 1;
    let order = random::VALUES
        .into_iter()
        .chain(random::VALUES.into_iter().rev());
    for (k, v) in order.enumerate() {
        let values = values_of(g, v);
        let what = format!("backed random graph at {values:?}");
        let b = differential::bindings_of(&what, g, &values);
        let inputs = differential::random_inputs(g, &b, seed * 16 + k as u64, (-3, 7));
        let b = reference::bind_inputs(g, &inputs, &b).unwrap();
        let want = reference::run(g, &inputs, &b);
        // A specialization whose guards hold is the one: a failed assert is then an error of the
        // call (the run reports it), not a reason to recompile.
        let guards_hold = |p: &guardless_ir::loop_ir::Program| {
            !matches!(p.env.check_bindings(&b), Err(SymError::GuardFailed { .. }))
        };
        let i = match lowered.iter().position(guards_hold) {
            Some(i) => i,
            None => {
                let mut again = g.clone();
                again.env.rehint_backed(&b).unwrap();
                lowerings += 1;
                match lower(&again) {
                    Ok(p) => {
                        if !guards_hold(&p) {
                            let e = p.env.check_bindings(&b).unwrap_err();
                            panic!(
                                "{what}: lowered for these sizes, fails its own guard: {e}\n{text}"
                            );
                        }
                        lowered.push(p);
                        lowered.len() - 1
                    }
                    Err(e) => {
                        assert!(
                            want.is_err(),
                            "{what}: lowering failed ({e}), the reference runs\n{text}"
                        );
                        continue;
                    }
                }
            }
        };
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let got = lowered[i].run(&inputs, &b);
            differential::judge(&what, got, want, &values, false);
        }));
        if let Err(e) = run {
            panic!("{}\n{text}", message(e));
        }
    }
    lowerings
}

/// Hints for backed graphs: each [`random::VALUES`] entry's values (so that some specializations
/// are for 0 and 1) and the unbacked symbols' optimization hints.
fn kinds(pick: usize) -> [Kind; 2] {
    let at = |i: usize| {
        random::VALUES
            .get(i)
            .copied()
            .unwrap_or([random::SYMBOLS[0].3, random::SYMBOLS[1].3])
    };
    let [h0, h1] = at(pick % 6);
    match pick / 6 % 3 {
        0 => [Kind::Backed(h0), Kind::Backed(h1)],
        1 => [Kind::Backed(h0), Kind::Unbacked],
        _ => [Kind::Unbacked, Kind::Backed(h1)],
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
        let _ = check(&g, &text, seed);
    }

    #[test]
    fn random_backed_graphs_lower_to_what_the_reference_computes(
        choices in proptest::collection::vec(any::<u32>(), 0..160),
        seed in 0u64..1000,
        pick in 0usize..18,
    ) {
        let (g, text) = random::graph_of("random graph", &choices, 3, 10, kinds(pick));
        check_backed(&g, &text, seed);
    }
}

/// Fixed graphs, longer than proptest's: the same ones every run. Most runs must be compared,
/// not refused by both (119 of 120 when written): a generator whose graphs were often invalid
/// would test little.
#[test]
fn seeded_random_graphs_lower_to_what_the_reference_computes() {
    let (mut compared, mut runs) = (0, 0);
    for seed in 0..24 {
        let (g, text) = random::graph("random graph", &random::choices(seed, 400), 4, 14);
        compared += check(&g, &text, seed);
        runs += random::VALUES.len();
    }
    println!("{compared} of {runs} runs compared");
    assert!(
        compared * 10 >= runs * 9,
        "only {compared} of {runs} runs compared"
    );
}

/// Fixed graphs with backed symbols: the same graphs as [`random::graph`] builds from these
/// choices, specialized and guarded, recompiled when a guard fails.
#[test]
fn seeded_random_backed_graphs_lower_to_what_the_reference_computes() {
    let mut lowerings = 0;
    for seed in 0..24 {
        let choices = random::choices(seed, 400);
        let (g, text) = random::graph_of("random graph", &choices, 4, 14, kinds(seed as usize));
        lowerings += check_backed(&g, &text, seed);
    }
    // Some sizes break the guards of a specialization for others (0 and 1 at least).
    assert!(lowerings > 24, "{lowerings} lowerings for 24 graphs");
}
