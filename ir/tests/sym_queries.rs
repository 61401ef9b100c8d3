//! Semantics of the guard-free query API, of asserts, and of every bad input the engine handles.

use guardless_ir::sym::{Bindings, ShapeEnv, SymError, ValueRange, INF};

fn env() -> ShapeEnv {
    let mut env = ShapeEnv::new();
    env.backed("s0", 64, Some(2), Some(1024)).unwrap();
    env.backed("s1", 100, None, None).unwrap();
    env.unbacked_size("u0", None, None, None).unwrap();
    env.unbacked_size("u1", None, None, Some(4096)).unwrap();
    env.unbacked_size("u2", None, Some(1_000_000), None)
        .unwrap();
    env
}

fn e(env: &mut ShapeEnv, text: &str) -> guardless_ir::sym::Expr {
    env.parse(text).unwrap()
}

#[test]
fn guard_or_false_on_unbacked_records_nothing_and_answers_false() {
    let mut env = env();
    let c = e(&mut env, "u0 == 1");
    assert!(!env.guard_or_false(c));
    assert!(env.guard_or_true(c));
    let c = e(&mut env, "u0 + u1 > s0");
    assert!(!env.guard_or_false(c));
    assert!(env.guards().is_empty());
}

#[test]
fn guard_or_false_on_backed_evaluates_the_hint_and_records_a_guard() {
    let mut env = env();
    let c = e(&mut env, "s0 > 32");
    assert!(env.guard_or_false(c));
    let c = e(&mut env, "s1 == 7");
    assert!(!env.guard_or_true(c));
    let guards: Vec<String> = env.guards().iter().map(|g| env.text(g.cond)).collect();
    assert_eq!(guards, ["s0 > 32", "s1 != 7"]);
}

#[test]
fn statically_known_decides_from_ranges_and_never_records() {
    let mut env = env();
    for (text, want) in [
        ("u0 >= 0", Some(true)),
        ("u0 < 0", Some(false)),
        ("u0 == 0", None),
        ("s0 >= 2", Some(true)),
        ("s0 == 1", Some(false)),
        ("u2 <= 1000000", Some(true)),
        ("u0 + 1 >= 1", Some(true)),
        ("s0 > 100", None),
    ] {
        let c = e(&mut env, text);
        assert_eq!(env.statically_known(c), want, "{text}");
        assert_eq!(env.statically_known_true(c), want == Some(true));
        assert_eq!(env.statically_known_false(c), want == Some(false));
    }
    assert!(env.guards().is_empty());
}

#[test]
fn guarding_hint_is_a_typed_data_dependent_error_for_unbacked() {
    let mut env = env();
    let x = e(&mut env, "s0*s1 + 1");
    assert_eq!(env.guarding_hint(x), Ok(6401));
    let y = e(&mut env, "s0 + u1 + u0");
    match env.guarding_hint(y) {
        Err(SymError::DataDependent { expr, symbols }) => {
            assert_eq!(expr, "s0 + u0 + u1");
            assert_eq!(symbols.len(), 2);
            assert!(symbols.contains(&"u0".to_string()) && symbols.contains(&"u1".to_string()));
        }
        other => panic!("expected a data-dependent error, got {other:?}"),
    }
    // An unbacked symbol that cancels out is not data-dependent.
    let z = e(&mut env, "s0 + u0 - u0");
    assert_eq!(env.guarding_hint(z), Ok(64));
    let c = e(&mut env, "u0 > 5");
    assert!(matches!(
        env.evaluate_guard(c),
        Err(SymError::DataDependent { .. })
    ));
    let c = e(&mut env, "s0 > 5");
    assert_eq!(env.evaluate_guard(c), Ok(true));
    assert_eq!(env.guards().len(), 1);
}

