//! Matmuls as cuBLAS sees them. cuBLAS is column-major: a row-major `C = A·B` is computed as
//! `Cᵀ = Bᵀ·Aᵀ`, and each operand is passed as itself or transposed, whichever of its strides is
//! the unit one. A layout with no unit stride (or sizes past `i32`) is not expressible: the
//! launcher runs that matmul on the host instead. An `addmm` bias row is always computed in the
//! transposed form, where it runs along cuBLAS's rows: cuBLASLt's bias epilogue adds such a
//! vector, or (the fallback) it is copied into every row of `C` and the product added to it.

use guardless_ir::graph::DType;

/// One operand: a `rows × cols` matrix per batch, strides in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    /// The first element of batch 0.
    pub address: u64,
    pub rows: i64,
    pub cols: i64,
    pub row_stride: i64,
    pub col_stride: i64,
    pub batch_stride: i64,
}

/// `c[i] = a[i] · b[i] (+ bias)` for `i < batch` (`a: m × k`, `b: k × n`, `c: m × n`).
#[derive(Clone, Debug)]
pub struct Gemm {
    /// The operands' dtype.
    pub dtype: DType,
    /// `c`'s dtype: the operands', or f32 for bf16/f16 operands (see [`supported`]).
    pub out_dtype: DType,
    pub batch: i64,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    /// `addmm`: the address of a dense row of `n` elements added to every row of each product
    /// before its rounding.
    pub bias: Option<u64>,
}

/// A column-major cuBLAS operand: `transposed` says whether to apply `op = T`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlasOperand {
    pub address: u64,
    pub transposed: bool,
    pub ld: i32,
    pub batch_stride: i64,
}

/// The arguments of `cublasGemmStridedBatchedEx`: `C (m × n) = op(A) (m × k) · op(B) (k × n)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlasGemm {
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub a: BlasOperand,
    pub b: BlasOperand,
    pub c: BlasOperand,
    pub batch: i32,
    /// A dense vector of `m` elements added to every column of `C` (the bias row).
    pub bias: Option<u64>,
}

/// Whether cuBLAS multiplies operands of dtype `d` into `out` here: floats into their own dtype
/// (f32 accumulation for the 16-bit ones), or bf16/f16 into f32 (a product an epilogue still
/// changes before its one rounding).
pub fn supported(d: DType, out: DType) -> bool {
    match d {
        DType::F32 | DType::F64 => out == d,
        DType::F16 | DType::BF16 => out == d || out == DType::F32,
        _ => false,
    }
}

