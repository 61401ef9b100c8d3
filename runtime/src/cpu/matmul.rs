//! Extern matmuls on the host: operands read in place through their layouts (transposed weights
//! need no copy). Products of a few rows (decode: one token against a weight matrix) go through
//! `gemm`'s matrix-vector path, which reads the weight once; larger ones through `matrixmultiply`
//! (blocked, SIMD), whose packing of the weight pays off only over many rows, its columns split
//! across the call's threads.
//! f16/bf16 operands are widened to f32 a tile of the weight at a time (a tile stays in cache;
//! the whole weight is never copied) and the product rounded once to the output dtype. A bias row
//! (`addmm`) is the accumulator's starting value, so it too is added before that one rounding.

use guardless_ir::graph::DType;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

/// A strided matrix view: element `(i, j)` at `offset + i * rs + j * cs`.
#[derive(Copy, Clone, Debug)]
pub struct Mat {
    pub rows: usize,
    pub cols: usize,
    pub rs: isize,
    pub cs: isize,
    pub offset: isize,
}

/// A bias row: element `j` at `offset + j * stride`.
#[derive(Copy, Clone, Debug)]
pub struct Row {
    pub offset: isize,
    pub stride: isize,
}

/// Products of at most this many rows take the matrix-vector path, a row at a time: each row
/// streams the weight once (from cache after the first), where matrixmultiply packs all of it
/// first — at 256×688, one row 12 µs against 84, six rows 73 against 84 (docs/benchmarks.md).
const FEW_ROWS: usize = 6;

/// Multiply-adds below which a product runs on the calling thread.
const PARALLEL_WORK: usize = 1 << 18;

/// Bytes of one widened weight tile (f16/bf16 operands): about half of a core's L2.
const TILE_BYTES: usize = 256 << 10;

/// `out = a @ b (+ bias)` for one matrix (`a`: m×k, `b`: k×n, `out`: m×n, `bias`: n), each in its
/// own storage. `out_dtype` is `dtype`, or f32 for f16/bf16 operands without a bias (the
/// product unrounded). `threads`: the most threads it may use (rayon's pool).
///
/// # Safety
/// Every element the views address lies inside its storage.
pub unsafe fn gemm(
    dtype: DType,
    out_dtype: DType,
    a: (*const u8, Mat),
    b: (*const u8, Mat),
    out: (*mut u8, Mat),
    bias: Option<(*const u8, Row)>,
    threads: usize,
) {
    let (m, n) = (a.1.rows, b.1.cols);
    if m == 0 || n == 0 {
        return;
    }
    match dtype {
        DType::F32 | DType::F64 => {
            // With a bias, every row of the output starts as it and the product is added.
            let size = dtype.size() as isize;
            if let Some((p, row)) = bias {
                for i in 0..m as isize {
                    for j in 0..n as isize {
                        let src = p.offset((row.offset + j * row.stride) * size);
                        let dst = out
                            .0
                            .offset((out.1.offset + i * out.1.rs + j * out.1.cs) * size);
                        std::ptr::copy_nonoverlapping(src, dst, size as usize);
                    }
                }
            }
            let accumulate = bias.is_some();
            if dtype == DType::F32 {
                product::<f32>(a, b, out, accumulate, threads);
            } else {
                product::<f64>(a, b, out, accumulate, threads);
            }
        }
        DType::F16 | DType::BF16 => half_gemm(dtype, out_dtype, a, b, out, bias, threads),
        _ => unreachable!("matmuls of floats only (checked by the caller)"),
    }
}

/// A float type both libraries multiply.
trait Float: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    /// Whether `super::rows` multiplies this type.
    const FEW_ROWS: bool;
    /// matrixmultiply's product for this type.
    #[allow(clippy::too_many_arguments)]
    unsafe fn blocked(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        ars: isize,
        acs: isize,
        b: *const Self,
        brs: isize,
        bcs: isize,
        beta: Self,
        c: *mut Self,
        crs: isize,
        ccs: isize,
    );
}

