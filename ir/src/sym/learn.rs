//! Learning from deferred runtime asserts (`torch._check`): range refinements, linear facts,
//! substitutions from equalities, divisibility and even hint shares for split pieces.

use super::divmod::gcd;
use super::env::{ShapeEnv, SymState};
use super::error::SymError;
use super::expr::{CmpOp, Expr, Node, SymbolId, SymbolKind};
use super::range::{ValueRange, INF};

impl ShapeEnv {
    /// `torch._check(cond)`: records a deferred runtime assert and learns from it. An assert that is
    /// provably false, or that contradicts earlier ones, is an error naming it.
    pub fn check(&mut self, cond: Expr) -> Result<(), SymError> {
        if !self.pool.info(cond).is_bool {
            return Err(SymError::NotBoolean {
                expr: self.text(cond),
            });
        }
        let s = self.simplify(cond);
        match self.pool.as_bool(s) {
            Some(true) => return Ok(()),
            Some(false) => {
                return Err(SymError::AssertAlwaysFalse {
                    assert: self.text(cond),
                })
            }
            None => {}
        }
        if self.assert_set.insert(s) {
            self.asserts.push(s);
        }
        self.learn(s).map_err(|detail| SymError::Contradiction {
            assert: self.text(cond),
            detail,
        })
    }

    /// Runs `f` with `cond` assumed — learned as an assert would be — then forgets it: ranges,
    /// facts, divisibility and asserts are as they were. `None` when `cond` is false or contradicts
    /// what is known (it can never hold). For implications: `assuming(a, |e|
    /// e.statically_known_true(b))` proves that `b` holds wherever `a` does.
    pub fn assuming<T>(&mut self, cond: Expr, f: impl FnOnce(&mut ShapeEnv) -> T) -> Option<T> {
        // Symbols' states are saved as the assumption changes them (`sym_mut`), not copied
        // whole: a program's loop variables make the table large, and the scheduler assumes
        // something for every variant of every kernel. The other tables hold what asserts taught
        // (a few entries) and are copied.
        let saved = (
            self.syms.len(),
            self.sym_undo.replace(Vec::new()),
            self.facts.clone(),
            self.fact_signatures.clone(),
            self.divisibility.clone(),
            self.asserts.len(),
            self.assert_set.clone(),
        );
        self.changed();
        let out = match self.check(cond) {
            Ok(()) => Some(f(self)),
            Err(_) => None,
        };
        let (len, outer, facts, signatures, divisibility, asserts, assert_set) = saved;
        let undo = std::mem::replace(&mut self.sym_undo, outer).unwrap_or_default();
        for (id, st) in undo.into_iter().rev() {
            if id.index() < len {
                self.syms[id.index()] = st;
            }
        }
        self.syms.truncate(len);
        self.facts = facts;
        self.fact_signatures = signatures;
        self.divisibility = divisibility;
        self.asserts.truncate(asserts);
        self.assert_set = assert_set;
        // Memo entries made under the assumption are stale from here on.
        self.changed();
        out
    }

    /// Symbol `id`'s state, to be changed: under [`ShapeEnv::assuming`] it is saved first (once),
    /// to be put back when the assumption ends.
    fn sym_mut(&mut self, id: SymbolId) -> &mut SymState {
        if let Some(undo) = &mut self.sym_undo {
            if !undo.iter().any(|(saved, _)| *saved == id) {
                undo.push((id, self.syms[id.index()].clone()));
            }
        }
        &mut self.syms[id.index()]
    }

    /// Parses and checks an assert.
    pub fn check_text(&mut self, text: &str) -> Result<(), SymError> {
        let e = self.parse(text)?;
        self.check(e)
    }

