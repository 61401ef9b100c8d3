//! Matrix products as extern kernels (cuBLAS on the GPU): `mm`, `bmm`, and `addmm` with its
//! bias as the library's epilogue when it is one row, else as a pointwise epilogue.

use super::args::{msg, scalar_arg, scalar_value, tensor};
use super::pointwise::map;
use super::promote::{compute_dtype, result_type};
use super::{LTensor, Lowerer, NodeError};
use crate::graph::{GraphNode, Scalar};
use crate::loop_ir::{BinaryOp, BufferKind};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// `addmm`: `beta·bias + alpha·(mat1 @ mat2)`.
pub(super) fn addmm(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let bias = tensor(l, n, "self")?;
    let (a, b) = (tensor(l, n, "mat1")?, tensor(l, n, "mat2")?);
    let (beta, alpha) = (scalar_arg(n, "beta")?, scalar_arg(n, "alpha")?);
    if is_one(l, beta) && is_one(l, alpha) && bias_is_a_row(l, &bias, &a, &b) {
        // The library adds it before its one rounding (cuBLASLt's bias epilogue).
        return matmul(l, n, a, b, false, Some(bias), false);
    }
    let t = result_type(&[&bias, &a])?;
    // The product stays in the compute dtype (f32 for bf16/f16) so the result rounds
    // once, after the epilogue, as the library's own alpha/beta would.
    let prod = matmul(l, n, a, b, false, None, true)?;
    let cd = compute_dtype(t);
    // The bias as an epilogue: beta·bias + alpha·(mat1 @ mat2); beta = 0 ignores the bias.
    let beta_zero = matches!(beta, Scalar::Int(e) if l.env.pool().as_const(e) == Some(0))
        || matches!(beta, Scalar::Float(f) if f == 0.0);
    map(l, &[bias, prod], t, t, move |c, v| {
        let a = scalar_value(c, alpha, cd);
        let p = c.body.binary(BinaryOp::Mul, a, v[1]);
        if beta_zero {
            return p;
        }
        let bt = scalar_value(c, beta, cd);
        let q = c.body.binary(BinaryOp::Mul, bt, v[0]);
        c.body.binary(BinaryOp::Add, q, p)
    })
}

/// Whether `s` is the constant 1.
fn is_one(l: &Lowerer, s: Scalar) -> bool {
    match s {
        Scalar::Int(e) => l.env.pool().as_const(e) == Some(1),
        Scalar::Float(f) => f == 1.0,
        Scalar::Bool(_) => false,
    }
}

/// Whether `bias` is one row (`[n]` or `[1, n]`) of `a @ b`'s floating dtype, provably.
fn bias_is_a_row(l: &mut Lowerer, bias: &LTensor, a: &LTensor, b: &LTensor) -> bool {
    let (Some(&cols), true) = (b.sizes.last(), a.dtype.is_float()) else {
        return false;
    };
    if bias.dtype != a.dtype || b.dtype != a.dtype || a.sizes.len() != 2 || b.sizes.len() != 2 {
        return false;
    }
    let one = l.env.pool_mut().one();
    let mut proved = |x: Expr, y: Expr| {
        let c = l.env.pool_mut().eq(x, y);
        l.env.statically_known_true(c)
    };
    match bias.sizes[..] {
        [n] => proved(n, cols),
        [rows, n] => proved(rows, one) && proved(n, cols),
        _ => false,
    }
}

/// `mm`/`bmm` as an extern kernel over buffers (`addmm` with a `bias` row); the inner sizes must
/// agree (a runtime assert when they are symbolic). `widened`: the result in the operands'
/// compute dtype (f32 for bf16/f16) rather than theirs.
pub(super) fn matmul(
    l: &mut Lowerer,
    n: &GraphNode,
    a: LTensor,
    b: LTensor,
    batched: bool,
    bias: Option<LTensor>,
    widened: bool,
) -> R<LTensor> {
    let rank = if batched { 3 } else { 2 };
    if a.sizes.len() != rank || b.sizes.len() != rank {
        return msg(format!(
            "expects {rank}-dimensional operands, found {} and {}",
            a.sizes.len(),
            b.sizes.len()
        ));
    }
    if a.dtype != b.dtype {
        return msg(format!(
            "operands have different dtypes: {} and {}",
            a.dtype, b.dtype
        ));
    }
    let k = rank - 1;
    let eq = l.env.pool_mut().eq(a.sizes[k], b.sizes[k - 1]);
    l.require(eq, |env| {
        format!(
            "inner sizes {} and {} differ",
            env.text(a.sizes[k]),
            env.text(b.sizes[k - 1])
        )
    })?;
    let mut sizes = a.sizes[..k].to_vec();
    if batched {
        let eq = l.env.pool_mut().eq(a.sizes[0], b.sizes[0]);
        l.require(eq, |_| "batch sizes differ".into())?;
    }
    sizes.push(b.sizes[k]);
    let dtype = if widened {
        compute_dtype(a.dtype)
    } else {
        a.dtype
    };
    let (a, b) = (l.as_buffer(a, &n.name), l.as_buffer(b, &n.name));
    let mut inputs = vec![a, b];
    let kernel = match (batched, bias) {
        (true, _) => crate::loop_ir::ExternKernel::Bmm,
        (false, None) => crate::loop_ir::ExternKernel::Mm,
        (false, Some(bias)) => {
            inputs.push(l.as_buffer(bias, &n.name));
            crate::loop_ir::ExternKernel::AddMm
        }
    };
    Ok(l.add_buffer(
        BufferKind::Extern { kernel, inputs },
        dtype,
        &sizes,
        &n.name,
    ))
}
