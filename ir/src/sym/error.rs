//! Errors of the symbolic engine. Each names the symbol, the expression or the assert involved.

use thiserror::Error;

use super::eval::EvalError;
use super::parse::ParseError;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SymError {
    #[error("cannot parse '{text}' {source}")]
    Parse { text: String, source: ParseError },
    #[error("symbol '{name}' is already declared")]
    DuplicateSymbol { name: String },
    #[error("'{name}' is not a valid symbol name (a letter or '_', then letters, digits or '_')")]
    InvalidSymbolName { name: String },
    #[error("unknown symbol '{name}'")]
    UnknownSymbol { name: String },
    #[error("symbol {name}: range {range} is empty")]
    EmptyRange { name: String, range: String },
    #[error("symbol {name}: hint {hint} is outside its range {range}")]
    HintOutOfRange {
        name: String,
        hint: i64,
        range: String,
    },
    #[error("expected a boolean condition, found the integer expression '{expr}'")]
    NotBoolean { expr: String },
    #[error("expected an integer expression, found the condition '{expr}'")]
    NotInteger { expr: String },
    #[error("assert '{assert}' is always false")]
    AssertAlwaysFalse { assert: String },
    #[error("assert '{assert}' contradicts what is already known: {detail}")]
    Contradiction { assert: String, detail: String },
    #[error("data-dependent expression '{expr}': unbacked symbol(s) {} have no guarding hint", .symbols.join(", "))]
    DataDependent { expr: String, symbols: Vec<String> },
    #[error("runtime assert '{assert}' failed")]
    AssertFailed { assert: String },
    /// A backed size's specialization does not hold for these values: compile again for them.
    #[error("guard '{guard}' does not hold: this compile specialized on the backed sizes' hints; compile again for these sizes")]
    GuardFailed { guard: String },
    #[error("symbol {name} = {value} is outside its range {range}")]
    ValueOutOfRange {
        name: String,
        value: i64,
        range: String,
    },
    #[error(transparent)]
    Eval(#[from] EvalError),
}
