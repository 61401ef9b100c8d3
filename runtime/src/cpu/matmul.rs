//! Extern matmuls on the host through `matrixmultiply` (blocked, SIMD, multithreaded): operands
//! read in place through their layouts (transposed weights need no copy); f16/bf16 operands are
//! widened to f32 first and the product rounded once to the output dtype. A bias row (`addmm`)
//! is the accumulator's starting value, so it too is added before that one rounding.

use guardless_ir::graph::DType;

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

/// `out = a @ b (+ bias)` for one matrix (`a`: m×k, `b`: k×n, `out`: m×n, `bias`: n), each in its
/// own storage. `out_dtype` is `dtype`, or f32 for f16/bf16 operands without a bias (the
/// product unrounded).
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
) {
    let (m, k, n) = (a.1.rows, a.1.cols, b.1.cols);
    if m == 0 || n == 0 {
        return;
    }
    // With a bias, every row of the output starts as it and the product is added (beta = 1).
    let beta = match bias {
        Some((p, row)) if matches!(dtype, DType::F32 | DType::F64) => {
            let size = dtype.size() as isize;
            for i in 0..m as isize {
                for j in 0..n as isize {
                    let src = p.offset((row.offset + j * row.stride) * size);
                    let dst = out
                        .0
                        .offset((out.1.offset + i * out.1.rs + j * out.1.cs) * size);
                    std::ptr::copy_nonoverlapping(src, dst, size as usize);
                }
            }
            1.0
        }
        _ => 0.0,
    };
    match dtype {
        DType::F32 => {
            let (pa, pb, po) = (a.0 as *const f32, b.0 as *const f32, out.0 as *mut f32);
            matrixmultiply::sgemm(
                m,
                k,
                n,
                1.0,
                pa.offset(a.1.offset),
                a.1.rs,
                a.1.cs,
                pb.offset(b.1.offset),
                b.1.rs,
                b.1.cs,
                beta as f32,
                po.offset(out.1.offset),
                out.1.rs,
                out.1.cs,
            );
        }
        DType::F64 => {
            let (pa, pb, po) = (a.0 as *const f64, b.0 as *const f64, out.0 as *mut f64);
            matrixmultiply::dgemm(
                m,
                k,
                n,
                1.0,
                pa.offset(a.1.offset),
                a.1.rs,
                a.1.cs,
                pb.offset(b.1.offset),
                b.1.rs,
                b.1.cs,
                beta,
                po.offset(out.1.offset),
                out.1.rs,
                out.1.cs,
            );
        }
        DType::F16 | DType::BF16 => {
            let widen = |p: *const u8, v: Mat| -> Vec<f32> {
                let p = p as *const u16;
                let mut w = Vec::with_capacity(v.rows * v.cols);
                for i in 0..v.rows as isize {
                    for j in 0..v.cols as isize {
                        let bits = *p.offset(v.offset + i * v.rs + j * v.cs);
                        w.push(if dtype == DType::F16 {
                            half::f16::from_bits(bits).to_f32()
                        } else {
                            half::bf16::from_bits(bits).to_f32()
                        });
                    }
                }
                w
            };
            let (wa, wb) = (widen(a.0, a.1), widen(b.0, b.1));
            let row = bias.map(|(p, row)| {
                let v = Mat {
                    rows: 1,
                    cols: n,
                    rs: 0,
                    cs: row.stride,
                    offset: row.offset,
                };
                widen(p, v)
            });
            let mut wo: Vec<f32> = match &row {
                Some(r) => (0..m).flat_map(|_| r.iter().copied()).collect(),
                None => vec![0f32; m * n],
            };
            matrixmultiply::sgemm(
                m,
                k,
                n,
                1.0,
                wa.as_ptr(),
                k as isize,
                1,
                wb.as_ptr(),
                n as isize,
                1,
                if row.is_some() { 1.0 } else { 0.0 },
                wo.as_mut_ptr(),
                n as isize,
                1,
            );
            if out_dtype == DType::F32 {
                let po = out.0 as *mut f32;
                for i in 0..m {
                    for j in 0..n {
                        let at = out.1.offset + i as isize * out.1.rs + j as isize * out.1.cs;
                        *po.offset(at) = wo[i * n + j];
                    }
                }
                return;
            }
            let po = out.0 as *mut u16;
            for i in 0..m {
                for j in 0..n {
                    let x = wo[i * n + j];
                    let bits = if dtype == DType::F16 {
                        half::f16::from_f32(x).to_bits()
                    } else {
                        half::bf16::from_f32(x).to_bits()
                    };
                    *po.offset(out.1.offset + i as isize * out.1.rs + j as isize * out.1.cs) = bits;
                }
            }
        }
        _ => unreachable!("matmuls of floats only (checked by the caller)"),
    }
}
