//! guardless IR: the symbolic shape engine ([`sym`]), which every later stage asks its size
//! questions, and the graph format ([`graph`]) that brings models in. ATen lowering and the
//! loop-level IR will live beside them.

pub mod graph;
pub mod loop_ir;
pub mod lower;
pub mod memory;
pub mod reference;
pub mod sym;
pub mod tensor;
pub mod tensor_io;
