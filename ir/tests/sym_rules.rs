//! Golden tests of the rewrite rules: input text → canonical, simplified text.

use guardless_ir::sym::ShapeEnv;

/// An environment with backed `s0` (hint 64, range [2, 1024]), `s1` (hint 100), unbacked sizes
/// `u0..u3` ([0, ∞)), `b` ([1, 16], a provably non-zero divisor), `n` (unbacked value, (-∞, ∞)),
/// and `i` ([-8, 8]).
fn env() -> ShapeEnv {
    let mut env = ShapeEnv::new();
    env.backed("s0", 64, Some(2), Some(1024)).unwrap();
    env.backed("s1", 100, None, None).unwrap();
    for u in ["u0", "u1", "u2", "u3"] {
        env.unbacked_size(u, None, None, None).unwrap();
    }
    env.unbacked_value("b", Some(1), Some(16), None).unwrap();
    env.unbacked_value("n", None, None, None).unwrap();
    env.unbacked_value("i", Some(-8), Some(8), None).unwrap();
    env
}

fn simplified(env: &mut ShapeEnv, text: &str) -> String {
    let e = env
        .parse(text)
        .unwrap_or_else(|err| panic!("{text}: {err}"));
    let s = env.simplify(e);
    env.text(s)
}

fn check(cases: &[(&str, &str)]) {
    let mut env = env();
    for (input, want) in cases {
        assert_eq!(simplified(&mut env, input), *want, "simplify({input})");
    }
}

#[test]
fn sums_and_products_are_canonical() {
    check(&[
        ("u1 + u0 + 2*u1 - 3", "u0 + 3*u1 - 3"),
        ("u0 - u0", "0"),
        ("s0*4096 + u1//2", "4096*s0 + u1//2"),
        ("(s0 + 1)*s1 - s0*s1", "s1"),
        ("(u0 + 1)*(u0 - 1)", "u0**2 - 1"),
        ("s0**2 * s0", "s0**3"),
        ("2*(u0 + 3) - 6", "2*u0"),
        ("u1*u0 - u0*u1", "0"),
        ("(n + 1)**0", "1"),
        ("-(u0 - u1)", "-u0 + u1"),
    ]);
}

#[test]
fn division_by_constants() {
    check(&[
        ("(4*u0 + 8)//4", "u0 + 2"),
        ("(4*u0 + 9)//4", "u0 + 2"),
        ("(4*u0 + 2*u1)//4", "u0 + u1//2"),
        ("(6*n + 4)//4", "3*n//2 + 1"),
        ("(n//4)//8", "n//32"),
        ("n//-2", "(-n)//2"),
        ("CeilDiv(4*n + 1, 4)", "n + 1"),
        ("CeilDiv(CeilDiv(n, 2), 3)", "CeilDiv(n, 6)"),
        ("n//1", "n"),
    ]);
}

#[test]
fn modulo_with_divisibility() {
    check(&[
        ("(n % 8) % 4", "n % 4"),
        ("(8*n + 5) % 4", "1"),
        ("(6*n + 3) % 9", "3*((2*n + 1) % 3)"),
        ("n % 1", "0"),
        ("(u0 * u1) % u1", "u0*u1 % u1"),
        ("(u0 * b) % b", "0"),
        ("(u0 * b) // b", "u0"),
        ("(2*b*u0 + 4*b) // (2*b)", "u0 + 2"),
        ("ModularIndexing(n, 4, 8)", "n//4 % 8"),
    ]);
}

/// An index split into a block and a position within it, joined again, is the index: for floor
/// division and Python's modulo `c·(x // c) + x % c = x` for every `x` and constant `c ≠ 0`.
#[test]
fn a_quotient_and_its_remainder_join() {
    check(&[
        ("64*(u0//64) + u0 % 64", "u0"),
        ("256*u1 + 64*(u0//64) + u0 % 64 + 3", "u0 + 256*u1 + 3"),
        ("(n//4)*4 + n % 4 - n", "0"),
        ("2*(8*(n//8) + n % 8) + 3*(i//2)*2 + 3*(i % 2)", "3*i + 2*n"),
        ("64*(u0//64) + 2*(u0 % 64)", "64*(u0//64) + 2*(u0 % 64)"),
        ("64*(u0//32) + u0 % 64", "64*(u0//32) + u0 % 64"),
        ("b*(u0//b) + u0 % b", "b*(u0//b) + u0 % b"),
    ]);
}

#[test]
fn symbolic_divisors_only_fold_when_provably_nonzero() {
    // u1 may be 0: (u0*u1) % u1 must raise for u1 = 0, so it is kept.
    check(&[
        ("u0//u1 - u0//u1", "0*(u0//u1)"),
        ("u0//b - u0//b", "0"),
        ("0*(n // u1) + 3", "0*(n//u1) + 3"),
        ("(n % 8) % (b + 16)", "n % 8"),
        ("Min(u0 // u1, -1) + 1", "Min(-1, u0//u1) + 1"),
    ]);
}

