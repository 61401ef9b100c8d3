//! Expression nodes. An [`Expr`] is a small `Copy` id into an [`ExprPool`](super::ExprPool); the pool
//! hash-conses nodes, so structurally equal canonical expressions have equal ids.

use std::fmt;

/// An interned integer or boolean expression.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Expr(pub(crate) u32);

impl Expr {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}

/// A declared symbol (a size or a scalar value).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct SymbolId(pub(crate) u32);

impl SymbolId {
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The id of the `i`-th declared symbol.
    pub fn from_index(i: usize) -> SymbolId {
        SymbolId(u32::try_from(i).expect("fewer than 2^32 symbols"))
    }
}

/// Whether the compiler may specialize on a symbol.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum SymbolKind {
    /// Has an example value (hint); decisions on it may be guarded.
    Backed,
    /// Data-dependent or declared dynamic: never guarded on.
    Unbacked,
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn negate(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Ne,
            CmpOp::Ne => CmpOp::Eq,
            CmpOp::Lt => CmpOp::Ge,
            CmpOp::Le => CmpOp::Gt,
            CmpOp::Gt => CmpOp::Le,
            CmpOp::Ge => CmpOp::Lt,
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    pub fn holds<T: Ord>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// The two operations whose constant folding can overflow `i64`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ArithOp {
    Add,
    Mul,
}

/// One node. Canonical-form invariants are kept by the constructors in `build`, `divmod`, `logic`:
/// - `Add`: at least one term; terms sorted by the pool's order, atoms distinct and neither constants
///   nor `Add`s; coefficients non-zero except for a term that may raise (it keeps coefficient 0 so
///   that a division by zero is not simplified away); never a lone term with coefficient 1 and
///   constant 0.
/// - `Mul`: at least two factors or one with exponent ≥ 2; sorted, distinct; no constants, sums or
///   `Mul`s among them.
/// - `Min`/`Max`/`And`/`Or`: at least two sorted distinct arguments, none of the same kind.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Node {
    Const(i64),
    Bool(bool),
    Sym(SymbolId),
    Add {
        terms: Box<[(Expr, i64)]>,
        constant: i64,
    },
    Mul(Box<[(Expr, u32)]>),
    FloorDiv(Expr, Expr),
    CeilDiv(Expr, Expr),
    /// Python (floor) modulo: the result has the sign of the divisor.
    Mod(Expr, Expr),
    Min(Box<[Expr]>),
    Max(Box<[Expr]>),
    /// `Where(cond, then, else)`: only the chosen branch is evaluated.
    Where(Expr, Expr, Expr),
    Cmp(CmpOp, Expr, Expr),
    And(Box<[Expr]>),
    Or(Box<[Expr]>),
    Not(Expr),
    /// A sum or product kept as written (operands sorted): folding it would overflow `i64`, or it
    /// is a product of two sums too large to expand.
    Unfolded(ArithOp, Expr, Expr),
}

/// Facts computed once when a node is interned.
#[derive(Copy, Clone, Debug, Default)]
pub struct NodeInfo {
    pub is_bool: bool,
    pub has_unbacked: bool,
    pub has_backed: bool,
    /// Contains a division or modulo whose divisor is not a non-zero constant, so evaluating it may
    /// raise. Such subexpressions are never dropped by a rewrite that cannot prove the divisor ≠ 0.
    pub may_raise: bool,
    pub depth: u32,
    /// Bit `id % 64` set for every symbol inside: a node whose mask misses a symbol's bit does
    /// not contain it, so substitutions skip it whole.
    pub symbols: u64,
}
