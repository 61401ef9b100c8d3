//! Comparing a backend's outputs with the reference's: per element, `|got - want| ≤ atol +
//! rtol·|want|` with `torch.testing.assert_close`'s tolerances for the output's dtype (exact for
//! integers and bools), NaN where the reference has NaN and the same infinities. Where that fails
//! for a float output only through rounding, `no_less_accurate` says whether the backend is as
//! close as the reference itself to the graph evaluated without rounding (see `docs/testing.md`).

use crate::graph::DType;
use crate::tensor::HostTensor;

/// `torch.testing.assert_close`'s default `(rtol, atol)` for a dtype.
pub fn tolerance(d: DType) -> (f64, f64) {
    match d {
        DType::F64 => (1e-7, 1e-7),
        DType::F32 => (1.3e-6, 1e-5),
        DType::F16 => (1e-3, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        _ => (0.0, 0.0),
    }
}

/// The worst element of a comparison: its flat index, the values, and what was allowed.
#[derive(Clone, Debug, PartialEq)]
pub struct Worst {
    pub index: usize,
    pub got: f64,
    pub want: f64,
    pub allowed: f64,
}

/// What comparing one output found.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub elements: usize,
    /// Elements beyond the tolerance (NaN or infinity mismatches included).
    pub failing: usize,
    /// The first element where NaN or an infinity is on one side only (or infinities differ).
    pub nonfinite_mismatch: Option<Worst>,
    /// The element furthest beyond its tolerance (by `|got - want| / allowed`).
    pub worst: Option<Worst>,
    pub max_difference: f64,
    /// The shapes differ (nothing else is compared).
    pub shape_mismatch: bool,
}

impl Comparison {
    pub fn passed(&self) -> bool {
        !self.shape_mismatch && self.failing == 0
    }
}

/// Compares `got` with `want` element by element.
pub fn compare(got: &HostTensor, want: &HostTensor, rtol: f64, atol: f64) -> Comparison {
    let mut c = Comparison {
        elements: want.numel(),
        failing: 0,
        nonfinite_mismatch: None,
        worst: None,
        max_difference: 0.0,
        shape_mismatch: got.shape != want.shape,
    };
    if c.shape_mismatch {
        return c;
    }
    let mut worst_ratio = 0.0f64;
    for i in 0..want.numel() {
        let (g, w) = (got.get_f64(i), want.get_f64(i));
        let allowed = atol + rtol * w.abs();
        let at = Worst {
            index: i,
            got: g,
            want: w,
            allowed,
        };
        if !g.is_finite() || !w.is_finite() {
            let same = (g.is_nan() && w.is_nan()) || g == w;
            if !same {
                c.failing += 1;
                c.nonfinite_mismatch.get_or_insert(at);
            }
            continue;
        }
        let d = (g - w).abs();
        c.max_difference = c.max_difference.max(d);
        if d > allowed {
            c.failing += 1;
            let ratio = if allowed > 0.0 {
                d / allowed
            } else {
                f64::INFINITY
            };
            if ratio > worst_ratio || c.worst.is_none() {
                worst_ratio = ratio;
                c.worst = Some(at);
            }
        }
    }
    c
}

/// How far two tensors are apart: the root mean square and the largest of the element
/// differences, over elements finite in both.
pub fn distance(a: &HostTensor, b: &HostTensor) -> (f64, f64) {
    let (mut sum, mut max, mut n) = (0.0, 0.0f64, 0usize);
    for i in 0..a.numel().min(b.numel()) {
        let (x, y) = (a.get_f64(i), b.get_f64(i));
        if x.is_finite() && y.is_finite() {
            sum += (x - y) * (x - y);
            max = max.max((x - y).abs());
            n += 1;
        }
    }
    ((sum / n.max(1) as f64).sqrt(), max)
}

/// Whether `got` is no less accurate than the reference `want`, both measured against `ideal`
/// (the graph evaluated without rounding): root-mean-square error at most twice the reference's,
/// and the largest element error at most four times the reference's largest, each plus `atol`.
/// The slack covers a different order of accumulation; a wrong element is an error of the size
/// of the values, far beyond either. Returns the verdict and the four errors (got rms, want rms,
/// got max, want max).
pub fn no_less_accurate(
    got: &HostTensor,
    want: &HostTensor,
    ideal: &HostTensor,
    atol: f64,
) -> (bool, [f64; 4]) {
    let (g_rms, g_max) = distance(got, ideal);
    let (w_rms, w_max) = distance(want, ideal);
    (
        g_rms <= 2.0 * w_rms + atol && g_max <= 4.0 * w_max + atol,
        [g_rms, w_rms, g_max, w_max],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(d: DType, v: &[f64]) -> HostTensor {
        HostTensor::from_f64(d, &[v.len()], v)
    }

    #[test]
    fn per_element_tolerances_and_nonfinite_positions() {
        let (r, a) = tolerance(DType::F32);
        assert!(compare(
            &t(DType::F32, &[1.0, 2.0]),
            &t(DType::F32, &[1.0, 2.0]),
            r,
            a
        )
        .passed());
        let c = compare(
            &t(DType::F32, &[1.0, 2.1]),
            &t(DType::F32, &[1.0, 2.0]),
            r,
            a,
        );
        assert_eq!((c.failing, c.worst.as_ref().unwrap().index), (1, 1));
        let c = compare(
            &t(DType::F32, &[f64::NAN, 1.0]),
            &t(DType::F32, &[1.0, 1.0]),
            r,
            a,
        );
        assert_eq!(c.nonfinite_mismatch.unwrap().index, 0);
        assert!(compare(
            &t(DType::F32, &[f64::NAN]),
            &t(DType::F32, &[f64::NAN]),
            r,
            a
        )
        .passed());
        let c = compare(
            &t(DType::F32, &[f64::INFINITY]),
            &t(DType::F32, &[f64::NEG_INFINITY]),
            r,
            a,
        );
        assert!(!c.passed());
        // bf16: 1.6 % of the value.
        let (r, a) = tolerance(DType::BF16);
        assert!(compare(&t(DType::BF16, &[1.0078125]), &t(DType::BF16, &[1.0]), r, a).passed());
        assert!(!compare(&t(DType::BF16, &[1.03125]), &t(DType::BF16, &[1.0]), r, a).passed());
        assert!(compare(&t(DType::F32, &[1.0]), &t(DType::F32, &[1.0, 2.0]), r, a).shape_mismatch);
    }
}
