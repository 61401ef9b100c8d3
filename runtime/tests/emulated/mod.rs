//! A device made of the CPU emulation of CUDA, for the launcher's tests: generated kernels
//! compiled as C++ (`codegen/tests/emu`), memory in host allocations, matmuls as a host loop
//! with the strides the launcher passes, CUDA-graph recording as a list of queued work.
#![allow(dead_code)]

use std::ffi::c_void;

use guardless_ir::graph::{DType, Graph};
use guardless_ir::sym::Bindings;
use guardless_ir::tensor::{Data, HostTensor};
use guardless_runtime::elements::{self, Either};
use guardless_runtime::launch::{
    Device, DeviceTensor, Executable, Gemm, Inputs, LaunchError, Session, SessionOptions,
};

use super::emu;

pub struct Emu {
    pub lib: emu::Compiled,
    pub names: Vec<String>,
    /// The functions launched, in order.
    pub launched: Vec<String>,
    /// Bytes moved by device-to-device copies.
    pub copied_bytes: usize,
    /// For each download (a wait for the device), how many functions had been launched.
    pub downloads: Vec<usize>,
    pub gemms: usize,
    /// Of them, with a bias row (`addmm`).
    pub biased: usize,
    /// While recording (as a CUDA graph capture does), queued work is kept, not run.
    pub recording: Option<Vec<Work>>,
    pub recordings: Vec<Vec<Work>>,
}

/// Device work as a recording keeps it.
#[derive(Clone)]
pub enum Work {
    Fill(u64, u8, usize),
    Copy(u64, u64, usize),
    Launch(usize, u32, u32, Vec<u64>),
    Gemm(Gemm),
}

impl Emu {
    /// Runs `w` now, or keeps it when recording.
    fn queue(&mut self, w: Work) -> Result<(), String> {
        if let Some(r) = &mut self.recording {
            r.push(w);
            return Ok(());
        }
        match w {
            Work::Fill(dst, byte, len) => {
                unsafe { std::ptr::write_bytes(dst as *mut u8, byte, len) };
            }
            Work::Copy(dst, src, len) => {
                self.copied_bytes += len;
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
            }
            Work::Launch(entry, grid, block, args) => self.run_launch(entry, grid, block, &args)?,
            Work::Gemm(g) => self.run_gemm(&g),
        }
        Ok(())
    }

    fn no_host_copies_while_recording(&self) -> Result<(), String> {
        match self.recording {
            Some(_) => Err("a host copy while recording".into()),
            None => Ok(()),
        }
    }
}

impl Emu {
    pub fn new(name: &str, exe: &Executable) -> Emu {
        Emu {
            lib: emu::build(name, &exe.program, &exe.module),
            names: exe.module.entries.iter().map(|e| e.name.clone()).collect(),
            launched: Vec::new(),
            copied_bytes: 0,
            downloads: Vec::new(),
            gemms: 0,
            biased: 0,
            recording: None,
            recordings: Vec::new(),
        }
    }
}

/// The element at `index` of the array of `dtype` at `address`.
pub unsafe fn read_at(address: u64, dtype: DType, index: i64) -> f64 {
    let s = dtype.size();
    let bytes = std::slice::from_raw_parts((address as *const u8).add(index as usize * s), s);
    match elements::read(bytes, dtype, 0) {
        Either::F(x) => x,
        Either::I(x) => x as f64,
    }
}

impl Device for Emu {
    type Memory = Vec<u128>;

    fn alloc(&mut self, bytes: usize, poison: bool) -> Result<Vec<u128>, String> {
        Ok(vec![
            if poison { u128::MAX } else { 0 };
            bytes.div_ceil(16).max(1)
        ])
    }
    fn address(&self, m: &Vec<u128>) -> u64 {
        m.as_ptr() as u64
    }
    fn upload(&mut self, dst: u64, bytes: &[u8]) -> Result<(), String> {
        self.no_host_copies_while_recording()?;
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len()) };
        Ok(())
    }
    fn download(&mut self, src: u64, out: &mut [u8]) -> Result<(), String> {
        self.no_host_copies_while_recording()?;
        self.downloads.push(self.launched.len());
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    fn fill(&mut self, dst: u64, byte: u8, len: usize) -> Result<(), String> {
        self.queue(Work::Fill(dst, byte, len))
    }
    fn copy(&mut self, dst: u64, src: u64, len: usize) -> Result<(), String> {
        self.queue(Work::Copy(dst, src, len))
    }
    fn launch(&mut self, entry: usize, grid: u32, block: u32, args: &[u64]) -> Result<(), String> {
        self.queue(Work::Launch(entry, grid, block, args.to_vec()))
    }
    fn gemm(&mut self, g: &Gemm) -> Result<(), String> {
        self.queue(Work::Gemm(g.clone()))
    }
    fn begin_capture(&mut self) -> Result<(), String> {
        self.recording = Some(Vec::new());
        Ok(())
    }
    fn end_capture(&mut self) -> Result<usize, String> {
        let r = self.recording.take().ok_or("not recording")?;
        self.recordings.push(r);
        Ok(self.recordings.len() - 1)
    }
    fn replay(&mut self, recording: usize) -> Result<(), String> {
        for w in self.recordings[recording].clone() {
            self.queue(w)?;
        }
        Ok(())
    }
}

