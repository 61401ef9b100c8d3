//! The expression arena: hash-consing, node facts and the canonical order of atoms.

use std::cmp::Ordering;

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap};

use super::expr::{Expr, Node, NodeInfo, SymbolId, SymbolKind};

/// A symbol's identity as the pool needs it (ranges and hints live in the `ShapeEnv`).
#[derive(Clone, Debug)]
pub struct SymbolName {
    pub name: Box<str>,
    pub kind: SymbolKind,
    /// Natural sort key, `s2 < s10`: the prefix before the trailing digits (its first 8 bytes as a
    /// big-endian integer compare like the string), then the number.
    head: u64,
    prefix: Box<str>,
    num: u64,
}

/// Interns expression nodes; equal canonical nodes share one [`Expr`].
#[derive(Clone, Debug)]
pub struct ExprPool {
    nodes: Vec<Node>,
    info: Vec<NodeInfo>,
    /// Ids with the hash of their node (kept, so that growing the table never rehashes long sums);
    /// the node itself lives once, in `nodes`.
    map: HashTable<(u64, Expr)>,
    symbols: Vec<SymbolName>,
    /// Each symbol's bit in [`NodeInfo::symbols`].
    bits: Vec<u64>,
    /// Symbols added while set are loop variables: they get one of the bits sizes never use.
    pub(crate) adding_index: bool,
    names: FxHashMap<Box<str>, SymbolId>,
    zero: Expr,
    one: Expr,
    true_: Expr,
    false_: Expr,
}

/// Bits of [`NodeInfo::symbols`] for loop variables; sizes use the others. Size expressions
/// (long sums of sizes) then never look like they hold a loop variable, so substituting or
/// hoisting loop variables skips them whole.
const INDEX_BITS: u32 = 16;

impl Default for ExprPool {
    fn default() -> Self {
        Self::new()
    }
}

impl ExprPool {
    pub fn new() -> Self {
        let mut pool = ExprPool {
            nodes: Vec::new(),
            info: Vec::new(),
            map: HashTable::new(),
            symbols: Vec::new(),
            bits: Vec::new(),
            adding_index: false,
            names: FxHashMap::default(),
            zero: Expr(0),
            one: Expr(0),
            true_: Expr(0),
            false_: Expr(0),
        };
        pool.zero = pool.intern(Node::Const(0));
        pool.one = pool.intern(Node::Const(1));
        pool.true_ = pool.intern(Node::Bool(true));
        pool.false_ = pool.intern(Node::Bool(false));
        pool
    }

    pub fn node(&self, e: Expr) -> &Node {
        &self.nodes[e.index()]
    }

