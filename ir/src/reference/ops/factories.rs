//! Tensors made from scalars.

use super::{build, fail, out, Node, Operand, E, R};
use crate::graph::{DType, Scalar};
use crate::tensor::HostTensor;

/// `full`, `full_like`, `scalar_tensor`.
pub(super) fn full(n: &Node, name: &str) -> R<Vec<HostTensor>> {
    let (shape, like): (Vec<usize>, Option<DType>) = match name {
        "full" => (sizes(&n.ints("size")?)?, None),
        "full_like" => {
            let x = n.tensor("self")?;
            (x.shape.clone(), Some(x.dtype))
        }
        _ => (Vec::new(), None),
    };
    let value = n.scalar(if name == "scalar_tensor" {
        "s"
    } else {
        "fill_value"
    })?;
    let d = n.dtype("dtype").or(like).unwrap_or(match value {
        Scalar::Float(_) => DType::F32,
        Scalar::Int(_) => DType::I64,
        Scalar::Bool(_) => DType::Bool,
    });
    let v = match n.number(value)? {
        Operand::Number(v, _) => v,
        Operand::Tensor(_) => unreachable!(),
    };
    let count = super::checked_numel(&shape)?;
    out(build(d, shape, vec![v; count]))
}

/// A size list a factory makes a tensor of: no negative size (ATen's message).
pub(super) fn sizes(sizes: &[i64]) -> R<Vec<usize>> {
    if let Some(&s) = sizes.iter().find(|&&s| s < 0) {
        return fail(format!(
            "Trying to create tensor with negative dimension {s}: {sizes:?}"
        ));
    }
    Ok(sizes.iter().map(|&s| s as usize).collect())
}

pub(super) fn arange(n: &Node, overload: &str) -> R<Vec<HostTensor>> {
    let num = |s: &str| -> R<i64> {
        match n.number(n.scalar(s)?)? {
            Operand::Number(E::I(v), _) => Ok(v),
            _ => Err(None),
        }
    };
    let (start, end, step) = match overload {
        "default" => (0, num("end")?, 1),
        "start" => (num("start")?, num("end")?, 1),
        _ => (num("start")?, num("end")?, num("step")?),
    };
    if step <= 0 {
        return fail("arange step must be positive");
    }
    let len = if end > start {
        ((end as i128 - start as i128 + step as i128 - 1) / step as i128) as i64
    } else {
        0
    };
    super::checked_numel(&[len as usize])?;
    let d = n.dtype("dtype").unwrap_or(DType::I64);
    out(build(
        d,
        vec![len as usize],
        (0..len).map(|i| E::I(start + i * step)).collect(),
    ))
}
