//! The textual form: Python-like, as torch prints shape expressions (`4096*s0 + u1//2`, `s0**2`,
//! `Min(u0, 8)`). `parse(print(e)) == e` holds for every canonical expression.

use std::fmt::{self, Write};

use super::expr::{ArithOp, Expr, Node};
use super::pool::ExprPool;

// Precedence levels, loosest first.
const OR: u8 = 1;
const AND: u8 = 2;
const NOT: u8 = 3;
const CMP: u8 = 4;
const ADD: u8 = 5;
const MUL: u8 = 6;
const UNARY: u8 = 7;
const ATOM: u8 = 9;

/// An expression bound to its pool, printable with `{}`.
pub struct Display<'a> {
    pool: &'a ExprPool,
    expr: Expr,
}

impl fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Printer {
            pool: self.pool,
            out: f,
        }
        .expr(self.expr, 0)
    }
}

impl ExprPool {
    pub fn display(&self, expr: Expr) -> Display<'_> {
        Display { pool: self, expr }
    }

    pub fn to_text(&self, expr: Expr) -> String {
        self.display(expr).to_string()
    }
}

struct Printer<'a, W: Write> {
    pool: &'a ExprPool,
    out: W,
}

impl<W: Write> Printer<'_, W> {
    fn prec(&self, e: Expr) -> u8 {
        match self.pool.node(e) {
            Node::Const(c) if *c < 0 => UNARY,
            Node::Add { terms, constant } => match terms.as_ref() {
                [(_, c)] if *constant == 0 && *c >= 0 => MUL,
                _ => ADD,
            },
            Node::Mul(_) | Node::FloorDiv(..) | Node::Mod(..) => MUL,
            Node::Unfolded(ArithOp::Mul, ..) => MUL,
            Node::Unfolded(ArithOp::Add, ..) => ADD,
            Node::Cmp(..) => CMP,
            Node::Not(_) => NOT,
            Node::And(_) => AND,
            Node::Or(_) => OR,
            _ => ATOM,
        }
    }

    /// Prints `e`, in parentheses if it binds looser than `min`.
    fn expr(&mut self, e: Expr, min: u8) -> fmt::Result {
        let paren = self.prec(e) < min;
        if paren {
            self.out.write_char('(')?;
        }
        self.bare(e)?;
        if paren {
            self.out.write_char(')')?;
        }
        Ok(())
    }

    fn list(&mut self, name: &str, args: &[Expr]) -> fmt::Result {
        write!(self.out, "{name}(")?;
        for (i, &a) in args.iter().enumerate() {
            if i > 0 {
                self.out.write_str(", ")?;
            }
            self.expr(a, 0)?;
        }
        self.out.write_char(')')
    }

    fn bare(&mut self, e: Expr) -> fmt::Result {
        let pool = self.pool;
        match pool.node(e) {
            Node::Const(c) => write!(self.out, "{c}"),
            Node::Bool(b) => self.out.write_str(if *b { "True" } else { "False" }),
            Node::Sym(s) => self.out.write_str(&pool.symbol(*s).name),
            Node::Add { terms, constant } => {
                for (i, &(t, c)) in terms.iter().enumerate() {
                    if i == 0 {
                        if c < 0 && c != i64::MIN {
                            self.out.write_char('-')?;
                        }
                    } else if c < 0 && c != i64::MIN {
                        self.out.write_str(" - ")?;
                    } else {
                        self.out.write_str(" + ")?;
                    }
                    let shown = if c < 0 && c != i64::MIN { -c } else { c };
                    // After a leading unary minus, `-y//2` would read as `(-y)//2`.
                    let leading_minus = i == 0 && shown != c;
                    self.term(t, shown, if leading_minus { UNARY } else { MUL })?;
                }
                match *constant {
                    0 => Ok(()),
                    k if k < 0 && k != i64::MIN => write!(self.out, " - {}", -k),
                    k => write!(self.out, " + {k}"),
                }
            }
            Node::Mul(factors) => self.factors(factors),
            Node::FloorDiv(a, b) => self.binary(*a, "//", *b),
            Node::Mod(a, b) => self.binary(*a, " % ", *b),
            Node::CeilDiv(a, b) => self.list("CeilDiv", &[*a, *b]),
            Node::Min(args) => self.list("Min", args),
            Node::Max(args) => self.list("Max", args),
            Node::Where(c, a, b) => self.list("Where", &[*c, *a, *b]),
            Node::Cmp(op, a, b) => {
                self.expr(*a, ADD)?;
                write!(self.out, " {} ", op.symbol())?;
                self.expr(*b, ADD)
            }
            Node::Not(a) => {
                self.out.write_char('~')?;
                self.expr(*a, ATOM)
            }
            Node::And(args) => self.joined(args, " & "),
            Node::Or(args) => self.joined(args, " | "),
            Node::Unfolded(ArithOp::Add, a, b) => {
                self.expr(*a, MUL)?;
                self.out.write_str(" + ")?;
                self.expr(*b, MUL)
            }
            Node::Unfolded(ArithOp::Mul, a, b) => {
                self.expr(*a, UNARY)?;
                self.out.write_char('*')?;
                self.expr(*b, UNARY)
            }
        }
    }

    /// `a OP b` at multiplicative precedence, left-associative.
    fn binary(&mut self, a: Expr, op: &str, b: Expr) -> fmt::Result {
        self.expr(a, MUL)?;
        self.out.write_str(op)?;
        self.expr(b, UNARY)
    }

    fn joined(&mut self, args: &[Expr], sep: &str) -> fmt::Result {
        for (i, &a) in args.iter().enumerate() {
            if i > 0 {
                self.out.write_str(sep)?;
            }
            self.expr(a, ATOM)?;
        }
        Ok(())
    }

    /// One term of a sum: `coeff*atom`, with the coefficient left out when it is 1.
    fn term(&mut self, atom: Expr, coeff: i64, min: u8) -> fmt::Result {
        if coeff == 1 {
            return match self.pool.node(atom) {
                Node::Mul(factors) => self.factors(factors),
                _ => self.expr(atom, min),
            };
        }
        write!(self.out, "{coeff}*")?;
        match self.pool.node(atom) {
            Node::Mul(factors) => self.factors(factors),
            _ => self.expr(atom, UNARY),
        }
    }

    fn factors(&mut self, factors: &[(Expr, u32)]) -> fmt::Result {
        for (i, &(f, n)) in factors.iter().enumerate() {
            if i > 0 {
                self.out.write_char('*')?;
            }
            if n == 1 {
                self.expr(f, UNARY)?;
            } else {
                self.expr(f, ATOM)?;
                write!(self.out, "**{n}")?;
            }
        }
        Ok(())
    }
}
