//! Printing expressions as C (and CUDA C) source. C's `/` and `%` truncate toward zero, so floor
//! division and Python modulo print as plain operators only when ranges prove the dividend ≥ 0 and
//! the divisor ≥ 1; otherwise through the helpers from [`CPrinter::helpers`].

use std::fmt::Write;

use super::env::ShapeEnv;
use super::expr::{ArithOp, Expr, Node};

/// How to print: the integer type, the qualifier and suffix of the helper functions, and the
/// prefix of symbols' variables.
#[derive(Clone, Debug)]
pub struct CPrinter {
    pub int_type: &'static str,
    pub suffix: &'static str,
    pub qualifier: &'static str,
    pub symbol_prefix: &'static str,
}

/// The prefix of symbols' variables in generated CUDA: a graph may name its sizes anything (`w`,
/// `int`, `threadIdx`, `k0`), and no other name in generated code starts with it.
pub const CUDA_SYMBOL_PREFIX: &str = "s_";

/// The CUDA variable that holds symbol `name`.
pub fn cuda_symbol(name: &str) -> String {
    format!("{CUDA_SYMBOL_PREFIX}{name}")
}

impl CPrinter {
    /// Host C with `int64_t` (needs `<stdint.h>`).
    pub fn c_i64() -> Self {
        CPrinter {
            int_type: "int64_t",
            suffix: "i64",
            qualifier: "static inline",
            symbol_prefix: "",
        }
    }

    /// CUDA device code with 64-bit or 32-bit indices.
    pub fn cuda(int_type: &'static str, suffix: &'static str) -> Self {
        CPrinter {
            int_type,
            suffix,
            qualifier: "__device__ __forceinline__",
            symbol_prefix: CUDA_SYMBOL_PREFIX,
        }
    }

    /// Definitions of the floor-division, ceiling-division, modulo, min and max helpers.
    pub fn helpers(&self) -> String {
        let (t, s, q) = (self.int_type, self.suffix, self.qualifier);
        format!(
            "{q} {t} gl_floordiv_{s}({t} a, {t} b) {{ {t} q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }}\n\
             {q} {t} gl_ceildiv_{s}({t} a, {t} b) {{ {t} q = a / b; return (a % b != 0 && ((a < 0) == (b < 0))) ? q + 1 : q; }}\n\
             {q} {t} gl_mod_{s}({t} a, {t} b) {{ {t} r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }}\n\
             {q} {t} gl_min_{s}({t} a, {t} b) {{ return a < b ? a : b; }}\n\
             {q} {t} gl_max_{s}({t} a, {t} b) {{ return a > b ? a : b; }}\n"
        )
    }
}

impl ShapeEnv {
    /// `e` as a C expression over variables named like the symbols.
    pub fn to_c(&mut self, e: Expr, p: &CPrinter) -> String {
        let mut out = String::new();
        self.write_c(e, p, &mut out);
        out
    }

    fn literal(v: i64, p: &CPrinter, out: &mut String) {
        if v == i64::MIN {
            let _ = write!(out, "(({})(-9223372036854775807LL - 1))", p.int_type);
        } else {
            let _ = write!(out, "(({}){v}LL)", p.int_type);
        }
    }

    fn plain_division(&mut self, a: Expr, b: Expr) -> bool {
        self.bound(a).lo >= 0 && self.bound(b).lo >= 1
    }