impl Float for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    const FEW_ROWS: bool = true;
    unsafe fn blocked(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        ars: isize,
        acs: isize,
        b: *const f32,
        brs: isize,
        bcs: isize,
        beta: f32,
        c: *mut f32,
        crs: isize,
        ccs: isize,
    ) {
        matrixmultiply::sgemm(m, k, n, 1.0, a, ars, acs, b, brs, bcs, beta, c, crs, ccs)
    }
}

impl Float for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    const FEW_ROWS: bool = false;
    unsafe fn blocked(
        m: usize,
        k: usize,
        n: usize,
        a: *const f64,
        ars: isize,
        acs: isize,
        b: *const f64,
        brs: isize,
        bcs: isize,
        beta: f64,
        c: *mut f64,
        crs: isize,
        ccs: isize,
    ) {
        matrixmultiply::dgemm(m, k, n, 1.0, a, ars, acs, b, brs, bcs, beta, c, crs, ccs)
    }
}

/// `out (+)= a @ b` in `T` (`accumulate`: add to what `out` holds), views in elements of `T`.
unsafe fn product<T: Float>(
    a: (*const u8, Mat),
    b: (*const u8, Mat),
    out: (*mut u8, Mat),
    accumulate: bool,
    threads: usize,
) {
    let (m, k, n) = (a.1.rows, a.1.cols, b.1.cols);
    let (pa, pb, po) = (
        (a.0 as *const T).offset(a.1.offset),
        (b.0 as *const T).offset(b.1.offset),
        (out.0 as *mut T).offset(out.1.offset),
    );
    if T::FEW_ROWS
        && (2..=super::rows::MAX_ROWS).contains(&m)
        && n > 1
        && a.1.cs == 1
        && b.1.rs == 1
    {
        few_rows(
            a.1,
            b.1,
            out.1,
            (pa as *const f32, pb as *const f32, po as *mut f32),
            accumulate,
            threads,
        );
    } else if m <= FEW_ROWS || n == 1 {
        let parallelism = if threads > 1 && n * k >= PARALLEL_WORK {
            gemm::Parallelism::Rayon(threads)
        } else {
            gemm::Parallelism::None
        };
        // gemm's `alpha` scales what `out` held (read only when `accumulate`), `beta` the product.
        let rows = if n == 1 { m } else { 1 };
        for i in (0..m).step_by(rows) {
            gemm::gemm(
                rows,
                n,
                k,
                po.offset(i as isize * out.1.rs),
                out.1.cs,
                out.1.rs,
                accumulate,
                pa.offset(i as isize * a.1.rs),
                a.1.cs,
                a.1.rs,
                pb,
                b.1.cs,
                b.1.rs,
                T::ONE,
                T::ONE,
                false,
                false,
                false,
                parallelism,
            );
        }
    } else {
        let beta = if accumulate { T::ONE } else { T::ZERO };
        // Columns split across `threads` (rayon's pool: the caller's thread count, which
        // matrixmultiply's own pool would not follow); each part packs only its columns.
        let parts = if threads > 1 && m * n * k >= PARALLEL_WORK {
            threads.min(n.div_ceil(64))
        } else {
            1
        };
        let per = n.div_ceil(parts);
        let (pa, pb, po) = (pa as usize, pb as usize, po as usize);
        let part = |j0: usize| {
            let w = per.min(n - j0);
            // Safety: columns j0..j0 + w of `b` and `out`, inside their views; parts write
            // disjoint columns.
            unsafe {
                T::blocked(
                    m,
                    k,
                    w,
                    pa as *const T,
                    a.1.rs,
                    a.1.cs,
                    (pb as *const T).offset(j0 as isize * b.1.cs),
                    b.1.rs,
                    b.1.cs,
                    beta,
                    (po as *mut T).offset(j0 as isize * out.1.cs),
                    out.1.rs,
                    out.1.cs,
                )
            }
        };
        if parts == 1 {
            part(0);
        } else {
            rayon::scope(|sc| {
                for j0 in (0..n).step_by(per) {
                    let part = &part;
                    sc.spawn(move |_| part(j0));
                }
            });
        }
    }
}

