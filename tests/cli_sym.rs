//! The `guardless sym` command line, run as a user would: the built binary, its stdout, stderr and
//! exit status.

mod common;

use common::guardless;

fn ok(args: &[&str]) -> String {
    let (success, stdout, stderr) = guardless(args);
    assert!(success, "{args:?} failed: {stderr}");
    stdout
}

fn fails(args: &[&str]) -> String {
    let (success, stdout, stderr) = guardless(args);
    assert!(!success, "{args:?} should fail, printed {stdout}");
    stderr
}

#[test]
fn simplify_prints_the_canonical_form() {
    assert_eq!(
        ok(&["sym", "simplify", "(4*u0 + 8)//4", "--range", "u0=0..1000"]),
        "u0 + 2\n"
    );
    assert_eq!(
        ok(&[
            "sym",
            "simplify",
            "u0 - u1 - u2",
            "--assert",
            "u0 == u1 + u2"
        ]),
        "0\n"
    );
    assert_eq!(
        ok(&["sym", "simplify", "-(s0*2) + s0*4096", "--hint", "s0=8"]),
        "4094*s0\n"
    );
    let c = ok(&[
        "sym",
        "simplify",
        "u0 // 4 + i % 3",
        "--range",
        "i=-5..5",
        "--c",
    ]);
    let lines: Vec<&str> = c.lines().collect();
    assert_eq!(lines[0], "u0//4 + i % 3");
    assert!(lines[1].contains("(u0 / ((int64_t)4LL))"), "{}", lines[1]);
    assert!(
        lines[1].contains("gl_mod_i64(i, ((int64_t)3LL))"),
        "{}",
        lines[1]
    );
}

#[test]
fn bound_prints_an_inclusive_range() {
    assert_eq!(
        ok(&["sym", "bound", "(4*u0 + 8)//4", "--range", "u0=0..1000"]),
        "[2, 1002]\n"
    );
    assert_eq!(ok(&["sym", "bound", "u0 - 5"]), "[-5, inf]\n");
    assert_eq!(
        ok(&["sym", "bound", "n", "--range", "n=-inf..inf"]),
        "[-inf, inf]\n"
    );
    assert_eq!(
        ok(&["sym", "bound", "s1 - u0", "--hint", "s1=100", "--assert", "u0 <= s1"]),
        "[0, inf]\n"
    );
}

#[test]
fn hint_always_gives_a_value_and_guarding_hint_refuses_unbacked() {
    assert_eq!(
        ok(&["sym", "hint", "u0 + s0", "--hint", "u0=4096", "--hint", "s0=7"]),
        "4103\n"
    );
    assert_eq!(ok(&["sym", "hint", "u0"]), "8192\n");
    assert_eq!(ok(&["sym", "hint", "u0", "--fallback", "64"]), "64\n");
    assert_eq!(ok(&["sym", "hint", "u0", "--range", "u0=1..100"]), "100\n");
    assert_eq!(
        ok(&["sym", "hint", "s0*3", "--hint", "s0=7", "--guarding"]),
        "21\n"
    );
    let err = fails(&["sym", "hint", "s0 + u0", "--hint", "s0=7", "--guarding"]);
    assert!(
        err.contains("data-dependent") && err.contains("u0"),
        "{err}"
    );
}

#[test]
fn decide_answers_true_false_or_unknown() {
    assert_eq!(ok(&["sym", "decide", "u0 >= 0"]), "true\n");
    assert_eq!(ok(&["sym", "decide", "u0 < 0"]), "false\n");
    assert_eq!(ok(&["sym", "decide", "u0 == 1"]), "unknown\n");
    assert_eq!(
        ok(&["sym", "decide", "u0 % 16 == 0", "--assert", "u0 == 32*u1"]),
        "true\n"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let err = fails(&["sym", "simplify", "x // (y"]);
    assert!(
        err.contains("at byte 7") && err.contains("expected ')'"),
        "{err}"
    );
    let err = fails(&["sym", "simplify", "s0 + 1"]);
    assert!(err.contains("s0") && err.contains("--hint s0="), "{err}");
    let err = fails(&["sym", "bound", "u0", "--range", "u0=5"]);
    assert!(err.contains("LO..HI"), "{err}");
    let err = fails(&["sym", "bound", "u0", "--range", "u0=a..5"]);
    assert!(err.contains("'a' is not an integer"), "{err}");
    let err = fails(&["sym", "bound", "u0", "--range", "u0=9..5"]);
    assert!(err.contains("u0") && err.contains("empty"), "{err}");
    let err = fails(&[
        "sym",
        "hint",
        "s0",
        "--hint",
        "s0=5",
        "--range",
        "s0=10..20",
    ]);
    assert!(err.contains("outside its range"), "{err}");
    let err = fails(&["sym", "decide", "u0 + 1"]);
    assert!(err.contains("not a condition"), "{err}");
    let err = fails(&["sym", "simplify", "u0", "--assert", "u0 < 0"]);
    assert!(
        err.contains("always false") && err.contains("u0 < 0"),
        "{err}"
    );
}
