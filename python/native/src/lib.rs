//! `guardless._native`: the Rust library inside the Python process. `compile` lowers, schedules
//! and JIT-compiles a graph once (a backed graph again for a call that breaks its guards:
//! `recompiles` counts those); `CompiledGraph.run` runs it on tensors given by data pointer
//! (read in place) and hands each output's storage to Python as a NumPy array that owns it, so
//! neither inputs nor outputs are copied. `compile_cuda` does the same for GPU 0 (`CompiledGpuGraph`:
//! torch CUDA tensors read in place, outputs copied once on torch's stream into buffers torch
//! allocates). `guardless.backend` (python/guardless/dynamo.py) wraps
//! this for `torch.compile`.

use std::time::Instant;

use guardless_ir::graph::{DType, Graph};
use guardless_ir::reference;
use guardless_ir::sym::Bindings;
use guardless_runtime::cpu::{CpuProgram, OutputStorage, RawTensor, RunOptions};
use guardless_runtime::cuda::CudaProgram;
use guardless_runtime::launch::{Device, DeviceTensor, Inputs, Session, SessionOptions};
use guardless_runtime::specialize::Specializations;
use numpy::PyArray1;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(
    _native,
    GuardlessError,
    PyException,
    "A graph guardless cannot compile, or a call it cannot run (the message names the node, input, symbol or assert)."
);

fn error(e: impl std::fmt::Display) -> PyErr {
    GuardlessError::new_err(e.to_string())
}

/// A graph compiled for this process's CPU: a backed graph once for every set of sizes its
/// guards allow (a call that breaks them compiles another specialization and counts a
/// recompile); an unbacked graph once.
#[pyclass(frozen, module = "guardless._native")]
struct CompiledGraph {
    graph: Graph,
    cpu: std::sync::Mutex<Specializations<CpuProgram>>,
    backend: &'static str,
    cache_use: String,
    kernels: usize,
    compile_seconds: f64,
}

/// The graph of the JSON text (docs/graph-format.md) and its loop-level program.
fn parse_and_lower(text: &str) -> Result<(Graph, guardless_ir::loop_ir::Program), String> {
    let graph = Graph::from_json(text).map_err(|e| e.to_string())?;
    let program = guardless_ir::lower::lower(&graph).map_err(|e| e.to_string())?;
    Ok((graph, program))
}

/// Compiles a graph (the JSON text of docs/graph-format.md) for the CPU backend.
#[pyfunction]
fn compile(py: Python<'_>, graph_json: &str) -> PyResult<CompiledGraph> {
    let text = graph_json.to_owned();
    py.detach(move || {
        let start = Instant::now();
        let (graph, program) = parse_and_lower(&text)?;
        let cpu = CpuProgram::compile(program).map_err(|e| e.to_string())?;
        Ok(CompiledGraph {
            backend: cpu.backend(),
            cache_use: cpu.cache_use(),
            kernels: cpu.schedule.kernels.len(),
            cpu: std::sync::Mutex::new(Specializations::new(graph.clone(), cpu)),
            graph,
            compile_seconds: start.elapsed().as_secs_f64(),
        })
    })
    .map_err(|e: String| error(e))
}

/// One input as Python passes it: data pointer, bytes readable from it, dtype name, shape and
/// strides (elements).
type PyRawInput = (usize, usize, String, Vec<usize>, Vec<i64>);

/// Each output as Python receives it: an output in storage of its own is a NumPy array of its
/// dtype, shape and strides viewing that storage (which the array keeps alive; bf16, which NumPy
/// lacks, as `("bf16", uint16 array)`); an output that is a view of input `k` is
/// `("input", k, dtype, shape, strides, offset)` (elements). Then the input bytes copied and the
/// output bytes written back into inputs they mutate (0 when computed in place).
type RunResult<'py> = (Vec<Bound<'py, PyAny>>, usize, usize);

/// The pointers in the inputs are only read, and the caller keeps them alive during the call.
struct CallInputs(Vec<RawTensor>);
unsafe impl Send for CallInputs {}

#[pymethods]
impl CompiledGraph {
    /// `llvm` (native kernels) or `interpreter`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }

    /// The first specialization's kernels.
    #[getter]
    fn kernels(&self) -> usize {
        self.kernels
    }

