//! Range-aware simplification and interval analysis. On top of the range-free canonical form this
//! applies substitutions from asserted equalities, decides comparisons, `Min`/`Max`/`Where` and
//! divisions from value ranges, and folds anything whose range is a single point. A rewrite that
//! drops a subexpression only fires when that subexpression cannot raise (divisors provably ≠ 0).

use super::divmod::gcd;
use super::env::ShapeEnv;
use super::expr::{ArithOp, CmpOp, Expr, Node};
use super::learn::lcm;
use super::range::ValueRange;

impl ShapeEnv {
    /// The canonical, range-simplified form of `e`. Memoized per environment version.
    pub fn simplify(&mut self, e: Expr) -> Expr {
        if let Some(r) = self.simplify_memo.get(e.index(), self.version) {
            return r;
        }
        let r = self.simplify_node(e);
        let r = self.fold_point(r);
        self.simplify_memo.insert(e.index(), self.version, r);
        r
    }

    /// Replaces an integer expression whose range is one point by that constant.
    fn fold_point(&mut self, e: Expr) -> Expr {
        let info = self.pool.info(e);
        if info.is_bool || self.pool.as_const(e).is_some() || self.may_raise_here(e) {
            return e;
        }
        match self.interval(e).is_point() {
            Some(v) => self.pool.constant(v),
            None => e,
        }
    }

    fn simplify_node(&mut self, e: Expr) -> Expr {
        let node = self.pool.node(e).clone();
        match node {
            Node::Const(_) | Node::Bool(_) => e,
            Node::Sym(s) => match self.syms[s.index()].replacement {
                Some(rep) => self.simplify(rep),
                None => e,
            },
            Node::Add { terms, constant } => {
                let mut kept = Vec::with_capacity(terms.len());
                let mut replaced = Vec::new();
                let mut dropped = false;
                for &(t, c) in terms.iter() {
                    let st = self.simplify(t);
                    // A zero-coefficient term stays only while its divisor may be zero.
                    if c == 0 && !self.may_raise_here(st) {
                        dropped = true;
                    } else if st == t {
                        kept.push((t, c));
                    } else {
                        replaced.push((st, c));
                    }
                }
                let sum = if replaced.is_empty() && !dropped {
                    e
                } else {
                    self.pool.sum_with_extra(&kept, &replaced, constant)
                };
                self.pool.join_div_mod(sum)
            }
            Node::Mul(factors) => {
                let mut acc = self.pool.one();
                for &(f, n) in factors.iter() {
                    let sf = self.simplify(f);
                    let p = self.pool.pow(sf, n);
                    acc = self.pool.mul(acc, p);
                }
                acc
            }
            Node::FloorDiv(a, b) | Node::CeilDiv(a, b) => {
                let floor = matches!(self.pool.node(e), Node::FloorDiv(..));
                let (a, b) = (self.simplify(a), self.simplify(b));
                self.div_ranged(a, b, floor)
            }
            Node::Mod(a, b) => {
                let (a, b) = (self.simplify(a), self.simplify(b));
                self.mod_ranged(a, b)
            }
            Node::Min(args) | Node::Max(args) => {
                let is_min = matches!(self.pool.node(e), Node::Min(_));
                let args: Vec<Expr> = args.iter().map(|&a| self.simplify(a)).collect();
                let built = self.pool.min_max(is_min, &args);
                self.prune_min_max(built, is_min)
            }
            Node::Where(c, a, b) => {
                let c = self.simplify(c);
                match self.pool.as_bool(c) {
                    Some(true) => self.simplify(a),
                    Some(false) => self.simplify(b),
                    None => {
                        let (a, b) = (self.simplify(a), self.simplify(b));
                        self.pool.where_(c, a, b)
                    }
                }
            }
            Node::Cmp(op, a, b) => {
                // The spelling as written first: cheap (no rebuilding), and substitution can hide
                // a range it shows (an offset that is a sum of sizes is ≥ 0 even after one size
                // became `s0 - others`).
                if !self.pool.may_raise(a) && !self.pool.may_raise(b) {
                    if let Some(v) = self.decide(op, a, b) {
                        return self.pool.bool(v);
                    }
                }
                let (sa, sb) = (self.simplify(a), self.simplify(b));
                let decided = if (sa, sb) != (a, b) {
                    self.decide(op, sa, sb)
                } else {
                    None
                };
                let decided = match decided {
                    None if self.pool.may_raise(a) || self.pool.may_raise(b) => {
                        self.decide(op, a, b)
                    }
                    d => d,
                };
                match decided {
                    Some(v) if !self.may_raise_here(sa) && !self.may_raise_here(sb) => {
                        self.pool.bool(v)
                    }
                    _ => self.pool.compare(op, sa, sb),
                }
            }
            Node::And(args) | Node::Or(args) => {
                let is_and = matches!(self.pool.node(e), Node::And(_));
                let args: Vec<Expr> = args.iter().map(|&a| self.simplify(a)).collect();
                if is_and {
                    self.pool.and(&args)
                } else {
                    self.pool.or(&args)
                }
            }
            Node::Not(a) => {
                let a = self.simplify(a);
                self.pool.not(a)
            }
            Node::Unfolded(op, a, b) => {
                let (a, b) = (self.simplify(a), self.simplify(b));
                match op {
                    ArithOp::Add => self.pool.add(a, b),
                    ArithOp::Mul => self.pool.mul(a, b),
                }
            }
        }
    }

