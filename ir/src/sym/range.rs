//! Inclusive integer intervals with infinite ends, and sound interval arithmetic. Bounds are `i128`
//! with saturation at ±[`INF`], so arithmetic on bounds never overflows silently.

use std::fmt;

/// The infinite end of a range.
pub const INF: i128 = 1 << 120;

/// Magnitudes from here on are infinite: far beyond any `i64`, and far enough from `INF` that a
/// finite shift of an infinite end (`∞ - 5`) stays infinite.
const INFINITE_FROM: i128 = 1 << 119;

fn norm(v: i128) -> i128 {
    if v >= INFINITE_FROM {
        INF
    } else if v <= -INFINITE_FROM {
        -INF
    } else {
        v
    }
}

/// `lo ≤ value ≤ hi`; `lo == -INF` / `hi == INF` mean unbounded. Never empty.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct ValueRange {
    pub lo: i128,
    pub hi: i128,
}

impl ValueRange {
    pub const UNBOUNDED: ValueRange = ValueRange { lo: -INF, hi: INF };
    pub const NONNEGATIVE: ValueRange = ValueRange { lo: 0, hi: INF };
    pub const BOOL: ValueRange = ValueRange { lo: 0, hi: 1 };

    /// `[lo, hi]`, with ends clamped to ±INF. Panics never; an inverted pair is `None`.
    pub fn new(lo: i128, hi: i128) -> Option<ValueRange> {
        let (lo, hi) = (norm(lo), norm(hi));
        (lo <= hi).then_some(ValueRange { lo, hi })
    }

    pub fn point(v: i64) -> ValueRange {
        ValueRange {
            lo: v as i128,
            hi: v as i128,
        }
    }

    pub fn from_i64(lo: Option<i64>, hi: Option<i64>) -> Option<ValueRange> {
        Self::new(lo.map_or(-INF, i128::from), hi.map_or(INF, i128::from))
    }

    pub fn is_point(&self) -> Option<i64> {
        (self.lo == self.hi)
            .then(|| i64::try_from(self.lo).ok())
            .flatten()
    }

    pub fn contains(&self, v: i64) -> bool {
        self.lo <= v as i128 && v as i128 <= self.hi
    }

    pub fn intersect(&self, o: &ValueRange) -> Option<ValueRange> {
        Self::new(self.lo.max(o.lo), self.hi.min(o.hi))
    }

    pub fn union(&self, o: &ValueRange) -> ValueRange {
        ValueRange {
            lo: self.lo.min(o.lo),
            hi: self.hi.max(o.hi),
        }
    }

    pub fn lo_i64(&self) -> Option<i64> {
        (self.lo > -INF)
            .then(|| i64::try_from(self.lo).ok())
            .flatten()
    }

    pub fn hi_i64(&self) -> Option<i64> {
        (self.hi < INF)
            .then(|| i64::try_from(self.hi).ok())
            .flatten()
    }

    /// Clamps `v` into the range.
    pub fn clamp(&self, v: i64) -> i64 {
        let c = (v as i128).clamp(self.lo, self.hi);
        i64::try_from(c).unwrap_or(if c < 0 { i64::MIN } else { i64::MAX })
    }

    pub fn add(&self, o: &ValueRange) -> ValueRange {
        // An infinite end absorbs: `∞ + (-∞)` is unknown, not 0 (a huge lower bound saturated to
        // ∞, minus the same, must not bound a difference to a point).
        let lo = if self.lo <= -INF || o.lo <= -INF {
            -INF
        } else {
            norm(self.lo.saturating_add(o.lo))
        };
        let hi = if self.hi >= INF || o.hi >= INF {
            INF
        } else {
            norm(self.hi.saturating_add(o.hi))
        };
        ValueRange { lo, hi }
    }

    pub fn neg(&self) -> ValueRange {
        ValueRange {
            lo: -self.hi,
            hi: -self.lo,
        }
    }

    pub fn scale(&self, k: i64) -> ValueRange {
        let k = k as i128;
        let (a, b) = (
            norm(self.lo.saturating_mul(k)),
            norm(self.hi.saturating_mul(k)),
        );
        ValueRange {
            lo: a.min(b),
            hi: a.max(b),
        }
    }

    pub fn mul(&self, o: &ValueRange) -> ValueRange {
        let c = [
            self.lo.saturating_mul(o.lo),
            self.lo.saturating_mul(o.hi),
            self.hi.saturating_mul(o.lo),
            self.hi.saturating_mul(o.hi),
        ];
        ValueRange {
            lo: norm(*c.iter().min().unwrap()),
            hi: norm(*c.iter().max().unwrap()),
        }
    }

    pub fn pow(&self, n: u32) -> ValueRange {
        let mut acc = ValueRange::point(1);
        for _ in 0..n.min(130) {
            acc = acc.mul(self);
        }
        if n % 2 == 0 && n > 0 {
            acc.lo = acc.lo.max(0);
        }
        acc
    }

    pub fn min(&self, o: &ValueRange) -> ValueRange {
        ValueRange {
            lo: self.lo.min(o.lo),
            hi: self.hi.min(o.hi),
        }
    }

    pub fn max(&self, o: &ValueRange) -> ValueRange {
        ValueRange {
            lo: self.lo.max(o.lo),
            hi: self.hi.max(o.hi),
        }
    }