impl Emu {
    fn run_launch(
        &mut self,
        entry: usize,
        grid: u32,
        block: u32,
        args: &[u64],
    ) -> Result<(), String> {
        let mut values = args.to_vec();
        let mut pointers: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        let name = format!("gl_run_{}", self.names[entry]);
        let f: libloading::Symbol<unsafe extern "C" fn(u32, u32, *mut *mut c_void)> =
            unsafe { self.lib.lib.get(name.as_bytes()) }.map_err(|e| e.to_string())?;
        unsafe { f(grid, block, pointers.as_mut_ptr()) };
        self.launched.push(self.names[entry].clone());
        Ok(())
    }
    fn run_gemm(&mut self, g: &Gemm) {
        // f64 accumulation and one rounding, as the reference does; cuBLAS with f32
        // accumulation lands within the dtype tolerance of it.
        self.gemms += 1;
        self.biased += usize::from(g.bias.is_some());
        let d = g.dtype;
        for bi in 0..g.batch {
            for i in 0..g.c.rows {
                for j in 0..g.c.cols {
                    // addmm: the bias row starts the sum (one rounding, as cuBLASLt's epilogue).
                    let mut acc = match g.bias {
                        Some(bias) => unsafe { read_at(bias, d, j) },
                        None => 0.0,
                    };
                    for l in 0..g.a.cols {
                        let a = bi * g.a.batch_stride + i * g.a.row_stride + l * g.a.col_stride;
                        let b = bi * g.b.batch_stride + l * g.b.row_stride + j * g.b.col_stride;
                        acc += unsafe { read_at(g.a.address, d, a) * read_at(g.b.address, d, b) };
                    }
                    let at = bi * g.c.batch_stride + i * g.c.row_stride + j * g.c.col_stride;
                    let out = unsafe {
                        std::slice::from_raw_parts_mut(
                            (g.c.address as *mut u8).add(at as usize * g.out_dtype.size()),
                            g.out_dtype.size(),
                        )
                    };
                    elements::write(out, g.out_dtype, 0, Either::F(acc));
                }
            }
        }
    }
}

pub fn example(name: &str) -> Graph {
    let path = format!(
        "{}/../examples/graphs/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    Graph::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub fn run(
    dev: &mut Emu,
    exe: &Executable,
    inputs: Inputs,
    b: &Bindings,
) -> Result<(Vec<HostTensor>, usize, usize), LaunchError> {
    let options = SessionOptions { poison: true };
    let mut s = Session::new(dev, exe, inputs, b, &options)?;
    s.execute(dev)?;
    let out = s.outputs(dev)?;
    Ok((out, s.host_steps, s.copied_input_bytes))
}

/// `t` on the "device": its storage (to keep while it is used) and the tensor — row-major, or
/// (`transposed`, 2-D) the same values stored column-major.
pub fn to_device(dev: &mut Emu, t: &HostTensor, transposed: bool) -> (Vec<u128>, DeviceTensor) {
    let (index, strides): (Box<dyn Fn(usize) -> usize>, Vec<i64>) = if transposed {
        let (r, c) = (t.shape[0], t.shape[1]);
        (Box::new(move |i| (i % r) * c + i / r), vec![1, r as i64])
    } else {
        let mut st = vec![1i64; t.shape.len()];
        for d in (0..t.shape.len().saturating_sub(1)).rev() {
            st[d] = st[d + 1] * t.shape[d + 1] as i64;
        }
        (Box::new(|i| i), st)
    };
    let n = t.numel();
    let stored = match &t.data {
        Data::Int(v) => {
            let v: Vec<i64> = (0..n).map(|i| v[index(i)]).collect();
            HostTensor::from_i64(t.dtype, &[n], &v)
        }
        Data::Float(v) => {
            let v: Vec<f64> = (0..n).map(|i| v[index(i)]).collect();
            HostTensor::from_f64(t.dtype, &[n], &v)
        }
    };
    let bytes = elements::to_bytes(&stored);
    let m = dev.alloc(bytes.len(), false).unwrap();
    dev.upload(dev.address(&m), &bytes).unwrap();
    let tensor = DeviceTensor {
        address: dev.address(&m),
        bytes: bytes.len(),
        dtype: t.dtype,
        shape: t.shape.clone(),
        strides,
    };
    (m, tensor)
}

/// A row-major device tensor's values, on the host.
pub fn download(dev: &mut Emu, t: &DeviceTensor) -> HostTensor {
    let n: usize = t.shape.iter().product();
    let mut bytes = vec![0u8; n * t.dtype.size()];
    dev.download(t.address, &mut bytes).unwrap();
    HostTensor {
        dtype: t.dtype,
        shape: t.shape.clone(),
        data: elements::to_data(&bytes, t.dtype, n),
    }
}

/// Runs `g` on `dev` with host `inputs` and compares every output with the reference executor
/// (`assert_close`); the outputs and the host steps.
pub fn compare(
    what: &str,
    dev: &mut Emu,
    exe: &Executable,
    g: &Graph,
    inputs: &[HostTensor],
    b: &Bindings,
) -> (Vec<HostTensor>, usize) {
    let want = guardless_ir::reference::run(g, inputs, b).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (got, host_steps, _) =
        run(dev, exe, Inputs::Host(inputs), b).unwrap_or_else(|e| panic!("{what}: {e}"));
    let ideal = || guardless_ir::reference::run_unrounded(g, inputs, b).unwrap();
    super::differential::assert_accurate(what, &got, &want, &ideal);
    (got, host_steps)
}
