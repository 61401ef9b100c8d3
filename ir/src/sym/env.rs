//! The `ShapeEnv`: declared symbols with ranges and hints, deferred runtime asserts and what they
//! teach (range refinements, linear facts, substitutions, divisibility), and recorded guards.

use rustc_hash::{FxHashMap, FxHashSet};

use super::error::SymError;
use super::expr::{Expr, SymbolId, SymbolKind};
use super::memo::{CompactRange, Memo};
use super::pool::ExprPool;
use super::range::ValueRange;

/// The default optimization hint for an unbacked symbol without one (clamped to its range).
pub const DEFAULT_FALLBACK_HINT: i64 = 8192;

/// Per-symbol state.
#[derive(Clone, Debug)]
pub(crate) struct SymState {
    pub expr: Expr,
    pub range: ValueRange,
    /// Backed: the example value. Unbacked: the user's optimization hint, if any.
    pub hint: Option<i64>,
    /// Set when an asserted equality eliminated this symbol.
    pub replacement: Option<Expr>,
    /// Known to be a multiple of this (1 when nothing is known).
    pub divisor: i64,
    /// Expressions bounding this symbol from above / below (from linear asserts); used to keep
    /// fallback hints consistent (`u0 <= s1` ⇒ hint(u0) ≤ hint(s1)).
    pub uppers: Vec<Expr>,
    pub lowers: Vec<Expr>,
    /// `(total, k)`: one of `k` hint-less sizes asserted to add up to `total` (a split); its
    /// fallback hint is an even share, `hint(total) / k`, so the pieces' hints add up.
    pub share: Option<(Expr, i64)>,
    /// A derived symbol's definition (see [`ShapeEnv::derived`]): its value and hint come from
    /// it, but simplification keeps the symbol whole.
    pub definition: Option<Expr>,
    /// A loop variable's extent: its value is in `0..extent` wherever it appears (every use is
    /// inside its loop), which proves `x // size == 0` and `x % size == x` for sizes that are no
    /// smaller, a relation its constant range cannot show.
    pub extent: Option<Expr>,
}

/// A recorded guard: `cond` held for the backed hints and must hold for a compiled artifact to be
/// reused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Guard {
    pub cond: Expr,
}

#[derive(Clone, Debug)]
pub struct ShapeEnv {
    pub(crate) pool: ExprPool,
    pub(crate) syms: Vec<SymState>,
    /// Ranges of linear keys (see `linear_key`) and other non-symbol atoms, learned from asserts.
    pub(crate) facts: FxHashMap<Expr, ValueRange>,
    /// (first atom, number of terms) of every sum in `facts`: a cheap filter before building a key.
    pub(crate) fact_signatures: FxHashSet<(Expr, usize)>,
    /// Known divisors of non-symbol expressions.
    pub(crate) divisibility: FxHashMap<Expr, i64>,
    pub(crate) asserts: Vec<Expr>,
    pub(crate) assert_set: FxHashSet<Expr>,
    guards: Vec<Guard>,
    guard_set: FxHashSet<Expr>,
    pub(crate) fallback_hint: i64,
    /// Bumped whenever ranges, facts or substitutions change; memo entries of older versions are
    /// stale. A counter instead of clearing keeps invalidation O(1).
    pub(crate) version: u32,
    pub(crate) simplify_memo: Memo<Expr>,
    pub(crate) range_memo: Memo<CompactRange>,
    pub(crate) hint_memo: Memo<i64>,
    /// Next number for each prefix of loop variables.
    index_counters: FxHashMap<String, usize>,
    /// Derived symbols by the expression each stands for.
    derived_by_key: FxHashMap<Expr, Expr>,
    /// What a data-dependent index variable indexes (`node 'emb' (aten.embedding.default)`), for
    /// the error of a value out of range: the op the user wrote, not the kernel it was fused into.
    index_origins: FxHashMap<Expr, String>,
    /// Under [`ShapeEnv::assuming`]: each symbol's state before the assumption first changed it.
    pub(crate) sym_undo: Option<Vec<(SymbolId, SymState)>>,
}

