//! Parse errors carry the byte position and what was expected.

use guardless_ir::sym::{ShapeEnv, SymError};

fn parse_err(text: &str) -> (usize, String) {
    let mut env = ShapeEnv::new();
    env.unbacked_size("u0", None, None, None).unwrap();
    env.backed("s0", 4, None, None).unwrap();
    match env.parse(text) {
        Err(SymError::Parse { source, .. }) => (source.pos, source.message),
        other => panic!("{text}: expected a parse error, got {other:?}"),
    }
}

#[test]
fn errors_give_position_and_expectation() {
    let cases: &[(&str, usize, &str)] = &[
        ("x // (u0", 0, "unknown symbol 'x'"),
        ("u0 // (u0", 9, "expected ')'"),
        ("u0 + ", 5, "expected an expression"),
        ("u0 $ 2", 3, "unexpected character '$'"),
        ("u0 ** u0", 6, "constant exponent"),
        ("u0 ** 65", 6, "constant exponent"),
        ("1 < u0 < 3", 7, "chained comparisons"),
        ("u0 + (u0 < 1)", 5, "expected an integer expression"),
        ("Where(u0, 1, 2)", 6, "expected a boolean expression"),
        ("Min()", 0, "at least one argument"),
        ("Mod(u0)", 0, "takes 2 arguments"),
        ("Foo(u0)", 0, "unknown function 'Foo'"),
        ("99999999999999999999", 0, "does not fit in 64 bits"),
        ("9223372036854775808", 0, "does not fit in 64 bits"),
        ("u0 ! 3", 3, "expected '!='"),
        ("u0 u0", 3, "expected an operator or end of input"),
        (
            "Piecewise((u0, u0 > 1), (s0, u0 > 2))",
            0,
            "must end with a (value, True) piece",
        ),
    ];
    for &(text, pos, msg) in cases {
        let (p, m) = parse_err(text);
        assert_eq!(p, pos, "{text}: {m}");
        assert!(m.contains(msg), "{text}: message '{m}' lacks '{msg}'");
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let text = format!("{}u0{}", "(".repeat(100_000), ")".repeat(100_000));
    let (_, m) = parse_err(&text);
    assert!(m.contains("nested deeper"), "{m}");
    let text = format!("{}u0", "-".repeat(100_000));
    let (_, m) = parse_err(&text);
    assert!(m.contains("nested deeper"), "{m}");
}

#[test]
fn extremes_round_trip() {
    let mut env = ShapeEnv::new();
    env.unbacked_value("n", None, None, None).unwrap();
    for text in [
        "-9223372036854775808",
        "9223372036854775807",
        "-9223372036854775808*n",
        "-(n//2) + 3",
        "-2**2",
    ] {
        let x = env.parse(text).unwrap();
        let printed = env.text(x);
        assert_eq!(env.parse(&printed), Ok(x), "{text} → {printed}");
    }
    let x = env.parse("-2**2").unwrap();
    assert_eq!(env.text(x), "-4");
}
