//! Exact evaluation: overflow and division by zero are errors, never wrapped values or panics.
//! Intermediate values are exact up to ±2^127 (Python's integers are unbounded) so that a canonical
//! form — an expanded polynomial, say — evaluates wherever the original did; the result must fit
//! `i64`. Booleans evaluate to 0 or 1.

use thiserror::Error;

use super::expr::{ArithOp, Expr, Node, SymbolId};
use super::pool::ExprPool;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EvalError {
    #[error("division by zero in {expr}")]
    DivisionByZero { expr: String },
    #[error("integer overflow in {expr}")]
    Overflow { expr: String },
    #[error("no value for symbol {symbol}")]
    Unbound { symbol: String },
}

fn floor_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

fn py_mod(a: i128, b: i128) -> i128 {
    let r = a % b;
    if r != 0 && ((r < 0) != (b < 0)) {
        r + b
    } else {
        r
    }
}

impl ExprPool {
    /// Evaluates `e` with values from `value_of` (`None`: the symbol is unbound, an error).
    pub fn evaluate_with(
        &self,
        e: Expr,
        value_of: &mut dyn FnMut(SymbolId) -> Option<i64>,
    ) -> Result<i64, EvalError> {
        let v = self.eval_exact(e, value_of)?;
        i64::try_from(v).map_err(|_| EvalError::Overflow {
            expr: self.to_text(e),
        })
    }

    /// Evaluates all operands; an overflow is reported only if no operand divides by zero.
    fn operands(
        &self,
        xs: impl Iterator<Item = Expr>,
        value_of: &mut dyn FnMut(SymbolId) -> Option<i64>,
    ) -> Result<Vec<i128>, EvalError> {
        let mut out = Vec::new();
        let mut overflowed: Option<EvalError> = None;
        for x in xs {
            match self.eval_exact(x, value_of) {
                Ok(v) => out.push(v),
                Err(err @ EvalError::Overflow { .. }) => {
                    overflowed.get_or_insert(err);
                }
                Err(err) => return Err(err),
            }
        }
        match overflowed {
            Some(err) => Err(err),
            None => Ok(out),
        }
    }

    /// Exact value of `e`. A division by zero anywhere among the operands evaluated wins over an
    /// overflow seen first, so that "raises" never depends on evaluation order.
    fn eval_exact(
        &self,
        e: Expr,
        value_of: &mut dyn FnMut(SymbolId) -> Option<i64>,
    ) -> Result<i128, EvalError> {
        let overflow = |p: &Self| EvalError::Overflow { expr: p.to_text(e) };
        let checked = |p: &Self, v: Option<i128>| {
            v.filter(|v| v.checked_abs().is_some())
                .ok_or_else(|| overflow(p))
        };
        Ok(match self.node(e) {
            Node::Const(c) => *c as i128,
            Node::Bool(b) => i128::from(*b),
            Node::Sym(s) => value_of(*s).ok_or_else(|| EvalError::Unbound {
                symbol: self.symbol(*s).name.to_string(),
            })? as i128,
            Node::Add { terms, constant } => {
                // A zero-coefficient term is kept only for a division by zero it may raise; its
                // size is irrelevant, so only that error counts.
                for &(t, _) in terms.iter().filter(|t| t.1 == 0) {
                    match self.eval_exact(t, value_of) {
                        Ok(_) | Err(EvalError::Overflow { .. }) => {}
                        Err(err) => return Err(err),
                    }
                }
                let live: Vec<(Expr, i64)> = terms.iter().copied().filter(|t| t.1 != 0).collect();
                let vals = self.operands(live.iter().map(|t| t.0), value_of)?;
                let mut acc = *constant as i128;
                for (&(_, c), v) in live.iter().zip(vals) {
                    acc = checked(
                        self,
                        v.checked_mul(c as i128).and_then(|x| acc.checked_add(x)),
                    )?;
                }
                acc
            }
            Node::Mul(factors) => {
                let vals = self.operands(factors.iter().map(|f| f.0), value_of)?;
                // A zero factor makes the product 0 however large the others are (Python's
                // integers do not overflow on the way there).
                if vals.contains(&0) {
                    return Ok(0);
                }
                let mut acc: i128 = 1;
                for (&(_, n), v) in factors.iter().zip(vals) {
                    for _ in 0..n {
                        acc = checked(self, acc.checked_mul(v))?;
                    }
                }
                acc
            }
            Node::FloorDiv(a, b) | Node::CeilDiv(a, b) | Node::Mod(a, b) => {
                let v = self.operands([*a, *b].into_iter(), value_of)?;
                let (x, y) = (v[0], v[1]);
                if y == 0 {
                    return Err(EvalError::DivisionByZero {
                        expr: self.to_text(e),
                    });
                }
                match self.node(e) {
                    Node::FloorDiv(..) => floor_div(x, y),
                    Node::CeilDiv(..) => -floor_div(-x, y),
                    _ => py_mod(x, y),
                }
            }
            Node::Min(args) => self
                .operands(args.iter().copied(), value_of)?
                .into_iter()
                .min()
                .unwrap_or(0),
            Node::Max(args) => self
                .operands(args.iter().copied(), value_of)?
                .into_iter()
                .max()
                .unwrap_or(0),
            Node::Where(c, a, b) => {
                if self.eval_exact(*c, value_of)? != 0 {
                    self.eval_exact(*a, value_of)?
                } else {
                    self.eval_exact(*b, value_of)?
                }
            }
            Node::Cmp(op, a, b) => {
                let v = self.operands([*a, *b].into_iter(), value_of)?;
                let (x, y) = (v[0], v[1]);
                i128::from(op.holds(x, y))
            }
            Node::And(args) => i128::from(
                self.operands(args.iter().copied(), value_of)?
                    .iter()
                    .all(|&v| v != 0),
            ),
            Node::Or(args) => i128::from(
                self.operands(args.iter().copied(), value_of)?
                    .iter()
                    .any(|&v| v != 0),
            ),
            Node::Not(a) => i128::from(self.eval_exact(*a, value_of)? == 0),
            Node::Unfolded(op, a, b) => {
                let v = self.operands([*a, *b].into_iter(), value_of)?;
                if *op == ArithOp::Mul && v.contains(&0) {
                    return Ok(0);
                }
                checked(
                    self,
                    match op {
                        ArithOp::Add => v[0].checked_add(v[1]),
                        ArithOp::Mul => v[0].checked_mul(v[1]),
                    },
                )?
            }
        })
    }
}
