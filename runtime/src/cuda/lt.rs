//! `addmm` through cuBLASLt: the bias row is added by the matmul's epilogue
//! (`CUBLASLT_EPILOGUE_BIAS`), so the product is rounded once with it and no kernel reads the
//! output again. Descriptors, layouts and the algorithm the heuristic picks are kept per shape
//! (and operand alignment): a call sets the bias pointer and queues the matmul.

use std::ffi::c_void;
use std::ptr::null_mut;

use cudarc::cublaslt::{result as lt, sys};
use cudarc::driver::{result as driver, sys as driver_sys};
use guardless_ir::graph::DType;
use rustc_hash::FxHashMap;

use crate::launch::BlasGemm;

/// Workspace the heuristic may use (cuBLASLt's recommendation for Hopper is 32 MiB; 4 MiB
/// covers the bias epilogue's algorithms).
const WORKSPACE: usize = 4 << 20;

fn err(what: &str, e: impl std::fmt::Debug) -> String {
    format!("cuBLASLt {what}: {e:?}")
}

/// What a plan depends on.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    dtype: DType,
    m: i32,
    n: i32,
    k: i32,
    transposed: [bool; 2],
    ld: [i32; 3],
    /// The largest power of two (≤ 256) dividing each operand's address: A, B, C.
    align: [u32; 3],
}

/// Descriptors for one shape; destroyed with it.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: Option<sys::cublasLtMatmulAlgo_t>,
}

impl Drop for Plan {
    fn drop(&mut self) {
        unsafe {
            for l in self.layouts {
                if !l.is_null() {
                    let _ = lt::destroy_matrix_layout(l);
                }
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
        }
    }
}

pub struct Lt {
    handle: sys::cublasLtHandle_t,
    workspace: driver_sys::CUdeviceptr,
    plans: FxHashMap<Shape, Plan>,
}

impl Drop for Lt {
    fn drop(&mut self) {
        self.plans.clear();
        unsafe {
            let _ = driver::free_sync(self.workspace);
            let _ = lt::destroy_handle(self.handle);
        }
    }
}

fn alignment(address: u64) -> u32 {
    1u32 << address.trailing_zeros().min(8)
}

/// The storage type of a dtype the bias epilogue takes (f32 accumulation and scale).
fn data_type(d: DType) -> Option<sys::cudaDataType> {
    use sys::cudaDataType as T;
    Some(match d {
        DType::F32 => T::CUDA_R_32F,
        DType::F16 => T::CUDA_R_16F,
        DType::BF16 => T::CUDA_R_16BF,
        _ => return None,
    })
}

/// Sets a descriptor attribute from a plain value.
unsafe fn set<T>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    v: &T,
) -> Result<(), String> {
    lt::set_matmul_desc_attribute(
        desc,
        attr,
        v as *const T as *const c_void,
        std::mem::size_of::<T>(),
    )
    .map_err(|e| err(&format!("{attr:?}"), e))
}

impl Lt {
    /// A handle and its workspace (the context must be current).
    pub fn new() -> Result<Lt, String> {
        let handle = lt::create_handle().map_err(|e| err("handle", e))?;
        let workspace = match unsafe { driver::malloc_sync(WORKSPACE) } {
            Ok(w) => w,
            Err(e) => {
                let _ = unsafe { lt::destroy_handle(handle) };
                return Err(err("workspace", e));
            }
        };
        Ok(Lt {
            handle,
            workspace,
            plans: FxHashMap::default(),
        })
    }