#[test]
fn optimization_hints_follow_the_documented_order() {
    let mut env = env();
    let cases = [
        ("s0", 64),        // backed hint
        ("u1", 4096),      // user optimization hint
        ("u0", 8192),      // fallback
        ("u0 + s0", 8256), // mixed
        ("u2 // 2", 4096), // fallback inside an expression
        ("Min(u0, 100)", 100),
    ];
    for (text, want) in cases {
        let x = e(&mut env, text);
        assert_eq!(env.optimization_hint(x), want, "{text}");
    }
    // The fallback is clamped to the symbol's range.
    let mut small = ShapeEnv::new();
    let u = small.unbacked_size("u0", Some(1), Some(64), None).unwrap();
    assert_eq!(small.optimization_hint(u), 64);
    // And it is configurable.
    small.set_fallback_hint(7);
    assert_eq!(small.optimization_hint(u), 7);
}

#[test]
fn hints_are_consistent_through_asserted_equalities() {
    let mut env = env();
    env.unbacked_size("u3", None, None, None).unwrap();
    env.check_text("u3 == u1 + s0").unwrap();
    let u3 = e(&mut env, "u3");
    assert_eq!(env.optimization_hint(u3), 4096 + 64);
}

#[test]
fn a_user_hint_survives_an_equality() {
    let mut env = env();
    env.unbacked_size("u3", None, None, None).unwrap();
    // u1 carries the user's hint 4096; the hint-less u0 and u3 are the ones solved for.
    env.check_text("u1 == u0 + u3").unwrap();
    let hint = |env: &mut ShapeEnv, t: &str| {
        let x = e(env, t);
        env.optimization_hint(x)
    };
    assert_eq!(hint(&mut env, "u1"), 4096);
    assert_eq!(hint(&mut env, "u0") + hint(&mut env, "u3"), 4096);
    assert_eq!(hint(&mut env, "u0"), 2048);
}

#[test]
fn hints_through_chained_equalities_terminate_and_agree() {
    let mut env = ShapeEnv::new();
    for u in ["u0", "u1", "u2", "u3", "u5", "u6"] {
        env.unbacked_size(u, None, None, None).unwrap();
    }
    // Replacements, shares and bounds that refer to each other in a cycle.
    env.check_text("u0 + u1 == u5").unwrap();
    env.check_text("u5 == u2 + u3").unwrap();
    env.check_text("u0 == u2 + u6").unwrap();
    env.check_text("u6 <= u1").unwrap();
    let mut hint = |t: &str| {
        let x = env.parse(t).unwrap();
        env.optimization_hint(x)
    };
    let (u0, u1, u2, u3, u5, u6) = (
        hint("u0"),
        hint("u1"),
        hint("u2"),
        hint("u3"),
        hint("u5"),
        hint("u6"),
    );
    for h in [u0, u1, u2, u3, u5, u6] {
        assert!(h >= 0);
    }
    assert_eq!(u5, u0 + u1);
    assert_eq!(u5, u2 + u3);
    assert_eq!(u0, u2 + u6);
}

#[test]
fn split_pieces_share_the_total_hint() {
    let mut env = env();
    env.unbacked_size("u3", None, None, None).unwrap();
    env.unbacked_size("u4", None, None, None).unwrap();
    // u1 has a user hint (4096) and keeps it; u0, u3, u4 share what remains of s0*100 = 6400.
    env.check_text("u0 + u1 + u3 + u4 == s0*100").unwrap();
    let hints: Vec<i64> = ["u0", "u1", "u3", "u4"]
        .iter()
        .map(|n| {
            let x = e(&mut env, n);
            env.optimization_hint(x)
        })
        .collect();
    assert_eq!(hints.iter().sum::<i64>(), 6400, "{hints:?}");
    assert_eq!(hints[1], 4096);
    assert!(hints.iter().all(|&h| h > 0), "{hints:?}");
    let total = e(&mut env, "u0 + u1 + u3 + u4");
    assert_eq!(env.optimization_hint(total), 6400);
}

#[test]
fn hints_respect_linear_assert_bounds() {
    let mut env = env();
    env.check_text("u0 <= s1").unwrap();
    let d = e(&mut env, "s1 - u0");
    assert!(env.optimization_hint(d) >= 0);
    let u0 = e(&mut env, "u0");
    assert_eq!(env.optimization_hint(u0), 100);
    // The fact itself is known, guard-free.
    let c = e(&mut env, "s1 - u0 >= 0");
    assert!(env.statically_known_true(c));
    assert_eq!(env.bound(d).lo, 0);
}

