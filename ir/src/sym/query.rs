//! The guard-free query API. Nothing here raises a data-dependent error except `guarding_hint`
//! and `evaluate_guard`, which exist to ask for a backed value, and nothing records a guard on an
//! unbacked symbol.

use rustc_hash::FxHashMap;

use super::env::ShapeEnv;
use super::error::SymError;
use super::expr::{CmpOp, Expr, Node, SymbolId, SymbolKind};
use super::range::ValueRange;

/// Values for symbols at run time.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    values: FxHashMap<SymbolId, i64>,
}

impl Bindings {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&mut self, id: SymbolId, v: i64) -> &mut Self {
        self.values.insert(id, v);
        self
    }

    pub fn get(&self, id: SymbolId) -> Option<i64> {
        self.values.get(&id).copied()
    }
}

impl ShapeEnv {
    /// `[lo, hi]` of `e` for every value of its symbols allowed by ranges and asserts.
    pub fn bound(&mut self, e: Expr) -> ValueRange {
        let s = self.simplify(e);
        let r = self.interval(s);
        if s == e {
            return r;
        }
        // Both spellings bound the same value; substitution may have loosened one of them.
        let raw = self.interval(e);
        r.intersect(&raw).unwrap_or(r)
    }

    /// Decides `cond` from algebra and ranges only; `None` when undecided. Records nothing.
    pub fn statically_known(&mut self, cond: Expr) -> Option<bool> {
        if let Some(v) = self.fast_decide(cond) {
            return v;
        }
        let s = self.simplify(cond);
        self.pool.as_bool(s)
    }

    pub fn statically_known_true(&mut self, cond: Expr) -> bool {
        self.statically_known(cond) == Some(true)
    }

    pub fn statically_known_false(&mut self, cond: Expr) -> bool {
        self.statically_known(cond) == Some(false)
    }

    /// The hot case — a symbol compared with a constant (`u0 >= 0`, `u0 == 1`, asked on every
    /// allocation) — straight from the symbol's range and divisor, without building anything.
    /// `Some(answer)` when it applies (`answer` is `None` when undecidable), `None` when it does not.
    fn fast_decide(&self, cond: Expr) -> Option<Option<bool>> {
        let Node::Cmp(op, a, b) = *self.pool.node(cond) else {
            return None;
        };
        let (sym, k, op) = match (
            self.pool.as_symbol(a),
            self.pool.as_const(b),
            self.pool.as_symbol(b),
            self.pool.as_const(a),
        ) {
            (Some(s), Some(k), _, _) => (s, k, op),
            (_, _, Some(s), Some(k)) => (s, k, swap(op)),
            _ => return None,
        };
        let st = &self.syms[sym.index()];
        if st.replacement.is_some() {
            return None;
        }
        let (r, off_grid) = (st.range, k.checked_rem(st.divisor).is_some_and(|m| m != 0));
        let k = k as i128;
        let decided = |yes: bool, no: bool| {
            if yes {
                Some(true)
            } else if no {
                Some(false)
            } else {
                None
            }
        };
        Some(match op {
            CmpOp::Lt => decided(r.hi < k, r.lo >= k),
            CmpOp::Le => decided(r.hi <= k, r.lo > k),
            CmpOp::Gt => decided(r.lo > k, r.hi <= k),
            CmpOp::Ge => decided(r.lo >= k, r.hi < k),
            CmpOp::Eq => decided(r.lo == k && r.hi == k, k < r.lo || k > r.hi || off_grid),
            CmpOp::Ne => decided(k < r.lo || k > r.hi || off_grid, r.lo == k && r.hi == k),
        })
    }

    /// If decidable, the answer; else if only backed symbols are involved, their hints decide and a
    /// guard is recorded; else (an unbacked symbol is involved) `false`, with no guard and no error.
    pub fn guard_or_false(&mut self, cond: Expr) -> bool {
        self.guard_or(cond, false)
    }

    /// As [`guard_or_false`](Self::guard_or_false) with `true` as the unbacked default.
    pub fn guard_or_true(&mut self, cond: Expr) -> bool {
        self.guard_or(cond, true)
    }

    fn guard_or(&mut self, cond: Expr, default: bool) -> bool {
        match self.fast_decide(cond) {
            Some(Some(v)) => return v,
            // A symbol against a constant that its range does not decide: nothing to simplify.
            Some(None) if self.pool.info(cond).has_unbacked => return default,
            _ => {}
        }
        let s = self.simplify(cond);
        if let Some(v) = self.pool.as_bool(s) {
            return v;
        }
        if self.pool.info(s).has_unbacked {
            return default;
        }
        match self.eval_backed(s) {
            Ok(v) => {
                let holds = v != 0;
                let g = if holds { s } else { self.pool.not(s) };
                self.record_guard(g);
                holds
            }
            Err(_) => default,
        }
    }

    /// Decides `cond` for the backed hints, recording a guard; a data-dependent error if an unbacked
    /// symbol is involved and ranges do not decide it.
    pub fn evaluate_guard(&mut self, cond: Expr) -> Result<bool, SymError> {
        if !self.pool.info(cond).is_bool {
            return Err(SymError::NotBoolean {
                expr: self.text(cond),
            });
        }
        if let Some(v) = self.statically_known(cond) {
            return Ok(v);
        }
        let s = self.simplify(cond);
        let holds = self.guarding_hint_of(s, cond)? != 0;
        let g = if holds { s } else { self.pool.not(s) };
        self.record_guard(g);
        Ok(holds)
    }

    /// The value of `e` from backed hints; a typed data-dependent error if an unbacked symbol remains.
    pub fn guarding_hint(&mut self, e: Expr) -> Result<i64, SymError> {
        let s = self.simplify(e);
        self.guarding_hint_of(s, e)
    }

