//! A hand-vectorized softmax over rows of f32 (AVX2 + FMA), as a ceiling for what any compiled
//! softmax reaches on this machine: the row max in register accumulators, one exp per element
//! of the same accuracy class as the backend's (Cody–Waite + degree-6 polynomial, two-step scale
//! for subnormals), the exps kept in a per-thread row buffer, and the output written with
//! streaming (non-temporal) stores while the next row is prefetched — choices a generic
//! compiler cannot always make (streaming stores need 32-byte aligned rows). Benchmark use only.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether this CPU runs [`softmax_rows`].
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Softmax of each `cols`-wide row of `x` into `out`, on `threads` threads.
/// `cols` must be a multiple of 8 and `out` 32-byte aligned (the streaming stores).
#[cfg(target_arch = "x86_64")]
pub fn softmax_rows(x: &[f32], out: &mut [f32], cols: usize, threads: usize) {
    assert!(supported() && cols % 8 == 0 && x.len() == out.len());
    assert_eq!(
        out.as_ptr() as usize % 32,
        0,
        "streaming stores need 32-byte rows"
    );
    let rows = x.len() / cols;
    let per = rows.div_ceil(threads) * cols;
    std::thread::scope(|s| {
        for (xs, os) in x.chunks(per).zip(out.chunks_mut(per)) {
            s.spawn(move || {
                let mut row = vec![0f32; cols];
                for (r, (xr, or)) in xs.chunks(cols).zip(os.chunks_mut(cols)).enumerate() {
                    let next = xs.get((r + 1) * cols..).unwrap_or(&[]);
                    // SAFETY: the features were checked above; slices are `cols` long.
                    unsafe { row_softmax(xr, or, &mut row, next) }
                }
            });
        }
    });
    // SAFETY: orders the streaming stores before the caller reads the output.
    unsafe { _mm_sfence() }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_softmax(x: &[f32], out: &mut [f32], row: &mut [f32], next: &[f32]) {
    let n = x.len();
    let (xp, op, rp) = (x.as_ptr(), out.as_mut_ptr(), row.as_mut_ptr());
    let mut m = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
    let mut j = 0;
    while j + 32 <= n {
        for (k, acc) in m.iter_mut().enumerate() {
            *acc = _mm256_max_ps(*acc, _mm256_loadu_ps(xp.add(j + 8 * k)));
        }
        j += 32;
    }
    while j < n {
        m[0] = _mm256_max_ps(m[0], _mm256_loadu_ps(xp.add(j)));
        j += 8;
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(
        lanes.as_mut_ptr(),
        _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])),
    );
    let max = _mm256_set1_ps(lanes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)));
    let mut sum = [_mm256_setzero_ps(); 2];
    let mut j = 0;
    while j < n {
        if j % 16 == 0 && j < next.len() {
            _mm_prefetch::<_MM_HINT_T1>(next.as_ptr().add(j) as *const i8);
        }
        let e = exp(_mm256_sub_ps(_mm256_loadu_ps(xp.add(j)), max));
        _mm256_storeu_ps(rp.add(j), e);
        sum[(j / 8) % 2] = _mm256_add_ps(sum[(j / 8) % 2], e);
        j += 8;
    }
    _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_add_ps(sum[0], sum[1]));
    let inv = _mm256_set1_ps(1.0 / lanes.iter().sum::<f32>());
    let mut j = 0;
    while j < n {
        _mm256_stream_ps(op.add(j), _mm256_mul_ps(_mm256_loadu_ps(rp.add(j)), inv));
        j += 8;
    }
}

/// The backend's exp algorithm, written with intrinsics.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp(x: __m256) -> __m256 {
    let c = _mm256_set1_ps;
    // Operand order keeps a NaN (maxps/minps return the second operand when unordered).
    let x = _mm256_min_ps(c(89.0), _mm256_max_ps(c(-104.0), x));
    let shifter = c(12_582_912.0);
    let k = _mm256_fmadd_ps(x, c(std::f32::consts::LOG2_E), shifter);
    let n = _mm256_sub_ps(k, shifter);
    let r = _mm256_fmadd_ps(n, c(-0.693_359_4), x);
    let r = _mm256_fmadd_ps(n, c(2.121_944_4e-4), r);
    let mut p = c(1.987_569_1e-4);
    for k in [1.398_2e-3, 8.333_452e-3, 4.166_58e-2, 1.666_666_5e-1, 0.5] {
        p = _mm256_fmadd_ps(p, r, c(k));
    }
    let y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), c(1.0));
    let ni = _mm256_sub_epi32(_mm256_castps_si256(k), _mm256_castps_si256(shifter));
    let half = _mm256_srai_epi32::<1>(ni);
    let rest = _mm256_sub_epi32(ni, half);
    _mm256_mul_ps(_mm256_mul_ps(y, pow2(half)), pow2(rest))
}

/// 2^e for e in the normal exponent range.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pow2(e: __m256i) -> __m256 {
    _mm256_castsi256_ps(_mm256_add_epi32(
        _mm256_slli_epi32::<23>(e),
        _mm256_set1_epi32(127 << 23),
    ))
}

/// A zeroed f32 buffer of `len` whose first element is 32-byte aligned: (storage, offset).
pub fn aligned_zeros(len: usize) -> (Vec<f32>, usize) {
    let v = vec![0f32; len + 8];
    let offset = (32 - v.as_ptr() as usize % 32) % 32 / 4;
    (v, offset)
}
