//! Floor division, ceiling division and Python modulo with a constant divisor, range-free.
//! Rules: `(c·q + r)//c → q + r//c`, common factors cancel, `(x//a)//b → x//(a·b)`,
//! `(x % a) % b → x % b` when `b | a`. Symbolic divisors are left to the range-aware simplifier,
//! which rewrites only when the divisor is provably non-zero.

use super::expr::{Expr, Node};
use super::pool::ExprPool;

#[derive(Copy, Clone, PartialEq, Eq)]
enum Rounding {
    Floor,
    Ceil,
}

/// The non-negative gcd; 1 (which divides everything) in the one case 2^63 does not fit.
pub(crate) fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    i64::try_from(a).unwrap_or(1)
}

/// Floor division; `None` for a zero divisor or `i64::MIN // -1`.
pub fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    Some(if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

/// Ceiling division; `None` for a zero divisor or `i64::MIN / -1`.
pub fn ceil_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    Some(if (a % b != 0) && ((a < 0) == (b < 0)) {
        q + 1
    } else {
        q
    })
}

/// Python's `a % b` (sign of the divisor); `None` for a zero divisor.
pub fn py_mod(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    if b == -1 {
        return Some(0);
    }
    let r = a % b;
    Some(if r != 0 && ((r < 0) != (b < 0)) {
        r + b
    } else {
        r
    })
}

impl ExprPool {
    /// `k·c·(x // c) + k·(x % c) → k·x` in a sum, for a constant `c ≠ 0` (floor division and
    /// Python's modulo: `x = c·(x // c) + x % c` for every `x`): what splitting an index into a
    /// head and a position within it and joining them again leaves (`64·(d // 64) + d % 64`).
    pub(crate) fn join_div_mod(&mut self, sum: Expr) -> Expr {
        let Node::Add { terms, .. } = self.node(sum) else {
            return sum;
        };
        let pair = terms.iter().find_map(|&(t, k)| {
            let Node::Mod(x, c) = *self.node(t) else {
                return None;
            };
            let cv = self.as_const(c).filter(|&cv| cv != 0)?;
            let quotient = terms.iter().find(|&&(q, kq)| {
                matches!(*self.node(q), Node::FloorDiv(qx, qc) if qx == x && qc == c)
                    && k.checked_mul(cv) == Some(kq)
            })?;
            Some((t, quotient.0, x, k))
        });
        let Some((m, q, x, k)) = pair else {
            return sum;
        };
        let (terms, constant) = self.linear_parts(sum);
        let rest: Vec<(Expr, i64)> = terms
            .into_iter()
            .filter(|&(t, _)| t != m && t != q)
            .collect();
        let rest = self.make_sum(rest, constant);
        let kx = self.scale(x, k);
        let joined = self.add(rest, kx);
        // Another pair may remain (each joined one leaves a sum with one pair fewer).
        self.join_div_mod(joined)
    }

    pub fn floordiv(&mut self, a: Expr, b: Expr) -> Expr {
        self.div_rounded(a, b, Rounding::Floor)
    }

    pub fn ceildiv(&mut self, a: Expr, b: Expr) -> Expr {
        self.div_rounded(a, b, Rounding::Ceil)
    }

    fn div_node(&mut self, a: Expr, b: Expr, r: Rounding) -> Expr {
        match r {
            Rounding::Floor => self.intern(Node::FloorDiv(a, b)),
            Rounding::Ceil => self.intern(Node::CeilDiv(a, b)),
        }
    }

