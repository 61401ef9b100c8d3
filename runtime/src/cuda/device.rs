//! [`Device`] on the CUDA driver: modules from CUBIN, launches and copies on one stream,
//! stream-ordered allocations (the driver's memory pool makes them cheap), matmuls through
//! cuBLAS (`addmm`'s bias through cuBLASLt's epilogue). Raw driver calls rather than cudarc's typed slices: the launcher deals in addresses,
//! and a launch must cost microseconds of host time.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{result, sys, CudaContext};
use guardless_codegen::cuda::Entry;
use guardless_ir::graph::DType;

use super::lt::Lt;
use crate::launch::{BlasGemm, Device, Gemm};

/// A stream, destroyed with the last allocation that uses it (when this runtime created it).
pub struct Stream {
    ctx: Arc<CudaContext>,
    raw: sys::CUstream,
    owned: bool,
}

// Driver handles may be used from any thread once the context is current there; every use
// binds it first.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.owned && self.ctx.bind_to_thread().is_ok() {
            unsafe {
                let _ = result::stream::synchronize(self.raw);
                let _ = result::stream::destroy(self.raw);
            }
        }
    }
}

/// Device memory, freed in stream order when dropped.
pub struct DeviceMemory {
    address: sys::CUdeviceptr,
    stream: Arc<Stream>,
    pooled: bool,
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        if self.stream.ctx.bind_to_thread().is_ok() {
            unsafe {
                let _ = if self.pooled {
                    result::free_async(self.address, self.stream.raw)
                } else {
                    result::free_sync(self.address)
                };
            }
        }
    }
}

pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<Stream>,
    modules: Vec<sys::CUmodule>,
    /// Per entry of the module index; `None` for variants without code.
    functions: Vec<Option<sys::CUfunction>>,
    blas: Option<blas_sys::cublasHandle_t>,
    lt: Option<Lt>,
    /// Matmuls with a bias that cuBLASLt's epilogue refused (the bias copied into the output,
    /// then the product added by cuBLAS instead), and why the last one was.
    pub epilogue_fallbacks: usize,
    pub epilogue_error: Option<String>,
    pooled: bool,
    /// Recorded calls (instantiated CUDA graphs); `None` once dropped.
    graphs: Vec<Option<sys::CUgraphExec>>,
}

fn err(what: &str, e: impl std::fmt::Debug) -> String {
    format!("{what}: {e:?}")
}

impl CudaDevice {
    /// Loads one CUBIN per translation unit and looks every entry's function up once.
    pub fn new(
        ctx: Arc<CudaContext>,
        cubins: &[Vec<u8>],
        entries: &[Entry],
    ) -> Result<Self, String> {
        ctx.bind_to_thread()
            .map_err(|e| err("binding the context", e))?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| err("creating a stream", e))?;
        let stream = Arc::new(Stream {
            ctx: ctx.clone(),
            raw,
            owned: true,
        });
        let mut modules = Vec::with_capacity(cubins.len());
        for (i, c) in cubins.iter().enumerate() {
            // The driver reads the image in place; it must outlive only this call.
            let m = unsafe { result::module::load_data(c.as_ptr() as *const c_void) }
                .map_err(|e| err(&format!("loading CUBIN {i}"), e))?;
            modules.push(m);
        }
        let mut functions = Vec::with_capacity(entries.len());
        for e in entries {
            if !e.generated {
                functions.push(None);
                continue;
            }
            let m = *modules
                .get(e.unit)
                .ok_or_else(|| format!("{}: translation unit {} has no CUBIN", e.name, e.unit))?;
            let name = CString::new(e.name.clone()).map_err(|x| err(&e.name, x))?;
            let f = unsafe { result::module::get_function(m, name) }
                .map_err(|x| err(&format!("function {}", e.name), x))?;
            functions.push(Some(f));
        }
        let pooled = ctx.has_async_alloc();
        Ok(CudaDevice {
            ctx,
            stream,
            modules,
            functions,
            blas: None,
            lt: None,
            epilogue_fallbacks: 0,
            epilogue_error: None,
            pooled,
            graphs: Vec::new(),
        })
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream every operation is queued on.
    pub fn raw_stream(&self) -> sys::CUstream {
        self.stream.raw
    }

    /// Queue work on `stream` (a caller's, torch's current stream say) instead of this device's
    /// own; the caller keeps it alive for as long as this device and its allocations.
    ///
    /// # Safety
    /// `stream` must be a valid stream of this device's context.
    pub unsafe fn use_stream(&mut self, stream: sys::CUstream) {
        self.stream = Arc::new(Stream {
            ctx: self.ctx.clone(),
            raw: stream,
            owned: false,
        });
        if let Some(h) = self.blas {
            let _ = blas::set_stream(h, stream as blas_sys::cudaStream_t);
        }
    }

