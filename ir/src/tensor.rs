//! Host tensors: the values graphs are run on and compared with. Contiguous, row-major. Floats are
//! stored as f64 holding a value exactly representable in their dtype; integers and bools as i64.

use crate::graph::DType;

#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Data,
}

thread_local! {
    static UNROUNDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every float kept as an f64, whatever its dtype (`round_to` is the identity):
/// the graph evaluated without rounding, the yardstick of how far rounding alone moves a result.
pub fn unrounded<T>(f: impl FnOnce() -> T) -> T {
    let before = UNROUNDED.with(|u| u.replace(true));
    let out = f();
    UNROUNDED.with(|u| u.set(before));
    out
}

/// Rounds `v` to the nearest value of a float dtype (round-to-nearest-even, as the hardware does).
pub fn round_to(dtype: DType, v: f64) -> f64 {
    if UNROUNDED.with(|u| u.get()) {
        return v;
    }
    match dtype {
        DType::F64 => v,
        DType::F32 => v as f32 as f64,
        // Through f32 rounded to odd: exact for f32 values, and the one rounding to 16 bits is
        // then correct for every f64 (`half`'s own f64 conversions drop the low 32 bits first).
        DType::F16 => half::f16::from_f32(to_f32_odd(v)).to_f64(),
        DType::BF16 => half::bf16::from_f32(to_f32_odd(v)).to_f64(),
        _ => v,
    }
}

/// `v` as an f32 rounded to odd: toward zero, the last bit set when inexact. Rounding that to a
/// format at least two bits narrower rounds `v` itself correctly.
fn to_f32_odd(v: f64) -> f32 {
    let t = v as f32;
    if t.is_nan() || t as f64 == v {
        return t;
    }
    // Inexact: step back toward zero when rounding went away from it (∞ steps to the largest).
    let t = if (t as f64).abs() > v.abs() {
        f32::from_bits(t.to_bits() - 1)
    } else {
        t
    };
    f32::from_bits(t.to_bits() | 1)
}

/// Converts an integer to a (non-float) dtype as a C cast would: wrapping, bools to 0/1.
pub fn wrap_to(dtype: DType, v: i64) -> i64 {
    match dtype {
        DType::I32 => v as i32 as i64,
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        DType::Bool => i64::from(v != 0),
        _ => v,
    }
}

impl HostTensor {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn zeros(dtype: DType, shape: &[usize]) -> HostTensor {
        let n = shape.iter().product();
        let data = if dtype.is_float() {
            Data::Float(vec![0.0; n])
        } else {
            Data::Int(vec![0; n])
        };
        HostTensor {
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    /// Floats from `values`, rounded to `dtype`.
    pub fn from_f64(dtype: DType, shape: &[usize], values: &[f64]) -> HostTensor {
        assert!(dtype.is_float());
        assert_eq!(values.len(), shape.iter().product::<usize>());
        HostTensor {
            dtype,
            shape: shape.to_vec(),
            data: Data::Float(values.iter().map(|&v| round_to(dtype, v)).collect()),
        }
    }

    /// Integers (or bools) from `values`, converted to `dtype`.
    pub fn from_i64(dtype: DType, shape: &[usize], values: &[i64]) -> HostTensor {
        assert!(!dtype.is_float());
        assert_eq!(values.len(), shape.iter().product::<usize>());
        HostTensor {
            dtype,
            shape: shape.to_vec(),
            data: Data::Int(values.iter().map(|&v| wrap_to(dtype, v)).collect()),
        }
    }

    /// Element `i` as f64 (integers converted).
    pub fn get_f64(&self, i: usize) -> f64 {
        match &self.data {
            Data::Float(v) => v[i],
            Data::Int(v) => v[i] as f64,
        }
    }

    /// A deterministic pseudo-random tensor (xorshift), for tests and `--random`: floats in
    /// [-2, 2), integers in [lo, hi).
    pub fn random(dtype: DType, shape: &[usize], seed: u64, int_range: (i64, i64)) -> HostTensor {
        let n: usize = shape.iter().product();
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        if dtype.is_float() {
            let v: Vec<f64> = (0..n)
                .map(|_| (next() >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0)
                .collect();
            HostTensor::from_f64(dtype, shape, &v)
        } else {
            let (lo, hi) = if dtype == DType::Bool {
                (0, 2)
            } else {
                int_range
            };
            let span = (hi - lo).max(1) as u64;
            let v: Vec<i64> = (0..n).map(|_| lo + (next() % span) as i64).collect();
            HostTensor::from_i64(dtype, shape, &v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_bit_rounding_sees_every_bit_of_an_f64() {
        let tiny = 2f64.powi(-40);
        // Just above the tie between 1 and the next value: up, though the f64's top 32 bits
        // alone show a tie (which goes to even: 1).
        for (dtype, ulp) in [(DType::BF16, 2f64.powi(-7)), (DType::F16, 2f64.powi(-10))] {
            let tie = 1.0 + ulp / 2.0;
            assert_eq!(round_to(dtype, tie), 1.0, "{dtype:?}: a tie goes to even");
            assert_eq!(round_to(dtype, tie + tiny), 1.0 + ulp, "{dtype:?}");
            assert_eq!(round_to(dtype, -(tie + tiny)), -(1.0 + ulp), "{dtype:?}");
            assert_eq!(round_to(dtype, tie - tiny), 1.0, "{dtype:?}");
            assert_eq!(round_to(dtype, f64::MAX), f64::INFINITY, "{dtype:?}");
            assert!(round_to(dtype, f64::NAN).is_nan());
            assert_eq!(round_to(dtype, -0.0).to_bits(), (-0.0f64).to_bits());
            assert_eq!(round_to(dtype, 1e-300), 0.0, "{dtype:?}");
        }
        assert_eq!(round_to(DType::F32, 1.0 + tiny), 1.0);
    }
}