    /// Where the first specialization's native code came from: `hit` (the disk cache: LLVM did
    /// not run), `stored` (compiled and stored there), `off: why` (compiled, not cached), or
    /// `interpreter`.
    #[getter]
    fn cache_use(&self) -> &str {
        &self.cache_use
    }

    /// Calls that broke every compiled specialization's guards and compiled another.
    #[getter]
    fn recompiles(&self) -> usize {
        self.cpu.lock().map_or(0, |s| s.recompiles())
    }

    #[getter]
    fn compile_seconds(&self) -> f64 {
        self.compile_seconds
    }

    /// The graph's inputs as `(name, dtype)`.
    #[getter]
    fn inputs(&self) -> Vec<(String, String)> {
        self.graph
            .inputs
            .iter()
            .map(|i| (i.name.clone(), i.dtype.to_string()))
            .collect()
    }

    /// Runs the graph. `inputs` as [`PyRawInput`]; `symbols` gives values of symbols no input
    /// dimension determines. Returns [`RunResult`]: the outputs (NumPy arrays viewing storage the
    /// library wrote, or views of inputs), the input bytes that had to be copied (inputs whose
    /// layout is not the graph's), and the bytes of outputs written back whole into inputs they
    /// mutate (0 when computed in place).
    ///
    /// The caller must keep every input tensor alive and unmodified during the call.
    #[pyo3(signature = (inputs, symbols=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<PyRawInput>,
        symbols: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<RunResult<'py>> {
        let given = bindings_of(&self.graph, symbols)?;
        let mut raw = Vec::with_capacity(inputs.len());
        for (k, (ptr, bytes, dtype, shape, strides)) in inputs.into_iter().enumerate() {
            let dtype = DType::from_name(&dtype)
                .ok_or_else(|| error(format!("input {k}: unknown dtype '{dtype}'")))?;
            raw.push(RawTensor {
                ptr: ptr as *const u8,
                bytes,
                dtype,
                shape,
                strides,
            });
        }
        let call = CallInputs(raw);
        let native = py
            .detach(move || {
                let call = call;
                let shapes: Vec<(DType, &[usize])> =
                    call.0.iter().map(|t| (t.dtype, &t.shape[..])).collect();
                let bindings = reference::bind_shapes(&self.graph, &shapes, &given)
                    .map_err(|e| e.to_string())?;
                let mut specs = self
                    .cpu
                    .lock()
                    .map_err(|_| "a previous call panicked".to_string())?;
                let cpu = specs
                    .select_lowered(&bindings, CpuProgram::compile)?
                    .artifact;
                // Safety: the caller keeps the tensors alive and unwritten (documented above).
                unsafe { cpu.run_raw(&call.0, &bindings, &RunOptions::default()) }
                    .map_err(|e| e.to_string())
            })
            .map_err(|e: String| error(format!("{}: {e}", self.graph.name)))?;
        let storages: Vec<Bound<'py, PyArray1<u64>>> = native
            .storages
            .into_iter()
            .map(|words| PyArray1::from_vec(py, words))
            .collect();
        let outputs = native
            .outputs
            .iter()
            .map(|o| match o.storage {
                OutputStorage::Owned(k) => output_array(&storages[k], o)
                    .map_err(|e| error(format!("{}: {e}", self.graph.name))),
                OutputStorage::Input(k) => Ok((
                    "input",
                    k,
                    o.dtype.to_string(),
                    o.shape.clone(),
                    o.strides.clone(),
                    o.offset,
                )
                    .into_pyobject(py)?
                    .into_any()),
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok((
            outputs,
            native.copied_input_bytes,
            native.written_back_bytes,
        ))
    }
}

/// Output `o` as a NumPy array of its dtype (bf16 as `("bf16", uint16 array)`), shape and
/// strides viewing `storage` from its offset, which it keeps alive. Every element it reaches must
/// lie inside the storage.
fn output_array<'py>(
    storage: &Bound<'py, PyArray1<u64>>,
    o: &guardless_runtime::cpu::OutputView,
) -> Result<Bound<'py, PyAny>, String> {
    use numpy::ndarray::{ArrayViewD, IxDyn, ShapeBuilder};
    let size = o.dtype.size();
    let bytes = numpy::PyUntypedArrayMethods::len(storage) * 8;
    let layout = guardless_ir::loop_ir::LayoutValues {
        sizes: o.shape.iter().map(|&n| n as i64).collect(),
        offset: o.offset,
        strides: o.strides.clone(),
    };
    let extent = layout.extent()?;
    if extent as u128 * size as u128 > bytes as u128 {
        return Err(format!(
            "an output of shape {:?}, strides {:?} and offset {} reaches past its storage of {bytes} bytes",
            o.shape, o.strides, o.offset
        ));
    }
    let empty = extent == 0;
    let base = storage.as_any().clone();
    let strides: Vec<usize> = o.strides.iter().map(|&s| s as usize).collect();
    let shape = IxDyn(&o.shape).strides(IxDyn(&strides));
    let start = if empty { 0 } else { o.offset as usize * size };
    let py = storage.py();
    // Safety: every element of the view lies inside the storage (checked above), which `base`
    // owns and the returned array keeps alive; the storage is never reallocated.
    unsafe {
        let at = (numpy::PyArrayMethods::data(storage) as *const u8).add(start);
        macro_rules! view {
            ($t:ty) => {
                numpy::PyArray::borrow_from_array(
                    &ArrayViewD::<$t>::from_shape_ptr(shape, at as *const $t),
                    base,
                )
                .into_any()
            };
        }
        Ok(match o.dtype {
            DType::F64 => view!(f64),
            DType::F32 => view!(f32),
            DType::F16 => view!(half::f16),
            DType::BF16 => ("bf16", view!(u16))
                .into_pyobject(py)
                .map_err(|e| e.to_string())?
                .into_any(),
            DType::I64 => view!(i64),
            DType::I32 => view!(i32),
            DType::I8 => view!(i8),
            DType::U8 => view!(u8),
            DType::Bool => view!(bool),
        })
    }
}

