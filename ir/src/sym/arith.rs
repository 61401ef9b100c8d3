//! Canonical sums and products: like terms combined, constants folded, products of small sums
//! expanded. Range-free: these rules hold for every value of every symbol.

use std::cmp::Ordering;

use super::expr::{ArithOp, Expr, Node, SymbolId};
use super::pool::ExprPool;

/// Products of two sums are expanded only while the result has at most this many terms; beyond it
/// the product stays unexpanded (`Node::Unfolded`). Expansion makes equal polynomials share one id; the cap keeps it linear.
const EXPAND_LIMIT: usize = 64;

impl ExprPool {
    /// `e` as `Σ coeff·atom + constant`.
    pub(crate) fn linear_parts(&self, e: Expr) -> (Vec<(Expr, i64)>, i64) {
        match self.node(e) {
            Node::Const(c) => (Vec::new(), *c),
            Node::Add { terms, constant } => (terms.to_vec(), *constant),
            _ => (vec![(e, 1)], 0),
        }
    }

    /// Calls `f` with `e` as `(terms, constant)` without copying the terms.
    pub(crate) fn with_parts<R>(&self, e: Expr, f: impl FnOnce(&[(Expr, i64)], i64) -> R) -> R {
        match self.node(e) {
            Node::Const(c) => f(&[], *c),
            Node::Add { terms, constant } => f(terms, *constant),
            _ => f(&[(e, 1)], 0),
        }
    }

    /// Builds a sum from sorted, distinct atoms with `i64` coefficients (no folding left to do).
    pub(crate) fn make_sum(&mut self, terms: Vec<(Expr, i64)>, constant: i64) -> Expr {
        if terms
            .iter()
            .any(|&(t, c)| c == 0 && self.is_compound_raiser(t))
        {
            let wide = terms.into_iter().map(|(t, c)| (t, c as i128)).collect();
            return self
                .finish_sum(wide, constant as i128, true)
                .expect("coefficients already fit");
        }
        match terms.as_slice() {
            [] => self.constant(constant),
            [(t, 1)] if constant == 0 => *t,
            _ => self.intern(Node::Add {
                terms: terms.into(),
                constant,
            }),
        }
    }

    /// Sorts and merges atoms, drops zero coefficients of atoms that cannot raise, and checks that
    /// everything fits `i64`. `None` on overflow.
    fn finish_sum(
        &mut self,
        mut terms: Vec<(Expr, i128)>,
        constant: i128,
        sorted: bool,
    ) -> Option<Expr> {
        if !sorted {
            terms.sort_by(|a, b| self.cmp(a.0, b.0));
        }
        let constant = i64::try_from(constant).ok()?;
        Self::merge_in_place(&mut terms)?;
        // A zero-coefficient term is kept only for the division by zero it may raise, so it is
        // spelled as the atoms that may raise: `0*x*(y//z)` is `0*(y//z)`. One canonical spelling.
        if terms
            .iter()
            .any(|&(t, c)| c == 0 && self.is_compound_raiser(t))
        {
            let mut flat = Vec::with_capacity(terms.len());
            for (t, c) in terms {
                if c == 0 && self.is_compound_raiser(t) {
                    let mut atoms = Vec::new();
                    self.raising_atoms(t, &mut atoms);
                    flat.extend(atoms.into_iter().map(|a| (a, 0)));
                } else {
                    flat.push((t, c));
                }
            }
            flat.sort_by(|a, b| self.cmp(a.0, b.0));
            Self::merge_in_place(&mut flat)?;
            terms = flat;
        }
        let keep = |p: &Self, &(t, c): &(Expr, i128)| c != 0 || p.may_raise(t);
        let n = terms.iter().filter(|t| keep(self, t)).count();
        let mut out: Vec<(Expr, i64)> = Vec::with_capacity(n);
        for t in terms.iter().filter(|t| keep(self, t)) {
            out.push((t.0, i64::try_from(t.1).ok()?));
        }
        Some(self.make_sum(out, constant))
    }

