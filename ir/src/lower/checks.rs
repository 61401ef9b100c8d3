//! Nodes that produce no tensor: `item()` binding an unbacked symbol, and the asserts an export
//! carries (on symbols, and on a tensor's dtype and sizes).

use super::args::{msg, tensor};
use super::{Lowerer, NodeError};
use crate::graph::{Arg, GraphNode};

type R<T> = Result<T, NodeError>;

/// `_local_scalar_dense` (`.item()`): the one element of a tensor bound to the node's symbol.
pub(super) fn item(l: &mut Lowerer, n: &GraphNode) -> R<()> {
    let x = tensor(l, n, "self")?;
    let sym = n
        .symbol
        .ok_or_else(|| NodeError::Message("needs the \"symbol\" it produces".into()))?;
    let numel = x.sizes.iter().fold(l.env.pool_mut().one(), |acc, &s| {
        l.env.pool_mut().mul(acc, s)
    });
    let one = l.env.pool_mut().one();
    let c = l.env.pool_mut().eq(numel, one);
    l.require(c, |_| {
        "item() of a tensor with more than one element".into()
    })?;
    let x = l.realize(x, &n.name);
    l.add_item(x.buffer.expect("realized"), sym, &n.name);
    Ok(())
}

/// `_assert_scalar` on a symbolic condition: proved, or a runtime assert.
pub(super) fn assert_scalar(l: &mut Lowerer, n: &GraphNode) -> R<()> {
    if let Some(Arg::SymBool(c)) = n.arg("self") {
        l.env
            .check(*c)
            .map_err(|e| NodeError::Message(e.to_string()))?;
    }
    Ok(())
}

/// `_assert_tensor_metadata`: checked, not dropped.
pub(super) fn assert_tensor_metadata(l: &mut Lowerer, n: &GraphNode) -> R<()> {
    // Checked, not dropped: a dtype that differs is an error now, sizes are runtime asserts.
    let a = tensor(l, n, "a")?;
    if let Some(Arg::DType(d)) = n.arg("dtype") {
        if *d != a.dtype {
            return msg(format!("the tensor is {}, the metadata says {d}", a.dtype));
        }
    }
    if let Some(Arg::Ints(sizes)) = n.arg("size") {
        if sizes.len() != a.sizes.len() {
            return msg(format!(
                "the tensor has {} dimensions, the metadata {}",
                a.sizes.len(),
                sizes.len()
            ));
        }
        for (&want, &have) in sizes.iter().zip(&a.sizes) {
            let c = l.env.pool_mut().eq(want, have);
            if !l.env.statically_known_true(c) {
                l.env
                    .check(c)
                    .map_err(|e| NodeError::Message(e.to_string()))?;
            }
        }
    }
    Ok(())
}