    pub fn synchronize(&self) -> Result<(), String> {
        unsafe { result::stream::synchronize(self.stream.raw) }.map_err(|e| err("synchronizing", e))
    }

    fn blas(&mut self) -> Result<blas_sys::cublasHandle_t, String> {
        if let Some(h) = self.blas {
            return Ok(h);
        }
        let h = blas::create_handle().map_err(|e| err("creating a cuBLAS handle", e))?;
        unsafe { blas::set_stream(h, self.stream.raw as blas_sys::cudaStream_t) }
            .map_err(|e| err("cuBLAS stream", e))?;
        self.blas = Some(h);
        Ok(h)
    }

    /// Milliseconds between two points of the stream: `f` runs in between.
    pub fn time<F: FnMut(&mut Self) -> Result<(), String>>(
        &mut self,
        mut f: F,
    ) -> Result<f64, String> {
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let start = result::event::create(flags).map_err(|e| err("event", e))?;
        let end = result::event::create(flags).map_err(|e| err("event", e))?;
        let out = (|| {
            unsafe { result::event::record(start, self.stream.raw) }
                .map_err(|e| err("record", e))?;
            f(self)?;
            unsafe { result::event::record(end, self.stream.raw) }.map_err(|e| err("record", e))?;
            unsafe { result::event::synchronize(end) }.map_err(|e| err("event sync", e))?;
            unsafe { result::event::elapsed(start, end) }
                .map(f64::from)
                .map_err(|e| err("elapsed", e))
        })();
        unsafe {
            let _ = result::event::destroy(start);
            let _ = result::event::destroy(end);
        }
        out
    }
}

// As for `Stream`: modules, functions and the cuBLAS handle are driver handles, used with the
// context bound; `&mut self` keeps one thread at a time.
unsafe impl Send for CudaDevice {}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        let _ = self.synchronize();
        for g in self.graphs.drain(..).flatten() {
            let _ = unsafe { result::graph::exec_destroy(g) };
        }
        if let Some(h) = self.blas.take() {
            let _ = unsafe { blas::destroy_handle(h) };
        }
        self.lt = None;
        for m in self.modules.drain(..) {
            let _ = unsafe { result::module::unload(m) };
        }
    }
}

fn blas_type(d: DType) -> Option<(blas_sys::cudaDataType, blas_sys::cublasComputeType_t)> {
    use blas_sys::cublasComputeType_t as C;
    use blas_sys::cudaDataType as T;
    Some(match d {
        DType::F32 => (T::CUDA_R_32F, C::CUBLAS_COMPUTE_32F),
        DType::F64 => (T::CUDA_R_64F, C::CUBLAS_COMPUTE_64F),
        DType::F16 => (T::CUDA_R_16F, C::CUBLAS_COMPUTE_32F),
        DType::BF16 => (T::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F),
        _ => return None,
    })
}

impl Device for CudaDevice {
    type Memory = DeviceMemory;