impl Default for ShapeEnv {
    fn default() -> Self {
        Self::new()
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(
            name,
            "and" | "or" | "not" | "True" | "False" | "true" | "false"
        )
}

impl ShapeEnv {
    pub fn new() -> Self {
        ShapeEnv {
            pool: ExprPool::new(),
            syms: Vec::new(),
            facts: FxHashMap::default(),
            fact_signatures: FxHashSet::default(),
            divisibility: FxHashMap::default(),
            asserts: Vec::new(),
            assert_set: FxHashSet::default(),
            guards: Vec::new(),
            guard_set: FxHashSet::default(),
            fallback_hint: DEFAULT_FALLBACK_HINT,
            version: 0,
            simplify_memo: Memo::new(Expr(0)),
            range_memo: Memo::new(ValueRange::UNBOUNDED.into()),
            hint_memo: Memo::new(0),
            index_counters: FxHashMap::default(),
            index_origins: FxHashMap::default(),
            derived_by_key: FxHashMap::default(),
            sym_undo: None,
        }
    }

    /// The expression arena, to build expressions (`env.pool_mut().add(a, b)`).
    pub fn pool(&self) -> &ExprPool {
        &self.pool
    }

    pub fn pool_mut(&mut self) -> &mut ExprPool {
        &mut self.pool
    }

    pub(crate) fn changed(&mut self) {
        self.version = self.version.wrapping_add(1);
    }

    /// Sets the optimization hint used for unbacked symbols without one.
    pub fn set_fallback_hint(&mut self, v: i64) {
        self.fallback_hint = v;
        self.changed();
    }

    fn declare(
        &mut self,
        name: &str,
        kind: SymbolKind,
        hint: Option<i64>,
        range: ValueRange,
    ) -> Result<Expr, SymError> {
        if !valid_name(name) {
            return Err(SymError::InvalidSymbolName { name: name.into() });
        }
        if self.pool.lookup(name).is_some() {
            return Err(SymError::DuplicateSymbol { name: name.into() });
        }
        if let Some(h) = hint {
            if !range.contains(h) {
                return Err(SymError::HintOutOfRange {
                    name: name.into(),
                    hint: h,
                    range: range.to_string(),
                });
            }
        }
        Ok(self.push_symbol(name, kind, hint, range, None))
    }

    /// A new symbol's state, with nothing learned yet.
    fn push_symbol(
        &mut self,
        name: &str,
        kind: SymbolKind,
        hint: Option<i64>,
        range: ValueRange,
        definition: Option<Expr>,
    ) -> Expr {
        let (_, e) = self.pool.add_symbol(name, kind);
        self.syms.push(SymState {
            expr: e,
            range,
            hint,
            replacement: None,
            divisor: 1,
            uppers: Vec::new(),
            lowers: Vec::new(),
            share: None,
            definition,
            extent: None,
        });
        e
    }

    /// A symbol standing for `definition`, named `<prefix><n>`: its value is the definition's
    /// (at run time, for hints and for guards), its range the definition's range now, but
    /// simplification treats it as one atom. Lowering names prefix sums with it (a `cat` or
    /// `split_with_sizes` of k pieces: offset j defined as offset j-1 plus one size), so an offset
    /// costs O(1) to substitute, simplify and print instead of O(k). `key` (the expression it
    /// replaces) finds an existing symbol for the same expression.
    pub fn derived(&mut self, prefix: &str, key: Expr, definition: Expr) -> Expr {
        if let Some(&e) = self.derived_by_key.get(&key) {
            return e;
        }
        let range = self.interval(definition);
        let backed = !self.pool.info(definition).has_unbacked;
        let (kind, hint) = if backed {
            // Backed hints are example values: the definition's at theirs.
            let hint = self
                .pool
                .evaluate_with(definition, &mut |id| self.syms[id.index()].hint)
                .ok();
            (SymbolKind::Backed, hint)
        } else {
            (SymbolKind::Unbacked, None)
        };
        let name = self.fresh_name(prefix);
        let e = self.push_symbol(&name, kind, hint, range, Some(definition));
        self.derived_by_key.insert(key, e);
        self.changed();
        e
    }