    /// Adds up the coefficients of equal neighbours.
    fn merge_in_place(terms: &mut Vec<(Expr, i128)>) -> Option<()> {
        let mut overflow = false;
        terms.dedup_by(|later, kept| {
            if later.0 != kept.0 {
                return false;
            }
            match kept.1.checked_add(later.1) {
                Some(c) => kept.1 = c,
                None => overflow = true,
            }
            true
        });
        (!overflow).then_some(())
    }

    /// A product or sum that may raise: reduced to its raising atoms when its coefficient is 0.
    fn is_compound_raiser(&self, t: Expr) -> bool {
        self.may_raise(t) && matches!(self.node(t), Node::Mul(_) | Node::Add { .. })
    }

    /// The maximal subexpressions of `t` that may raise and are not sums or products.
    fn raising_atoms(&self, t: Expr, out: &mut Vec<Expr>) {
        match self.node(t) {
            Node::Mul(factors) => factors
                .iter()
                .for_each(|&(f, _)| self.raising_atoms(f, out)),
            Node::Add { terms, .. } => terms.iter().for_each(|&(a, _)| self.raising_atoms(a, out)),
            _ if self.may_raise(t) => out.push(t),
            _ => {}
        }
    }

    fn unfolded(&mut self, op: ArithOp, a: Expr, b: Expr) -> Expr {
        let (a, b) = if self.cmp(a, b).is_gt() {
            (b, a)
        } else {
            (a, b)
        };
        self.intern(Node::Unfolded(op, a, b))
    }

    pub fn add(&mut self, a: Expr, b: Expr) -> Expr {
        match (self.as_const(a), self.as_const(b)) {
            (Some(0), _) => return b,
            (_, Some(0)) => return a,
            (Some(x), Some(y)) => {
                return match x.checked_add(y) {
                    Some(v) => self.constant(v),
                    None => self.unfolded(ArithOp::Add, a, b),
                }
            }
            _ => {}
        }
        // Both term lists are sorted: merge them in linear time (long concatenation sums). The
        // common case — no coefficient cancels or overflows — builds the result in one pass.
        let merged: Option<(Vec<(Expr, i64)>, i64)> = self.with_parts(a, |ta, ca| {
            self.with_parts(b, |tb, cb| {
                let terms = merge_sorted(
                    ta,
                    tb,
                    |x, y| self.cmp(x, y),
                    |x, y| x.checked_add(y).filter(|&c| c != 0),
                )?;
                Some((terms, ca.checked_add(cb)?))
            })
        });
        if let Some((terms, constant)) = merged {
            return self.make_sum(terms, constant);
        }
        // Something cancels or overflows: the general path.
        let (ta, ca) = self.linear_parts(a);
        let (tb, cb) = self.linear_parts(b);
        let terms = ta.iter().chain(&tb).map(|&(t, c)| (t, c as i128)).collect();
        match self.finish_sum(terms, ca as i128 + cb as i128, false) {
            Some(e) => e,
            None => self.unfolded(ArithOp::Add, a, b),
        }
    }

    /// The sum of many expressions in one pass: `O(n log n)` rather than `n` pairwise merges.
    pub fn add_all(&mut self, items: &[Expr]) -> Expr {
        let mut terms = Vec::new();
        let mut constant: i128 = 0;
        for &e in items {
            let (t, c) = self.linear_parts(e);
            terms.extend(t.into_iter().map(|(t, k)| (t, k as i128)));
            constant += c as i128;
        }
        match self.finish_sum(terms, constant, false) {
            Some(e) => e,
            // Overflow somewhere: fold pairwise so that only the overflowing step stays unfolded.
            None => items.iter().fold(self.zero(), |acc, &e| self.add(acc, e)),
        }
    }