/// f32 `out (+)= a @ b` through `super::rows` (`a`'s rows and `b`'s columns contiguous), its
/// columns split across `threads`. The pointers are the views' first elements.
fn few_rows<W: super::rows::Weight + Send + Sync>(
    a: Mat,
    b: Mat,
    out: Mat,
    (pa, pb, po): (*const f32, *const W, *mut f32),
    accumulate: bool,
    threads: usize,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if !accumulate {
        for i in 0..m as isize {
            for j in 0..n as isize {
                // Safety: inside the output view.
                unsafe { *po.offset(i * out.rs + j * out.cs) = 0.0 };
            }
        }
    }
    let parts = if threads > 1 && m * n * k >= PARALLEL_WORK {
        threads.min(n.div_ceil(64))
    } else {
        1
    };
    let per = n.div_ceil(parts);
    let (pa, pb, po) = (pa as usize, pb as usize, po as usize);
    let part = |j0: usize| {
        let w = per.min(n - j0);
        // Safety: columns j0..j0 + w of `b` and `out`; parts write disjoint columns.
        unsafe {
            super::rows::add_product(
                (m, w, k),
                pa as *const f32,
                a.rs,
                (pb as *const W).offset(j0 as isize * b.cs),
                b.cs,
                (po as *mut f32).offset(j0 as isize * out.cs),
                (out.rs, out.cs),
            )
        }
    };
    if parts == 1 {
        part(0);
    } else {
        rayon::scope(|sc| {
            for j0 in (0..n).step_by(per) {
                let part = &part;
                sc.spawn(move |_| part(j0));
            }
        });
    }
}

/// `widened[i]` = element `at + i * step` of an f16/bf16 storage, for `widened.len()` elements.
unsafe fn widen(dtype: DType, p: *const u8, at: isize, step: isize, widened: &mut [f32]) {
    let p = (p as *const u16).offset(at);
    let n = widened.len();
    if step == 1 {
        let bits = std::slice::from_raw_parts(p, n);
        if dtype == DType::F16 {
            bits.reinterpret_cast::<half::f16>()
                .convert_to_f32_slice(widened);
        } else {
            bits.reinterpret_cast::<half::bf16>()
                .convert_to_f32_slice(widened);
        }
        return;
    }
    for (i, w) in widened.iter_mut().enumerate() {
        let bits = *p.offset(i as isize * step);
        *w = if dtype == DType::F16 {
            half::f16::from_bits(bits).to_f32()
        } else {
            half::bf16::from_bits(bits).to_f32()
        };
    }
}

