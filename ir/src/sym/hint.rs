//! Optimization hints: always a value, for speed heuristics; never a guard, never an error.
//!
//! Order of sources: backed hints; the user's optimization hints; for a symbol an equality
//! eliminated, its replacement's hint (so hints agree with asserted equalities); for a piece of a
//! split, an even share of the total; then the fallback (default 8192), clamped to the symbol's range
//! and its asserted linear bounds. To be consistent, a hint-less symbol's hint may only depend on
//! backed symbols, hinted symbols and hint-less symbols declared before it: the dependencies form no
//! cycle, every symbol has one hint per environment version, and they are computed bottom-up
//! (no deep recursion).

use rustc_hash::FxHashSet;

use super::env::ShapeEnv;
use super::expr::{Expr, Node, SymbolId, SymbolKind};

/// What one symbol's hint is computed from, simplified to symbols no equality eliminated.
#[derive(Default)]
struct Sources {
    replacement: Option<Expr>,
    share: Option<(Expr, i64)>,
    uppers: Vec<Expr>,
    lowers: Vec<Expr>,
}

impl Sources {
    fn exprs(&self) -> impl Iterator<Item = Expr> + '_ {
        self.replacement
            .iter()
            .copied()
            .chain(self.share.iter().map(|s| s.0))
            .chain(self.uppers.iter().copied())
            .chain(self.lowers.iter().copied())
    }
}

impl ShapeEnv {
    /// Always a value in `bound(e)` (see the module documentation for where it comes from). A
    /// division by zero or an overflow while computing it gives the fallback, clamped.
    pub fn optimization_hint(&mut self, e: Expr) -> i64 {
        // Fast path: a linear combination of plain symbols (sizes, offsets) is a dot product of
        // hints that each lie in their symbol's range, so it lies in the sum's interval; only a fact
        // about the sum itself can narrow it further.
        if let Node::Add { terms, constant } = self.pool.node(e) {
            if terms.iter().all(|&(t, _)| self.pool.as_symbol(t).is_some()) {
                let (n, first, mut acc) = (terms.len(), terms[0].0, *constant as i128);
                for k in 0..n {
                    let Node::Add { terms, .. } = self.pool.node(e) else {
                        unreachable!()
                    };
                    let (t, c) = terms[k];
                    let id = self.pool.as_symbol(t).expect("checked");
                    acc += self.symbol_optimization_hint(id) as i128 * c as i128;
                }
                let h =
                    i64::try_from(acc.clamp(i64::MIN as i128, i64::MAX as i128)).expect("clamped");
                return if self.fact_signatures.contains(&(first, n)) {
                    self.interval(e).clamp(h)
                } else {
                    h
                };
            }
        }
        let r = self.interval(e);
        if let Some(v) = r.is_point() {
            return v;
        }
        for id in self.pool.free_symbols(e) {
            self.symbol_optimization_hint(id);
        }
        match self.eval_with_hints(e) {
            Some(v) => r.clamp(v),
            None => r.clamp(self.fallback_hint),
        }
    }

    /// The optimization hint of one symbol.
    pub fn symbol_optimization_hint(&mut self, id: SymbolId) -> i64 {
        if let Some(h) = self.hint_memo.get(id.index(), self.version) {
            return h;
        }
        let sources = self.hint_sources(id);
        if sources.exprs().all(|e| self.hints_ready(e)) {
            return self.compute_hint(id, &sources);
        }
        // Dependencies first, bottom-up: backed and hinted symbols (they depend on nothing), then
        // hint-less ones in declaration order (each depends only on earlier ones and the first
        // group), then eliminated ones (they depend only on the others).
        let mut needed: Vec<(SymbolId, Sources)> = Vec::new();
        let mut seen = FxHashSet::default();
        let mut stack = vec![id];
        while let Some(x) = stack.pop() {
            if self.hint_memo.get(x.index(), self.version).is_some() || !seen.insert(x) {
                continue;
            }
            let src = self.hint_sources(x);
            for e in src.exprs() {
                stack.extend(self.pool.free_symbols(e));
            }
            needed.push((x, src));
        }
        let stage = |this: &Self, x: SymbolId| {
            let st = &this.syms[x.index()];
            if st.replacement.is_some() || st.definition.is_some() {
                2
            } else if this.pool.symbol(x).kind == SymbolKind::Backed || st.hint.is_some() {
                0
            } else {
                1
            }
        };
        needed.sort_by_key(|(x, _)| (stage(self, *x), x.index()));
        for (x, src) in &needed {
            self.compute_hint(*x, src);
        }
        self.hint_memo
            .get(id.index(), self.version)
            .expect("computed above")
    }