    /// `Σ kᵢ·eᵢ + constant` in one pass.
    pub fn linear_combination(&mut self, items: &[(Expr, i64)], constant: i64) -> Expr {
        let mut terms = Vec::new();
        let mut acc: i128 = constant as i128;
        for &(e, k) in items {
            let (t, c) = self.linear_parts(e);
            terms.extend(t.into_iter().map(|(t, m)| (t, m as i128 * k as i128)));
            acc += c as i128 * k as i128;
        }
        match self.finish_sum(terms, acc, false) {
            Some(e) => e,
            None => items.iter().fold(self.constant(constant), |acc, &(e, k)| {
                let s = self.scale(e, k);
                self.add(acc, s)
            }),
        }
    }

    /// `Σ sorted + Σ kᵢ·extraᵢ + constant`, where `sorted` is already a sorted list of distinct
    /// atoms: only the extra part is sorted before a linear merge (re-simplifying a long sum after
    /// one substitution stays linear).
    pub(crate) fn sum_with_extra(
        &mut self,
        sorted: &[(Expr, i64)],
        extra: &[(Expr, i64)],
        constant: i64,
    ) -> Expr {
        let mut more: Vec<(Expr, i128)> = Vec::new();
        let mut acc = constant as i128;
        for &(e, k) in extra {
            let (t, c) = self.linear_parts(e);
            more.extend(t.into_iter().map(|(t, m)| (t, m as i128 * k as i128)));
            acc += c as i128 * k as i128;
        }
        more.sort_by(|a, b| self.cmp(a.0, b.0));
        let mut merged = Vec::with_capacity(sorted.len() + more.len());
        let (mut i, mut j) = (0, 0);
        while i < sorted.len() || j < more.len() {
            let take_sorted =
                j == more.len() || (i < sorted.len() && self.cmp(sorted[i].0, more[j].0).is_le());
            if take_sorted {
                merged.push((sorted[i].0, sorted[i].1 as i128));
                i += 1;
            } else {
                merged.push(more[j]);
                j += 1;
            }
        }
        match self.finish_sum(merged, acc, true) {
            Some(e) => e,
            None => {
                let all: Vec<(Expr, i64)> = sorted.iter().chain(extra).copied().collect();
                self.linear_combination(&all, constant)
            }
        }
    }

    pub fn sub(&mut self, a: Expr, b: Expr) -> Expr {
        let nb = self.neg(b);
        self.add(a, nb)
    }

    pub fn neg(&mut self, a: Expr) -> Expr {
        self.scale(a, -1)
    }

    /// `k * a`.
    pub fn scale(&mut self, a: Expr, k: i64) -> Expr {
        if k == 1 {
            return a;
        }
        if let Some(x) = self.as_const(a) {
            return match x.checked_mul(k) {
                Some(v) => self.constant(v),
                None => {
                    let kc = self.constant(k);
                    self.unfolded(ArithOp::Mul, kc, a)
                }
            };
        }
        let (terms, c) = self.linear_parts(a);
        let terms = terms
            .into_iter()
            .map(|(t, m)| (t, m as i128 * k as i128))
            .collect();
        match self.finish_sum(terms, c as i128 * k as i128, true) {
            Some(e) => e,
            None => {
                let kc = self.constant(k);
                self.unfolded(ArithOp::Mul, kc, a)
            }
        }
    }

    pub fn mul(&mut self, a: Expr, b: Expr) -> Expr {
        if let Some(k) = self.as_const(a) {
            return self.scale(b, k);
        }
        if let Some(k) = self.as_const(b) {
            return self.scale(a, k);
        }
        let (ta, ca) = self.linear_parts(a);
        let (tb, cb) = self.linear_parts(b);
        let na = ta.len() + usize::from(ca != 0);
        let nb = tb.len() + usize::from(cb != 0);
        if na > 1 && nb > 1 && na * nb > EXPAND_LIMIT {
            // Too big to expand: kept as the product of the two (an atom), so that the text
            // `(a)*(b)` parses back to the same node.
            return self.unfolded(ArithOp::Mul, a, b);
        }
        let mut terms: Vec<(Expr, i128)> = Vec::with_capacity(na * nb);
        for &(x, cx) in &ta {
            for &(y, cy) in &tb {
                let Some(m) = self.monomial_mul(x, y) else {
                    return self.unfolded(ArithOp::Mul, a, b);
                };
                terms.push((m, cx as i128 * cy as i128));
            }
        }
        if cb != 0 {
            terms.extend(ta.iter().map(|&(x, cx)| (x, cx as i128 * cb as i128)));
        }
        if ca != 0 {
            terms.extend(tb.iter().map(|&(y, cy)| (y, ca as i128 * cy as i128)));
        }
        match self.finish_sum(terms, ca as i128 * cb as i128, false) {
            Some(e) => e,
            None => self.unfolded(ArithOp::Mul, a, b),
        }
    }