/// f16/bf16 operands: `a` widened whole (a few rows at decode), `b` a tile of columns at a time
/// into a scratch tile in `b`'s own order (column-major when its columns are contiguous), the
/// tile's product in f32 (starting from the bias), then rounded into `out` once.
unsafe fn half_gemm(
    dtype: DType,
    out_dtype: DType,
    a: (*const u8, Mat),
    b: (*const u8, Mat),
    out: (*mut u8, Mat),
    bias: Option<(*const u8, Row)>,
    threads: usize,
) {
    let (m, k, n) = (a.1.rows, a.1.cols, b.1.cols);
    let mut wa = vec![0f32; m * k];
    for i in 0..m {
        let at = a.1.offset + i as isize * a.1.rs;
        widen(dtype, a.0, at, a.1.cs, &mut wa[i * k..(i + 1) * k]);
    }
    let a_view = Mat {
        rows: m,
        cols: k,
        rs: k as isize,
        cs: 1,
        offset: 0,
    };
    if dtype == DType::BF16 && b.1.rs == 1 && m <= super::rows::MAX_ROWS {
        // A bf16 weight with contiguous columns read as it is, widened in registers.
        let mut wo = vec![0f32; m * n];
        if let Some((p, row)) = bias {
            widen(dtype, p, row.offset, row.stride, &mut wo[..n]);
            for i in 1..m {
                wo.copy_within(..n, i * n);
            }
        }
        let o_view = Mat {
            rows: m,
            cols: n,
            rs: n as isize,
            cs: 1,
            offset: 0,
        };
        let pb = (b.0 as *const super::rows::Bf16).offset(b.1.offset);
        few_rows(
            a_view,
            b.1,
            o_view,
            (wa.as_ptr(), pb, wo.as_mut_ptr()),
            bias.is_some(),
            threads,
        );
        round_into(dtype, out_dtype, &wo, (m, n), 0, out);
        return;
    }
    let width = (TILE_BYTES / (4 * k.max(1))).clamp(16, n.max(16)).min(n);
    let column_major = b.1.rs.abs() < b.1.cs.abs();
    let mut wb = vec![0f32; k * width];
    let mut wo = vec![0f32; m * width];
    let mut bias_row = vec![0f32; width];
    for j0 in (0..n).step_by(width) {
        let w = width.min(n - j0);
        let col = b.1.offset + j0 as isize * b.1.cs;
        let tile = if column_major {
            for j in 0..w {
                let at = col + j as isize * b.1.cs;
                widen(dtype, b.0, at, b.1.rs, &mut wb[j * k..(j + 1) * k]);
            }
            (1, k as isize)
        } else {
            for i in 0..k {
                let at = col + i as isize * b.1.rs;
                widen(dtype, b.0, at, b.1.cs, &mut wb[i * w..(i + 1) * w]);
            }
            (w as isize, 1)
        };
        let b_view = Mat {
            rows: k,
            cols: w,
            rs: tile.0,
            cs: tile.1,
            offset: 0,
        };
        if let Some((p, row)) = bias {
            widen(
                dtype,
                p,
                row.offset + j0 as isize * row.stride,
                row.stride,
                &mut bias_row[..w],
            );
            for i in 0..m {
                wo[i * w..(i + 1) * w].copy_from_slice(&bias_row[..w]);
            }
        }
        let o_view = Mat {
            rows: m,
            cols: w,
            rs: w as isize,
            cs: 1,
            offset: 0,
        };
        product::<f32>(
            (wa.as_ptr() as *const u8, a_view),
            (wb.as_ptr() as *const u8, b_view),
            (wo.as_mut_ptr() as *mut u8, o_view),
            bias.is_some(),
            threads,
        );
        round_into(dtype, out_dtype, &wo, (m, w), j0, out);
    }
}