    /// `C = op(A)·op(B) + bias` (the bias along `C`'s rows, one matrix) on `stream`. An error
    /// (a dtype, a batch or an alignment it does not take) leaves nothing queued.
    pub fn matmul_bias(
        &mut self,
        p: &BlasGemm,
        dtype: DType,
        stream: driver_sys::CUstream,
    ) -> Result<(), String> {
        let bias = p.bias.ok_or("no bias")?;
        if p.batch != 1 {
            return Err("a batched matmul with a bias".into());
        }
        let ty = data_type(dtype).ok_or_else(|| format!("no bias epilogue for {dtype:?}"))?;
        let shape = Shape {
            dtype,
            m: p.m,
            n: p.n,
            k: p.k,
            transposed: [p.a.transposed, p.b.transposed],
            ld: [p.a.ld, p.b.ld, p.c.ld],
            align: [p.a.address, p.b.address, p.c.address].map(alignment),
        };
        if !self.plans.contains_key(&shape) {
            let plan = self.plan(&shape, ty)?;
            self.plans.insert(shape, plan);
        }
        let plan = &self.plans[&shape];
        let algo = plan.algo.as_ref().ok_or("no algorithm for this shape")?;
        let (one, zero) = (1.0f32, 0.0f32);
        unsafe {
            use sys::cublasLtMatmulDescAttributes_t as A;
            set(
                plan.desc,
                A::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                &(bias as *const c_void),
            )?;
            let [la, lb, lc] = plan.layouts;
            lt::matmul(
                self.handle,
                plan.desc,
                &one as *const f32 as *const c_void,
                &zero as *const f32 as *const c_void,
                p.a.address as *const c_void,
                la,
                p.b.address as *const c_void,
                lb,
                p.c.address as *const c_void,
                lc,
                p.c.address as *mut c_void,
                lc,
                algo,
                self.workspace as *mut c_void,
                WORKSPACE,
                stream as sys::cudaStream_t,
            )
            .map_err(|e| err("matmul", e))
        }
    }

    /// Descriptors and the heuristic's algorithm for `s` (a shape with no algorithm is kept
    /// too, so the heuristic runs once).
    fn plan(&self, s: &Shape, ty: sys::cudaDataType) -> Result<Plan, String> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        let mut plan = Plan {
            desc: lt::create_matmul_desc(
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType::CUDA_R_32F,
            )
            .map_err(|e| err("descriptor", e))?,
            layouts: [null_mut(); 3],
            algo: None,
        };
        let op = |t: bool| match t {
            true => cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T,
            false => cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
        };
        unsafe {
            set(
                plan.desc,
                A::CUBLASLT_MATMUL_DESC_TRANSA,
                &op(s.transposed[0]),
            )?;
            set(
                plan.desc,
                A::CUBLASLT_MATMUL_DESC_TRANSB,
                &op(s.transposed[1]),
            )?;
            let epilogue = sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS;
            set(plan.desc, A::CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue)?;
        }
        // Each operand as stored: op(A) is m × k, op(B) k × n, C m × n (column-major).
        let (m, n, k) = (s.m as u64, s.n as u64, s.k as u64);
        let stored = [
            if s.transposed[0] { (k, m) } else { (m, k) },
            if s.transposed[1] { (n, k) } else { (k, n) },
            (m, n),
        ];
        for (i, (rows, cols)) in stored.into_iter().enumerate() {
            plan.layouts[i] = lt::create_matrix_layout(ty, rows, cols, s.ld[i] as i64)
                .map_err(|e| err("layout", e))?;
        }
        let pref = lt::create_matmul_pref().map_err(|e| err("preference", e))?;
        let heuristic = (|| unsafe {
            // Each preference has its own width: the workspace is a uint64_t, the alignments are
            // uint32_t (cuBLASLt refuses a size that does not match).
            let put = |attr: P, v: *const c_void, size: usize| {
                lt::set_matmul_pref_attribute(pref, attr, v, size)
                    .map_err(|e| err(&format!("{attr:?}"), e))
            };
            let workspace = WORKSPACE as u64;
            put(
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &workspace as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )?;
            let align = [s.align[0], s.align[1], s.align[2], s.align[2]];
            for (attr, a) in [
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
            ]
            .into_iter()
            .zip(&align)
            {
                put(
                    attr,
                    a as *const u32 as *const c_void,
                    std::mem::size_of::<u32>(),
                )?;
            }
            let [la, lb, lc] = plan.layouts;
            Ok::<_, String>(
                lt::get_matmul_algo_heuristic(self.handle, plan.desc, la, lb, lc, lc, pref).ok(),
            )
        })();
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        plan.algo = heuristic?.map(|h| h.algo);
        Ok(plan)
    }
}