    /// Product of two monomials (atoms or products of atoms). `None` if an exponent overflows.
    fn monomial_mul(&mut self, x: Expr, y: Expr) -> Option<Expr> {
        let fx = self.factors(x);
        let fy = self.factors(y);
        let out = merge_sorted(
            &fx,
            &fy,
            |p, q| self.cmp_factor(p, q),
            |m, n| m.checked_add(n),
        )?;
        Some(self.intern(Node::Mul(out.into())))
    }

    /// `x / y` for monomials when every factor of `y` divides `x`.
    pub(crate) fn monomial_div(&mut self, x: Expr, y: Expr) -> Option<Expr> {
        let mut fx = self.factors(x);
        for (f, n) in self.factors(y) {
            let i = fx.iter().position(|p| p.0 == f)?;
            fx[i].1 = fx[i].1.checked_sub(n)?;
        }
        fx.retain(|p| p.1 > 0);
        Some(match fx.as_slice() {
            [] => self.one(),
            [(f, 1)] => *f,
            _ => self.intern(Node::Mul(fx.into())),
        })
    }

    fn factors(&self, e: Expr) -> Vec<(Expr, u32)> {
        match self.node(e) {
            Node::Mul(f) => f.to_vec(),
            _ => vec![(e, 1)],
        }
    }

    /// `a ** n` for a natural `n`, as repeated products (the same form `a*a*…*a` parses to).
    pub fn pow(&mut self, a: Expr, n: u32) -> Expr {
        if n == 0 {
            // Keep a possible division by zero inside `a` alive: `1 + 0*a`.
            let z = self.scale(a, 0);
            return self.add(self.one(), z);
        }
        let mut acc = a;
        for _ in 1..n {
            acc = self.mul(acc, a);
        }
        acc
    }
}