impl Operand {
    fn transposed(self) -> Operand {
        Operand {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// This matrix as a column-major operand (possibly transposed), if its strides allow.
    fn blas(self) -> Option<BlasOperand> {
        let (r, c) = (self.rows.max(1), self.cols.max(1));
        // A size-1 dimension's stride is free: pick the one that makes the layout work.
        let unit_rows = self.row_stride == 1 || r == 1;
        let unit_cols = self.col_stride == 1 || c == 1;
        let (transposed, ld) = if unit_rows && (self.col_stride >= r || c == 1) {
            (false, if c == 1 { r } else { self.col_stride })
        } else if unit_cols && (self.row_stride >= c || r == 1) {
            (true, if r == 1 { c } else { self.row_stride })
        } else {
            return None;
        };
        Some(BlasOperand {
            address: self.address,
            transposed,
            ld: i32::try_from(ld).ok()?,
            batch_stride: self.batch_stride,
        })
    }
}

impl Gemm {
    /// How cuBLAS computes this, or `None` when it cannot.
    pub fn plan(&self) -> Option<BlasGemm> {
        let (m, k, n) = (self.a.rows, self.a.cols, self.b.cols);
        let fits = |v: i64| i32::try_from(v).ok();
        // C itself column-major, or else Cᵀ = Bᵀ·Aᵀ with Cᵀ column-major (always with a bias:
        // then it runs along cuBLAS's rows).
        let direct = self
            .c
            .blas()
            .filter(|c| !c.transposed && self.bias.is_none());
        let (a, b, c, m, n) = match direct {
            Some(c) => (self.a.blas()?, self.b.blas()?, c, m, n),
            None => {
                let c = self.c.transposed().blas().filter(|c| !c.transposed)?;
                (
                    self.b.transposed().blas()?,
                    self.a.transposed().blas()?,
                    c,
                    n,
                    m,
                )
            }
        };
        Some(BlasGemm {
            m: fits(m)?,
            n: fits(n)?,
            k: fits(k)?,
            a,
            b,
            c,
            batch: fits(self.batch)?,
            bias: self.bias,
        })
    }
}

impl Gemm {
    /// Device copies `(dst, src, bytes)` that put the bias in every row of `C` (elements of
    /// `size` bytes), for a gemm that then adds the product to `C` (beta = 1), or for an empty
    /// inner dimension: the bias into the first row, then the rows filled so far copied after
    /// them, doubling — a logarithmic number of copies. `None` without a bias, or when `C`'s
    /// rows are not dense and consecutive.
    pub fn bias_fill(&self, size: usize) -> Option<Vec<(u64, u64, usize)>> {
        let bias = self.bias?;
        let (rows, cols, c) = (self.c.rows.max(0) as usize, self.c.cols.max(0), &self.c);
        if (c.col_stride != 1 && cols > 1) || (c.row_stride != cols && rows > 1) {
            return None;
        }
        let row = cols as usize * size;
        let mut copies = Vec::new();
        for b in 0..self.batch.max(0) as u64 {
            let base = c.address + b * (c.batch_stride as u64 * size as u64);
            if rows > 0 {
                copies.push((base, bias, row));
            }
            let mut filled = 1usize;
            while filled < rows {
                let more = filled.min(rows - filled);
                copies.push((base + (filled * row) as u64, base, more * row));
                filled += more;
            }
        }
        Some(copies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(rows: i64, cols: i64, rs: i64, cs: i64) -> Operand {
        Operand {
            address: 0,
            rows,
            cols,
            row_stride: rs,
            col_stride: cs,
            batch_stride: 0,
        }
    }

    fn gemm(a: Operand, b: Operand, c: Operand) -> Gemm {
        Gemm {
            dtype: DType::F32,
            out_dtype: DType::F32,
            batch: 1,
            a,
            b,
            c,
            bias: None,
        }
    }

    #[test]
    fn row_major_product_is_computed_transposed() {
        // [3, 4] · [4, 5] → [3, 5], all row-major: Cᵀ (5 × 3) = Bᵀ · Aᵀ, both plain.
        let g = gemm(op(3, 4, 4, 1), op(4, 5, 5, 1), op(3, 5, 5, 1));
        let p = g.plan().unwrap();
        assert_eq!((p.m, p.n, p.k), (5, 3, 4));
        assert_eq!((p.a.transposed, p.a.ld), (false, 5));
        assert_eq!((p.b.transposed, p.b.ld), (false, 4));
        assert_eq!((p.c.transposed, p.c.ld), (false, 5));
    }

    #[test]
    fn a_transposed_weight_is_an_operand_flag() {
        // x [3, 4] · wᵀ where w is [5, 4] row-major: b has strides (1, 4).
        let g = gemm(op(3, 4, 4, 1), op(4, 5, 1, 4), op(3, 5, 5, 1));
        let p = g.plan().unwrap();
        assert_eq!((p.a.transposed, p.a.ld), (true, 4));
        assert_eq!((p.b.transposed, p.b.ld), (false, 4));
    }

    #[test]
    fn layouts_without_a_unit_stride_need_the_host() {
        let g = gemm(op(3, 4, 8, 2), op(4, 5, 5, 1), op(3, 5, 5, 1));
        assert!(g.plan().is_none());
        // Overlapping rows (a leading dimension shorter than a row) are not a cuBLAS layout.
        let g = gemm(op(3, 4, 2, 1), op(4, 5, 5, 1), op(3, 5, 5, 1));
        assert!(g.plan().is_none());
    }

    #[test]
    fn single_rows_take_any_stride() {
        // One token: [1, 4] with an arbitrary row stride.
        let g = gemm(op(1, 4, 12345, 1), op(4, 5, 5, 1), op(1, 5, 777, 1));
        let p = g.plan().unwrap();
        // C is one row: column-major as it stands, with a leading dimension of 1.
        assert_eq!((p.m, p.n, p.k), (1, 5, 4));
        assert!(p.c.ld >= p.m && !p.c.transposed);
        assert_eq!((p.a.transposed, p.b.transposed), (false, true));
    }

    fn op_at(address: u64, rows: i64, cols: i64, rs: i64, cs: i64) -> Operand {
        Operand {
            address,
            ..op(rows, cols, rs, cs)
        }
    }

    /// `g`'s product (plus its bias) in row-major order, from `mem` (addresses are element
    /// indices).
    fn product(mem: &[f64], g: &Gemm) -> Vec<f64> {
        let at = |o: &Operand, i: i64, j: i64| {
            mem[(o.address as i64 + i * o.row_stride + j * o.col_stride) as usize]
        };
        let (m, k, n) = (g.a.rows, g.a.cols, g.b.cols);
        (0..m * n)
            .map(|e| {
                let (i, j) = (e / n, e % n);
                let bias = g.bias.map_or(0.0, |b| mem[b as usize + j as usize]);
                bias + (0..k).map(|l| at(&g.a, i, l) * at(&g.b, l, j)).sum::<f64>()
            })
            .collect()
    }

    /// What cuBLAS computes for a plan, on `mem` (addresses are element indices).
    fn run_blas(p: &BlasGemm, mem: &mut [f64]) {
        run_blas_beta(p, mem, 0.0)
    }

    /// `C = op(A)·op(B) + beta·C`.
    fn run_blas_beta(p: &BlasGemm, mem: &mut [f64], beta: f64) {
        let at = |o: &BlasOperand, r: i64, c: i64| -> usize {
            let (r, c) = if o.transposed { (c, r) } else { (r, c) };
            (o.address as i64 + r + c * o.ld as i64) as usize
        };
        for i in 0..p.m as i64 {
            for j in 0..p.n as i64 {
                let acc: f64 = (0..p.k as i64)
                    .map(|l| mem[at(&p.a, i, l)] * mem[at(&p.b, l, j)])
                    .sum();
                let c = at(&p.c, i, j);
                mem[c] = acc + if beta == 0.0 { 0.0 } else { beta * mem[c] };
            }
        }
    }

    #[test]
    fn every_plan_computes_the_row_major_product() {
        // Each operand row-major, column-major, or padded; sizes with and without ones.
        let layouts = |rows: i64, cols: i64| {
            vec![
                (cols, 1),
                (1, rows),
                (cols + 3, 1),
                (1, rows + 2),
                (cols * 2, 2), // no unit stride unless a size is 1
            ]
        };
        let mut checked = 0;
        for (m, k, n) in [
            (3, 4, 5),
            (1, 4, 5),
            (3, 1, 5),
            (3, 4, 1),
            (1, 1, 1),
            (6, 2, 7),
        ] {
            for (ars, acs) in layouts(m, k) {
                for (brs, bcs) in layouts(k, n) {
                    for (crs, ccs) in layouts(m, n).into_iter().take(4) {
                        let g = gemm(
                            op_at(0, m, k, ars, acs),
                            op_at(1000, k, n, brs, bcs),
                            op_at(2000, m, n, crs, ccs),
                        );
                        let Some(p) = g.plan() else {
                            assert!(
                                (acs != 1 && ars != 1 && m > 1 && k > 1)
                                    || (bcs != 1 && brs != 1 && k > 1 && n > 1),
                                "{m}x{k}x{n}: no plan for unit-stride layouts"
                            );
                            continue;
                        };
                        let mut mem: Vec<f64> = (0..3000).map(|i| (i % 7) as f64 - 3.0).collect();
                        let want = product(&mem, &g);
                        run_blas(&p, &mut mem);
                        for e in 0..m * n {
                            let (i, j) = (e / n, e % n);
                            let got = mem[(2000 + i * crs + j * ccs) as usize];
                            assert_eq!(got, want[e as usize], "{m}x{k}x{n} {g:?} via {p:?}");
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 300, "{checked} layouts checked");
    }

    #[test]
    fn a_bias_row_runs_along_cublas_rows_and_is_filled_by_doubling_copies() {
        // x [m, k] (row-major or transposed) · w [k, n] + bias [n] into a dense [m, n].
        for (m, k, n) in [(3, 4, 5), (1, 4, 5), (7, 2, 1), (6, 3, 9), (0, 3, 4)] {
            for (ars, acs) in [(k, 1), (1, m.max(1))] {
                for (brs, bcs) in [(n, 1), (1, k)] {
                    let g = Gemm {
                        bias: Some(3000),
                        ..gemm(
                            op_at(0, m, k, ars, acs),
                            op_at(1000, k, n, brs, bcs),
                            op_at(2000, m, n, n, 1),
                        )
                    };
                    let p = g.plan().expect("a plan");
                    // Transposed: cuBLAS's rows are the output's columns, as the bias runs.
                    assert_eq!((p.m, p.n), (n as i32, m as i32), "{g:?}");
                    let mut mem: Vec<f64> = (0..3100).map(|i| (i % 7) as f64 - 3.0).collect();
                    let want = product(&mem, &g);
                    let copies = g.bias_fill(1).expect("a dense C");
                    assert!(copies.len() as f64 <= 1.0 + (m.max(1) as f64).log2().ceil());
                    for (dst, src, len) in copies {
                        let from: Vec<f64> = mem[src as usize..][..len].to_vec();
                        mem[dst as usize..][..len].copy_from_slice(&from);
                    }
                    run_blas_beta(&p, &mut mem, 1.0);
                    let got: Vec<f64> = (0..m * n).map(|e| mem[(2000 + e) as usize]).collect();
                    assert_eq!(got, want, "{m}x{k}x{n} {g:?}");
                }
            }
        }
        // A padded C cannot be filled by whole-row copies.
        let padded = Gemm {
            bias: Some(0),
            ..gemm(op(3, 4, 4, 1), op(4, 5, 5, 1), op(3, 5, 8, 1))
        };
        assert!(padded.bias_fill(4).is_none());
    }
}