    /// The definition of a derived symbol.
    pub fn symbol_definition(&self, id: SymbolId) -> Option<Expr> {
        self.syms[id.index()].definition
    }

    fn range_of(name: &str, min: Option<i64>, max: Option<i64>) -> Result<ValueRange, SymError> {
        ValueRange::from_i64(min, max).ok_or_else(|| SymError::EmptyRange {
            name: name.into(),
            range: format!("[{}, {}]", min.unwrap_or(i64::MIN), max.unwrap_or(i64::MAX)),
        })
    }

    /// A backed size with example value `hint`; `min`/`max` default to `[0, ∞)`.
    pub fn backed(
        &mut self,
        name: &str,
        hint: i64,
        min: Option<i64>,
        max: Option<i64>,
    ) -> Result<Expr, SymError> {
        let range = Self::range_of(name, Some(min.unwrap_or(0)), max)?;
        self.declare(name, SymbolKind::Backed, Some(hint), range)
    }

    /// An unbacked size: range defaults to `[0, ∞)`.
    pub fn unbacked_size(
        &mut self,
        name: &str,
        min: Option<i64>,
        max: Option<i64>,
        optimization_hint: Option<i64>,
    ) -> Result<Expr, SymError> {
        let range = Self::range_of(name, Some(min.unwrap_or(0)), max)?;
        self.declare(name, SymbolKind::Unbacked, optimization_hint, range)
    }

    /// An unbacked scalar value (e.g. from `.item()`): range defaults to `(-∞, ∞)`.
    pub fn unbacked_value(
        &mut self,
        name: &str,
        min: Option<i64>,
        max: Option<i64>,
        optimization_hint: Option<i64>,
    ) -> Result<Expr, SymError> {
        let range = Self::range_of(name, min, max)?;
        self.declare(name, SymbolKind::Unbacked, optimization_hint, range)
    }

    /// A fresh backed size named `s<n>`.
    pub fn new_backed(&mut self, hint: i64) -> Result<Expr, SymError> {
        let name = self.fresh_name("s");
        self.backed(&name, hint, None, None)
    }

    /// A fresh unbacked size named `u<n>`.
    pub fn new_unbacked_size(&mut self, optimization_hint: Option<i64>) -> Expr {
        let name = self.fresh_name("u");
        self.unbacked_size(&name, None, None, optimization_hint)
            .expect("fresh names are valid")
    }

    /// A loop variable over `0..size`: an unbacked value whose range is `[0, max(size) - 1]`, named
    /// `<prefix><n>` with the first free `n`.
    pub fn new_index_var(&mut self, prefix: &str, size: Expr) -> Expr {
        let hi = self
            .bound(size)
            .hi_i64()
            .map(|h| h.saturating_sub(1).max(0));
        let counter = self.index_counters.entry(prefix.to_string()).or_insert(0);
        let name = loop {
            let name = format!("{prefix}{counter}");
            *counter += 1;
            if self.pool.lookup(&name).is_none() {
                break name;
            }
        };
        self.pool.adding_index = true;
        let v = self.unbacked_value(&name, Some(0), hi, None);
        self.pool.adding_index = false;
        let v = v.expect("fresh names are valid");
        let id = self.pool.as_symbol(v).expect("a symbol");
        self.syms[id.index()].extent = Some(size);
        v
    }

    /// Forgets that index variable `var` stays below its extent: a variable bound to a value read
    /// from data is checked at run time, and code may compute with it before the check's error
    /// stops the call.
    pub(crate) fn forget_extent(&mut self, var: Expr) {
        if let Some(id) = self.pool.as_symbol(var) {
            self.syms[id.index()].extent = None;
        }
    }

    /// The extent of loop variable `var` (see [`ShapeEnv::new_index_var`]).
    pub(crate) fn extent(&self, var: Expr) -> Option<Expr> {
        let id = self.pool.as_symbol(var)?;
        self.syms.get(id.index())?.extent
    }

