//! Parser for the textual form (see `print`). Also accepts the function spellings torch and
//! Inductor print: `FloorDiv`, `CeilDiv`, `Mod`/`PythonMod`, `ModularIndexing`, `CleanDiv`,
//! `Piecewise((a, c), (b, True))`, `Eq`/`Ne`/`Lt`/`Le`/`Gt`/`Ge`, `And`/`Or`/`Not`, and the
//! keywords `and`/`or`/`not`.

use thiserror::Error;

use super::expr::{CmpOp, Expr};
use super::pool::ExprPool;

/// A parse error with the byte offset where it was found.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("at byte {pos}: {message}")]
pub struct ParseError {
    pub pos: usize,
    pub message: String,
}

const MAX_DEPTH: usize = 200;
const MAX_EXPONENT: i64 = 64;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok<'a> {
    Int(u64),
    Ident(&'a str),
    Punct(&'static str),
    End,
}

impl Tok<'_> {
    fn describe(&self) -> String {
        match self {
            Tok::Int(v) => format!("integer {v}"),
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Punct(p) => format!("'{p}'"),
            Tok::End => "end of input".into(),
        }
    }
}

const PUNCT: [&str; 19] = [
    "**", "//", "<=", ">=", "==", "!=", "+", "-", "*", "%", "(", ")", ",", "<", ">", "&", "|", "~",
    "!",
];

fn lex(text: &str) -> Result<Vec<(Tok<'_>, usize)>, ParseError> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let v = text[start..i].parse::<u64>().map_err(|_| ParseError {
                pos: start,
                message: format!(
                    "integer literal {} does not fit in 64 bits",
                    &text[start..i]
                ),
            })?;
            out.push((Tok::Int(v), start));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Ident(&text[start..i]), start));
        } else if let Some(p) = PUNCT.iter().find(|p| text[i..].starts_with(**p)) {
            if *p == "!" {
                return Err(ParseError {
                    pos: i,
                    message: "expected '!=' (use '~' or 'not' for negation)".into(),
                });
            }
            out.push((Tok::Punct(p), i));
            i += p.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return Err(ParseError {
                pos: i,
                message: format!("unexpected character '{ch}'"),
            });
        }
    }
    out.push((Tok::End, text.len()));
    Ok(out)
}

/// The identifiers used as symbols in `text` (not function names or keywords), in order of first
/// appearance. Lets a caller declare symbols before parsing.
pub fn symbol_names(text: &str) -> Result<Vec<String>, ParseError> {
    let toks = lex(text)?;
    let mut names: Vec<String> = Vec::new();
    for (i, (t, _)) in toks.iter().enumerate() {
        if let Tok::Ident(s) = t {
            let is_call = matches!(toks.get(i + 1), Some((Tok::Punct("("), _)));
            if !is_call && !is_keyword(s) && !names.iter().any(|n| n == s) {
                names.push(s.to_string());
            }
        }
    }
    Ok(names)
}

fn is_keyword(s: &str) -> bool {
    matches!(
        s,
        "and" | "or" | "not" | "True" | "False" | "true" | "false"
    )
}

impl ExprPool {
    /// Parses `text`; symbols must already be declared in this pool.
    pub fn parse(&mut self, text: &str) -> Result<Expr, ParseError> {
        let toks = lex(text)?;
        let mut p = Parser {
            pool: self,
            toks,
            at: 0,
            depth: 0,
        };
        let e = p.or()?;
        match p.peek() {
            Tok::End => Ok(e),
            t => Err(p.error(format!(
                "expected an operator or end of input, found {}",
                t.describe()
            ))),
        }
    }
}

