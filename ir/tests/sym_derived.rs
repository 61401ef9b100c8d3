//! Derived symbols (`ShapeEnv::derived`): one atom for simplification, the definition's value at
//! run time, its hint for heuristics and guards, its range for proofs.

use guardless_ir::sym::{Bindings, Expr, ShapeEnv, SymbolKind};

fn unbacked(env: &mut ShapeEnv, name: &str, hint: i64) -> Expr {
    env.unbacked_size(name, Some(0), Some(100), Some(hint))
        .unwrap()
}

#[test]
fn a_chain_of_offsets_evaluates_hints_and_bounds_like_its_sums() {
    let mut env = ShapeEnv::new();
    let u: Vec<Expr> = (0..4)
        .map(|i| unbacked(&mut env, &format!("u{i}"), 10 * (i + 1)))
        .collect();
    // off2 = u0 + u1 + u2 (defined as (u0 + u1) + u2), off3 = off2 + u3.
    let p = env.pool_mut();
    let s01 = p.add(u[0], u[1]);
    let s012 = p.add(s01, u[2]);
    let s0123 = p.add(s012, u[3]);
    let step2 = p.add(s01, u[2]);
    let off2 = env.derived("off", s012, step2);
    let step3 = env.pool_mut().add(off2, u[3]);
    let off3 = env.derived("off", s0123, step3);
    assert_ne!(off2, off3);
    // The same sum is the same symbol.
    assert_eq!(env.derived("off", s012, step2), off2);

    let id3 = env.pool().as_symbol(off3).unwrap();
    assert_eq!(env.pool().symbol(id3).kind, SymbolKind::Unbacked);
    assert_eq!(env.symbol_definition(id3), Some(step3));
    // One atom: simplification keeps it whole.
    assert_eq!(env.simplify(off3), off3);
    // Hints and ranges come from the definition.
    assert_eq!(env.optimization_hint(off3), 10 + 20 + 30 + 40);
    let r = env.bound(off3);
    assert_eq!((r.lo, r.hi), (0, 400));
    // Run-time values from the bindings of the sizes.
    let mut b = Bindings::new();
    for (i, &x) in u.iter().enumerate() {
        b.set(env.pool().as_symbol(x).unwrap(), [3, 0, 7, 11][i]);
    }
    assert_eq!(env.evaluate(off2, &b).unwrap(), 10);
    assert_eq!(env.evaluate(off3, &b).unwrap(), 21);
    let d = env.pool_mut().sub(off3, off2);
    assert_eq!(env.evaluate(d, &b).unwrap(), 11);
    // Deciding on an unbacked offset is refused, not guarded.
    assert!(env.guarding_hint(off3).is_err());
}

#[test]
fn an_offset_of_backed_sizes_is_backed_with_the_examples_sum() {
    let mut env = ShapeEnv::new();
    let s: Vec<Expr> = (0..3)
        .map(|i| env.backed(&format!("s{i}"), 4 + i, None, None).unwrap())
        .collect();
    let p = env.pool_mut();
    let s01 = p.add(s[0], s[1]);
    let key = p.add(s01, s[2]);
    let def = p.add(s01, s[2]);
    let off = env.derived("off", key, def);
    let id = env.pool().as_symbol(off).unwrap();
    assert_eq!(env.pool().symbol(id).kind, SymbolKind::Backed);
    assert_eq!(env.guarding_hint(off).unwrap(), 4 + 5 + 6);
    assert_eq!(env.symbol_hint(id), Some(15));
}