    fn hints_ready(&self, e: Expr) -> bool {
        self.pool
            .free_symbols(e)
            .iter()
            .all(|s| self.hint_memo.get(s.index(), self.version).is_some())
    }

    /// Computes and memoizes a symbol's hint; its sources' symbols must be ready.
    fn compute_hint(&mut self, id: SymbolId, src: &Sources) -> i64 {
        let st = self.syms[id.index()].clone();
        let h = if let Some(rep) = src.replacement {
            self.eval_with_hints(rep).unwrap_or(self.fallback_hint)
        } else {
            match (self.pool.symbol(id).kind, st.hint) {
                (_, Some(h)) => h,
                (SymbolKind::Backed, None) => self.fallback_hint,
                (SymbolKind::Unbacked, None) => {
                    let mut h = match src.share {
                        Some((total, k)) => self
                            .eval_with_hints(total)
                            .map_or(self.fallback_hint, |t| t / k.max(1)),
                        None => self.fallback_hint,
                    };
                    h = st.range.clamp(h);
                    for &u in &src.uppers {
                        if let Some(v) = self.eval_with_hints(u) {
                            h = h.min(v);
                        }
                    }
                    for &l in &src.lowers {
                        if let Some(v) = self.eval_with_hints(l) {
                            h = h.max(v);
                        }
                    }
                    h
                }
            }
        };
        let h = st.range.clamp(h);
        self.hint_memo.insert(id.index(), self.version, h);
        h
    }

    /// `e` evaluated with the memoized hints of its symbols; `None` on a division by zero or an
    /// overflow (or a symbol not ready).
    fn eval_with_hints(&self, e: Expr) -> Option<i64> {
        let (memo, version) = (&self.hint_memo, self.version);
        self.pool
            .evaluate_with(e, &mut |s| memo.get(s.index(), version))
            .ok()
    }

    fn hint_sources(&mut self, id: SymbolId) -> Sources {
        let st = self.syms[id.index()].clone();
        if let Some(rep) = st.replacement.or(st.definition) {
            return Sources {
                replacement: Some(self.simplify(rep)),
                ..Sources::default()
            };
        }
        if self.pool.symbol(id).kind == SymbolKind::Backed || st.hint.is_some() {
            return Sources::default();
        }
        let share = st
            .share
            .and_then(|(total, k)| self.usable_source(id, total).map(|t| (t, k)));
        let uppers = st
            .uppers
            .iter()
            .filter_map(|&u| self.usable_source(id, u))
            .collect();
        let lowers = st
            .lowers
            .iter()
            .filter_map(|&l| self.usable_source(id, l))
            .collect();
        Sources {
            replacement: None,
            share,
            uppers,
            lowers,
        }
    }

    /// `e` simplified, if a hint-less `id` may depend on it: only backed symbols, hinted symbols
    /// and hint-less symbols declared before `id` (which keeps the dependencies acyclic).
    fn usable_source(&mut self, id: SymbolId, e: Expr) -> Option<Expr> {
        let s = self.simplify(e);
        let ok = self.pool.free_symbols(s).iter().all(|&f| {
            self.pool.symbol(f).kind == SymbolKind::Backed
                || self.syms[f.index()].hint.is_some()
                || (f.index() < id.index() && self.syms[f.index()].replacement.is_none())
        });
        ok.then_some(s)
    }
}