    fn learn(&mut self, c: Expr) -> Result<(), String> {
        match self.pool.node(c).clone() {
            Node::And(args) => {
                for &orig in args.iter() {
                    let a = self.simplify(orig);
                    if self.pool.as_bool(a) == Some(false) {
                        return Err(format!("'{}' is false given the rest", self.text(orig)));
                    }
                    self.learn(a)?;
                }
                Ok(())
            }
            Node::Cmp(op, a, b) => {
                let d = self.pool.sub(a, b);
                match op {
                    CmpOp::Eq => {
                        // `u2 == u0 + u1` defines the lone symbol: it is the one eliminated.
                        let lone = self.pool.as_symbol(a).or(self.pool.as_symbol(b));
                        self.learn_eq(d, lone)
                    }
                    CmpOp::Ne => self.learn_ne(d),
                    CmpOp::Le => self.learn_range(d, ValueRange { lo: -INF, hi: 0 }),
                    CmpOp::Lt => self.learn_range(d, ValueRange { lo: -INF, hi: -1 }),
                    CmpOp::Ge => self.learn_range(d, ValueRange { lo: 0, hi: INF }),
                    CmpOp::Gt => self.learn_range(d, ValueRange { lo: 1, hi: INF }),
                }
            }
            // Disjunctions and the like stay runtime asserts only.
            _ => Ok(()),
        }
    }

    /// Learns `d ∈ r`.
    pub(crate) fn learn_range(&mut self, d: Expr, r: ValueRange) -> Result<(), String> {
        let Some((key, s, k)) = self.pool.linear_key(d) else {
            return match self.pool.as_const(d) {
                Some(v) if !r.contains(v) => Err(format!("{v} is not in {r}")),
                _ => Ok(()),
            };
        };
        let Some(kr) = solve_scaled(r, s, k) else {
            return Err(format!(
                "no integer value of '{}' satisfies it",
                self.text(key)
            ));
        };
        self.narrow(key, kr)?;
        self.learn_symbol_bounds(d, r);
        Ok(())
    }

    /// Intersects what is known about `key` with `kr`.
    fn narrow(&mut self, key: Expr, kr: ValueRange) -> Result<(), String> {
        if let Some(id) = self.pool.as_symbol(key) {
            let st = &self.syms[id.index()];
            if let Some(rep) = st.replacement {
                return self.narrow_expr(rep, kr);
            }
            let old = st.range;
            let new = old
                .intersect(&kr)
                .ok_or_else(|| format!("{} ∈ {old} and {kr}", self.text(key)))?;
            let new = round_to_multiple(new, st.divisor)
                .ok_or_else(|| format!("no multiple of {} in {new}", st.divisor))?;
            if new != old {
                self.sym_mut(id).range = new;
                self.changed();
            }
            return Ok(());
        }
        let old = self
            .facts
            .get(&key)
            .copied()
            .unwrap_or(ValueRange::UNBOUNDED);
        let new = old
            .intersect(&kr)
            .ok_or_else(|| format!("{} ∈ {old} and {kr}", self.text(key)))?;
        if new != old {
            if let Node::Add { terms, .. } = self.pool.node(key) {
                self.fact_signatures.insert((terms[0].0, terms.len()));
            }
            self.facts.insert(key, new);
            self.changed();
        }
        Ok(())
    }

    fn narrow_expr(&mut self, e: Expr, r: ValueRange) -> Result<(), String> {
        let e = self.simplify(e);
        match self.pool.linear_key(e) {
            Some((key, s, k)) => {
                let kr = solve_scaled(r, s, k)
                    .ok_or_else(|| format!("no integer value of '{}'", self.text(key)))?;
                self.narrow(key, kr)
            }
            None => match self.pool.as_const(e) {
                Some(v) if !r.contains(v) => Err(format!("{v} is not in {r}")),
                _ => Ok(()),
            },
        }
    }