/// Merges two lists sorted by `order` on their keys, combining the values of equal keys with
/// `combine`; `None` if a combination fails.
fn merge_sorted<V: Copy>(
    a: &[(Expr, V)],
    b: &[(Expr, V)],
    order: impl Fn(Expr, Expr) -> Ordering,
    combine: impl Fn(V, V) -> Option<V>,
) -> Option<Vec<(Expr, V)>> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match order(a[i].0, b[j].0) {
            Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            Ordering::Equal => {
                out.push((a[i].0, combine(a[i].1, b[j].1)?));
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    Some(out)
}

impl ExprPool {
    /// `e` with symbols replaced by `map` (symbols it maps to `None` stay), rebuilt canonically.
    pub fn substitute(&mut self, e: Expr, map: &dyn Fn(SymbolId) -> Option<Expr>) -> Expr {
        let mut memo = rustc_hash::FxHashMap::default();
        self.substitute_memo(e, map, u64::MAX, &mut memo)
    }

    /// `e` with each symbol of `pairs` replaced by its expression. Subexpressions that hold none
    /// of them are not visited.
    pub fn substitute_pairs(&mut self, e: Expr, pairs: &[(SymbolId, Expr)]) -> Expr {
        let mask = pairs.iter().fold(0, |m, &(s, _)| m | self.symbol_bit(s));
        let mut memo = rustc_hash::FxHashMap::default();
        let map = |id: SymbolId| pairs.iter().find(|(k, _)| *k == id).map(|(_, v)| *v);
        self.substitute_memo(e, &map, mask, &mut memo)
    }

    /// `e` with every occurrence of a key of `map` (a whole subexpression) replaced by its value,
    /// rebuilt in canonical form.
    pub fn replace(&mut self, e: Expr, map: &rustc_hash::FxHashMap<Expr, Expr>) -> Expr {
        // A key can only occur inside a node that holds all its symbols (a key without symbols
        // can occur anywhere).
        let mask = if map.keys().any(|&k| self.info(k).symbols == 0) {
            u64::MAX
        } else {
            map.keys().fold(0, |m, &k| m | self.info(k).symbols)
        };
        let mut memo = map.clone();
        self.substitute_memo(e, &|_| None, mask, &mut memo)
    }

    fn substitute_memo(
        &mut self,
        e: Expr,
        map: &dyn Fn(SymbolId) -> Option<Expr>,
        mask: u64,
        memo: &mut rustc_hash::FxHashMap<Expr, Expr>,
    ) -> Expr {
        if let Some(&r) = memo.get(&e) {
            return r;
        }
        if self.info(e).symbols & mask == 0 {
            return e;
        }
        // Nodes are canonical: one whose children all stay the same is itself (no rebuild, which
        // for long sums would cost their length on every visit).
        if !matches!(self.node(e), Node::Sym(_)) {
            let mut children = Vec::new();
            self.for_each_child(e, |c| children.push(c));
            let mut same = true;
            for c in children {
                same &= self.substitute_memo(c, map, mask, memo) == c;
            }
            if same {
                memo.insert(e, e);
                return e;
            }
        }
        let node = self.node(e).clone();
        let mut sub = |p: &mut Self, x: Expr| p.substitute_memo(x, map, mask, memo);
        let r = match node {
            Node::Const(_) | Node::Bool(_) => e,
            Node::Sym(s) => map(s).unwrap_or(e),
            Node::Add { terms, constant } => {
                let items: Vec<(Expr, i64)> =
                    terms.iter().map(|&(t, c)| (sub(self, t), c)).collect();
                self.linear_combination(&items, constant)
            }
            Node::Mul(factors) => factors.iter().fold(self.one(), |acc, &(f, n)| {
                let f = sub(self, f);
                let p = self.pow(f, n);
                self.mul(acc, p)
            }),
            Node::FloorDiv(a, b) => {
                let (a, b) = (sub(self, a), sub(self, b));
                self.floordiv(a, b)
            }
            Node::CeilDiv(a, b) => {
                let (a, b) = (sub(self, a), sub(self, b));
                self.ceildiv(a, b)
            }
            Node::Mod(a, b) => {
                let (a, b) = (sub(self, a), sub(self, b));
                self.modulo(a, b)
            }
            Node::Min(args) | Node::Max(args) => {
                let is_min = matches!(self.node(e), Node::Min(_));
                let args: Vec<Expr> = args.iter().map(|&a| sub(self, a)).collect();
                self.min_max(is_min, &args)
            }
            Node::Where(c, a, b) => {
                let (c, a, b) = (sub(self, c), sub(self, a), sub(self, b));
                self.where_(c, a, b)
            }
            Node::Cmp(op, a, b) => {
                let (a, b) = (sub(self, a), sub(self, b));
                self.compare(op, a, b)
            }
            Node::And(args) | Node::Or(args) => {
                let is_and = matches!(self.node(e), Node::And(_));
                let args: Vec<Expr> = args.iter().map(|&a| sub(self, a)).collect();
                if is_and {
                    self.and(&args)
                } else {
                    self.or(&args)
                }
            }
            Node::Not(a) => {
                let a = sub(self, a);
                self.not(a)
            }
            Node::Unfolded(op, a, b) => {
                let (a, b) = (sub(self, a), sub(self, b));
                match op {
                    ArithOp::Add => self.add(a, b),
                    ArithOp::Mul => self.mul(a, b),
                }
            }
        };
        memo.insert(e, r);
        r
    }
}