/// Whether a CUDA driver and a GPU are present.
#[pyfunction]
fn cuda_available() -> bool {
    guardless_runtime::cuda::available()
}

/// A graph compiled for GPU 0 (the GPU runtime; torch's tensors on `cuda:0`).
#[pyclass(frozen, module = "guardless._native")]
struct CompiledGpuGraph {
    graph: Graph,
    gpu: std::sync::Mutex<Specializations<CudaProgram>>,
    kernels: usize,
    arch: String,
    compile_seconds: f64,
}

/// Compiles a graph for GPU 0 (NVRTC through the disk cache).
#[pyfunction]
fn compile_cuda(py: Python<'_>, graph_json: &str) -> PyResult<CompiledGpuGraph> {
    let text = graph_json.to_owned();
    py.detach(move || {
        let start = Instant::now();
        let (graph, program) = parse_and_lower(&text)?;
        let gpu = CudaProgram::compile(program).map_err(|e| e.to_string())?;
        Ok(CompiledGpuGraph {
            kernels: gpu.exe.schedule.kernels.len(),
            arch: gpu.arch.clone(),
            gpu: std::sync::Mutex::new(Specializations::new(graph.clone(), gpu)),
            graph,
            compile_seconds: start.elapsed().as_secs_f64(),
        })
    })
    .map_err(|e: String| error(e))
}

/// One output of a GPU call: dtype, shape, strides, offset (elements) into its buffer.
type PyGpuOutput = (String, Vec<usize>, Vec<i64>, i64);

