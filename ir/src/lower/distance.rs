//! `_cdist_forward`: the p-norm distances between the rows of two batches of matrices, a
//! reduction over the feature dimension of `|a − b|` raised to `p` (a count of differences for
//! `p = 0`, a maximum for `p = ∞`), then the `1/p`-th power. Computed directly for every
//! `compute_mode` (ATen may take the Euclidean distance through a matmul; the results agree
//! within rounding).

use std::rc::Rc;

use super::args::{msg, tensor};
use super::pointwise::map;
use super::pool::float;
use super::promote::compute_dtype;
use super::views::{assert_equal, broadcast_sizes, expand};
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::GraphNode;
use crate::loop_ir::{BinaryOp, Constant, ReductionKind, UnaryOp};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

pub(super) fn cdist(l: &mut Lowerer, n: &GraphNode) -> R<LTensor> {
    let (x1, x2) = (tensor(l, n, "x1")?, tensor(l, n, "x2")?);
    let p = float(l, n, "p")?;
    if p.is_nan() || p < 0.0 {
        return msg(format!("p must be a non-negative number, found {p}"));
    }
    if !x1.dtype.is_float() || x1.dtype != x2.dtype {
        return msg(format!(
            "cdist takes two tensors of one float dtype, found {} and {}",
            x1.dtype, x2.dtype
        ));
    }
    let (r1, r2) = (x1.sizes.len(), x2.sizes.len());
    if r1 < 2 || r2 < 2 {
        return msg("cdist takes tensors of at least two dimensions");
    }
    let features = x1.sizes[r1 - 1];
    assert_equal(l, features, x2.sizes[r2 - 1], "the feature dimension")?;
    // Batch dimensions broadcast; each operand is read at [batch…, row, feature].
    let batch_sizes = broadcast_sizes(l, &[&x1.sizes[..r1 - 2], &x2.sizes[..r2 - 2]])?;
    let (rows1, rows2) = (x1.sizes[r1 - 2], x2.sizes[r2 - 2]);
    let with = |rows: Expr| {
        let mut s = batch_sizes.clone();
        s.extend([rows, features]);
        s
    };
    let (s1, s2) = (with(rows1), with(rows2));
    let (a, b) = (expand(l, x1, &s1)?, expand(l, x2, &s2)?);
    let dtype = a.dtype;
    let cd = compute_dtype(dtype);
    let k = batch_sizes.len();
    let (la, lb) = (a.loader.clone(), b.loader.clone());
    // [batch…, i, j, feature] ↦ the term of |a[…, i, :] − b[…, j, :]|.
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let mut ia = idx[..k].to_vec();
        ia.extend([idx[k], idx[k + 2]]);
        let mut ib = idx[..k].to_vec();
        ib.extend([idx[k + 1], idx[k + 2]]);
        let (va, vb) = (la(c, &ia), lb(c, &ib));
        let (va, vb) = (c.body.cast(va, cd), c.body.cast(vb, cd));
        let d = c.body.binary(BinaryOp::Sub, va, vb);
        let d = c.body.unary(UnaryOp::Abs, d);
        if p == 0.0 {
            let zero = c.body.constant(Constant::float(0.0), cd);
            let ne = c.body.binary(BinaryOp::Ne, d, zero);
            c.body.cast(ne, cd)
        } else if p == 1.0 || p.is_infinite() {
            d
        } else if p == 2.0 {
            c.body.binary(BinaryOp::Mul, d, d)
        } else {
            let e = c.body.constant(Constant::float(p), cd);
            c.body.binary(BinaryOp::Pow, d, e)
        }
    });
    let mut sizes = batch_sizes.clone();
    sizes.extend([rows1, rows2, features]);
    let terms = LTensor::lazy(cd, sizes, loader);
    let kind = if p.is_infinite() {
        ReductionKind::Max
    } else {
        ReductionKind::Sum
    };
    let total = l.reduction(&terms, &[k + 2], false, kind, cd, &n.name);
    map(l, &[total], cd, dtype, move |c, v| {
        if p.is_infinite() {
            // No features: 0, not the maximum's identity.
            let zero = c.body.constant(Constant::float(0.0), cd);
            c.body.binary(BinaryOp::Max, v[0], zero)
        } else if p == 0.0 || p == 1.0 {
            v[0]
        } else if p == 2.0 {
            c.body.unary(UnaryOp::Sqrt, v[0])
        } else {
            let e = c.body.constant(Constant::float(1.0 / p), cd);
            c.body.binary(BinaryOp::Pow, v[0], e)
        }
    })
}