#[test]
fn hint_computation_never_panics() {
    let mut env = env();
    let x = e(&mut env, "s0 // (u0 - u0 + u2 - 8192)");
    // u2's hint is 8192, so the hint divides by zero: the fallback, clamped, is returned.
    let h = env.optimization_hint(x);
    assert!(env.bound(x).contains(h));
    let big = e(&mut env, "u0 * u0 * u0 * u0 * u0 * u0");
    let h = env.optimization_hint(big);
    assert!(h > 0);
}

#[test]
fn asserts_refine_ranges() {
    let mut env = env();
    env.check_text("u0 >= 2").unwrap();
    env.check_text("u0 <= s0").unwrap();
    let u0 = e(&mut env, "u0");
    assert_eq!(env.bound(u0), ValueRange::new(2, 1024).unwrap());
    env.check_text("u2 != 0").unwrap();
    let u2 = e(&mut env, "u2");
    assert_eq!(env.bound(u2).lo, 1);
    env.check_text("2*u1 + 6 <= 100").unwrap();
    let u1 = e(&mut env, "u1");
    assert_eq!(env.bound(u1), ValueRange::new(0, 47).unwrap());
    // Facts about non-symbol expressions: a sum of sizes.
    env.check_text("u0 + u2 <= 5000").unwrap();
    let sum = e(&mut env, "2*u0 + 2*u2 + 1");
    assert_eq!(env.bound(sum).hi, 10001);
    assert_eq!(env.runtime_asserts().len(), 5);
}

#[test]
fn bad_asserts_are_errors_naming_them() {
    let mut env = env();
    assert!(
        matches!(env.check_text("u0 < 0"), Err(SymError::AssertAlwaysFalse { assert }) if assert == "u0 < 0")
    );
    env.check_text("u2 >= 10").unwrap();
    // False given what is known: named as such.
    assert!(
        matches!(env.check_text("u2 <= 5"), Err(SymError::AssertAlwaysFalse { assert }) if assert == "u2 <= 5")
    );
    // Each half is possible, together they are not.
    match env.check_text("(u2 <= 20) & (u2 >= 30)") {
        Err(SymError::Contradiction { assert, detail }) => {
            assert_eq!(assert, "(u2 <= 20) & (u2 >= 30)");
            assert!(detail.contains("u2 >= 30"), "{detail}");
        }
        other => panic!("expected a contradiction, got {other:?}"),
    }
    assert!(matches!(
        env.check_text("u0 + 1"),
        Err(SymError::NotBoolean { .. })
    ));
    assert!(matches!(
        env.check_text("u9 > 0"),
        Err(SymError::Parse { .. })
    ));
    // A trivially true assert is not recorded.
    let before = env.runtime_asserts().len();
    env.check_text("u0 >= 0").unwrap();
    assert_eq!(env.runtime_asserts().len(), before);
}

#[test]
fn multiple_of_and_fits_in_i32() {
    let mut env = env();
    let x = e(&mut env, "16*u0 + 32");
    assert!(env.statically_known_multiple_of(x, 16));
    assert!(!env.statically_known_multiple_of(x, 64));
    let zero = e(&mut env, "u0 - u0");
    assert!(env.statically_known_multiple_of(zero, 0));
    let s = e(&mut env, "s0 * 1024");
    assert!(env.fits_in_i32(s));
    let u = e(&mut env, "u2 * 4096");
    assert!(!env.fits_in_i32(u));
    env.check_text("u2 <= 1000").unwrap();
    assert!(env.fits_in_i32(u));
    // The final value fits but an intermediate of the C form does not.
    let wide = e(&mut env, "Min(u2*4000000, 5)");
    assert!(env.bound(wide).hi <= 5);
    assert!(!env.fits_in_i32(wide));
    let unbounded = e(&mut env, "u0");
    assert!(!env.fits_in_i32(unbounded));
    assert_eq!(env.bound(unbounded).hi, INF);
}

