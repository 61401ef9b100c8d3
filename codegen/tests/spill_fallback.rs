//! A configuration that spills registers is replaced, not fatal: a softmax of a sum whose
//! persistent variants are forced to keep both inputs' rows in registers under a 64-register cap
//! (1024 threads per block) spills; `build::build` shrinks those variants until nothing spills,
//! says so in the schedule's text (`--emit schedule`), records the steps so that a fresh schedule
//! replays them to the same source, and the variants it fell back to compute the softmax in the
//! CUDA emulation at sizes where the launcher picks them.

mod emu;
mod examples;

use emu::sampled::{check_variant, selected};
use examples::toolchain;
use guardless_codegen::build::{build, replay, Fallback};
use guardless_codegen::cache::Cache;
use guardless_codegen::cuda::generate;
use guardless_codegen::schedule::Strategy;
use guardless_codegen::schedule::{schedule, Schedule};
use guardless_ir::graph::Graph;
use guardless_ir::loop_ir::Program;
use guardless_ir::lower::lower;
use guardless_ir::sym::Bindings;
use rustc_hash::FxHashSet;

/// softmax(a + b) over rows of m ≤ 1024 elements: the rows are short at the hint (32 threads per
/// row), so a persistent variant holds up to 8 steps of 4 lanes of each input per thread.
const GRAPH: &str = r#"{
  "format": "guardless-graph", "version": 1, "name": "softmax_of_sum",
  "symbols": [
    {"name": "n", "kind": "unbacked", "min": 1, "max": 8192, "optimization_hint": 64},
    {"name": "m", "kind": "unbacked", "min": 1, "max": 1024, "optimization_hint": 32}
  ],
  "inputs": [
    {"name": "a", "dtype": "f32", "shape": ["n", "m"]},
    {"name": "b", "dtype": "f32", "shape": ["n", "m"]}
  ],
  "nodes": [
    {"name": "s", "op": "aten.add.Tensor", "args": {"self": {"tensor": "a"}, "other": {"tensor": "b"}}},
    {"name": "out", "op": "aten._softmax.default",
     "args": {"self": {"tensor": "s"}, "dim": -1, "half_to_float": false}}
  ],
  "outputs": [{"tensor": "out"}]
}"#;

fn scheduled() -> (Program, Schedule) {
    let mut p = lower(&Graph::from_json(GRAPH).unwrap()).unwrap();
    let s = schedule(&mut p);
    (p, s)
}

/// Every persistent variant made to keep as much of the rows in registers as the register file
/// allows a thread (255) while a block of 1024 threads leaves each thread 64: the variants
/// forced, by (kernel, variant).
fn force_spills(p: &mut Program, s: &mut Schedule) -> Vec<(usize, usize)> {
    let mut forced = Vec::new();
    for (ki, k) in s.kernels.iter_mut().enumerate() {
        for vi in 0..k.variants.len() {
            let mut c = k.variants[vi].config.clone();
            if c.strategy != Strategy::Persistent {
                continue;
            }
            c.threads = 1024;
            c.row_cache = 255;
            let (rows, row_len) = (k.rows, k.row_len);
            k.variants[vi].reconfigure(&mut p.env, rows, row_len, c);
            forced.push((ki, vi));
        }
    }
    forced
}

#[test]
fn a_configuration_that_spills_is_replaced_by_a_smaller_one() {
    let Some(_) = toolchain() else { return };
    let dir = std::env::temp_dir().join(format!("guardless-spill-{}", std::process::id()));
    let cache = Cache::new(&dir);

    // As scheduled, nothing spills and nothing falls back.
    let (mut p, mut s) = scheduled();
    let plain = build(&mut p, &mut s, &cache, "sm_90").unwrap();
    assert!(plain.fallbacks.is_empty(), "{:?}", plain.fallbacks);
    assert!(!s.to_text(&p).contains("spills"));

    // Forced, the persistent variants spill; the build falls back instead of failing.
    let (mut p, mut s) = scheduled();
    let forced = force_spills(&mut p, &mut s);
    assert!(!forced.is_empty(), "the softmax has persistent variants");
    let built = build(&mut p, &mut s, &cache, "sm_90").unwrap();
    for (c, _) in &built.units {
        for r in &c.kernels {
            assert_eq!(r.spill_bytes, 0, "{} still spills:\n{}", r.name, c.log);
        }
    }
    assert!(
        !built.fallbacks.is_empty(),
        "nothing spilled: the forced configuration is not tested"
    );
    let text = s.to_text(&p);
    // (kernel, variant, steps) of each fallback: all of kernels (the softmax has no library step).
    let fallbacks: Vec<(usize, usize, usize)> = built
        .fallbacks
        .iter()
        .map(|f| match *f {
            Fallback::Kernel {
                kernel,
                variant,
                steps,
            } => (kernel, variant, steps),
            Fallback::Library { .. } => panic!("{f:?}: the softmax has no library step"),
        })
        .collect();
    for &(kernel, variant, steps) in &fallbacks {
        assert!(
            forced.contains(&(kernel, variant)),
            "v{variant} of kernel {kernel} was not forced"
        );
        assert!(steps >= 1);
        let why = format!("why spills: v{variant} spilled ");
        assert!(
            text.contains(&why),
            "the schedule does not say {why}…:\n{text}"
        );
        let c = &s.kernels[kernel].variants[variant].config;
        assert!(c.row_cache < 255 || c.strategy == Strategy::Looped, "{c:?}");
    }

    // The recorded steps replayed on a fresh (forced) schedule give the code that was compiled.
    let (mut p2, mut s2) = scheduled();
    force_spills(&mut p2, &mut s2);
    replay(&mut p2, &mut s2, &built.fallbacks).unwrap();
    assert_eq!(generate(&mut p2, &s2).source, built.module.source);
    // More steps than the ladder has is an error, not a panic.
    let mut too_many = built.fallbacks.clone();
    let (kernel, variant, _) = fallbacks[0];
    too_many[0] = Fallback::Kernel {
        kernel,
        variant,
        steps: 100,
    };
    let (mut p3, mut s3) = scheduled();
    let e = replay(&mut p3, &mut s3, &too_many).unwrap_err();
    assert!(e.contains("steps, but the configuration has fewer"), "{e}");

    // Each variant fallen back to computes the softmax where the launcher picks it.
    let c = emu::build("spill_fallback", &p, &built.module);
    for &(kernel, variant, _) in &fallbacks {
        let mut ran = false;
        'sizes: for n in [1, 5, 64, 300, 4096, 5000] {
            for m in [1, 31, 32, 100, 1000, 1024] {
                let mut b = Bindings::new();
                b.set(p.env.symbol_id("n").unwrap(), n);
                b.set(p.env.symbol_id("m").unwrap(), m);
                let none = FxHashSet::default();
                if selected(&p, &s, &built.module, kernel, &b, &none) != Some(variant) {
                    continue;
                }
                check_variant(&p, &s, &built.module, &c, kernel, variant, &b, &none, 1)
                    .unwrap_or_else(|e| {
                        panic!("v{variant} of kernel {kernel} at n={n}, m={m}: {e}")
                    });
                ran = true;
                break 'sizes;
            }
        }
        assert!(ran, "no size tried selects v{variant} of kernel {kernel}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