    /// `floor(a / b)` over the points where `b ≠ 0`; unbounded if `b` is always 0.
    pub fn floordiv(&self, b: &ValueRange) -> ValueRange {
        let mut out: Option<ValueRange> = None;
        if b.hi >= 1 {
            out = Some(floordiv_pos(self, b.lo.max(1), b.hi));
        }
        if b.lo <= -1 {
            // a // b == (-a) // (-b)
            let r = floordiv_pos(&self.neg(), -b.hi.min(-1), -b.lo);
            out = Some(out.map_or(r, |o| o.union(&r)));
        }
        out.unwrap_or(ValueRange::UNBOUNDED)
    }

    /// `ceil(a / b) == -floor(-a / b)`.
    pub fn ceildiv(&self, b: &ValueRange) -> ValueRange {
        self.neg().floordiv(b).neg()
    }

    /// Python `a % b` over the points where `b ≠ 0`.
    pub fn modulo(&self, b: &ValueRange) -> ValueRange {
        let mut out: Option<ValueRange> = None;
        if b.hi >= 1 {
            let (p, q) = (b.lo.max(1), b.hi);
            let mut r = ValueRange {
                lo: 0,
                hi: norm(q - 1),
            };
            if self.lo >= 0 {
                r.hi = r.hi.min(self.hi);
            }
            if p == q
                && q < INF
                && self.lo > -INF
                && self.hi < INF
                && self.lo.div_euclid(q) == self.hi.div_euclid(q)
            {
                r = ValueRange {
                    lo: self.lo.rem_euclid(q),
                    hi: self.hi.rem_euclid(q),
                };
            }
            out = Some(r);
        }
        if b.lo <= -1 {
            let r = ValueRange {
                lo: norm(b.lo + 1),
                hi: 0,
            };
            out = Some(out.map_or(r, |o| o.union(&r)));
        }
        out.unwrap_or(ValueRange::UNBOUNDED)
    }
}

/// `floor(a / b)` for `b ∈ [p, q]`, `1 ≤ p ≤ q` (q may be INF).
fn floordiv_pos(a: &ValueRange, p: i128, q: i128) -> ValueRange {
    let fdiv = |x: i128, y: i128| x.div_euclid(y); // y > 0: Euclid == floor
    let hi = if a.hi >= INF {
        INF
    } else if a.hi >= 0 {
        fdiv(a.hi, p)
    } else if q >= INF {
        -1
    } else {
        fdiv(a.hi, q)
    };
    let lo = if a.lo <= -INF {
        -INF
    } else if a.lo >= 0 {
        if q >= INF {
            0
        } else {
            fdiv(a.lo, q)
        }
    } else {
        fdiv(a.lo, p)
    };
    ValueRange { lo, hi }
}

impl fmt::Display for ValueRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = |v: i128| -> String {
            if v >= INF {
                "inf".into()
            } else if v <= -INF {
                "-inf".into()
            } else {
                v.to_string()
            }
        };
        write!(f, "[{}, {}]", end(self.lo), end(self.hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(lo: i128, hi: i128) -> ValueRange {
        ValueRange::new(lo, hi).unwrap()
    }

    #[test]
    fn infinite_ends_stay_infinite() {
        let x = ValueRange::NONNEGATIVE.add(&ValueRange::point(-5));
        assert_eq!(x, r(-5, INF));
        assert_eq!(x.to_string(), "[-5, inf]");
        assert_eq!(ValueRange::UNBOUNDED.scale(-3), ValueRange::UNBOUNDED);
        assert_eq!(ValueRange::NONNEGATIVE.mul(&r(-2, -1)), r(-INF, 0));
        assert_eq!(r(0, 0).mul(&ValueRange::UNBOUNDED), r(0, 0));
        assert_eq!(
            r(i64::MIN as i128, i64::MAX as i128).pow(3),
            ValueRange::UNBOUNDED
        );
    }

    #[test]
    fn division_skips_the_zero_divisor() {
        assert_eq!(r(10, 20).floordiv(&r(0, 5)), r(2, 20));
        assert_eq!(r(10, 20).floordiv(&r(-5, 0)), r(-20, -2));
        assert_eq!(r(-7, 7).floordiv(&r(2, 2)), r(-4, 3));
        assert_eq!(r(1, 5).floordiv(&r(1, INF)), r(0, 5));
        assert_eq!(r(-5, -1).floordiv(&r(1, INF)), r(-5, -1));
        assert_eq!(r(3, 9).ceildiv(&r(2, 2)), r(2, 5));
        assert_eq!(r(0, 0).floordiv(&r(0, 0)), ValueRange::UNBOUNDED);
    }

    #[test]
    fn python_modulo_has_the_divisor_sign() {
        assert_eq!(r(-100, 100).modulo(&r(8, 8)), r(0, 7));
        assert_eq!(r(0, 5).modulo(&r(8, 8)), r(0, 5));
        assert_eq!(r(17, 19).modulo(&r(8, 8)), r(1, 3));
        assert_eq!(r(-100, 100).modulo(&r(-8, -8)), r(-7, 0));
        assert_eq!(r(-100, 100).modulo(&r(-8, 8)), r(-7, 7));
    }

    #[test]
    fn clamp_and_conversions() {
        assert_eq!(ValueRange::NONNEGATIVE.clamp(-3), 0);
        assert_eq!(ValueRange::UNBOUNDED.clamp(i64::MIN), i64::MIN);
        assert_eq!(ValueRange::NONNEGATIVE.hi_i64(), None);
        assert_eq!(r(3, 3).is_point(), Some(3));
        assert!(ValueRange::new(5, 4).is_none());
    }
}
