//! Property tests of the symbolic engine over random expressions of depth ≥ 6 over 1–5 symbols with
//! random ranges, at random points inside the ranges. `PROPTEST_CASES` overrides the case count.

mod common;

use common::{case, env_with, point, RawErr};
use guardless_ir::sym::{Bindings, EvalError, ShapeEnv, SymError};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn bind(env: &ShapeEnv, vals: &[i64]) -> Bindings {
    let mut b = Bindings::new();
    for (i, &v) in vals.iter().enumerate() {
        b.set(env.symbol_id(&format!("x{i}")).unwrap(), v);
    }
    b
}

proptest! {
    #![proptest_config(common::fixed_seed(cases()))]

    /// (a) simplification keeps the value and keeps divisions by zero; (b) the value lies in
    /// `bound`; (d) nothing panics.
    #[test]
    fn simplify_preserves_value_and_bound_contains_it((ranges, raw, points) in case()) {
        let (mut env, syms) = env_with(&ranges);
        let built = raw.build(&mut env, &syms);
        let simple = env.simplify(built);
        let range = env.bound(built);
        for p in &points {
            let vals = point(&ranges, p);
            let b = bind(&env, &vals);
            let expected = raw.eval(&vals);
            let got_built = env.evaluate(built, &b);
            let got = env.evaluate(simple, &b);
            // A canonical form may multiply out what the original kept factored (`(a - b)**2`);
            // exact up to 2^127, so with values beyond 2^24 an overflow of the canonical form is
            // possible where the original had none.
            let huge = raw.max_magnitude(&vals) > 1 << 24 || vals.iter().any(|v| v.unsigned_abs() > 1 << 24);
            let overflowed = |r: &Result<i64, SymError>| matches!(r, Err(SymError::Eval(EvalError::Overflow { .. })));
            match expected {
                Ok(_) if huge && (overflowed(&got) || overflowed(&got_built)) => {}
                Ok(v) => {
                    prop_assert_eq!(&got_built, &Ok(v), "canonical form of {:?} at {:?}: {}", raw, vals, env.text(built));
                    prop_assert_eq!(&got, &Ok(v), "simplified {} at {:?}", env.text(simple), vals);
                    prop_assert!(range.contains(v), "{} = {} at {:?} outside bound {}", env.text(built), v, vals, range);
                }
                Err(RawErr::DivZero) => {
                    prop_assert!(got.is_err(), "{:?} divides by zero at {:?} but simplified {} = {:?}", raw, vals, env.text(simple), got);
                }
                // An intermediate value beyond i64 in the raw tree: nothing to compare.
                Err(RawErr::Overflow) => {}
            }
            if let Ok(v) = got {
                prop_assert!(range.contains(v), "{} = {} outside bound {}", env.text(simple), v, range);
            }
        }
    }

    /// (c) `parse(print(e)) == e`, also in a fresh environment with symbols declared in reverse.
    #[test]
    fn print_parse_round_trip((ranges, raw, _points) in case()) {
        let (mut env, syms) = env_with(&ranges);
        let built = raw.build(&mut env, &syms);
        let simple = env.simplify(built);
        for e in [built, simple] {
            let text = env.text(e);
            let back = env.parse(&text);
            prop_assert_eq!(back.clone(), Ok(e), "{} did not round-trip: {:?}", text, back.map(|b| env.text(b)));
            let mut other = ShapeEnv::new();
            for (i, &(lo, hi)) in ranges.iter().enumerate().rev() {
                other.unbacked_value(&format!("x{i}"), Some(lo), Some(hi), None).unwrap();
            }
            let again = other.parse(&text).map(|x| other.text(x));
            prop_assert_eq!(again, Ok(text.clone()));
        }
    }
}

#[test]
fn evaluation_errors_are_typed_not_panics() {
    let mut env = ShapeEnv::new();
    let x = env.unbacked_value("x", None, None, None).unwrap();
    let e = env.parse("x // (x - x)").unwrap();
    let b = bind_one(&env, x, 3);
    assert!(matches!(
        env.evaluate(e, &b),
        Err(SymError::Eval(EvalError::DivisionByZero { .. }))
    ));
    let big = env.parse("x * 9223372036854775807").unwrap();
    assert!(matches!(
        env.evaluate(big, &b),
        Err(SymError::Eval(EvalError::Overflow { .. }))
    ));
    let unbound = env.parse("x + 1").unwrap();
    assert!(matches!(
        env.evaluate(unbound, &Bindings::new()),
        Err(SymError::Eval(EvalError::Unbound { .. }))
    ));
}

fn bind_one(env: &ShapeEnv, x: guardless_ir::sym::Expr, v: i64) -> Bindings {
    let mut b = Bindings::new();
    b.set(env.pool().as_symbol(x).unwrap(), v);
    b
}