    fn guarding_hint_of(&mut self, s: Expr, original: Expr) -> Result<i64, SymError> {
        if self.pool.info(s).has_unbacked {
            let symbols = self
                .pool
                .free_symbols(s)
                .into_iter()
                .filter(|&id| self.pool.symbol(id).kind == SymbolKind::Unbacked)
                .map(|id| self.pool.symbol(id).name.to_string())
                .collect();
            return Err(SymError::DataDependent {
                expr: self.text(original),
                symbols,
            });
        }
        Ok(self.eval_backed(s)?)
    }

    fn eval_backed(&self, s: Expr) -> Result<i64, super::eval::EvalError> {
        self.pool
            .evaluate_with(s, &mut |id| match self.pool.symbol(id).kind {
                SymbolKind::Backed => self.syms[id.index()].hint,
                SymbolKind::Unbacked => None,
            })
    }

    /// Whether `e` is a multiple of `n` for every allowed value (from structure, substitutions and
    /// asserted divisibility such as `u0 % 16 == 0`).
    pub fn statically_known_multiple_of(&mut self, e: Expr, n: i64) -> bool {
        let s = self.simplify(e);
        if n == 0 {
            return self.pool.as_const(s) == Some(0);
        }
        let m = self.known_multiple(s);
        m.checked_rem(n).is_none_or(|r| r == 0)
    }

    /// Whether every allowed value of `e` — and of every intermediate value of its C form (each
    /// subexpression, each partial sum and product) — fits in `i32`, so 32-bit index arithmetic is
    /// exact.
    pub fn fits_in_i32(&mut self, e: Expr) -> bool {
        let s = self.simplify(e);
        let limit = ValueRange {
            lo: i32::MIN as i128,
            hi: i32::MAX as i128,
        };
        self.fits_in(s, &limit)
    }

    fn fits_in(&mut self, e: Expr, limit: &ValueRange) -> bool {
        let inside = |r: ValueRange| r.lo >= limit.lo && r.hi <= limit.hi;
        if !inside(self.interval(e)) {
            return false;
        }
        match self.pool.node(e).clone() {
            Node::Add { terms, constant } => {
                let mut acc: Option<ValueRange> = None;
                for &(t, c) in terms.iter().filter(|t| t.1 != 0) {
                    let term = self.interval(t).scale(c);
                    let next = acc.map_or(term, |a| a.add(&term));
                    if !self.fits_in(t, limit) || !inside(term) || !inside(next) {
                        return false;
                    }
                    acc = Some(next);
                }
                inside(
                    acc.unwrap_or(ValueRange::point(0))
                        .add(&ValueRange::point(constant)),
                )
            }
            Node::Mul(factors) => {
                let mut acc = ValueRange::point(1);
                for &(f, n) in factors.iter() {
                    let r = self.interval(f);
                    for _ in 0..n {
                        acc = acc.mul(&r);
                        if !inside(acc) {
                            return false;
                        }
                    }
                    if !self.fits_in(f, limit) {
                        return false;
                    }
                }
                true
            }
            _ => {
                let mut kids = Vec::new();
                self.pool.for_each_child(e, |c| kids.push(c));
                kids.into_iter()
                    .all(|c| self.pool.info(c).is_bool || self.fits_in(c, limit))
            }
        }
    }

    /// Evaluates `e` at run time. A symbol without a value that an equality eliminated is computed
    /// from its replacement; a derived symbol from its definition.
    pub fn evaluate(&self, e: Expr, bindings: &Bindings) -> Result<i64, SymError> {
        Ok(self
            .pool
            .evaluate_with(e, &mut |id| self.value_of(id, bindings))?)
    }

    /// The value of symbol `id` under `bindings` (through its replacement when it has one).
    pub fn symbol_value(&self, id: SymbolId, bindings: &Bindings) -> Option<i64> {
        self.value_of(id, bindings)
    }

    fn value_of(&self, id: SymbolId, bindings: &Bindings) -> Option<i64> {
        bindings.get(id).or_else(|| {
            let st = &self.syms[id.index()];
            let rep = st.replacement.or(st.definition)?;
            self.pool
                .evaluate_with(rep, &mut |s| self.value_of(s, bindings))
                .ok()
        })
    }

    /// Checks run-time values against every recorded guard, range (declared, or narrowed by an
    /// assert) and deferred assert; the error names the guard, the symbol or the assert. An
    /// assert over a symbol without a value yet (one a data-dependent op produces later) is
    /// skipped: it is checked once that value exists.
    pub fn check_bindings(&self, bindings: &Bindings) -> Result<(), SymError> {
        // Guards first: the asserts, and the ranges they narrowed, were recorded under them (a
        // backed size guarded `!= 1` is asserted equal to what it meets), so a failed guard means
        // another specialization, not invalid values. Guards involve backed symbols only, which
        // the inputs' shapes bind.
        for g in self.guards() {
            if let Ok(0) = self.evaluate(g.cond, bindings) {
                return Err(SymError::GuardFailed {
                    guard: self.text(g.cond),
                });
            }
        }
        for (i, st) in self.syms.iter().enumerate() {
            let id = SymbolId(i as u32);
            if let Some(v) = bindings.get(id) {
                if !st.range.contains(v) {
                    return Err(SymError::ValueOutOfRange {
                        name: self.pool.symbol(id).name.to_string(),
                        value: v,
                        range: st.range.to_string(),
                    });
                }
            }
        }
        for &a in self.runtime_asserts() {
            match self.evaluate(a, bindings) {
                Ok(0) => {
                    return Err(SymError::AssertFailed {
                        assert: self.text(a),
                    })
                }
                Err(SymError::Eval(super::eval::EvalError::Unbound { .. })) | Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn swap(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        other => other,
    }
}