/// Columns `j0..j0 + w` of `out` from the f32 rows `wo` (m×w, row-major): as they are into an
/// f32 output, else rounded once to `dtype`.
unsafe fn round_into(
    dtype: DType,
    out_dtype: DType,
    wo: &[f32],
    (m, w): (usize, usize),
    j0: usize,
    out: (*mut u8, Mat),
) {
    for i in 0..m {
        for j in 0..w {
            let x = wo[i * w + j];
            let at = out.1.offset + i as isize * out.1.rs + (j0 + j) as isize * out.1.cs;
            if out_dtype == DType::F32 {
                *(out.0 as *mut f32).offset(at) = x;
            } else {
                *(out.0 as *mut u16).offset(at) = if dtype == DType::F16 {
                    half::f16::from_f32(x).to_bits()
                } else {
                    half::bf16::from_f32(x).to_bits()
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element `i` of a storage of `dtype`, as f64.
    fn get(dtype: DType, s: &[u8], i: usize) -> f64 {
        let w = dtype.size();
        let b = &s[i * w..(i + 1) * w];
        match dtype {
            DType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
            DType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
            DType::F16 => half::f16::from_le_bytes(b.try_into().unwrap()).to_f64(),
            DType::BF16 => half::bf16::from_le_bytes(b.try_into().unwrap()).to_f64(),
            _ => unreachable!(),
        }
    }

    /// A storage of `n` elements of `dtype` with small exact values (sums of them are exact in
    /// f32, so every path must agree with the f64 reference to the output's rounding).
    fn storage(dtype: DType, n: usize, seed: usize) -> Vec<u8> {
        let mut s = Vec::with_capacity(n * dtype.size());
        for i in 0..n {
            let x = (((i * 7 + seed * 13) % 17) as f64 - 8.0) / 8.0;
            match dtype {
                DType::F32 => s.extend((x as f32).to_le_bytes()),
                DType::F64 => s.extend(x.to_le_bytes()),
                DType::F16 => s.extend(half::f16::from_f64(x).to_le_bytes()),
                DType::BF16 => s.extend(half::bf16::from_f64(x).to_le_bytes()),
                _ => unreachable!(),
            }
        }
        s
    }

    /// Every path (few rows, many rows, tiles of a widened weight with a remainder), both
    /// layouts of the weight, with and without a bias, against the product in f64.
    #[test]
    fn products_match_a_reference_on_every_path() {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            // k = 4096 makes the widened tiles 16 columns wide: n = 40 is 2 tiles and 8 columns;
            // 2–32 rows against a transposed weight in register tiles (32×96×100 split into
            // two column ranges), else 6 rows a row at a time, 7 blocked; 64×128×200 blocked
            // in two column ranges.
            for &(m, k, n) in &[
                (1, 5, 3),
                (1, 4096, 40),
                (3, 64, 33),
                (4, 7, 1),
                (6, 9, 6),
                (7, 9, 6),
                (17, 33, 70),
                (64, 128, 200),
                (32, 96, 100),
            ] {
                for transposed in [false, true] {
                    for with_bias in [false, true] {
                        let a = storage(dtype, m * k, 1);
                        let b = storage(dtype, k * n, 2);
                        let bias = storage(dtype, n, 3);
                        let mut out = vec![0u8; m * n * dtype.size()];
                        let av = Mat {
                            rows: m,
                            cols: k,
                            rs: k as isize,
                            cs: 1,
                            offset: 0,
                        };
                        // A transposed weight: stored n×k (a linear layer's), read as k×n.
                        let (brs, bcs) = if transposed {
                            (1, k as isize)
                        } else {
                            (n as isize, 1)
                        };
                        let bv = Mat {
                            rows: k,
                            cols: n,
                            rs: brs,
                            cs: bcs,
                            offset: 0,
                        };
                        let ov = Mat {
                            rows: m,
                            cols: n,
                            rs: n as isize,
                            cs: 1,
                            offset: 0,
                        };
                        let row = Row {
                            offset: 0,
                            stride: 1,
                        };
                        unsafe {
                            gemm(
                                dtype,
                                dtype,
                                (a.as_ptr(), av),
                                (b.as_ptr(), bv),
                                (out.as_mut_ptr(), ov),
                                with_bias.then_some((bias.as_ptr(), row)),
                                2,
                            )
                        };
                        for i in 0..m {
                            for j in 0..n {
                                let mut want = if with_bias { get(dtype, &bias, j) } else { 0.0 };
                                for t in 0..k {
                                    let bj = (t as isize * brs + j as isize * bcs) as usize;
                                    want += get(dtype, &a, i * k + t) * get(dtype, &b, bj);
                                }
                                let got = get(dtype, &out, i * n + j);
                                // The reference rounded once to the output dtype.
                                let rounded = match dtype {
                                    DType::F16 => half::f16::from_f64(want).to_f64(),
                                    DType::BF16 => half::bf16::from_f64(want).to_f64(),
                                    DType::F32 => want as f32 as f64,
                                    _ => want,
                                };
                                assert_eq!(
                                    got, rounded,
                                    "{dtype:?} m={m} k={k} n={n} transposed={transposed} bias={with_bias} at ({i}, {j})"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