#[test]
fn ranges_decide_min_max_where_and_comparisons() {
    check(&[
        ("Min(u0, u0 + 1)", "u0"),
        ("Max(s0, 8)", "Max(8, s0)"),
        ("Max(s0, 2)", "s0"),
        ("Min(i, 100)", "i"),
        ("Where(u0 < 0, u0 + s0, u0)", "u0"),
        ("Where(i < 0, i + s0, i)", "Where(i < 0, i + s0, i)"),
        ("u0 >= 0", "True"),
        ("u0 + 1 > u0", "True"),
        ("2*n + 1 == 0", "False"),
        ("i < 9", "True"),
        ("(u0 >= 0) & (i <= 8)", "True"),
        ("(u0 == 0) | (u0 > 0)", "(u0 == 0) | (u0 > 0)"),
        ("b // 17", "0"),
        ("b % 17", "b"),
        ("(s0 + 1024) // 1025", "1"),
        ("i % 16", "i % 16"),
        ("(i + 8) % 17", "i + 8"),
    ]);
}

#[test]
fn asserted_equalities_substitute() {
    let mut env = env();
    env.check_text("u0 == u1 + u2").unwrap();
    assert_eq!(simplified(&mut env, "u0 - u1 - u2"), "0");
    assert_eq!(simplified(&mut env, "u0"), "u1 + u2");
    // A backed symbol is preferred as the representative: u3 is eliminated in favour of s0.
    env.check_text("s0 == u3").unwrap();
    assert_eq!(simplified(&mut env, "u3 + 1"), "s0 + 1");
    // Chains resolve transitively.
    env.check_text("u2 == 2*u1").unwrap();
    assert_eq!(simplified(&mut env, "u0"), "3*u1");
    // An equality with a constant fixes the value.
    env.check_text("n == 7").unwrap();
    assert_eq!(simplified(&mut env, "n*n"), "49");
}

#[test]
fn asserted_divisibility_is_known() {
    let mut env = env();
    env.check_text("u0 % 16 == 0").unwrap();
    assert_eq!(simplified(&mut env, "u0 % 16"), "0");
    assert_eq!(simplified(&mut env, "(u0 + 32) % 8"), "0");
    assert_eq!(simplified(&mut env, "(u0 + 4) // 4"), "u0//4 + 1");
    let u0 = env.parse("u0").unwrap();
    assert!(env.statically_known_multiple_of(u0, 16));
    assert!(env.statically_known_multiple_of(u0, 8));
    assert!(!env.statically_known_multiple_of(u0, 32));
}

#[test]
fn constant_overflow_is_kept_unfolded() {
    let mut env = env();
    let text = "9223372036854775807 + n + 1";
    let s = simplified(&mut env, text);
    assert_eq!(s, "1 + (n + 9223372036854775807)");
    // And it still reads back as itself.
    assert_eq!(simplified(&mut env, &s), s);
    assert_eq!(
        simplified(&mut env, "-9223372036854775808 + 0"),
        "-9223372036854775808"
    );
}

#[test]
fn torch_spellings_parse() {
    check(&[
        ("FloorDiv(s0, 2) + PythonMod(s0, 2)", "s0//2 + s0 % 2"),
        (
            "Piecewise((i, i >= 0), (i + s0, True))",
            "Where(i >= 0, i, i + s0)",
        ),
        ("Eq(u0, 0) | Ne(u0, 0)", "(u0 == 0) | (u0 != 0)"),
        ("Max(1, u0)", "Max(1, u0)"),
        ("CleanDiv(4*u0, 4)", "u0"),
        ("not (u0 >= 0)", "False"),
    ]);
}

#[test]
fn substitution_rebuilds_canonically() {
    let mut env = env();
    let e = env.parse("2*n + n//2 + Min(n, u0)").unwrap();
    let n = env.symbol_id("n").unwrap();
    let rep = env.parse("2*u1 + 4").unwrap();
    let s = env.pool_mut().substitute(e, &|id| (id == n).then_some(rep));
    assert_eq!(env.text(s), "5*u1 + Min(u0, 2*u1 + 4) + 10");
    // Symbols the map leaves alone stay; the result is canonical, so it is shared.
    let again = env.parse("5*u1 + Min(u0, 2*u1 + 4) + 10").unwrap();
    assert_eq!(s, again);
}

/// A loop variable stays below its extent wherever it appears: a reshape's `x // n` and `x % n`
/// over a loop `x in 0..n` fold, also through a flattened index; nothing folds that could reach
/// the divisor, and a variable bound to data (checked at run time, not yet proved) keeps both.
#[test]
fn loop_variables_below_their_extent_fold_division_and_modulo() {
    let mut env = ShapeEnv::new();
    let n = env.unbacked_size("n", Some(0), Some(65536), None).unwrap();
    let x = env.new_index_var("x", n);
    let c256 = env.parse("256").unwrap();
    let y = env.new_index_var("x", c256);
    let (xs, ys) = (env.text(x), env.text(y));
    for (input, want) in [
        (format!("{xs} // n"), "0".to_string()),
        (format!("{xs} % n"), xs.clone()),
        (format!("(256*{xs} + {ys}) // (256*n)"), "0".into()),
        (
            format!("(256*{xs} + {ys}) % (256*n)"),
            format!("256*{xs} + {ys}"),
        ),
        (format!("{xs} // (n + 1)"), "0".into()),
        (format!("{ys} % 256"), ys.clone()),
        // Could reach the divisor: kept.
        (format!("({xs} + 1) // n"), format!("({xs} + 1)//n")),
        (format!("{xs} % (n - 1)"), format!("{xs} % (n - 1)")),
        (
            format!("(256*{xs} + {ys}) // (255*n)"),
            format!("(256*{xs} + {ys})//(255*n)"),
        ),
    ] {
        assert_eq!(simplified(&mut env, &input), want, "simplify({input})");
    }
}