    pub fn info(&self, e: Expr) -> NodeInfo {
        self.info[e.index()]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn zero(&self) -> Expr {
        self.zero
    }

    pub fn one(&self) -> Expr {
        self.one
    }

    pub fn bool(&self, b: bool) -> Expr {
        if b {
            self.true_
        } else {
            self.false_
        }
    }

    pub fn constant(&mut self, v: i64) -> Expr {
        match v {
            0 => self.zero,
            1 => self.one,
            _ => self.intern(Node::Const(v)),
        }
    }

    pub fn as_const(&self, e: Expr) -> Option<i64> {
        match self.node(e) {
            Node::Const(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_bool(&self, e: Expr) -> Option<bool> {
        match self.node(e) {
            Node::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_symbol(&self, e: Expr) -> Option<SymbolId> {
        match self.node(e) {
            Node::Sym(s) => Some(*s),
            _ => None,
        }
    }

    pub fn may_raise(&self, e: Expr) -> bool {
        self.info(e).may_raise
    }

    /// `e == s·key + k` with `key` a sum of atoms whose coefficients have gcd 1 and a positive first
    /// non-zero coefficient, so that facts about `e` and about `2·e - 6` share one key.
    /// `None` for constants.
    pub(crate) fn linear_key(&mut self, e: Expr) -> Option<(Expr, i64, i64)> {
        let (terms, k) = self.linear_parts(e);
        let g = terms.iter().fold(0, |g, &(_, c)| super::divmod::gcd(g, c));
        if g == 0 {
            return None;
        }
        let first = terms.iter().find(|t| t.1 != 0)?.1;
        let s = if first < 0 { -g } else { g };
        let scaled: Option<Vec<(Expr, i64)>> = terms
            .iter()
            .map(|&(t, c)| Some((t, c.checked_div(s)?)))
            .collect();
        let key = self.make_sum(scaled?, 0);
        Some((key, s, k))
    }

    /// Whether `needle` occurs in `hay`.
    pub fn contains(&self, hay: Expr, needle: Expr) -> bool {
        if hay == needle {
            return true;
        }
        if matches!(
            self.node(hay),
            Node::Const(_) | Node::Bool(_) | Node::Sym(_)
        ) {
            return false;
        }
        let mut seen = rustc_hash::FxHashSet::default();
        let mut stack = vec![hay];
        while let Some(x) = stack.pop() {
            if x == needle {
                return true;
            }
            if seen.insert(x) {
                self.for_each_child(x, |c| stack.push(c));
            }
        }
        false
    }

    /// The symbols occurring in `e`, each once, in order of first occurrence.
    pub fn free_symbols(&self, e: Expr) -> Vec<SymbolId> {
        // Fast path: a sum of distinct plain symbols (concatenation offsets) needs no visited set.
        if let Node::Add { terms, .. } = self.node(e) {
            let syms: Option<Vec<SymbolId>> =
                terms.iter().map(|&(t, _)| self.as_symbol(t)).collect();
            if let Some(syms) = syms {
                return syms;
            }
        }
        let mut seen = rustc_hash::FxHashSet::default();
        let mut out = Vec::new();
        let mut stack = vec![e];
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            if let Node::Sym(s) = self.node(x) {
                out.push(*s);
            }
            self.for_each_child(x, |c| stack.push(c));
        }
        out
    }

    /// The symbols of all of `es`, each once, in order of discovery; shared subexpressions are
    /// walked once.
    pub fn free_symbols_of(&self, es: &[Expr]) -> Vec<SymbolId> {
        let mut seen = rustc_hash::FxHashSet::default();
        let mut out = Vec::new();
        let mut stack: Vec<Expr> = es.iter().rev().copied().collect();
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            match self.node(x) {
                Node::Sym(s) => out.push(*s),
                _ if self.info(x).symbols == 0 => {}
                _ => self.for_each_child(x, |c| stack.push(c)),
            }
        }
        out
    }

    pub fn for_each_child(&self, e: Expr, mut f: impl FnMut(Expr)) {
        match self.node(e) {
            Node::Const(_) | Node::Bool(_) | Node::Sym(_) => {}
            Node::Add { terms, .. } => terms.iter().for_each(|t| f(t.0)),
            Node::Mul(factors) => factors.iter().for_each(|t| f(t.0)),
            Node::FloorDiv(a, b)
            | Node::CeilDiv(a, b)
            | Node::Mod(a, b)
            | Node::Cmp(_, a, b)
            | Node::Unfolded(_, a, b) => {
                f(*a);
                f(*b);
            }
            Node::Min(xs) | Node::Max(xs) | Node::And(xs) | Node::Or(xs) => {
                xs.iter().for_each(|&x| f(x))
            }
            Node::Where(c, a, b) => {
                f(*c);
                f(*a);
                f(*b);
            }
            Node::Not(a) => f(*a),
        }
    }

    /// Registers a symbol name; the caller (the `ShapeEnv`) checks uniqueness.
    /// The bit of symbol `s` in [`NodeInfo::symbols`].
    pub fn symbol_bit(&self, s: SymbolId) -> u64 {
        self.bits[s.index()]
    }

    pub(crate) fn add_symbol(&mut self, name: &str, kind: SymbolKind) -> (SymbolId, Expr) {
        let id = SymbolId(self.symbols.len() as u32);
        let n = self.symbols.len() as u64;
        self.bits.push(if self.adding_index {
            1u64 << (64 - INDEX_BITS as u64 + n % INDEX_BITS as u64)
        } else {
            1u64 << (n % (64 - INDEX_BITS as u64))
        });
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, num) = name.split_at(name.len() - digits);
        let num = num.parse::<u64>().unwrap_or(0);
        let mut head = [0u8; 8];
        let n = prefix.len().min(8);
        head[..n].copy_from_slice(&prefix.as_bytes()[..n]);
        self.symbols.push(SymbolName {
            name: name.into(),
            kind,
            head: u64::from_be_bytes(head),
            prefix: prefix.into(),
            num,
        });
        self.names.insert(name.into(), id);
        let e = self.intern(Node::Sym(id));
        (id, e)
    }

    pub fn symbol(&self, id: SymbolId) -> &SymbolName {
        &self.symbols[id.index()]
    }

    pub fn lookup(&self, name: &str) -> Option<SymbolId> {
        self.names.get(name).copied()
    }

    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    pub fn symbol_expr(&mut self, id: SymbolId) -> Expr {
        self.intern(Node::Sym(id))
    }

    pub(crate) fn intern(&mut self, node: Node) -> Expr {
        let hash = FxBuildHasher.hash_one(&node);
        let nodes = &self.nodes;
        if let Some(&(_, e)) = self
            .map
            .find(hash, |&(h, e)| h == hash && nodes[e.index()] == node)
        {
            return e;
        }
        let info = self.compute_info(&node);
        let e = Expr(u32::try_from(self.nodes.len()).expect("more than 2^32 expression nodes"));
        self.nodes.push(node);
        self.info.push(info);
        self.map.insert_unique(hash, (hash, e), |&(h, _)| h);
        e
    }

    fn compute_info(&self, node: &Node) -> NodeInfo {
        let mut info = NodeInfo::default();
        let child = |e: Expr, info: &mut NodeInfo| {
            let c = self.info(e);
            info.has_unbacked |= c.has_unbacked;
            info.has_backed |= c.has_backed;
            info.may_raise |= c.may_raise;
            info.depth = info.depth.max(c.depth + 1);
            info.symbols |= c.symbols;
        };
        match node {
            Node::Const(_) => {}
            Node::Bool(_) => info.is_bool = true,
            Node::Sym(s) => {
                info.symbols = self.bits[s.index()];
                match self.symbols[s.index()].kind {
                    SymbolKind::Backed => info.has_backed = true,
                    SymbolKind::Unbacked => info.has_unbacked = true,
                }
            }
            Node::Add { terms, .. } => terms.iter().for_each(|&(t, _)| child(t, &mut info)),
            Node::Mul(factors) => factors.iter().for_each(|&(f, _)| child(f, &mut info)),
            Node::FloorDiv(a, b) | Node::CeilDiv(a, b) | Node::Mod(a, b) => {
                child(*a, &mut info);
                child(*b, &mut info);
                if !matches!(self.node(*b), Node::Const(c) if *c != 0) {
                    info.may_raise = true;
                }
            }
            Node::Min(args) | Node::Max(args) => args.iter().for_each(|&a| child(a, &mut info)),
            Node::Where(c, a, b) => {
                child(*c, &mut info);
                child(*a, &mut info);
                child(*b, &mut info);
                info.is_bool = self.info(*a).is_bool;
            }
            Node::Cmp(_, a, b) => {
                child(*a, &mut info);
                child(*b, &mut info);
                info.is_bool = true;
            }
            Node::And(args) | Node::Or(args) => {
                args.iter().for_each(|&a| child(a, &mut info));
                info.is_bool = true;
            }
            Node::Not(a) => {
                child(*a, &mut info);
                info.is_bool = true;
            }
            Node::Unfolded(_, a, b) => {
                child(*a, &mut info);
                child(*b, &mut info);
            }
        }
        info
    }

    fn rank(node: &Node) -> u8 {
        match node {
            Node::Const(_) => 0,
            Node::Bool(_) => 1,
            Node::Sym(_) | Node::Mul(_) => 2,
            Node::Add { .. } => 3,
            Node::FloorDiv(..) => 4,
            Node::CeilDiv(..) => 5,
            Node::Mod(..) => 6,
            Node::Min(_) => 7,
            Node::Max(_) => 8,
            Node::Where(..) => 9,
            Node::Cmp(..) => 10,
            Node::Not(_) => 11,
            Node::And(_) => 12,
            Node::Or(_) => 13,
            Node::Unfolded(..) => 14,
        }
    }

    /// The deterministic total order used to sort terms, factors and arguments. It depends only on
    /// structure and symbol names, so printing and re-parsing in another pool gives the same text.
    /// Symbols and products compare as monomials (lexicographically by factors): `s0 < s0*s1 < s1`.
    pub fn cmp(&self, a: Expr, b: Expr) -> Ordering {
        if a == b {
            return Ordering::Equal;
        }
        let (na, nb) = (self.node(a), self.node(b));
        if let (Node::Sym(x), Node::Sym(y)) = (na, nb) {
            return self.cmp_symbols(*x, *y);
        }
        let rank = Self::rank(na).cmp(&Self::rank(nb));
        if rank != Ordering::Equal {
            return rank;
        }
        match (na, nb) {
            (Node::Const(x), Node::Const(y)) => x.cmp(y),
            (Node::Bool(x), Node::Bool(y)) => x.cmp(y),
            (Node::Sym(_) | Node::Mul(_), Node::Sym(_) | Node::Mul(_)) => self.cmp_monomials(a, b),
            (
                Node::Add {
                    terms: ta,
                    constant: ca,
                },
                Node::Add {
                    terms: tb,
                    constant: cb,
                },
            ) => self
                .cmp_lists(ta, tb, |p, x, y| p.cmp(x.0, y.0).then(x.1.cmp(&y.1)))
                .then(ca.cmp(cb)),
            (Node::FloorDiv(a1, b1), Node::FloorDiv(a2, b2))
            | (Node::CeilDiv(a1, b1), Node::CeilDiv(a2, b2))
            | (Node::Mod(a1, b1), Node::Mod(a2, b2)) => {
                self.cmp(*a1, *a2).then_with(|| self.cmp(*b1, *b2))
            }
            (Node::Min(x), Node::Min(y))
            | (Node::Max(x), Node::Max(y))
            | (Node::And(x), Node::And(y))
            | (Node::Or(x), Node::Or(y)) => self.cmp_lists(x, y, |p, a, b| p.cmp(*a, *b)),
            (Node::Where(c1, a1, b1), Node::Where(c2, a2, b2)) => self
                .cmp(*c1, *c2)
                .then_with(|| self.cmp(*a1, *a2))
                .then_with(|| self.cmp(*b1, *b2)),
            (Node::Cmp(o1, a1, b1), Node::Cmp(o2, a2, b2)) => (*o1 as u8)
                .cmp(&(*o2 as u8))
                .then_with(|| self.cmp(*a1, *a2))
                .then_with(|| self.cmp(*b1, *b2)),
            (Node::Not(x), Node::Not(y)) => self.cmp(*x, *y),
            (Node::Unfolded(o1, a1, b1), Node::Unfolded(o2, a2, b2)) => (*o1 as u8)
                .cmp(&(*o2 as u8))
                .then_with(|| self.cmp(*a1, *a2))
                .then_with(|| self.cmp(*b1, *b2)),
            _ => unreachable!("rank() separates node kinds"),
        }
    }

    fn cmp_lists<T>(&self, a: &[T], b: &[T], f: impl Fn(&Self, &T, &T) -> Ordering) -> Ordering {
        for (x, y) in a.iter().zip(b) {
            let o = f(self, x, y);
            if o != Ordering::Equal {
                return o;
            }
        }
        a.len().cmp(&b.len())
    }

    fn cmp_symbols(&self, a: SymbolId, b: SymbolId) -> Ordering {
        let (x, y) = (&self.symbols[a.index()], &self.symbols[b.index()]);
        x.head
            .cmp(&y.head)
            .then_with(|| {
                if x.prefix.len() > 8 || y.prefix.len() > 8 {
                    x.prefix.cmp(&y.prefix)
                } else {
                    Ordering::Equal
                }
            })
            .then(x.num.cmp(&y.num))
            .then_with(|| x.name.cmp(&y.name))
    }

    /// Compares two monomials (a symbol, or a product of atoms) lexicographically by their factors.
    fn cmp_monomials(&self, a: Expr, b: Expr) -> Ordering {
        let single_a = [(a, 1)];
        let single_b = [(b, 1)];
        let fa: &[(Expr, u32)] = match self.node(a) {
            Node::Mul(f) => f,
            _ => &single_a,
        };
        let fb: &[(Expr, u32)] = match self.node(b) {
            Node::Mul(f) => f,
            _ => &single_b,
        };
        self.cmp_lists(fa, fb, |p, x, y| p.cmp_factor(x.0, y.0).then(x.1.cmp(&y.1)))
    }

    /// Order of factor atoms inside a product (never products themselves).
    pub(crate) fn cmp_factor(&self, a: Expr, b: Expr) -> Ordering {
        match (self.node(a), self.node(b)) {
            (Node::Sym(x), Node::Sym(y)) => self.cmp_symbols(*x, *y),
            _ => self.cmp(a, b),
        }
    }
}
