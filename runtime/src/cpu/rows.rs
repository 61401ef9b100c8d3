//! f32 products of a few rows (2–32: a decode batch; any count for a bf16 weight, read as it is,
//! widened in registers) against a matrix whose columns are contiguous (a linear layer's weight, read transposed in place): register tiles of 2 rows × 4
//! columns, 8 lanes along the inner dimension, the weight streamed once and nothing packed.
//! `matrixmultiply` packs the whole weight first, which at these row counts costs more than the
//! product (256×688 at 8 rows: 45 µs here against its 85; at 32 rows 174 against 184), and
//! `gemm`'s matrix-vector path serves one row only. Measured in docs/benchmarks.md.

/// The most rows this path takes; blocked products win beyond.
pub const MAX_ROWS: usize = 32;

/// An element type of the weight, read 8 at a time and widened to f32 in registers.
pub trait Weight: Copy {
    /// Elements `t..t + 8` from `p`, as f32 (`avx2`: only called where AVX2 is enabled).
    unsafe fn lanes(p: *const Self, t: usize, avx2: bool) -> [f32; 8];
    /// Element `t`.
    unsafe fn one(p: *const Self, t: usize) -> f32;
}

impl Weight for f32 {
    #[inline(always)]
    unsafe fn lanes(p: *const f32, t: usize, _avx2: bool) -> [f32; 8] {
        std::ptr::read_unaligned(p.add(t) as *const [f32; 8])
    }
    #[inline(always)]
    unsafe fn one(p: *const f32, t: usize) -> f32 {
        *p.add(t)
    }
}

/// A bf16 element's bits: its f32 is the bits shifted up 16 (exact).
#[derive(Copy, Clone)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl Weight for Bf16 {
    #[inline(always)]
    unsafe fn lanes(p: *const Bf16, t: usize, avx2: bool) -> [f32; 8] {
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // One widening and one shift of 8 lanes (the portable loop below stays scalar).
            use std::arch::x86_64::*;
            let bits = _mm_loadu_si128(p.add(t) as *const __m128i);
            let w = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits));
            return std::mem::transmute::<__m256i, [f32; 8]>(w);
        }
        let bits = std::ptr::read_unaligned(p.add(t) as *const [u16; 8]);
        bits.map(|b| f32::from_bits((b as u32) << 16))
    }
    #[inline(always)]
    unsafe fn one(p: *const Bf16, t: usize) -> f32 {
        f32::from_bits(((*p.add(t)).0 as u32) << 16)
    }
}

/// `o[i·ors + j·ocs] = Σ_t a[i·ars + t] · b[j·bcs + t]` for a `R`×`C` tile.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<W: Weight, const R: usize, const C: usize>(
    a: *const f32,
    ars: isize,
    b: *const W,
    bcs: isize,
    k: usize,
    o: *mut f32,
    (ors, ocs): (isize, isize),
    fma: bool,
) {
    let mut acc = [[[0f32; 8]; C]; R];
    let mut t = 0usize;
    while t + 8 <= k {
        let mut bv = [[0f32; 8]; C];
        for (c, v) in bv.iter_mut().enumerate() {
            *v = W::lanes(b.offset(c as isize * bcs), t, fma);
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let av = std::ptr::read_unaligned(a.offset(r as isize * ars).add(t) as *const [f32; 8]);
            for (c, lanes) in row.iter_mut().enumerate() {
                for l in 0..8 {
                    lanes[l] = if fma {
                        av[l].mul_add(bv[c][l], lanes[l])
                    } else {
                        av[l] * bv[c][l] + lanes[l]
                    };
                }
            }
        }
        t += 8;
    }
    for (r, row) in acc.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            let mut s = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
            for u in t..k {
                s += *a.offset(r as isize * ars).add(u) * W::one(b.offset(c as isize * bcs), u);
            }
            let at = o.offset(r as isize * ors + c as isize * ocs);
            *at += s;
        }
    }
}

/// Adds `a @ b` to `o` (m rows, columns `[0, n)` of `b` and `o`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn product<W: Weight>(
    (m, n, k): (usize, usize, usize),
    a: *const f32,
    ars: isize,
    b: *const W,
    bcs: isize,
    o: *mut f32,
    os: (isize, isize),
    fma: bool,
) {
    let mut j = 0;
    while j < n {
        let cw = (n - j).min(4);
        let mut i = 0;
        while i < m {
            let rw = (m - i).min(2);
            let pa = a.offset(i as isize * ars);
            let pb = b.offset(j as isize * bcs);
            let po = o.offset(i as isize * os.0 + j as isize * os.1);
            match (rw, cw) {
                (2, 4) => tile::<W, 2, 4>(pa, ars, pb, bcs, k, po, os, fma),
                (1, 4) => tile::<W, 1, 4>(pa, ars, pb, bcs, k, po, os, fma),
                (2, _) => {
                    for c in 0..cw as isize {
                        let (pb, po) = (pb.offset(c * bcs), po.offset(c * os.1));
                        tile::<W, 2, 1>(pa, ars, pb, bcs, k, po, os, fma)
                    }
                }
                _ => {
                    for c in 0..cw as isize {
                        let (pb, po) = (pb.offset(c * bcs), po.offset(c * os.1));
                        tile::<W, 1, 1>(pa, ars, pb, bcs, k, po, os, fma)
                    }
                }
            }
            i += rw;
        }
        j += cw;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn product_avx2<W: Weight>(
    shape: (usize, usize, usize),
    a: *const f32,
    ars: isize,
    b: *const W,
    bcs: isize,
    o: *mut f32,
    os: (isize, isize),
) {
    // `fma` is true only here, where AVX2 and FMA are enabled (`lanes` relies on it).
    product(shape, a, ars, b, bcs, o, os, true)
}

/// Adds `a @ b` to `o`: `a` m×k (f32) with rows contiguous (`ars` between rows), `b` k×n (f32,
/// or bf16 widened as it is read) with columns contiguous (`bcs` between columns), `o` m×n (f32)
/// at strides `os`.
///
/// # Safety
/// Every element the views address lies inside its storage; `o` does not overlap `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn add_product<W: Weight>(
    shape: (usize, usize, usize),
    a: *const f32,
    ars: isize,
    b: *const W,
    bcs: isize,
    o: *mut f32,
    os: (isize, isize),
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        return product_avx2(shape, a, ars, b, bcs, o, os);
    }
    product(shape, a, ars, b, bcs, o, os, false)
}