    fn write_c(&mut self, e: Expr, p: &CPrinter, out: &mut String) {
        let node = self.pool.node(e).clone();
        let s = p.suffix;
        let call = |this: &mut Self, name: &str, args: &[Expr], out: &mut String| {
            let _ = write!(out, "{name}_{s}(");
            for (i, &a) in args.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                this.write_c(a, p, out);
            }
            out.push(')');
        };
        match node {
            Node::Const(v) => Self::literal(v, p, out),
            Node::Bool(b) => out.push_str(if b { "1" } else { "0" }),
            Node::Sym(id) => {
                out.push_str(p.symbol_prefix);
                out.push_str(&self.pool.symbol(id).name)
            }
            Node::Add { terms, constant } => {
                // Zero-coefficient terms exist only to raise a division by zero; C cannot raise
                // (it would trap or be undefined), so they are left out.
                let live: Vec<(Expr, i64)> = terms.iter().copied().filter(|t| t.1 != 0).collect();
                if live.is_empty() {
                    return Self::literal(constant, p, out);
                }
                out.push('(');
                for (i, &(t, c)) in live.iter().enumerate() {
                    if i > 0 {
                        out.push_str(" + ");
                    }
                    if c != 1 {
                        Self::literal(c, p, out);
                        out.push('*');
                    }
                    self.write_c(t, p, out);
                }
                if constant != 0 {
                    out.push_str(" + ");
                    Self::literal(constant, p, out);
                }
                out.push(')');
            }
            Node::Mul(factors) => {
                out.push('(');
                let mut first = true;
                for &(f, n) in factors.iter() {
                    for _ in 0..n {
                        if !first {
                            out.push('*');
                        }
                        first = false;
                        self.write_c(f, p, out);
                    }
                }
                out.push(')');
            }
            Node::FloorDiv(a, b) | Node::Mod(a, b) => {
                let is_div = matches!(self.pool.node(e), Node::FloorDiv(..));
                if self.plain_division(a, b) {
                    out.push('(');
                    self.write_c(a, p, out);
                    out.push_str(if is_div { " / " } else { " % " });
                    self.write_c(b, p, out);
                    out.push(')');
                } else {
                    call(
                        self,
                        if is_div { "gl_floordiv" } else { "gl_mod" },
                        &[a, b],
                        out,
                    );
                }
            }
            Node::CeilDiv(a, b) => call(self, "gl_ceildiv", &[a, b], out),
            Node::Min(args) | Node::Max(args) => {
                let name = if matches!(self.pool.node(e), Node::Min(_)) {
                    "gl_min"
                } else {
                    "gl_max"
                };
                // Nested binary calls: Min(a, b, c) → gl_min(a, gl_min(b, c)).
                let (last, init) = args.split_last().expect("Min/Max have arguments");
                let mut tail = String::new();
                self.write_c(*last, p, &mut tail);
                for &a in init.iter().rev() {
                    let mut head = String::new();
                    let _ = write!(head, "{name}_{s}(");
                    self.write_c(a, p, &mut head);
                    let _ = write!(head, ", {tail})");
                    tail = head;
                }
                out.push_str(&tail);
            }
            Node::Where(c, a, b) => {
                out.push('(');
                self.write_c(c, p, out);
                out.push_str(" ? ");
                self.write_c(a, p, out);
                out.push_str(" : ");
                self.write_c(b, p, out);
                out.push(')');
            }
            Node::Cmp(op, a, b) => {
                out.push('(');
                self.write_c(a, p, out);
                let _ = write!(out, " {} ", op.symbol());
                self.write_c(b, p, out);
                out.push(')');
            }
            Node::And(args) | Node::Or(args) => {
                let sep = if matches!(self.pool.node(e), Node::And(_)) {
                    " && "
                } else {
                    " || "
                };
                out.push('(');
                for (i, &a) in args.iter().enumerate() {
                    if i > 0 {
                        out.push_str(sep);
                    }
                    self.write_c(a, p, out);
                }
                out.push(')');
            }
            Node::Not(a) => {
                out.push_str("(!");
                self.write_c(a, p, out);
                out.push(')');
            }
            Node::Unfolded(op, a, b) => {
                out.push('(');
                self.write_c(a, p, out);
                out.push_str(if op == ArithOp::Add { " + " } else { " * " });
                self.write_c(b, p, out);
                out.push(')');
            }
        }
    }
}
