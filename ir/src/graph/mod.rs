//! The graph format (version 1, JSON; `docs/graph-format.md`): what comes in. A [`Graph`] holds the
//! symbols in a `ShapeEnv`, the inputs with symbolic shapes, the nodes with their arguments (tensor
//! references resolved), the outputs and the asserts. Lowering to the loop-level IR builds on it.

mod dtype;
mod error;
mod read;
pub mod schema;
mod value;

pub use dtype::DType;
pub use error::GraphError;
pub use schema::{Arg, Scalar, Schema};
pub use value::{Producer, TensorRef, Value};

use crate::sym::{Expr, ShapeEnv, SymbolId};

/// What an input is to the model.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum InputKind {
    User,
    Parameter,
    Buffer,
    Constant,
}

#[derive(Clone, Debug)]
pub struct Input {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<Expr>,
    /// Stated strides (checked at run time); `None`: contiguous.
    pub strides: Option<Vec<Expr>>,
    pub kind: InputKind,
}

#[derive(Clone, Debug)]
pub struct GraphNode {
    pub name: String,
    /// The ATen overload as torch.export prints it, e.g. `aten.add.Tensor`.
    pub op: String,
    pub schema: &'static Schema,
    /// Arguments bound to the schema: typed, in schema order, defaults filled in.
    pub args: Vec<Arg>,
    /// Stated output shape and dtype, checked against what lowering infers.
    pub shape: Option<Vec<Expr>>,
    pub dtype: Option<DType>,
    /// The unbacked symbol a `.item()` node produces.
    pub symbol: Option<SymbolId>,
}

#[derive(Copy, Clone, Debug)]
pub struct Output {
    pub tensor: TensorRef,
    /// Index of the input this output is written back into after the call (a KV-cache write).
    pub mutates: Option<usize>,
}

impl GraphNode {
    /// The bound argument named `name` (a schema parameter).
    pub fn arg(&self, name: &str) -> Option<&Arg> {
        self.schema
            .params
            .iter()
            .position(|p| p.name == name)
            .map(|i| &self.args[i])
    }
}

#[derive(Clone, Debug)]
pub struct Graph {
    pub name: String,
    pub env: ShapeEnv,
    pub inputs: Vec<Input>,
    pub nodes: Vec<GraphNode>,
    pub outputs: Vec<Output>,
    /// The `asserts` as written (they are also recorded in `env`).
    pub asserts: Vec<String>,
}

impl Graph {
    /// Copies each output that `mutates` an input into that input (what a call does after its
    /// kernels); returns how many were written. An output whose dtype or shape is not its
    /// input's is an error naming both.
    pub fn write_back(
        &self,
        inputs: &mut [crate::tensor::HostTensor],
        outputs: &[crate::tensor::HostTensor],
    ) -> Result<usize, String> {
        let mut n = 0;
        for (i, o) in self.outputs.iter().enumerate() {
            let Some(k) = o.mutates else { continue };
            let name = &self.inputs[k].name;
            let (src, dst) = match (outputs.get(i), inputs.get_mut(k)) {
                (Some(s), Some(d)) => (s, d),
                _ => {
                    return Err(format!(
                        "output {i} writes back into input '{name}': missing"
                    ))
                }
            };
            if src.dtype != dst.dtype || src.shape != dst.shape {
                return Err(format!(
                    "output {i} ({} {:?}) cannot be written back into input '{name}' ({} {:?})",
                    src.dtype, src.shape, dst.dtype, dst.shape
                ));
            }
            dst.data = src.data.clone();
            n += 1;
        }
        Ok(n)
    }
}
