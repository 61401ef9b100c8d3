//! Hoisting size arithmetic out of kernels: every maximal subexpression of an index that uses no
//! loop variable (an offset `u0 + u1 + … + u9`, a stride `s0*s1`) becomes a kernel parameter the
//! launcher computes once, as Inductor passes `ks0`. Kernel text stays linear in the graph, and
//! the GPU does not recompute sizes per element.

use guardless_ir::sym::{Expr, Node, ShapeEnv, SymbolId};
use rustc_hash::{FxHashMap, FxHashSet};

pub struct Hoister {
    locals: FxHashSet<SymbolId>,
    locals_mask: u64,
    /// The derived parameters: symbol, and the expression it stands for.
    pub derived: Vec<(SymbolId, Expr)>,
    names: FxHashMap<Expr, Expr>,
    local_memo: FxHashMap<Expr, bool>,
}

impl Hoister {
    pub fn new(env: &ShapeEnv, locals: FxHashSet<SymbolId>) -> Hoister {
        Hoister {
            locals_mask: locals.iter().fold(0, |m, &s| m | env.pool().symbol_bit(s)),
            locals,
            derived: Vec::new(),
            names: FxHashMap::default(),
            local_memo: FxHashMap::default(),
        }
    }

    fn has_local(&mut self, env: &ShapeEnv, e: Expr) -> bool {
        if let Some(&v) = self.local_memo.get(&e) {
            return v;
        }
        let v = env.pool().info(e).symbols & self.locals_mask != 0
            && env
                .pool()
                .free_symbols(e)
                .iter()
                .any(|s| self.locals.contains(s));
        self.local_memo.insert(e, v);
        v
    }

    /// The symbol standing for the loop-free `e` (a new one the first time).
    fn derive(&mut self, env: &mut ShapeEnv, e: Expr) -> Expr {
        if let Some(&s) = self.names.get(&e) {
            return s;
        }
        let r = env.bound(e);
        let clamp = |v: i128| i64::try_from(v).ok();
        let mut n = env.pool().symbol_count();
        let name = loop {
            let name = format!("gl_d{n}");
            if env.symbol_id(&name).is_none() {
                break name;
            }
            n += 1;
        };
        let s = env
            .unbacked_value(&name, clamp(r.lo), clamp(r.hi), None)
            .expect("a fresh name");
        self.derived
            .push((env.pool().as_symbol(s).expect("a symbol"), e));
        self.names.insert(e, s);
        s
    }

    /// `e` with its loop-free parts replaced by derived parameters.
    pub fn hoist(&mut self, env: &mut ShapeEnv, e: Expr) -> Expr {
        let mut map = FxHashMap::default();
        self.collect(env, e, &mut map);
        if map.is_empty() {
            return e;
        }
        let r = env.pool_mut().replace(e, &map);
        env.simplify(r)
    }

    fn collect(&mut self, env: &mut ShapeEnv, e: Expr, map: &mut FxHashMap<Expr, Expr>) {
        if map.contains_key(&e) {
            return;
        }
        if matches!(
            env.pool().node(e),
            Node::Const(_) | Node::Bool(_) | Node::Sym(_)
        ) {
            return;
        }
        if !self.has_local(env, e) {
            let s = self.derive(env, e);
            map.insert(e, s);
            return;
        }
        // Only a sum's terms are needed by value; other nodes are walked through their children.
        let sum = match env.pool().node(e) {
            Node::Add { terms, constant } => Some((terms.to_vec(), *constant)),
            _ => None,
        };
        match sum {
            Some((terms, constant)) => {
                let (mut local, mut other) = (Vec::new(), Vec::new());
                for (t, c) in terms {
                    if self.has_local(env, t) {
                        let t = self.hoist(env, t);
                        local.push((t, c));
                    } else {
                        other.push((t, c));
                    }
                }
                // One loop-free term that is a plain symbol stays inline.
                let simple = other.len() == 1
                    && other[0].1 == 1
                    && env.pool().as_symbol(other[0].0).is_some()
                    && constant == 0;
                if !other.is_empty() && !simple {
                    let rest = env.pool_mut().linear_combination(&other, constant);
                    let s = self.derive(env, rest);
                    local.push((s, 1));
                    let whole = env.pool_mut().linear_combination(&local, 0);
                    map.insert(e, whole);
                } else {
                    local.extend(other);
                    let whole = env.pool_mut().linear_combination(&local, constant);
                    if whole != e {
                        map.insert(e, whole);
                    }
                }
            }
            None => {
                let mut children = Vec::new();
                env.pool().for_each_child(e, |c| children.push(c));
                for c in children {
                    self.collect(env, c, map);
                }
            }
        }
    }
}
