//! guardless IR. Today: the symbolic shape engine ([`sym`]), which every later stage asks its size
//! questions. The graph format, ATen lowering and the loop-level IR will live beside it.

pub mod sym;
