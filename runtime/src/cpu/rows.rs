//! f32 products of a few rows (2–32: a decode batch) against a matrix whose columns are
//! contiguous (a linear layer's weight, read transposed in place): register tiles of 2 rows × 4
//! columns, 8 lanes along the inner dimension, the weight streamed once and nothing packed.
//! `matrixmultiply` packs the whole weight first, which at these row counts costs more than the
//! product (256×688 at 8 rows: 45 µs here against its 85; at 32 rows 174 against 184), and
//! `gemm`'s matrix-vector path serves one row only. Measured in docs/benchmarks.md.

/// The most rows this path takes; blocked products win beyond.
pub const MAX_ROWS: usize = 32;

/// `o[i·ors + j·ocs] = Σ_t a[i·ars + t] · b[j·bcs + t]` for a `R`×`C` tile.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const R: usize, const C: usize>(
    a: *const f32,
    ars: isize,
    b: *const f32,
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
            *v = std::ptr::read_unaligned(b.offset(c as isize * bcs).add(t) as *const [f32; 8]);
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
                s += *a.offset(r as isize * ars).add(u) * *b.offset(c as isize * bcs).add(u);
            }
            let at = o.offset(r as isize * ors + c as isize * ocs);
            *at += s;
        }
    }
}

/// Adds `a @ b` to `o` (m rows, columns `[0, n)` of `b` and `o`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn product(
    (m, n, k): (usize, usize, usize),
    a: *const f32,
    ars: isize,
    b: *const f32,
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
                (2, 4) => tile::<2, 4>(pa, ars, pb, bcs, k, po, os, fma),
                (1, 4) => tile::<1, 4>(pa, ars, pb, bcs, k, po, os, fma),
                (2, _) => {
                    for c in 0..cw as isize {
                        let (pb, po) = (pb.offset(c * bcs), po.offset(c * os.1));
                        tile::<2, 1>(pa, ars, pb, bcs, k, po, os, fma)
                    }
                }
                _ => {
                    for c in 0..cw as isize {
                        let (pb, po) = (pb.offset(c * bcs), po.offset(c * os.1));
                        tile::<1, 1>(pa, ars, pb, bcs, k, po, os, fma)
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
unsafe fn product_avx2(
    shape: (usize, usize, usize),
    a: *const f32,
    ars: isize,
    b: *const f32,
    bcs: isize,
    o: *mut f32,
    os: (isize, isize),
) {
    product(shape, a, ars, b, bcs, o, os, true)
}

/// Adds `a @ b` to `o`: `a` m×k with rows contiguous (`ars` between rows), `b` k×n with
/// columns contiguous (`bcs` between columns), `o` m×n at strides `os`.
///
/// # Safety
/// Every element the views address lies inside its storage; `o` does not overlap `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn add_product(
    shape: (usize, usize, usize),
    a: *const f32,
    ars: isize,
    b: *const f32,
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