    fn alloc(&mut self, bytes: usize, poison: bool) -> Result<DeviceMemory, String> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| err("binding the context", e))?;
        let bytes = bytes.max(1);
        let address = unsafe {
            if self.pooled {
                result::malloc_async(self.stream.raw, bytes)
            } else {
                result::malloc_sync(bytes)
            }
        }
        .map_err(|e| err(&format!("allocating {bytes} bytes"), e))?;
        let m = DeviceMemory {
            address,
            stream: self.stream.clone(),
            pooled: self.pooled,
        };
        if poison {
            self.fill(address, 0xFF, bytes)?;
        }
        Ok(m)
    }

    fn address(&self, m: &DeviceMemory) -> u64 {
        m.address
    }

    fn upload(&mut self, dst: u64, bytes: &[u8]) -> Result<(), String> {
        // From pageable memory the call returns once the bytes are staged: `bytes` may go.
        unsafe { result::memcpy_htod_async(dst, bytes, self.stream.raw) }
            .map_err(|e| err("copying to the device", e))
    }

    fn download(&mut self, src: u64, out: &mut [u8]) -> Result<(), String> {
        unsafe { result::memcpy_dtoh_async(out, src, self.stream.raw) }
            .map_err(|e| err("copying from the device", e))?;
        self.synchronize()
    }

    fn fill(&mut self, dst: u64, byte: u8, len: usize) -> Result<(), String> {
        unsafe { result::memset_d8_async(dst, byte, len, self.stream.raw) }
            .map_err(|e| err("filling device memory", e))
    }

    fn copy(&mut self, dst: u64, src: u64, len: usize) -> Result<(), String> {
        unsafe { result::memcpy_dtod_async(dst, src, len, self.stream.raw) }
            .map_err(|e| err("copying on the device", e))
    }

    fn launch(&mut self, entry: usize, grid: u32, block: u32, args: &[u64]) -> Result<(), String> {
        let f = self
            .functions
            .get(entry)
            .copied()
            .flatten()
            .ok_or_else(|| format!("entry {entry} has no function"))?;
        let mut values = args.to_vec();
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        unsafe {
            result::launch_kernel(
                f,
                (grid, 1, 1),
                (block, 1, 1),
                0,
                self.stream.raw,
                &mut params,
            )
        }
        .map_err(|e| err("launch", e))
    }

    fn begin_capture(&mut self) -> Result<(), String> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| err("binding the context", e))?;
        // Thread-local: other threads' CUDA calls are not this capture's business.
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        unsafe { result::stream::begin_capture(self.stream.raw, mode) }
            .map_err(|e| err("starting a CUDA graph capture", e))
    }

    fn end_capture(&mut self) -> Result<usize, String> {
        let graph = unsafe { result::stream::end_capture(self.stream.raw) }
            .map_err(|e| err("ending the CUDA graph capture", e))?;
        let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) };
        let _ = unsafe { result::graph::destroy(graph) };
        let exec = exec.map_err(|e| err("instantiating the CUDA graph", e))?;
        self.graphs.push(Some(exec));
        Ok(self.graphs.len() - 1)
    }

    fn replay(&mut self, recording: usize) -> Result<(), String> {
        let exec = self
            .graphs
            .get(recording)
            .copied()
            .flatten()
            .ok_or("no such recording")?;
        unsafe { result::graph::launch(exec, self.stream.raw) }
            .map_err(|e| err("launching the CUDA graph", e))
    }

    fn drop_recording(&mut self, recording: usize) {
        if let Some(exec) = self.graphs.get_mut(recording).and_then(Option::take) {
            let _ = unsafe { result::graph::exec_destroy(exec) };
        }
    }

    fn gemm(&mut self, g: &Gemm) -> Result<(), String> {
        let p = g.plan().ok_or("a layout cuBLAS cannot take")?;
        if p.bias.is_none() {
            return self.blas_gemm(&p, g.dtype, g.out_dtype, false);
        }
        if g.out_dtype != g.dtype {
            return Err("a bias epilogue into a wider output".into());
        }
        let stream = self.stream.raw;
        let done = match &mut self.lt {
            Some(lt) => lt.matmul_bias(&p, g.dtype, stream),
            None => Lt::new().and_then(|lt| self.lt.insert(lt).matmul_bias(&p, g.dtype, stream)),
        };
        if let Err(e) = done {
            // The bias copied into every row of the output, then the product added.
            self.epilogue_fallbacks += 1;
            self.epilogue_error = Some(e);
            let copies = g
                .bias_fill(g.dtype.size())
                .ok_or("a bias into an output with padded rows")?;
            for (dst, src, len) in copies {
                self.copy(dst, src, len)?;
            }
            return self.blas_gemm(&p, g.dtype, g.dtype, true);
        }
        Ok(())
    }
}

impl CudaDevice {
    /// `C = op(A)·op(B)`, or `C += op(A)·op(B)` when `accumulate`; `C` of dtype `out` (the
    /// operands' `dtype`, or f32 for 16-bit operands: the accumulator stored unrounded).
    fn blas_gemm(
        &mut self,
        p: &BlasGemm,
        dtype: DType,
        out: DType,
        accumulate: bool,
    ) -> Result<(), String> {
        let (ty, compute) = blas_type(dtype).ok_or("a dtype cuBLAS does not multiply here")?;
        let (out_ty, _) = blas_type(out).ok_or("a dtype cuBLAS does not store here")?;
        let h = self.blas()?;
        let op = |t: bool| {
            if t {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let b = f64::from(u8::from(accumulate));
        let (one32, beta32, one64, beta64) = (1.0f32, b as f32, 1.0f64, b);
        let (alpha, beta): (*const c_void, *const c_void) = if dtype == DType::F64 {
            (&one64 as *const f64 as _, &beta64 as *const f64 as _)
        } else {
            (&one32 as *const f32 as _, &beta32 as *const f32 as _)
        };
        unsafe {
            blas::gemm_strided_batched_ex(
                h,
                op(p.a.transposed),
                op(p.b.transposed),
                p.m,
                p.n,
                p.k,
                alpha,
                p.a.address as *const c_void,
                ty,
                p.a.ld,
                p.a.batch_stride,
                p.b.address as *const c_void,
                ty,
                p.b.ld,
                p.b.batch_stride,
                beta,
                p.c.address as *mut c_void,
                out_ty,
                p.c.ld,
                p.c.batch_stride,
                p.batch,
                compute,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| err("cuBLAS gemm", e))
    }
}
