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

    fn eval_exact(
        &self,
        e: Expr,
        value_of: &mut dyn FnMut(SymbolId) -> Option<i64>,
    ) -> Result<i128, EvalError> {
        let checked = |p: &Self, v: Option<i128>| -> Result<i128, EvalError> {
            v.filter(|v| v.checked_abs().is_some())
                .ok_or_else(|| EvalError::Overflow { expr: p.to_text(e) })
        };
        Ok(match self.node(e) {
            Node::Const(c) => *c as i128,
            Node::Bool(b) => i128::from(*b),
            Node::Sym(s) => value_of(*s).ok_or_else(|| EvalError::Unbound {
                symbol: self.symbol(*s).name.to_string(),
            })? as i128,
            Node::Add { terms, constant } => {
                let mut acc = *constant as i128;
                for &(t, c) in terms.iter() {
                    let v = self.eval_exact(t, value_of);
                    if c == 0 {
                        // Kept only for a division by zero it may raise; its size is irrelevant.
                        match v {
                            Err(EvalError::Overflow { .. }) | Ok(_) => continue,
                            Err(e) => return Err(e),
                        }
                    }
                    acc = checked(
                        self,
                        v?.checked_mul(c as i128).and_then(|x| acc.checked_add(x)),
                    )?;
                }
                acc
            }
            Node::Mul(factors) => {
                let mut acc: i128 = 1;
                for &(f, n) in factors.iter() {
                    let v = self.eval_exact(f, value_of)?;
                    for _ in 0..n {
                        acc = checked(self, acc.checked_mul(v))?;
                    }
                }
                acc
            }
            Node::FloorDiv(a, b) | Node::CeilDiv(a, b) | Node::Mod(a, b) => {
                let x = self.eval_exact(*a, value_of)?;
                let y = self.eval_exact(*b, value_of)?;
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
            Node::Min(args) | Node::Max(args) => {
                let is_min = matches!(self.node(e), Node::Min(_));
                let mut best: Option<i128> = None;
                for &a in args.iter() {
                    let v = self.eval_exact(a, value_of)?;
                    best = Some(match best {
                        None => v,
                        Some(b) if is_min => b.min(v),
                        Some(b) => b.max(v),
                    });
                }
                best.unwrap_or(0)
            }
            Node::Where(c, a, b) => {
                if self.eval_exact(*c, value_of)? != 0 {
                    self.eval_exact(*a, value_of)?
                } else {
                    self.eval_exact(*b, value_of)?
                }
            }
            Node::Cmp(op, a, b) => {
                let x = self.eval_exact(*a, value_of)?;
                let y = self.eval_exact(*b, value_of)?;
                let holds = match op {
                    super::expr::CmpOp::Eq => x == y,
                    super::expr::CmpOp::Ne => x != y,
                    super::expr::CmpOp::Lt => x < y,
                    super::expr::CmpOp::Le => x <= y,
                    super::expr::CmpOp::Gt => x > y,
                    super::expr::CmpOp::Ge => x >= y,
                };
                i128::from(holds)
            }
            Node::And(args) | Node::Or(args) => {
                let is_and = matches!(self.node(e), Node::And(_));
                let mut acc = is_and;
                // Every argument is evaluated, so an error anywhere is reported.
                for &a in args.iter() {
                    let v = self.eval_exact(a, value_of)? != 0;
                    acc = if is_and { acc && v } else { acc || v };
                }
                i128::from(acc)
            }
            Node::Not(a) => i128::from(self.eval_exact(*a, value_of)? == 0),
            Node::Unfolded(op, a, b) => {
                let x = self.eval_exact(*a, value_of)?;
                let y = self.eval_exact(*b, value_of)?;
                checked(
                    self,
                    match op {
                        ArithOp::Add => x.checked_add(y),
                        ArithOp::Mul => x.checked_mul(y),
                    },
                )?
            }
        })
    }
}