struct Parser<'p, 't> {
    pool: &'p mut ExprPool,
    toks: Vec<(Tok<'t>, usize)>,
    at: usize,
    depth: usize,
}

impl<'t> Parser<'_, 't> {
    fn peek(&self) -> Tok<'t> {
        self.toks[self.at].0
    }

    fn peek2(&self) -> Tok<'t> {
        self.toks.get(self.at + 1).map_or(Tok::End, |t| t.0)
    }

    fn pos(&self) -> usize {
        self.toks[self.at].1
    }

    fn error(&self, message: String) -> ParseError {
        ParseError {
            pos: self.pos(),
            message,
        }
    }

    fn bump(&mut self) -> Tok<'t> {
        let t = self.peek();
        if self.at + 1 < self.toks.len() {
            self.at += 1;
        }
        t
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Tok::Punct(q) if q == p) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn eat_keyword(&mut self, k: &str) -> bool {
        if matches!(self.peek(), Tok::Ident(s) if s == k) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), ParseError> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(self.error(format!("expected '{p}', found {}", self.peek().describe())))
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!("expression nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn int(&self, e: Expr, pos: usize) -> Result<Expr, ParseError> {
        if self.pool.info(e).is_bool {
            Err(ParseError {
                pos,
                message: "expected an integer expression, found a boolean".into(),
            })
        } else {
            Ok(e)
        }
    }

    fn boolean(&self, e: Expr, pos: usize) -> Result<Expr, ParseError> {
        if self.pool.info(e).is_bool {
            Ok(e)
        } else {
            Err(ParseError {
                pos,
                message: "expected a boolean expression, found an integer".into(),
            })
        }
    }

    fn or(&mut self) -> Result<Expr, ParseError> {
        self.enter()?;
        let pos = self.pos();
        let mut e = self.and()?;
        let mut args = vec![];
        while self.eat("|") || self.eat_keyword("or") {
            if args.is_empty() {
                args.push(self.boolean(e, pos)?);
            }
            let pos = self.pos();
            let rhs = self.and()?;
            args.push(self.boolean(rhs, pos)?);
        }
        if !args.is_empty() {
            e = self.pool.or(&args);
        }
        self.depth -= 1;
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr, ParseError> {
        let pos = self.pos();
        let mut e = self.not()?;
        let mut args = vec![];
        while self.eat("&") || self.eat_keyword("and") {
            if args.is_empty() {
                args.push(self.boolean(e, pos)?);
            }
            let pos = self.pos();
            let rhs = self.not()?;
            args.push(self.boolean(rhs, pos)?);
        }
        if !args.is_empty() {
            e = self.pool.and(&args);
        }
        Ok(e)
    }

    fn not(&mut self) -> Result<Expr, ParseError> {
        if self.eat("~") || self.eat_keyword("not") {
            self.enter()?;
            let pos = self.pos();
            let inner = self.not()?;
            let inner = self.boolean(inner, pos)?;
            self.depth -= 1;
            return Ok(self.pool.not(inner));
        }
        self.cmp()
    }

    fn cmp_op(&self) -> Option<CmpOp> {
        match self.peek() {
            Tok::Punct("==") => Some(CmpOp::Eq),
            Tok::Punct("!=") => Some(CmpOp::Ne),
            Tok::Punct("<") => Some(CmpOp::Lt),
            Tok::Punct("<=") => Some(CmpOp::Le),
            Tok::Punct(">") => Some(CmpOp::Gt),
            Tok::Punct(">=") => Some(CmpOp::Ge),
            _ => None,
        }
    }

    fn cmp(&mut self) -> Result<Expr, ParseError> {
        let pos = self.pos();
        let lhs = self.arith()?;
        let Some(op) = self.cmp_op() else {
            return Ok(lhs);
        };
        let lhs = self.int(lhs, pos)?;
        self.bump();
        let pos = self.pos();
        let rhs = self.arith()?;
        let rhs = self.int(rhs, pos)?;
        if self.cmp_op().is_some() {
            return Err(
                self.error("chained comparisons are not supported; join them with '&'".into())
            );
        }
        Ok(self.pool.compare(op, lhs, rhs))
    }

    fn arith(&mut self) -> Result<Expr, ParseError> {
        let pos = self.pos();
        let mut e = self.term()?;
        loop {
            let plus = if self.eat("+") {
                true
            } else if self.eat("-") {
                false
            } else {
                return Ok(e);
            };
            e = self.int(e, pos)?;
            let rpos = self.pos();
            let rhs = self.term()?;
            let rhs = self.int(rhs, rpos)?;
            e = if plus {
                self.pool.add(e, rhs)
            } else {
                self.pool.sub(e, rhs)
            };
        }
    }

    fn term(&mut self) -> Result<Expr, ParseError> {
        let pos = self.pos();
        let mut e = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Punct(p @ ("*" | "//" | "%")) => p,
                _ => return Ok(e),
            };
            self.bump();
            e = self.int(e, pos)?;
            let rpos = self.pos();
            let rhs = self.unary()?;
            let rhs = self.int(rhs, rpos)?;
            e = match op {
                "*" => self.pool.mul(e, rhs),
                "//" => self.pool.floordiv(e, rhs),
                _ => self.pool.modulo(e, rhs),
            };
        }
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        let pos = self.pos();
        if self.eat("-") {
            // `-5` is one literal (so that -9223372036854775808 is representable), unless `**` follows.
            if let (Tok::Int(v), next) = (self.peek(), self.peek2()) {
                if next != Tok::Punct("**") {
                    let lit_pos = self.pos();
                    self.bump();
                    let v = 0i64.checked_sub_unsigned(v).ok_or_else(|| ParseError {
                        pos: lit_pos,
                        message: format!("integer literal -{v} does not fit in 64 bits"),
                    })?;
                    return Ok(self.pool.constant(v));
                }
            }
            self.enter()?;
            let inner = self.unary()?;
            let inner = self.int(inner, pos + 1)?;
            self.depth -= 1;
            return Ok(self.pool.neg(inner));
        }
        if self.eat("+") {
            self.enter()?;
            let inner = self.unary()?;
            self.depth -= 1;
            return self.int(inner, pos + 1);
        }
        self.power()
    }

    fn power(&mut self) -> Result<Expr, ParseError> {
        let pos = self.pos();
        let base = self.atom()?;
        if !self.eat("**") {
            return Ok(base);
        }
        let base = self.int(base, pos)?;
        let epos = self.pos();
        let exp = self.unary()?;
        match self.pool.as_const(exp) {
            Some(n) if (0..=MAX_EXPONENT).contains(&n) => Ok(self.pool.pow(base, n as u32)),
            _ => Err(ParseError {
                pos: epos,
                message: format!("expected a constant exponent between 0 and {MAX_EXPONENT}"),
            }),
        }
    }

    fn atom(&mut self) -> Result<Expr, ParseError> {
        let pos = self.pos();
        match self.bump() {
            Tok::Int(v) => match i64::try_from(v) {
                Ok(v) => Ok(self.pool.constant(v)),
                Err(_) => Err(ParseError {
                    pos,
                    message: format!("integer literal {v} does not fit in 64 bits"),
                }),
            },
            Tok::Punct("(") => {
                let e = self.or()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Ident("True" | "true") => Ok(self.pool.bool(true)),
            Tok::Ident("False" | "false") => Ok(self.pool.bool(false)),
            Tok::Ident(name) if self.eat("(") => self.call(name, pos),
            Tok::Ident(name) if !is_keyword(name) => match self.pool.lookup(name) {
                Some(id) => Ok(self.pool.symbol_expr(id)),
                None => Err(ParseError {
                    pos,
                    message: format!("unknown symbol '{name}'"),
                }),
            },
            t => Err(ParseError {
                pos,
                message: format!("expected an expression, found {}", t.describe()),
            }),
        }
    }

    /// Arguments after the opening parenthesis, up to and including the closing one.
    fn args(&mut self) -> Result<Vec<(Expr, usize)>, ParseError> {
        self.enter()?;
        let mut args = Vec::new();
        if !self.eat(")") {
            loop {
                let pos = self.pos();
                args.push((self.or()?, pos));
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        self.depth -= 1;
        Ok(args)
    }

    fn call(&mut self, name: &str, pos: usize) -> Result<Expr, ParseError> {
        if name == "Piecewise" {
            return self.piecewise(pos);
        }
        let args = self.args()?;
        let arity = |n: usize| -> Result<(), ParseError> {
            if args.len() == n {
                Ok(())
            } else {
                Err(ParseError {
                    pos,
                    message: format!("{name} takes {n} arguments, found {}", args.len()),
                })
            }
        };
        let ints = |p: &Self| -> Result<Vec<Expr>, ParseError> {
            args.iter().map(|&(e, at)| p.int(e, at)).collect()
        };
        let bools = |p: &Self| -> Result<Vec<Expr>, ParseError> {
            args.iter().map(|&(e, at)| p.boolean(e, at)).collect()
        };
        let cmp = |op| (op, 2);
        let compare = match name {
            "Eq" => Some(cmp(CmpOp::Eq)),
            "Ne" => Some(cmp(CmpOp::Ne)),
            "Lt" | "StrictLessThan" => Some(cmp(CmpOp::Lt)),
            "Le" | "LessThan" => Some(cmp(CmpOp::Le)),
            "Gt" | "StrictGreaterThan" => Some(cmp(CmpOp::Gt)),
            "Ge" | "GreaterThan" => Some(cmp(CmpOp::Ge)),
            _ => None,
        };
        if let Some((op, n)) = compare {
            arity(n)?;
            let a = ints(self)?;
            return Ok(self.pool.compare(op, a[0], a[1]));
        }
        match name {
            "Min" | "Max" => {
                if args.is_empty() {
                    return Err(ParseError {
                        pos,
                        message: format!("{name} needs at least one argument"),
                    });
                }
                let a = ints(self)?;
                Ok(self.pool.min_max(name == "Min", &a))
            }
            "FloorDiv" | "CleanDiv" | "CeilDiv" | "Mod" | "PythonMod" => {
                arity(2)?;
                let a = ints(self)?;
                Ok(match name {
                    "CeilDiv" => self.pool.ceildiv(a[0], a[1]),
                    "Mod" | "PythonMod" => self.pool.modulo(a[0], a[1]),
                    _ => self.pool.floordiv(a[0], a[1]),
                })
            }
            "ModularIndexing" => {
                arity(3)?;
                let a = ints(self)?;
                let q = self.pool.floordiv(a[0], a[1]);
                Ok(self.pool.modulo(q, a[2]))
            }
            "Where" => {
                arity(3)?;
                let c = self.boolean(args[0].0, args[0].1)?;
                let (t, f) = (args[1].0, args[2].0);
                if self.pool.info(t).is_bool != self.pool.info(f).is_bool {
                    return Err(ParseError {
                        pos: args[2].1,
                        message: "Where branches differ in type".into(),
                    });
                }
                Ok(self.pool.where_(c, t, f))
            }
            "And" | "Or" => {
                let a = bools(self)?;
                Ok(if name == "And" {
                    self.pool.and(&a)
                } else {
                    self.pool.or(&a)
                })
            }
            "Not" => {
                arity(1)?;
                let a = bools(self)?;
                Ok(self.pool.not(a[0]))
            }
            _ => Err(ParseError {
                pos,
                message: format!("unknown function '{name}'"),
            }),
        }
    }

    /// `Piecewise((v1, c1), …, (vn, True))` → nested `Where`.
    fn piecewise(&mut self, pos: usize) -> Result<Expr, ParseError> {
        self.enter()?;
        let mut pieces = Vec::new();
        loop {
            self.expect("(")?;
            let vpos = self.pos();
            let v = self.or()?;
            self.expect(",")?;
            let cpos = self.pos();
            let c = self.or()?;
            let c = self.boolean(c, cpos)?;
            self.expect(")")?;
            pieces.push((v, vpos, c));
            if self.eat(")") {
                break;
            }
            self.expect(",")?;
        }
        self.depth -= 1;
        let (last, _, lc) = pieces.pop().expect("at least one piece");
        if self.pool.as_bool(lc) != Some(true) {
            return Err(ParseError {
                pos,
                message: "Piecewise must end with a (value, True) piece".into(),
            });
        }
        let ty = self.pool.info(last).is_bool;
        let mut e = last;
        for (v, vpos, c) in pieces.into_iter().rev() {
            if self.pool.info(v).is_bool != ty {
                return Err(ParseError {
                    pos: vpos,
                    message: "Piecewise values differ in type".into(),
                });
            }
            e = self.pool.where_(c, v, e);
        }
        Ok(e)
    }
}