    /// For a short linear `d ∈ r` over plain symbols, bounds each unit-coefficient symbol by the
    /// rest: numerically (range) and symbolically (for consistent hints).
    fn learn_symbol_bounds(&mut self, d: Expr, r: ValueRange) {
        const MAX_TERMS: usize = 8;
        let (terms, _) = self.pool.linear_parts(d);
        if terms.len() < 2 || terms.len() > MAX_TERMS {
            return;
        }
        for &(t, c) in &terms {
            let Some(id) = self.pool.as_symbol(t) else {
                continue;
            };
            if c.abs() != 1 || self.syms[id.index()].replacement.is_some() {
                continue;
            }
            // d = c·t + rest ∈ [lo, hi]  ⇒  c·t ∈ [lo - rest, hi - rest].
            let ct = self.pool.scale(t, c);
            let rest = self.pool.sub(d, ct);
            let neg_rest = self.pool.neg(rest);
            let rest_range = self.interval(neg_rest);
            let ct_range = ValueRange { lo: r.lo, hi: r.hi }.add(&rest_range);
            let t_range = if c == 1 { ct_range } else { ct_range.neg() };
            let _ = self.narrow(t, t_range);
            let upper_side = (c == 1 && r.hi < INF) || (c == -1 && r.lo > -INF);
            let lower_side = (c == 1 && r.lo > -INF) || (c == -1 && r.hi < INF);
            let bound_for = |this: &mut Self, v: i128| -> Option<Expr> {
                // t = (v - rest) / c  with c = ±1
                let v = this.pool.constant(i64::try_from(v).ok()?);
                let e = this.pool.add(v, neg_rest);
                Some(if c == 1 { e } else { this.pool.neg(e) })
            };
            if upper_side {
                let v = if c == 1 { r.hi } else { r.lo };
                if let Some(b) = bound_for(self, v) {
                    self.sym_mut(id).uppers.push(b);
                }
            }
            if lower_side {
                let v = if c == 1 { r.lo } else { r.hi };
                if let Some(b) = bound_for(self, v) {
                    self.sym_mut(id).lowers.push(b);
                }
            }
            self.changed();
        }
    }

    fn learn_ne(&mut self, d: Expr) -> Result<(), String> {
        let Some((key, s, k)) = self.pool.linear_key(d) else {
            return Ok(());
        };
        let Some(id) = self.pool.as_symbol(key) else {
            return Ok(());
        };
        if self.syms[id.index()].replacement.is_some() || k.checked_rem(s) != Some(0) {
            return Ok(());
        }
        // s·x + k ≠ 0  ⇒  x ≠ -k/s: shrink the range if that value is an end.
        let excluded = -(k as i128) / s as i128;
        let r = self.syms[id.index()].range;
        let new = if r.lo == excluded {
            ValueRange::new(r.lo + 1, r.hi)
        } else if r.hi == excluded {
            ValueRange::new(r.lo, r.hi - 1)
        } else {
            return Ok(());
        };
        let new = new.ok_or_else(|| format!("{} has no value but {excluded}", self.text(key)))?;
        self.narrow(key, new)
    }

    fn learn_eq(&mut self, d: Expr, lone: Option<SymbolId>) -> Result<(), String> {
        // `x % n == 0`: divisibility.
        if let Node::Mod(x, n) = *self.pool.node(d) {
            if let Some(n) = self.pool.as_const(n).filter(|&n| n > 0) {
                self.learn_multiple(x, n)?;
                return self.learn_range(d, ValueRange::point(0));
            }
        }
        let (terms, _) = self.pool.linear_parts(d);
        // A symbol can be solved for when it occurs in no other term (trivial when all are symbols).
        let all_symbols = terms.iter().all(|&(t, _)| self.pool.as_symbol(t).is_some());
        let pick = terms
            .iter()
            .filter(|&&(t, c)| c.abs() == 1 && self.pool.as_symbol(t).is_some())
            .filter(|&&(t, _)| {
                all_symbols
                    || terms
                        .iter()
                        .all(|&(o, _)| o == t || !self.pool.contains(o, t))
            })
            .max_by_key(|&&(t, _)| {
                let id = self.pool.as_symbol(t).expect("filtered");
                let st = &self.syms[id.index()];
                // Eliminate unbacked before backed, hint-less before hinted (a user's hint is kept),
                // then the lone side of the equality, then the newest.
                (
                    self.pool.symbol(id).kind == SymbolKind::Unbacked,
                    st.hint.is_none(),
                    Some(id) == lone,
                    id.index(),
                )
            })
            .copied();
        let Some((t, c)) = pick else {
            return self.learn_range(d, ValueRange::point(0));
        };
        let id = self.pool.as_symbol(t).expect("picked a symbol");
        // d = c·t + rest = 0  ⇒  t = -c·rest.
        let ct = self.pool.scale(t, c);
        let rest = self.pool.sub(d, ct);
        let rep = self.pool.scale(rest, -c);
        self.share_hints(&terms, c, d);
        let st = self.syms[id.index()].clone();
        self.sym_mut(id).replacement = Some(rep);
        self.changed();
        // What was known of the eliminated symbol is now known of its replacement.
        self.narrow_expr(rep, st.range)?;
        self.learn_symbol_bounds(rep, st.range);
        if st.divisor > 1 {
            self.learn_multiple(rep, st.divisor)?;
        }
        if let (Some(h), SymbolKind::Unbacked) = (st.hint, self.pool.symbol(id).kind) {
            // Keep a user hint alive on a lone replacement symbol that has none.
            if let Some(r) = self.pool.as_symbol(rep) {
                if self.syms[r.index()].hint.is_none() && self.syms[r.index()].range.contains(h) {
                    self.sym_mut(r).hint = Some(h);
                }
            }
        }
        Ok(())
    }

