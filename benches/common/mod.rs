//! The split/cat trace shared by the `sym_scaling` benchmark and the `sym_trace` example: N unbacked
//! sizes in groups of 128; each group is the split of a dimension `s0` (asserted to sum to it, as
//! `split_with_sizes` does), then concatenated back; a compiler's queries are asked of every size
//! (≥ 0, == 0, == 1, optimization hint, fits in i32), of every concatenation offset (its hint) and of
//! the total (== s0, ≥ 0, hint, fits in i32).

use guardless::ir::sym::{Expr, ShapeEnv};

const GROUP: usize = 128;

/// Runs the trace; returns a checksum so nothing is optimized away.
pub fn trace(n: usize) -> i64 {
    let mut env = ShapeEnv::new();
    let s0 = env
        .backed("s0", 64 * GROUP as i64, Some(GROUP as i64), None)
        .unwrap();
    let zero = env.pool_mut().zero();
    let one = env.pool_mut().one();
    let mut checksum = 0i64;
    let mut made = 0;
    while made < n {
        let size = GROUP.min(n - made);
        // split_with_sizes: fresh unbacked sizes, each checked like an allocation.
        let pieces: Vec<Expr> = (0..size).map(|_| env.new_unbacked_size(None)).collect();
        made += size;
        for &u in &pieces {
            let p = env.pool_mut();
            let ge0 = p.ge(u, zero);
            let eq0 = p.eq(u, zero);
            let eq1 = p.eq(u, one);
            assert!(env.statically_known_true(ge0));
            assert!(!env.guard_or_false(eq0));
            assert!(!env.guard_or_false(eq1));
        }
        let total = env.pool_mut().add_all(&pieces);
        let eq = env.pool_mut().eq(total, s0);
        env.check(eq).unwrap();
        // flip + cat: the output size is the sum of the pieces; each input's offset is a prefix
        // sum, whose hint feeds the kernel's heuristics; the index type depends on the total.
        let cat = env.pool_mut().add_all(&pieces);
        assert_eq!(
            env.simplify(cat),
            s0,
            "the concatenation is as long as the split dimension"
        );
        let nonneg = env.pool_mut().ge(cat, zero);
        assert!(env.statically_known_true(nonneg));
        checksum = checksum.wrapping_add(i64::from(env.fits_in_i32(cat)));
        checksum = checksum.wrapping_add(env.optimization_hint(cat));
        let mut offset = zero;
        for &u in pieces.iter().rev() {
            checksum = checksum.wrapping_add(env.optimization_hint(offset));
            offset = env.pool_mut().add(offset, u);
        }
        for &u in &pieces {
            checksum = checksum.wrapping_add(env.optimization_hint(u));
            checksum = checksum.wrapping_add(i64::from(env.fits_in_i32(u)));
        }
    }
    assert!(env.guards().is_empty(), "no guard on unbacked sizes");
    checksum
}
