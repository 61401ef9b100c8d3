//! `searchsorted` and `bucketize`: for each value, its insertion point in a sorted sequence, by
//! ATen's binary search unrolled over as many halvings as the longest sequence in range needs
//! (the sequence's length may be unbacked). Each probe is a masked, bounds-checked load, so a
//! sequence of 0 elements reads nothing; ATen's predicate is kept as is (`!(s >= v)` to the
//! left, `!(s > v)` to the right), so a NaN in the sequence or the values lands where ATen puts
//! it.

use std::rc::Rc;

use super::args::{msg, tensor};
use super::promote::{compute_dtype, result_type};
use super::views::assert_equal;
use super::{Ctx, LTensor, Loader, Lowerer, NodeError};
use crate::graph::{Arg, DType, GraphNode};
use crate::loop_ir::{BinaryOp, Constant, UnaryOp};
use crate::sym::Expr;

type R<T> = Result<T, NodeError>;

/// `searchsorted.Tensor`/`.Scalar` and `bucketize.Tensor`.
pub(super) fn search_sorted(l: &mut Lowerer, n: &GraphNode, name: &str) -> R<LTensor> {
    let (seq, values) = if name == "bucketize" {
        (tensor(l, n, "boundaries")?, tensor(l, n, "self")?)
    } else {
        (tensor(l, n, "sorted_sequence")?, tensor(l, n, "self")?)
    };
    let right = matches!(n.arg("right"), Some(Arg::Bool(true)));
    let right = match n.arg("side") {
        None | Some(Arg::None) => right,
        Some(Arg::Str(s)) if s == "right" => true,
        Some(Arg::Str(s)) if s == "left" && !right => false,
        Some(Arg::Str(s)) if s == "left" => {
            return msg("side 'left' contradicts right=True");
        }
        other => return msg(format!("side must be 'left' or 'right', found {other:?}")),
    };
    let out = if matches!(n.arg("out_int32"), Some(Arg::Bool(true))) {
        DType::I32
    } else {
        DType::I64
    };
    if seq.sizes.is_empty() || (name == "bucketize" && seq.sizes.len() != 1) {
        return msg(format!(
            "the {} must have {} dimension, not {}",
            if name == "bucketize" {
                "boundaries"
            } else {
                "sorted sequence"
            },
            if name == "bucketize" {
                "exactly one"
            } else {
                "at least one"
            },
            seq.sizes.len()
        ));
    }
    // A 1-D sequence serves every value; otherwise each row of values has its own row of the
    // sequence (the same leading sizes).
    let lead = seq.sizes.len() - 1;
    if lead > 0 {
        if values.sizes.len() != seq.sizes.len() {
            return msg(format!(
                "a sequence of {} dimensions takes values of as many, not {}",
                seq.sizes.len(),
                values.sizes.len()
            ));
        }
        for k in 0..lead {
            assert_equal(l, seq.sizes[k], values.sizes[k], "the leading dimensions")?;
        }
    }
    let sorter = match n.arg("sorter") {
        None | Some(Arg::None) => None,
        Some(_) => {
            let s = tensor(l, n, "sorter")?;
            if s.dtype != DType::I64 || s.sizes.len() != seq.sizes.len() {
                return msg("sorter must be an i64 tensor of the sequence's shape");
            }
            for (k, (&a, &b)) in s.sizes.iter().zip(&seq.sizes).enumerate() {
                assert_equal(l, a, b, &format!("sorter dimension {k}"))?;
            }
            Some(s.loader.clone())
        }
    };
    let cd = compute_dtype(result_type(&[&seq, &values])?);
    let len = seq.sizes[lead];
    // Halvings until a range of `hi` elements is empty: ⌈log2(hi + 1)⌉.
    let hi = l.env.bound(len).hi.clamp(0, i64::MAX as i128) as u128;
    let steps = 128 - hi.leading_zeros();
    let (seq_ld, val_ld) = (seq.loader.clone(), values.loader.clone());
    let origin = l.origin();
    let loader: Loader = Rc::new(move |c: &mut Ctx, idx: &[Expr]| {
        let v = val_ld(c, idx);
        let v = c.body.cast(v, cd);
        let row: Vec<Expr> = idx[..lead].to_vec();
        let zero = c.body.constant(Constant::Int(0), DType::I64);
        let one = c.body.constant(Constant::Int(1), DType::I64);
        let two = c.body.constant(Constant::Int(2), DType::I64);
        let (mut lo, mut hi) = (zero, c.body.index(len));
        for _ in 0..steps {
            let active = c.body.binary(BinaryOp::Lt, lo, hi);
            let span = c.body.binary(BinaryOp::Sub, hi, lo);
            let half = c.body.binary(BinaryOp::FloorDiv, span, two);
            let mid = c.body.binary(BinaryOp::Add, lo, half);
            let outer = c.body.enter_mask(active);
            let mut at = c.bind_index(mid, len, &origin);
            if let Some(sorter) = &sorter {
                let p: Vec<Expr> = row.iter().copied().chain([at]).collect();
                let s = sorter(c, &p);
                at = c.bind_index(s, len, &origin);
            }
            let p: Vec<Expr> = row.iter().copied().chain([at]).collect();
            let s = seq_ld(c, &p);
            let s = c.body.cast(s, cd);
            c.body.exit_mask(outer);
            let stop = c
                .body
                .binary(if right { BinaryOp::Gt } else { BinaryOp::Ge }, s, v);
            let go = c.body.unary(UnaryOp::LogicalNot, stop);
            let go = c.body.binary(BinaryOp::LogicalAnd, go, active);
            let past = c.body.binary(BinaryOp::Add, mid, one);
            lo = c.body.where_(go, past, lo);
            let shrink = c.body.binary(BinaryOp::LogicalAnd, active, stop);
            hi = c.body.where_(shrink, mid, hi);
        }
        c.body.cast(lo, out)
    });
    Ok(LTensor::lazy(out, values.sizes.clone(), loader))
}
