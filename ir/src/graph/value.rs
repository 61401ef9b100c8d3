//! Argument values of graph nodes, as the format spells them. Whether a string is a symbolic integer
//! (`"s0*2"`) or plain text (`"tanh"`) depends on the op's schema, so strings stay text here.

use super::dtype::DType;
use crate::sym::Expr;

/// A reference to a tensor: an input, or output `index` of a node (`None`: its only output).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct TensorRef {
    pub producer: Producer,
    pub index: Option<usize>,
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Producer {
    Input(usize),
    Node(usize),
}

#[derive(Clone, PartialEq, Debug)]
pub enum Value {
    None,
    Bool(bool),
    /// A JSON integer (spelled without a fraction or exponent): exact 64-bit.
    Int(i64),
    /// A JSON number with a fraction or exponent, or `{"float": "inf" | "-inf" | "nan"}`.
    Float(f64),
    /// Text: a symbolic integer expression or plain text, as the schema expects.
    Str(String),
    /// `{"symbool": "u0 >= 0"}`, parsed.
    SymBool(Expr),
    Tensor(TensorRef),
    DType(DType),
    List(Vec<Value>),
}