#[test]
fn evaluate_and_runtime_checks() {
    let mut env = env();
    env.unbacked_size("u3", None, None, None).unwrap();
    env.check_text("u3 == u0 + u1").unwrap();
    env.check_text("u0 <= s0").unwrap();
    let id = |env: &ShapeEnv, n: &str| env.symbol_id(n).unwrap();
    let mut b = Bindings::new();
    b.set(id(&env, "s0"), 10)
        .set(id(&env, "u0"), 3)
        .set(id(&env, "u1"), 4);
    let x = e(&mut env, "u3 * s0");
    // u3 was eliminated by the equality: it is computed from u0 + u1.
    assert_eq!(env.evaluate(x, &b), Ok(70));
    assert_eq!(env.check_bindings(&b), Ok(()));
    b.set(id(&env, "u0"), 11);
    assert!(
        matches!(env.check_bindings(&b), Err(SymError::AssertFailed { assert }) if assert == "u0 <= s0")
    );
    b.set(id(&env, "u0"), -1);
    assert!(
        matches!(env.check_bindings(&b), Err(SymError::ValueOutOfRange { name, .. }) if name == "u0")
    );
}

#[test]
fn declaration_errors_name_the_symbol() {
    let mut env = env();
    assert_eq!(
        env.unbacked_size("u0", None, None, None),
        Err(SymError::DuplicateSymbol { name: "u0".into() })
    );
    assert!(matches!(
        env.unbacked_size("3x", None, None, None),
        Err(SymError::InvalidSymbolName { .. })
    ));
    assert!(matches!(
        env.unbacked_size("and", None, None, None),
        Err(SymError::InvalidSymbolName { .. })
    ));
    assert!(
        matches!(env.backed("s9", 5000, None, Some(10)), Err(SymError::HintOutOfRange { name, .. }) if name == "s9")
    );
    assert!(matches!(
        env.unbacked_size("u9", Some(5), Some(4), None),
        Err(SymError::EmptyRange { .. })
    ));
}

#[test]
fn fresh_symbols() {
    let mut env = env();
    let s = env.new_backed(12).unwrap();
    let u = env.new_unbacked_size(None);
    assert_ne!(env.text(s), env.text(u));
    assert!(env.text(s).starts_with('s') && env.text(u).starts_with('u'));
}

#[test]
fn a_product_with_a_zero_factor_is_zero_however_large_the_others() {
    // Found by sym_props: Python's integers reach 0 without overflowing on the way.
    let mut env = env();
    let x = e(&mut env, "u0**6 * u2**6 * Max(0, 1 - u1)**3");
    let id = |env: &ShapeEnv, n: &str| env.symbol_id(n).unwrap();
    let mut b = Bindings::new();
    b.set(id(&env, "u0"), 902)
        .set(id(&env, "u1"), 1)
        .set(id(&env, "u2"), 3743);
    assert_eq!(env.evaluate(x, &b), Ok(0));
    // Without the zero, the overflow is still an error, not a wrong value.
    b.set(id(&env, "u1"), -1);
    assert!(env.evaluate(x, &b).is_err());
}

#[test]
fn a_difference_of_saturated_bounds_is_not_a_point() {
    // Found by sym_props: (P·x)² with x in [2, 4] saturates its lower bound to ∞; x2·(P·x)² - (P·x)²
    // must not bound to [0, 0] through ∞ - ∞ (with x2 = 1 it is 0, and the rest is -(mod)).
    let mut env = ShapeEnv::new();
    env.unbacked_value("x1", Some(2), Some(4), None).unwrap();
    env.unbacked_value("x2", Some(1), Some(1), None).unwrap();
    let e = env
        .parse("((((x2*(x2 + -1)) - x1) * -407619307041649445)**2) * (-1 + x2) - ((-2 + x1) % (-4 % x1))")
        .unwrap();
    let r = env.bound(e);
    assert!(r.contains(-1) && r.contains(0), "{r}");
}