    /// For `d == 0` where several hint-less unbacked sizes appear with the same coefficient `c`
    /// (`u0 + u1 + u2 == s0`), gives each an even share of their total as its fallback hint.
    fn share_hints(&mut self, terms: &[(Expr, i64)], c: i64, d: Expr) {
        let group: Vec<Expr> = terms
            .iter()
            .filter(|&&(t, k)| {
                k == c
                    && self.pool.as_symbol(t).is_some_and(|id| {
                        let st = &self.syms[id.index()];
                        self.pool.symbol(id).kind == SymbolKind::Unbacked
                            && st.hint.is_none()
                            && st.replacement.is_none()
                            && st.share.is_none()
                    })
            })
            .map(|&(t, _)| t)
            .collect();
        if group.len() < 2 {
            return;
        }
        // c·Σgroup + others = 0  ⇒  Σgroup = -others / c  (c = ±1).
        let sum = self.pool.add_all(&group);
        let scaled = self.pool.scale(sum, c);
        let others = self.pool.sub(d, scaled);
        let total = self.pool.scale(others, -c);
        let k = group.len() as i64;
        for t in group {
            let id = self.pool.as_symbol(t).expect("filtered");
            self.sym_mut(id).share = Some((total, k));
        }
    }

    fn learn_multiple(&mut self, x: Expr, n: i64) -> Result<(), String> {
        let x = self.simplify(x);
        if let Some(id) = self.pool.as_symbol(x) {
            let st = self.sym_mut(id);
            let lcm = lcm(st.divisor, n);
            st.divisor = lcm;
            let r = st.range;
            let new =
                round_to_multiple(r, lcm).ok_or_else(|| format!("no multiple of {lcm} in {r}"))?;
            self.sym_mut(id).range = new;
        } else {
            let d = self.divisibility.entry(x).or_insert(1);
            *d = lcm(*d, n);
        }
        self.changed();
        Ok(())
    }
}

pub(crate) fn lcm(a: i64, b: i64) -> i64 {
    let g = gcd(a, b);
    if g == 0 {
        return 0;
    }
    (a / g).checked_mul(b).map_or(a.max(b), |v| v.abs())
}

/// Shrinks a range to its multiples of `n` (ends rounded inwards).
fn round_to_multiple(r: ValueRange, n: i64) -> Option<ValueRange> {
    if n <= 1 {
        return Some(r);
    }
    let n = n as i128;
    let lo = if r.lo <= -INF {
        r.lo
    } else {
        -((-r.lo).div_euclid(n)) * n
    };
    let hi = if r.hi >= INF {
        r.hi
    } else {
        r.hi.div_euclid(n) * n
    };
    ValueRange::new(lo, hi)
}

/// The range of `key` given `s·key + k ∈ r` (`s ≠ 0`); `None` if no integer fits.
pub(crate) fn solve_scaled(r: ValueRange, s: i64, k: i64) -> Option<ValueRange> {
    let shift = |v: i128| if v.abs() >= INF { v } else { v - k as i128 };
    let (mut lo, mut hi) = (shift(r.lo), shift(r.hi));
    let mut s = s as i128;
    if s < 0 {
        (lo, hi) = (-hi, -lo);
        s = -s;
    }
    let lo = if lo <= -INF {
        lo
    } else {
        -((-lo).div_euclid(s))
    };
    let hi = if hi >= INF { hi } else { hi.div_euclid(s) };
    ValueRange::new(lo, hi)
}
