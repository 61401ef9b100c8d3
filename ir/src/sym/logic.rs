//! `Min`, `Max`, `Where`, comparisons and boolean connectives, range-free. Arguments that may raise
//! are never dropped by folding.

use super::expr::{CmpOp, Expr, Node};
use super::pool::ExprPool;

impl ExprPool {
    pub fn min(&mut self, a: Expr, b: Expr) -> Expr {
        self.min_max(true, &[a, b])
    }

    pub fn max(&mut self, a: Expr, b: Expr) -> Expr {
        self.min_max(false, &[a, b])
    }

    /// `Min(args…)` (`is_min`) or `Max(args…)`; `args` must not be empty.
    pub fn min_max(&mut self, is_min: bool, args: &[Expr]) -> Expr {
        let mut flat: Vec<Expr> = Vec::with_capacity(args.len());
        let mut best: Option<i64> = None;
        let fold = |v: i64, best: &mut Option<i64>| {
            *best = Some(match *best {
                None => v,
                Some(b) if is_min => b.min(v),
                Some(b) => b.max(v),
            })
        };
        for &a in args {
            match self.node(a) {
                Node::Min(xs) if is_min => flat.extend(xs.iter().copied()),
                Node::Max(xs) if !is_min => flat.extend(xs.iter().copied()),
                _ => flat.push(a),
            }
        }
        flat.retain(|&a| match self.as_const(a) {
            Some(v) => {
                fold(v, &mut best);
                false
            }
            None => true,
        });
        if let Some(v) = best {
            let c = self.constant(v);
            flat.push(c);
        }
        flat.sort_by(|x, y| self.cmp(*x, *y));
        flat.dedup();
        match flat.as_slice() {
            [] => self.zero(),
            [one] => *one,
            _ if is_min => self.intern(Node::Min(flat.into())),
            _ => self.intern(Node::Max(flat.into())),
        }
    }

    /// `Where(cond, then, else)`: evaluates only the chosen branch.
    pub fn where_(&mut self, cond: Expr, then: Expr, other: Expr) -> Expr {
        match self.as_bool(cond) {
            Some(true) => then,
            Some(false) => other,
            None if then == other && !self.may_raise(cond) => then,
            None => self.intern(Node::Where(cond, then, other)),
        }
    }

    pub fn compare(&mut self, op: CmpOp, a: Expr, b: Expr) -> Expr {
        if let (Some(x), Some(y)) = (self.as_const(a), self.as_const(b)) {
            return self.bool(op.holds(x, y));
        }
        if a == b && !self.may_raise(a) {
            return self.bool(op.holds(0, 0));
        }
        self.intern(Node::Cmp(op, a, b))
    }

    pub fn eq(&mut self, a: Expr, b: Expr) -> Expr {
        self.compare(CmpOp::Eq, a, b)
    }

    pub fn ne(&mut self, a: Expr, b: Expr) -> Expr {
        self.compare(CmpOp::Ne, a, b)
    }

    pub fn lt(&mut self, a: Expr, b: Expr) -> Expr {
        self.compare(CmpOp::Lt, a, b)
    }

    pub fn le(&mut self, a: Expr, b: Expr) -> Expr {
        self.compare(CmpOp::Le, a, b)
    }

    pub fn gt(&mut self, a: Expr, b: Expr) -> Expr {
        self.compare(CmpOp::Gt, a, b)
    }

    pub fn ge(&mut self, a: Expr, b: Expr) -> Expr {
        self.compare(CmpOp::Ge, a, b)
    }

    pub fn not(&mut self, a: Expr) -> Expr {
        match *self.node(a) {
            Node::Bool(b) => self.bool(!b),
            Node::Not(x) => x,
            Node::Cmp(op, x, y) => self.compare(op.negate(), x, y),
            _ => self.intern(Node::Not(a)),
        }
    }

    pub fn and(&mut self, args: &[Expr]) -> Expr {
        self.connective(true, args)
    }

    pub fn or(&mut self, args: &[Expr]) -> Expr {
        self.connective(false, args)
    }

    /// `And` (`is_and`) or `Or`. Both evaluate every argument.
    fn connective(&mut self, is_and: bool, args: &[Expr]) -> Expr {
        let mut flat: Vec<Expr> = Vec::with_capacity(args.len());
        for &a in args {
            match self.node(a) {
                Node::And(xs) if is_and => flat.extend(xs.iter().copied()),
                Node::Or(xs) if !is_and => flat.extend(xs.iter().copied()),
                _ => flat.push(a),
            }
        }
        // The neutral element disappears; the absorbing one decides unless something may raise.
        flat.retain(|&a| self.as_bool(a) != Some(is_and));
        let absorbing = self.bool(!is_and);
        if flat.contains(&absorbing) && flat.iter().all(|&a| !self.may_raise(a)) {
            return absorbing;
        }
        flat.sort_by(|x, y| self.cmp(*x, *y));
        flat.dedup();
        match flat.as_slice() {
            [] => self.bool(is_and),
            [one] => *one,
            _ if is_and => self.intern(Node::And(flat.into())),
            _ => self.intern(Node::Or(flat.into())),
        }
    }
}