    /// Whether evaluating `e` may divide by zero, given what the ranges prove about divisors.
    pub(crate) fn may_raise_here(&mut self, e: Expr) -> bool {
        if !self.pool.may_raise(e) {
            return false;
        }
        match *self.pool.node(e) {
            Node::FloorDiv(a, b) | Node::CeilDiv(a, b) | Node::Mod(a, b) => {
                self.interval(b).contains(0) || self.may_raise_here(a) || self.may_raise_here(b)
            }
            _ => {
                let mut kids = Vec::new();
                self.pool.for_each_child(e, |c| kids.push(c));
                kids.into_iter().any(|c| self.may_raise_here(c))
            }
        }
    }

    /// Decides `a op b` from the range of `a - b` (and divisibility for equalities).
    pub(crate) fn decide(&mut self, op: CmpOp, a: Expr, b: Expr) -> Option<bool> {
        let d = self.pool.sub(a, b);
        let r = self.interval(d);
        let lt0 = |r: &ValueRange| {
            if r.hi < 0 {
                Some(true)
            } else if r.lo >= 0 {
                Some(false)
            } else {
                None
            }
        };
        let eq0 = |this: &mut Self, r: &ValueRange| {
            if r.lo == 0 && r.hi == 0 {
                return Some(true);
            }
            if !r.contains(0) {
                return Some(false);
            }
            // 2·u0 + 1 == 0 is false for every integer u0.
            let (terms, k) = this.pool.linear_parts(d);
            let m = terms.iter().fold(0, |m, &(t, c)| {
                gcd(m, c.saturating_mul(this.known_multiple(t)))
            });
            (m > 1 && k % m != 0).then_some(false)
        };
        match op {
            CmpOp::Lt => lt0(&r),
            CmpOp::Ge => lt0(&r).map(|v| !v),
            CmpOp::Le => lt0(&r.add(&ValueRange::point(-1))),
            CmpOp::Gt => lt0(&r.add(&ValueRange::point(-1))).map(|v| !v),
            CmpOp::Eq => eq0(self, &r),
            CmpOp::Ne => eq0(self, &r).map(|v| !v),
        }
    }

    /// Drops `Min`/`Max` arguments that another argument provably dominates.
    fn prune_min_max(&mut self, e: Expr, is_min: bool) -> Expr {
        const MAX_PAIRWISE: usize = 16;
        let args: Vec<Expr> = match self.pool.node(e) {
            Node::Min(a) | Node::Max(a) if a.len() <= MAX_PAIRWISE => a.to_vec(),
            _ => return e,
        };
        let mut keep = vec![true; args.len()];
        for i in 0..args.len() {
            if self.may_raise_here(args[i]) {
                continue;
            }
            for j in 0..args.len() {
                if i == j || !keep[j] {
                    continue;
                }
                // For Min, args[i] is redundant if args[j] <= args[i].
                let op = if is_min { CmpOp::Le } else { CmpOp::Ge };
                if self.decide(op, args[j], args[i]) == Some(true) {
                    keep[i] = false;
                    break;
                }
            }
        }
        if keep.iter().all(|&k| k) {
            return e;
        }
        let kept: Vec<Expr> = args
            .iter()
            .zip(&keep)
            .filter(|p| *p.1)
            .map(|p| *p.0)
            .collect();
        self.pool.min_max(is_min, &kept)
    }

    /// `a // b` (or ceiling) with range knowledge.
    fn div_ranged(&mut self, a: Expr, b: Expr, floor: bool) -> Expr {
        let base = if floor {
            self.pool.floordiv(a, b)
        } else {
            self.pool.ceildiv(a, b)
        };
        let (x, y) = match *self.pool.node(base) {
            Node::FloorDiv(x, y) | Node::CeilDiv(x, y) => (x, y),
            _ => return base,
        };
        if self.may_raise_here(x) || self.may_raise_here(y) {
            return base;
        }
        // 0 <= x < y also proves y > 0 wherever x exists (inside its loops): a size that may be
        // 0 divides only where its loop runs.
        if floor && self.below(x, y) {
            return self.pool.scale(x, 0);
        }
        if self.interval(y).contains(0) {
            return base;
        }
        if let Some(q) = self.exact_quotient(x, y) {
            return q;
        }
        base
    }