#[test]
fn a_guard_that_does_not_hold_fails_the_check_naming_it() {
    let mut env = env();
    // s1's hint (100) decides s1 == 37 as false and records the guard s1 != 37.
    let c = e(&mut env, "Eq(s1, 37)");
    assert!(!env.guard_or_false(c));
    assert_eq!(env.guards().len(), 1);
    let mut b = Bindings::new();
    b.set(env.symbol_id("s0").unwrap(), 8)
        .set(env.symbol_id("s1").unwrap(), 99);
    assert_eq!(env.check_bindings(&b), Ok(()));
    b.set(env.symbol_id("s1").unwrap(), 37);
    let err = env.check_bindings(&b).unwrap_err();
    assert!(
        matches!(&err, SymError::GuardFailed { guard } if guard.contains("s1") && guard.contains("37")),
        "{err}"
    );
    assert!(err.to_string().contains("compile again"), "{err}");
}

#[test]
fn rehinting_backed_symbols_moves_hints_and_drops_guards() {
    let mut env = env();
    let c = e(&mut env, "Eq(s1, 37)");
    assert!(!env.guard_or_false(c));
    let s0s1 = e(&mut env, "s0 + s1");
    let key = e(&mut env, "s0 + s1 + 0");
    let d = env.derived("d", key, s0s1);
    let u1 = env.symbol_id("u1").unwrap();
    let before_u1 = env.symbol_optimization_hint(u1);
    assert_eq!(env.optimization_hint(d), 164);
    let mut b = Bindings::new();
    b.set(env.symbol_id("s1").unwrap(), 37)
        .set(env.symbol_id("s0").unwrap(), 8)
        .set(u1, 5);
    assert!(matches!(
        env.check_bindings(&b),
        Err(SymError::GuardFailed { .. })
    ));
    env.rehint_backed(&b).unwrap();
    assert!(env.guards().is_empty());
    assert_eq!(env.check_bindings(&b), Ok(()));
    let s1 = env.symbol_id("s1").unwrap();
    assert_eq!(env.symbol_hint(s1), Some(37));
    // The derived symbol follows; unbacked hints are not the call's business.
    assert_eq!(env.optimization_hint(d), 45);
    assert_eq!(env.symbol_optimization_hint(u1), before_u1);
    // Now the hint decides the other way, and records that.
    assert!(env.guard_or_false(c));
    // A value outside the declared range is refused, naming the symbol.
    b.set(env.symbol_id("s0").unwrap(), 5000);
    let err = env.rehint_backed(&b).unwrap_err();
    assert!(err.to_string().contains("s0"), "{err}");
    // ... and changes nothing.
    assert_eq!(env.symbol_hint(env.symbol_id("s0").unwrap()), Some(8));
}

/// An assumption holds inside `assuming` only: ranges narrowed, symbols eliminated by an equality
/// and hints moved with them are all as before afterwards, nested assumptions included.
#[test]
fn assuming_forgets_what_it_assumed() {
    let mut env = env();
    let (u0, u1) = (env.symbol_id("u0").unwrap(), env.symbol_id("u1").unwrap());
    let before = |env: &mut ShapeEnv| {
        let s = e(env, "u0 + u1");
        let s = env.simplify(s);
        (env.symbol_range(u0), env.symbol_range(u1), env.text(s), {
            let k = e(env, "u1 >= 13");
            env.statically_known_true(k)
        })
    };
    let start = before(&mut env);
    let c = e(&mut env, "(u0 >= 10) & (u1 == u0 + 3)");
    let inner = env
        .assuming(c, |env| {
            let k = e(env, "u0 >= 10");
            let narrowed = env.statically_known_true(k);
            let k = e(env, "u1 >= 13");
            let outer = env.statically_known_true(k);
            let d = e(env, "u0 >= 100");
            let nested = env.assuming(d, |env| {
                let k = e(env, "u1 >= 103");
                env.statically_known_true(k)
            });
            let k = e(env, "u1 >= 103");
            (narrowed, outer, nested, env.statically_known_true(k))
        })
        .expect("satisfiable");
    assert_eq!(inner, (true, true, Some(true), false));
    assert_eq!(before(&mut env), start);
    // A contradiction is no assumption at all.
    let c = e(&mut env, "u0 + u1 < 0");
    assert!(env.assuming(c, |_| ()).is_none());
    assert_eq!(before(&mut env), start);
}
