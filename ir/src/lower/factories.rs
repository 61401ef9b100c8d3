//! Tensors made from scalars: `full`, `full_like`, `scalar_tensor` and `arange`, as loaders (no
//! buffer unless a consumer needs one).

use std::rc::Rc;

use super::args::{ints, msg, scalar_arg, scalar_value, tensor};
use super::promote::compute_dtype;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode, Scalar};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

pub(super) fn full(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let (sizes, like) = match name {
        "full" => (nonnegative_sizes(l, ints(n, "size")?)?, None),
        "full_like" => {
            let x = tensor(l, n, "self")?;
            (x.sizes.clone(), Some(x.dtype))
        }
        _ => (Vec::new(), None),
    };
    let value = scalar_arg(
        n,
        if name == "scalar_tensor" {
            "s"
        } else {
            "fill_value"
        },
    )?;
    let dtype = match n.arg("dtype") {
        Some(Arg::DType(d)) => *d,
        _ => like.unwrap_or(match value {
            Scalar::Float(_) => DType::F32,
            Scalar::Int(_) => DType::I64,
            Scalar::Bool(_) => DType::Bool,
        }),
    };
    let cd = compute_dtype(dtype);
    let loader: Loader = Rc::new(move |c: &mut Ctx, _idx: &[Expr]| scalar_value(c, value, cd));
    Ok(LTensor::lazy(dtype, sizes, loader))
}

/// A size list a factory makes a tensor of: each size provably non-negative, or asserted so at
/// run time (ATen's message when one is a negative constant).
pub(super) fn nonnegative_sizes(l: &mut Lowerer, sizes: Vec<Expr>) -> R<Vec<Expr>> {
    for &s in &sizes {
        let zero = l.env.pool_mut().zero();
        let c = l.env.pool_mut().ge(s, zero);
        let text: Vec<String> = sizes.iter().map(|&e| l.env.text(e)).collect();
        l.require(c, |env| {
            format!(
                "Trying to create tensor with negative dimension {}: [{}]",
                env.text(s),
                text.join(", ")
            )
        })?;
    }
    Ok(sizes)
}

pub(super) fn arange(l: &mut Lowerer, n: &GraphNode, overload: &str) -> R<LTensor> {
    let get = |name: &str| scalar_arg(n, name);
    let (start, end, step) = match overload {
        "default" => (
            Scalar::Int(l.env.pool_mut().zero()),
            get("end")?,
            Scalar::Int(l.env.pool_mut().one()),
        ),
        "start" => (
            get("start")?,
            get("end")?,
            Scalar::Int(l.env.pool_mut().one()),
        ),
        _ => (get("start")?, get("end")?, get("step")?),
    };
    let (Scalar::Int(s), Scalar::Int(e), Scalar::Int(st)) = (start, end, step) else {
        return Err(NodeError::Unsupported);
    };
    let step_c = match l.env.pool().as_const(st) {
        Some(k) if k > 0 => k,
        _ => return msg("arange: the step must be a positive constant"),
    };
    // Length ceil((end - start) / step), never negative.
    let p = l.env.pool_mut();
    let diff = p.sub(e, s);
    let stepc = p.constant(step_c);
    let len = p.ceildiv(diff, stepc);
    let zero = p.zero();
    let len = p.max(zero, len);
    let len = l.env.simplify(len);
    let dtype = match n.arg("dtype") {
        Some(Arg::DType(d)) => *d,
        _ => DType::I64,
    };
    let cd = compute_dtype(dtype);
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let p = c.env.pool_mut();
        let scaled = p.scale(idx[0], step_c);
        let at = p.add(s, scaled);
        let v = c.body.index(at);
        c.body.cast(v, cd)
    });
    Ok(LTensor::lazy(dtype, vec![len], loader))
}
