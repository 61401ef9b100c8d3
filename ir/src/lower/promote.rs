//! ATen's type promotion: dimensioned tensors decide, a zero-dimensional tensor only when its
//! category (bool < integer < float) is higher, a Python number only by category (then the default
//! dtype of that category: f32 or i64).

use super::LTensor;
use crate::graph::DType;

/// The dtype arithmetic happens in: f16 and bf16 compute in f32.
pub fn compute_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// The dtype of a float-valued function of `d`: integers and bools give f32.
pub(super) fn float_of(d: DType) -> DType {
    if d.is_float() {
        d
    } else {
        DType::F32
    }
}

fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::F64 | DType::F32 | DType::F16 | DType::BF16 => 2,
        _ => 1,
    }
}

/// `torch.promote_types`.
pub fn promote_types(a: DType, b: DType) -> Result<DType, String> {
    use DType::*;
    if a == b {
        return Ok(a);
    }
    let (ca, cb) = (category(a), category(b));
    if ca != cb {
        return Ok(if ca > cb { a } else { b });
    }
    Ok(match (a, b) {
        (F16, BF16) | (BF16, F16) => F32,
        (F64, _) | (_, F64) => F64,
        (F32, _) | (_, F32) => F32,
        (U8, I8) | (I8, U8) => {
            return Err("promoting u8 with i8 needs i16, which guardless does not support".into())
        }
        (I64, _) | (_, I64) => I64,
        (I32, _) | (_, I32) => I32,
        (x, _) => x,
    })
}

/// `torch.result_type` of the operands.
pub fn result_type(operands: &[&LTensor]) -> Result<DType, String> {
    let mut dim: Option<DType> = None;
    let mut zero: Option<DType> = None;
    let mut number: Option<DType> = None;
    for t in operands {
        let slot = if t.wrapped {
            &mut number
        } else if t.sizes.is_empty() {
            &mut zero
        } else {
            &mut dim
        };
        *slot = Some(match *slot {
            None => t.dtype,
            Some(d) => promote_types(d, t.dtype)?,
        });
    }
    let mut result = dim;
    if let Some(z) = zero {
        result = match result {
            Some(r) if category(z) <= category(r) => Some(r),
            _ => Some(z),
        };
    }
    if let Some(n) = number {
        let default = match category(n) {
            2 => DType::F32,
            1 => DType::I64,
            _ => DType::Bool,
        };
        result = match result {
            Some(r) if category(n) <= category(r) => Some(r),
            _ => Some(default),
        };
    }
    result.ok_or_else(|| "no operands".to_string())
}