    /// Whether `0 <= x < y` is proved, `x` a sum of loop variables (each below its extent) and
    /// ranged atoms: the flattened index of a reshape, `256*x0 + x1` with `x1` in `0..256`, is
    /// below `256*n` when `x0` is in `0..n`.
    fn below(&mut self, x: Expr, y: Expr) -> bool {
        if self.interval(x).lo < 0 {
            return false;
        }
        let (terms, k) = self.pool.linear_parts(x);
        let mut most = self.pool.constant(k);
        for (t, c) in terms {
            let top = match (self.extent(t), c > 0) {
                (Some(e), true) => {
                    let one = self.pool.one();
                    self.pool.sub(e, one)
                }
                (_, positive) => {
                    let r = self.interval(t);
                    let v = if positive { r.hi } else { r.lo };
                    match i64::try_from(v) {
                        Ok(v) => self.pool.constant(v),
                        Err(_) => return false,
                    }
                }
            };
            let scaled = self.pool.scale(top, c);
            most = self.pool.add(most, scaled);
        }
        self.decide(CmpOp::Lt, most, y) == Some(true)
    }

    /// Python `a % b` with range knowledge.
    fn mod_ranged(&mut self, a: Expr, b: Expr) -> Expr {
        let base = self.pool.modulo(a, b);
        let Node::Mod(x, y) = *self.pool.node(base) else {
            return base;
        };
        if self.may_raise_here(x) || self.may_raise_here(y) {
            return base;
        }
        if self.below(x, y) {
            return x;
        }
        let ry = self.interval(y);
        if ry.contains(0) {
            return base;
        }
        let multiple = self
            .pool
            .as_const(y)
            .is_some_and(|c| self.known_multiple(x).checked_rem(c) == Some(0));
        if multiple || self.exact_quotient(x, y).is_some() {
            return self.pool.scale(x, 0);
        }
        if ry.lo >= 1 {
            // x % y == x - k·y when x // y is provably the constant k.
            let rx = self.interval(x);
            if let Some(k) = rx.floordiv(&ry).is_point() {
                if k == 0 {
                    return x;
                }
                if k != 0 {
                    let ky = self.pool.scale(y, k);
                    return self.pool.sub(x, ky);
                }
            }
        }
        base
    }

    /// `Some(q)` when `x == q·y` exactly, structurally: `y` a monomial dividing every term of `x`,
    /// or `x` a constant multiple of the sum `y`.
    fn exact_quotient(&mut self, x: Expr, y: Expr) -> Option<Expr> {
        let (tx, kx) = self.pool.linear_parts(x);
        let (ty, ky) = self.pool.linear_parts(y);
        if ty.is_empty() {
            return None;
        }
        // x = m·y for an integer m.
        if tx.len() == ty.len() {
            let (a0, b0) = (tx[0], ty[0]);
            if a0.0 == b0.0 && b0.1 != 0 && a0.1.checked_rem(b0.1) == Some(0) {
                let m = a0.1.checked_div(b0.1)?;
                let same = tx
                    .iter()
                    .zip(&ty)
                    .all(|(a, b)| a.0 == b.0 && b.1.checked_mul(m) == Some(a.1))
                    && ky.checked_mul(m) == Some(kx);
                if same {
                    return Some(self.pool.constant(m));
                }
            }
        }
        // y a single monomial c·m dividing every term of x.
        if kx != 0 || ty.len() != 1 || ky != 0 {
            return None;
        }
        let (ym, yc) = ty[0];
        let mut out = Vec::with_capacity(tx.len());
        for &(t, c) in &tx {
            if c.checked_rem(yc) != Some(0) {
                return None;
            }
            let q = self.pool.monomial_div(t, ym)?;
            out.push((q, c.checked_div(yc)?));
        }
        Some(self.pool.linear_combination(&out, 0))
    }

    /// The largest known `m` with `m | e` (0 when `e` is 0).
    pub(crate) fn known_multiple(&mut self, e: Expr) -> i64 {
        let structural = match self.pool.node(e).clone() {
            Node::Const(c) => c.checked_abs().unwrap_or(1),
            Node::Sym(s) => self.syms[s.index()].divisor,
            Node::Add { terms, constant } => terms.iter().fold(constant, |g, &(t, c)| {
                gcd(g, c.saturating_mul(self.known_multiple(t)))
            }),
            Node::Mul(factors) => factors.iter().fold(1i64, |acc, &(f, n)| {
                let m = self.known_multiple(f);
                m.checked_pow(n)
                    .and_then(|p| acc.checked_mul(p))
                    .unwrap_or(acc)
            }),
            Node::Unfolded(ArithOp::Mul, a, b) => {
                let (x, y) = (self.known_multiple(a), self.known_multiple(b));
                x.checked_mul(y).unwrap_or(1)
            }
            _ => 1,
        };
        match self.divisibility.get(&e) {
            Some(&d) => lcm(structural.max(1), d),
            None => structural,
        }
    }

