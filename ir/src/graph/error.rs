//! Errors reading a graph. Each names where: the JSON position, the symbol, the input, the node and
//! its op, the output or the assert.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum GraphError {
    #[error("malformed graph JSON at line {line}, column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("not a guardless graph: \"format\" is '{found}', expected 'guardless-graph'")]
    Format { found: String },
    #[error("unsupported graph format version {found} (this build reads version 1)")]
    Version { found: u64 },
    #[error("symbol '{name}': {message}")]
    Symbol { name: String, message: String },
    #[error("input '{input}': {message}")]
    Input { input: String, message: String },
    #[error("node '{node}' ({op}): {message}")]
    Node {
        node: String,
        op: String,
        message: String,
    },
    #[error("output {index}: {message}")]
    Output { index: usize, message: String },
    #[error("assert '{assert}': {message}")]
    Assert { assert: String, message: String },
    #[error("unknown op{}: {}", if .ops.len() > 1 { "s" } else { "" }, .ops.iter().map(|(n, o)| format!("{o} (node '{n}')")).collect::<Vec<_>>().join(", "))]
    UnknownOps { ops: Vec<(String, String)> },
    #[error("unbacked symbol '{name}' is declared but nothing binds it (no input dimension, no data-dependent node)")]
    Unbound { name: String },
    /// A name or other text with a control character (a newline, a NUL, …): refused, so that no
    /// name can end a comment in generated code or a line of a report. `text` is escaped.
    #[error("{at}: \"{text}\" has a control character ({code}) at character {offset}; names and other text must be printable")]
    ControlCharacter {
        at: String,
        text: String,
        code: String,
        offset: usize,
    },
}
