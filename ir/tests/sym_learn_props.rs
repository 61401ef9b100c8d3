//! Soundness of learning from asserts: pick a point, record random asserts that hold at it (linear
//! facts, equalities that substitute, divisibility, disjunctions), then check that nothing the engine
//! concludes excludes the point: simplification keeps values, bounds contain them, statically known
//! conditions are true there, and no assert that holds was called false or contradictory.

mod common;

use common::{case, point, Raw};
use guardless_ir::sym::{Bindings, CmpOp, Expr, ShapeEnv, SymError};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
        / 4
}

#[derive(Clone, Debug)]
enum Fact {
    /// `Σ cᵢ·xᵢ + k  op  0`, with `op` and `k` chosen so it holds at the point.
    Linear(Vec<(usize, i64)>, CmpOp),
    /// `x_i == Σ cⱼ·xⱼ + k` with `k` chosen so it holds.
    Equality(usize, Vec<(usize, i64)>),
    /// `x_i % m == r` with `r` chosen so it holds (divisibility when `r == 0`).
    Modulo(usize, i64),
    /// `(x_i <= k) | (x_j >= k')`, true at the point.
    Either(usize, usize),
}

fn fact(n: usize) -> impl Strategy<Value = Fact> {
    let coeffs = prop::collection::vec((0..n, -3i64..=3), 1..=3);
    let op = prop_oneof![
        Just(CmpOp::Le),
        Just(CmpOp::Lt),
        Just(CmpOp::Ge),
        Just(CmpOp::Gt),
        Just(CmpOp::Ne)
    ];
    prop_oneof![
        3 => (coeffs.clone(), op).prop_map(|(c, op)| Fact::Linear(c, op)),
        2 => (0..n, coeffs).prop_map(|(i, c)| Fact::Equality(i, c)),
        1 => (0..n, 1i64..=8).prop_map(|(i, m)| Fact::Modulo(i, m)),
        1 => (0..n, 0..n).prop_map(|(i, j)| Fact::Either(i, j)),
    ]
}

/// The assert's text, true at `vals`.
fn assert_text(f: &Fact, vals: &[i64]) -> String {
    let lin = |c: &[(usize, i64)]| -> (String, i64) {
        let text = c
            .iter()
            .map(|&(i, k)| format!("({k})*x{i}"))
            .collect::<Vec<_>>()
            .join(" + ");
        (text, c.iter().map(|&(i, k)| k * vals[i]).sum())
    };
    match f {
        Fact::Linear(c, op) => {
            let (text, v) = lin(c);
            // Pick the constant so the comparison holds with a little slack (or exactly).
            let k = match op {
                CmpOp::Le => v,
                CmpOp::Lt => v + 1,
                CmpOp::Ge => v,
                CmpOp::Gt => v - 1,
                _ => v + 1, // Ne
            };
            format!("{text} {} {k}", op.symbol())
        }
        Fact::Equality(i, c) => {
            let (text, v) = lin(c);
            format!("x{i} == {text} + {}", vals[*i] - v)
        }
        Fact::Modulo(i, m) => format!("x{i} % {m} == {}", vals[*i].rem_euclid(*m)),
        Fact::Either(i, j) => format!("(x{i} <= {}) | (x{j} >= {})", vals[*i], vals[*j] + 1),
    }
}

proptest! {
    #![proptest_config(common::fixed_seed(cases()))]

    #[test]
    fn learning_never_excludes_a_point_where_the_asserts_hold(
        (ranges, raw, points) in case(),
        facts in prop::collection::vec(fact(5), 1..=6),
    ) {
        let n = ranges.len();
        let vals = point(&ranges, &points[0]);
        let mut env = ShapeEnv::new();
        let syms: Vec<Expr> = ranges
            .iter()
            .enumerate()
            .map(|(i, &(lo, hi))| env.unbacked_value(&format!("x{i}"), Some(lo), Some(hi), None).unwrap())
            .collect();
        let mut b = Bindings::new();
        for (i, &v) in vals.iter().enumerate() {
            b.set(env.symbol_id(&format!("x{i}")).unwrap(), v);
        }
        for f in &facts {
            let f = restrict(f, n);
            let text = assert_text(&f, &vals);
            match env.check_text(&text) {
                Ok(()) => {}
                Err(e @ (SymError::AssertAlwaysFalse { .. } | SymError::Contradiction { .. })) => {
                    prop_assert!(false, "{} holds at {:?} but: {}", text, vals, e);
                }
                Err(e) => prop_assert!(false, "{}: {}", text, e),
            }
        }
        prop_assert_eq!(env.check_bindings(&b), Ok(()));
        let built = raw.build(&mut env, &syms);
        check_expr(&mut env, &raw, built, &vals, &b)?;
        for &s in &syms {
            let v = env.evaluate(s, &b).unwrap();
            let r = env.bound(s);
            prop_assert!(r.contains(v), "{} = {} outside {}", env.text(s), v, r);
            let simple = env.simplify(s);
            prop_assert_eq!(env.evaluate(simple, &b), Ok(v), "{} simplified to {}", env.text(s), env.text(simple));
        }
    }
}

/// Facts over symbols that exist.
fn restrict(f: &Fact, n: usize) -> Fact {
    let m = |i: usize| i % n;
    match f {
        Fact::Linear(c, op) => Fact::Linear(c.iter().map(|&(i, k)| (m(i), k)).collect(), *op),
        Fact::Equality(i, c) => Fact::Equality(m(*i), c.iter().map(|&(j, k)| (m(j), k)).collect()),
        Fact::Modulo(i, k) => Fact::Modulo(m(*i), *k),
        Fact::Either(i, j) => Fact::Either(m(*i), m(*j)),
    }
}

fn check_expr(
    env: &mut ShapeEnv,
    raw: &Raw,
    e: Expr,
    vals: &[i64],
    b: &Bindings,
) -> Result<(), TestCaseError> {
    let Ok(v) = raw.eval(vals) else { return Ok(()) };
    if raw.max_magnitude(vals) > 1 << 24 {
        return Ok(());
    }
    let simple = env.simplify(e);
    prop_assert_eq!(
        env.evaluate(simple, b),
        Ok(v),
        "{} simplified to {} at {:?}",
        env.text(e),
        env.text(simple),
        vals
    );
    let r = env.bound(e);
    prop_assert!(
        r.contains(v),
        "{} = {} outside {} at {:?}",
        env.text(e),
        v,
        r,
        vals
    );
    for (op, k) in [
        (CmpOp::Le, v),
        (CmpOp::Ge, v),
        (CmpOp::Eq, v),
        (CmpOp::Lt, v + 1),
        (CmpOp::Ne, v + 1),
    ] {
        let kc = env.pool_mut().constant(k);
        let c = env.pool_mut().compare(op, e, kc);
        prop_assert!(
            !env.statically_known_false(c),
            "{} is true at {:?} but known false",
            env.text(c),
            vals
        );
    }
    Ok(())
}