    /// The value range of `e` by interval analysis over the canonical form, narrowed by facts.
    pub(crate) fn interval(&mut self, e: Expr) -> ValueRange {
        if let Some(r) = self.range_memo.get(e.index(), self.version) {
            return r.into();
        }
        let r = self.interval_node(e);
        self.range_memo.insert(e.index(), self.version, r.into());
        r
    }

    fn interval_node(&mut self, e: Expr) -> ValueRange {
        let node = self.pool.node(e).clone();
        let raw = match node {
            Node::Const(c) => return ValueRange::point(c),
            Node::Bool(b) => return ValueRange::point(i64::from(b)),
            Node::Sym(s) => {
                let st = &self.syms[s.index()];
                match st.replacement {
                    Some(rep) => {
                        let own = st.range;
                        let rep = self.simplify(rep);
                        let r = self.interval(rep);
                        return r.intersect(&own).unwrap_or(r);
                    }
                    None => return st.range,
                }
            }
            Node::Add { terms, constant } => {
                let mut acc = ValueRange::point(constant);
                for &(t, c) in terms.iter() {
                    if c != 0 {
                        // Plain symbols straight from their state: long sums of sizes are common.
                        let r = match self.pool.node(t) {
                            Node::Sym(s) if self.syms[s.index()].replacement.is_none() => {
                                self.syms[s.index()].range
                            }
                            _ => self.interval(t),
                        };
                        acc = acc.add(&r.scale(c));
                    }
                }
                if self.fact_signatures.contains(&(terms[0].0, terms.len())) {
                    if let Some((key, s, k)) = self.pool.linear_key(e) {
                        if let Some(f) = self.facts.get(&key) {
                            let known = f.scale(s).add(&ValueRange::point(k));
                            acc = acc.intersect(&known).unwrap_or(acc);
                        }
                    }
                }
                return acc;
            }
            Node::Mul(factors) => {
                let mut acc = ValueRange::point(1);
                for &(f, n) in factors.iter() {
                    acc = acc.mul(&self.interval(f).pow(n));
                }
                acc
            }
            Node::FloorDiv(a, b) => self.interval(a).floordiv(&self.interval(b)),
            Node::CeilDiv(a, b) => self.interval(a).ceildiv(&self.interval(b)),
            Node::Mod(a, b) => self.interval(a).modulo(&self.interval(b)),
            Node::Min(args) | Node::Max(args) => {
                let is_min = matches!(self.pool.node(e), Node::Min(_));
                let rs: Vec<ValueRange> = args.iter().map(|&a| self.interval(a)).collect();
                rs.iter()
                    .skip(1)
                    .fold(rs[0], |acc, r| if is_min { acc.min(r) } else { acc.max(r) })
            }
            Node::Where(c, a, b) => match self.interval(c).is_point() {
                Some(0) => self.interval(b),
                Some(_) => self.interval(a),
                None => self.interval(a).union(&self.interval(b)),
            },
            Node::Cmp(op, a, b) => match self.decide(op, a, b) {
                Some(v) => ValueRange::point(i64::from(v)),
                None => ValueRange::BOOL,
            },
            Node::And(args) | Node::Or(args) => {
                let is_and = matches!(self.pool.node(e), Node::And(_));
                let rs: Vec<Option<i64>> =
                    args.iter().map(|&a| self.interval(a).is_point()).collect();
                if rs.iter().all(|r| r == &Some(i64::from(is_and))) {
                    ValueRange::point(i64::from(is_and))
                } else if rs.iter().any(|r| r == &Some(i64::from(!is_and))) {
                    ValueRange::point(i64::from(!is_and))
                } else {
                    ValueRange::BOOL
                }
            }
            Node::Not(a) => match self.interval(a).is_point() {
                Some(v) => ValueRange::point(i64::from(v == 0)),
                None => ValueRange::BOOL,
            },
            Node::Unfolded(op, a, b) => {
                let (ra, rb) = (self.interval(a), self.interval(b));
                match op {
                    ArithOp::Add => ra.add(&rb),
                    ArithOp::Mul => ra.mul(&rb),
                }
            }
        };
        match self.facts.get(&e) {
            Some(f) => raw.intersect(f).unwrap_or(raw),
            None => raw,
        }
    }
}
