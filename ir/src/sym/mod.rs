//! The symbolic shape engine.
//!
//! Expressions are hash-consed in an [`ExprPool`] and referred to by the `Copy` id [`Expr`]. Every
//! constructor returns a canonical form (sums of products ordered deterministically, constants
//! folded, like terms combined, divisions by constants reduced), so equal polynomials share one id.
//! A [`ShapeEnv`] owns the pool and the symbols: backed ones (with a hint) and unbacked ones (with a
//! range and maybe an optimization hint). It records deferred runtime asserts, learns from them, and
//! answers the guard-free queries the compiler asks — see `query`.

mod arith;
mod cprint;
mod divmod;
mod env;
mod error;
mod eval;
mod expr;
mod hint;
mod learn;
mod logic;
mod memo;
mod parse;
mod pool;
mod print;
mod query;
mod range;
mod simplify;

pub use cprint::{cuda_symbol, CPrinter, CUDA_SYMBOL_PREFIX};
pub use divmod::{ceil_div, floor_div, py_mod};
pub use env::{Guard, ShapeEnv, DEFAULT_FALLBACK_HINT};
pub use error::SymError;
pub use eval::EvalError;
pub use expr::{ArithOp, CmpOp, Expr, Node, NodeInfo, SymbolId, SymbolKind};
pub use parse::{symbol_names, ParseError};
pub use pool::{ExprPool, SymbolName};
pub use print::Display;
pub use query::Bindings;
pub use range::{ValueRange, INF};