    /// Records what the index variable `var` indexes (see [`ShapeEnv::index_origin`]).
    pub fn set_index_origin(&mut self, var: Expr, origin: &str) {
        self.index_origins.insert(var, origin.to_string());
    }

    /// What the index variable `var` indexes, as an error names it: `node 'emb'
    /// (aten.embedding.default)`; `None` when lowering did not say.
    pub fn index_origin(&self, var: Expr) -> Option<&str> {
        self.index_origins.get(&var).map(String::as_str)
    }

    fn fresh_name(&self, prefix: &str) -> String {
        let mut n = self.pool.symbol_count();
        loop {
            let name = format!("{prefix}{n}");
            if self.pool.lookup(&name).is_none() {
                return name;
            }
            n += 1;
        }
    }

    pub fn symbol(&self, name: &str) -> Result<Expr, SymError> {
        let id = self
            .pool
            .lookup(name)
            .ok_or_else(|| SymError::UnknownSymbol { name: name.into() })?;
        Ok(self.syms[id.index()].expr)
    }

    pub fn symbol_id(&self, name: &str) -> Option<SymbolId> {
        self.pool.lookup(name)
    }

    pub fn symbol_kind(&self, id: SymbolId) -> SymbolKind {
        self.pool.symbol(id).kind
    }

    pub fn symbol_name(&self, id: SymbolId) -> &str {
        &self.pool.symbol(id).name
    }

    /// The symbol's current range (refined by asserts).
    pub fn symbol_range(&self, id: SymbolId) -> ValueRange {
        self.syms[id.index()].range
    }

    pub fn symbol_hint(&self, id: SymbolId) -> Option<i64> {
        self.syms[id.index()].hint
    }

    /// Parses `text` against the declared symbols.
    pub fn parse(&mut self, text: &str) -> Result<Expr, SymError> {
        self.pool.parse(text).map_err(|source| SymError::Parse {
            text: text.into(),
            source,
        })
    }

    pub fn text(&self, e: Expr) -> String {
        self.pool.to_text(e)
    }

    /// The deferred runtime asserts, in the order recorded.
    pub fn runtime_asserts(&self) -> &[Expr] {
        &self.asserts
    }

    /// Guards recorded by `guard_or_*` / `evaluate_guard` on backed symbols.
    pub fn guards(&self) -> &[Guard] {
        &self.guards
    }

    /// Moves the hints of backed symbols to their values in `values` (a recompile for sizes
    /// that broke a guard); a derived backed symbol's hint follows its definition. Guards
    /// recorded for the old hints are dropped: the next lowering records its own.
    pub fn rehint_backed(&mut self, values: &super::Bindings) -> Result<(), SymError> {
        // All or nothing: the new hints first (a definition reads earlier symbols' new hints).
        let mut hints: Vec<Option<i64>> = self.syms.iter().map(|s| s.hint).collect();
        for i in 0..self.syms.len() {
            let id = SymbolId(i as u32);
            if self.pool.symbol(id).kind != SymbolKind::Backed {
                continue;
            }
            let hint = match self.syms[i].definition {
                Some(def) => self.pool.evaluate_with(def, &mut |s| hints[s.index()]).ok(),
                None => values.get(id).or(hints[i]),
            };
            if let Some(h) = hint {
                if !self.syms[i].range.contains(h) {
                    return Err(SymError::HintOutOfRange {
                        name: self.pool.symbol(id).name.to_string(),
                        hint: h,
                        range: self.syms[i].range.to_string(),
                    });
                }
            }
            hints[i] = hint;
        }
        for (st, h) in self.syms.iter_mut().zip(hints) {
            st.hint = h;
        }
        self.guards.clear();
        self.guard_set.clear();
        self.changed();
        Ok(())
    }

    pub(crate) fn record_guard(&mut self, cond: Expr) {
        if self.guard_set.insert(cond) {
            self.guards.push(Guard { cond });
        }
    }
}