    fn div_rounded(&mut self, a: Expr, b: Expr, r: Rounding) -> Expr {
        let c = match self.as_const(b) {
            Some(c) if c != 0 => c,
            _ => return self.div_node(a, b, r),
        };
        if let Some(x) = self.as_const(a) {
            let v = match r {
                Rounding::Floor => floor_div(x, c),
                Rounding::Ceil => ceil_div(x, c),
            };
            return match v {
                Some(v) => self.constant(v),
                None => self.div_node(a, b, r),
            };
        }
        if c == 1 {
            return a;
        }
        if c < 0 {
            // a // c == (-a) // (-c); only if negating does not overflow.
            let na = self.neg(a);
            if c == i64::MIN || matches!(self.node(na), Node::Unfolded(..)) {
                return self.div_node(a, b, r);
            }
            if c == -1 {
                return na;
            }
            let pc = self.constant(-c);
            return self.div_rounded(na, pc, r);
        }
        let (terms, k) = self.linear_parts(a);
        let mut quotient = Vec::new();
        let mut rest = Vec::new();
        for (t, m) in terms {
            if m % c == 0 {
                quotient.push((t, m / c));
            } else {
                rest.push((t, m));
            }
        }
        let (qk, rk) = (k.div_euclid(c), k.rem_euclid(c));
        let q = self.make_sum(quotient, qk);
        if rest.is_empty() {
            // 0 <= rk < c: floor adds 0, ceil adds 1 when rk > 0.
            return match r {
                Rounding::Ceil if rk > 0 => self.add(q, self.one()),
                _ => q,
            };
        }
        let g = rest.iter().fold(gcd(c, rk), |g, &(_, m)| gcd(g, m));
        let rest: Vec<_> = rest.into_iter().map(|(t, m)| (t, m / g)).collect();
        let (rk, c) = (rk / g, c / g);
        let nested = match rest.as_slice() {
            [(t, 1)] if rk == 0 => match (self.node(*t), r) {
                (Node::FloorDiv(x, d), Rounding::Floor) | (Node::CeilDiv(x, d), Rounding::Ceil) => {
                    match self.as_const(*d) {
                        Some(d) if d > 0 => d.checked_mul(c).map(|dc| (*x, dc)),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        };
        let inner = self.make_sum(rest, rk);
        let div = match nested {
            Some((x, dc)) => {
                let dc = self.constant(dc);
                self.div_rounded(x, dc, r)
            }
            None if c == 1 => inner,
            None => {
                let cc = self.constant(c);
                self.div_node(inner, cc, r)
            }
        };
        self.add(q, div)
    }

    /// Python modulo.
    pub fn modulo(&mut self, a: Expr, b: Expr) -> Expr {
        let c = match self.as_const(b) {
            Some(c) if c != 0 => c,
            _ => return self.intern(Node::Mod(a, b)),
        };
        if let Some(x) = self.as_const(a) {
            return self.constant(py_mod(x, c).expect("non-zero divisor"));
        }
        if c == 1 || c == -1 {
            return self.scale(a, 0);
        }
        if c < 0 {
            return self.intern(Node::Mod(a, b));
        }
        let (terms, k) = self.linear_parts(a);
        let mut rest = Vec::new();
        let mut kept_zero = Vec::new();
        for (t, m) in terms {
            if m % c != 0 {
                rest.push((t, m));
            } else if self.may_raise(t) {
                kept_zero.push((t, 0));
            }
        }
        let rk = k.rem_euclid(c);
        let kept = self.make_sum(kept_zero, 0);
        if rest.is_empty() {
            let rc = self.constant(rk);
            return self.add(rc, kept);
        }
        let g = rest.iter().fold(gcd(c, rk), |g, &(_, m)| gcd(g, m));
        let rest: Vec<_> = rest.into_iter().map(|(t, m)| (t, m / g)).collect();
        let (rk, cg) = (rk / g, c / g);
        let nested = match rest.as_slice() {
            [(t, 1)] if rk == 0 => match self.node(*t) {
                Node::Mod(x, d) => match self.as_const(*d) {
                    Some(d) if d > 0 && d % cg == 0 => Some(*x),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        };
        let inner = self.make_sum(rest, rk);
        let base = match nested {
            Some(x) => {
                let cc = self.constant(cg);
                self.modulo(x, cc)
            }
            None if cg == 1 => self.scale(inner, 0),
            None => {
                let cc = self.constant(cg);
                self.intern(Node::Mod(inner, cc))
            }
        };
        let scaled = self.scale(base, g);
        self.add(scaled, kept)
    }
}