#[pymethods]
impl CompiledGpuGraph {
    #[getter]
    fn backend(&self) -> &'static str {
        "cuda"
    }

    #[getter]
    fn arch(&self) -> String {
        self.arch.clone()
    }

    #[getter]
    fn kernels(&self) -> usize {
        self.kernels
    }

    #[getter]
    fn compile_seconds(&self) -> f64 {
        self.compile_seconds
    }

    /// Calls that broke every compiled specialization's guards and compiled another.
    #[getter]
    fn recompiles(&self) -> usize {
        self.gpu.lock().map_or(0, |s| s.recompiles())
    }

    /// Runs the graph on tensors on GPU 0, queued on `stream` (a `CUstream` handle: torch's
    /// current stream). Inputs are read in place where their layout is the graph's. `alloc` is
    /// called with one byte count per output and returns the device addresses of fresh buffers of
    /// those sizes (torch allocates them); each output's storage is copied there on the stream.
    /// Returns one [`PyGpuOutput`] per output (a view of buffer i) and the input bytes copied.
    ///
    /// The caller keeps the inputs alive and unwritten until the stream has run the call.
    #[pyo3(signature = (inputs, symbols, stream, alloc))]
    fn run(
        &self,
        inputs: Vec<PyRawInput>,
        symbols: Option<&Bound<'_, PyDict>>,
        stream: usize,
        alloc: &Bound<'_, PyAny>,
    ) -> PyResult<(Vec<PyGpuOutput>, usize)> {
        let given = bindings_of(&self.graph, symbols)?;
        let mut tensors = Vec::with_capacity(inputs.len());
        for (k, (ptr, bytes, dtype, shape, strides)) in inputs.into_iter().enumerate() {
            let dtype = DType::from_name(&dtype)
                .ok_or_else(|| error(format!("input {k}: unknown dtype '{dtype}'")))?;
            tensors.push(DeviceTensor {
                address: ptr as u64,
                bytes,
                dtype,
                shape,
                strides,
            });
        }
        let shapes: Vec<(DType, &[usize])> =
            tensors.iter().map(|t| (t.dtype, &t.shape[..])).collect();
        let name = &self.graph.name;
        let fail = |e: String| error(format!("{name}: {e}"));
        let bindings = reference::bind_shapes(&self.graph, &shapes, &given)
            .map_err(|e| fail(e.to_string()))?;
        let mut specs = self
            .gpu
            .lock()
            .map_err(|_| fail("a previous call panicked".into()))?;
        let gpu = specs
            .select_lowered(&bindings, CudaProgram::compile)
            .map_err(fail)?
            .artifact;
        let (exe, dev) = gpu.parts();
        // Safety: torch's stream of the same (primary) context, alive for the call.
        unsafe { dev.use_stream(stream as _) };
        let options = SessionOptions::default();
        let mut s = Session::new(dev, exe, Inputs::Device(&tensors), &bindings, &options)
            .map_err(|e| fail(e.to_string()))?;
        s.execute(dev).map_err(|e| fail(e.to_string()))?;
        let views = s.output_views(dev).map_err(|e| fail(e.to_string()))?;
        // Each output's storage from its first element to the last its strides reach.
        let spans: Vec<usize> = views
            .iter()
            .map(|v| v.extent().map(|n| n * v.dtype.size()).map_err(fail))
            .collect::<PyResult<_>>()?;
        let buffers: Vec<usize> = alloc.call1((spans.clone(),))?.extract()?;
        if buffers.len() != views.len() {
            return Err(fail(format!(
                "alloc returned {} buffers for {} outputs",
                buffers.len(),
                views.len()
            )));
        }
        for ((v, &n), &to) in views.iter().zip(&spans).zip(&buffers) {
            if n > 0 {
                dev.copy(to as u64, v.address, n).map_err(fail)?;
            }
        }
        let copied = s.copied_input_bytes;
        // The session's memory is freed in stream order, after the copies.
        drop(s);
        let outputs = views
            .into_iter()
            .map(|v| (v.dtype.to_string(), v.shape, v.strides, 0))
            .collect();
        Ok((outputs, copied))
    }
}

/// Symbol values given by name.
fn bindings_of(graph: &Graph, symbols: Option<&Bound<'_, PyDict>>) -> PyResult<Bindings> {
    let mut given = Bindings::default();
    if let Some(d) = symbols {
        for (k, v) in d.iter() {
            let name: String = k.extract()?;
            let value: i64 = v.extract()?;
            let id = graph
                .env
                .symbol_id(&name)
                .ok_or_else(|| error(format!("symbol '{name}' is not in the graph")))?;
            given.set(id, value);
        }
    }
    Ok(given)
}

/// The `guardless` command line (`argv`: the program's name, then its arguments), as the binary
/// runs it: prints its output and errors, returns the exit status. `pip install` puts it on the
/// PATH as `guardless` (python/guardless/cli.py).
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(move || guardless::cli::main_with_args(argv))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_class::<CompiledGraph>()?;
    m.add_function(wrap_pyfunction!(compile_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_available, m)?)?;
    m.add_class::<CompiledGpuGraph>()?;
    m.add("GuardlessError", m.py().get_type::<GuardlessError>())?;
    Ok(())
}
