//! Native host storage: each buffer's elements in its dtype's layout (f16/bf16 as 16-bit words,
//! bools as bytes), blocks 8-byte aligned, placed as the schedule's memory plan says.

use guardless_ir::graph::DType;
use guardless_ir::tensor::{Data, HostTensor};

/// One allocation: a slot of the memory plan, or a buffer's own storage; or an input read in
/// place from the caller's memory (never written).
#[derive(Default)]
pub struct Block {
    words: Vec<u64>,
    borrowed: Option<(*mut u8, usize)>,
}

// A borrowed block points into memory the caller keeps alive and unwritten for the session.
unsafe impl Send for Block {}
unsafe impl Sync for Block {}

impl Block {
    /// `bytes` bytes at `ptr`, owned by the caller.
    pub fn borrowed(ptr: *const u8, bytes: usize) -> Block {
        Block {
            words: Vec::new(),
            borrowed: Some((ptr as *mut u8, bytes)),
        }
    }

    pub fn is_borrowed(&self) -> bool {
        self.borrowed.is_some()
    }

    /// At least `bytes` bytes; fresh contents are 0xFF bytes (NaN, -1) when `poison`.
    pub fn ensure(&mut self, bytes: usize, poison: bool) {
        debug_assert!(self.borrowed.is_none(), "a borrowed block is never written");
        let words = bytes.div_ceil(8);
        if self.words.len() < words {
            let fill = if poison { u64::MAX } else { 0 };
            self.words = vec![fill; words];
        } else if poison {
            self.words.fill(u64::MAX);
        }
    }

    pub fn bytes(&self) -> usize {
        match self.borrowed {
            Some((_, n)) => n,
            None => self.words.len() * 8,
        }
    }

    pub fn ptr(&mut self) -> *mut u8 {
        match self.borrowed {
            Some((p, _)) => p,
            None => self.words.as_mut_ptr() as *mut u8,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self.borrowed {
            Some((_, 0)) => &[],
            Some((p, n)) => unsafe { std::slice::from_raw_parts(p, n) },
            None => unsafe {
                std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.words.len() * 8)
            },
        }
    }

    /// The block's bytes for writing; empty for a borrowed block.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        if self.borrowed.is_some() {
            return &mut [];
        }
        unsafe {
            std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.words.len() * 8)
        }
    }

    /// The owned storage, leaving the block empty (handed to the caller as an output).
    pub fn take_words(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.words)
    }
}

/// Element `i` of `bytes` (of dtype `d`) as f64 or i64.
pub fn read(bytes: &[u8], d: DType, i: usize) -> Either {
    let s = d.size();
    let b = &bytes[i * s..(i + 1) * s];
    match d {
        DType::F64 => Either::F(f64::from_le_bytes(b.try_into().expect("8 bytes"))),
        DType::F32 => Either::F(f32::from_le_bytes(b.try_into().expect("4 bytes")) as f64),
        DType::F16 => Either::F(half::f16::from_le_bytes(b.try_into().expect("2 bytes")).to_f64()),
        DType::BF16 => {
            Either::F(half::bf16::from_le_bytes(b.try_into().expect("2 bytes")).to_f64())
        }
        DType::I64 => Either::I(i64::from_le_bytes(b.try_into().expect("8 bytes"))),
        DType::I32 => Either::I(i32::from_le_bytes(b.try_into().expect("4 bytes")) as i64),
        DType::I8 => Either::I(b[0] as i8 as i64),
        DType::U8 => Either::I(b[0] as i64),
        DType::Bool => Either::I(i64::from(b[0] != 0)),
    }
}

#[derive(Copy, Clone)]
pub enum Either {
    F(f64),
    I(i64),
}

/// Writes element `i` (the value already of `d`'s range; floats rounded to nearest even).
pub fn write(bytes: &mut [u8], d: DType, i: usize, v: Either) {
    let s = d.size();
    let out = &mut bytes[i * s..(i + 1) * s];
    let (f, n) = match v {
        Either::F(x) => (x, x as i64),
        Either::I(x) => (x as f64, x),
    };
    match d {
        DType::F64 => out.copy_from_slice(&f.to_le_bytes()),
        DType::F32 => out.copy_from_slice(&(f as f32).to_le_bytes()),
        DType::F16 => out.copy_from_slice(&half::f16::from_f64(f).to_le_bytes()),
        DType::BF16 => out.copy_from_slice(&half::bf16::from_f64(f).to_le_bytes()),
        DType::I64 => out.copy_from_slice(&n.to_le_bytes()),
        DType::I32 => out.copy_from_slice(&(n as i32).to_le_bytes()),
        DType::I8 | DType::U8 => out[0] = n as u8,
        DType::Bool => out[0] = u8::from(n != 0),
    }
}

/// The first `n` elements of `bytes` as host data.
pub fn to_data(bytes: &[u8], d: DType, n: usize) -> Data {
    let n = n.min(bytes.len() / d.size());
    if d.is_float() {
        Data::Float(
            (0..n)
                .map(|i| match read(bytes, d, i) {
                    Either::F(x) => x,
                    Either::I(x) => x as f64,
                })
                .collect(),
        )
    } else {
        Data::Int(
            (0..n)
                .map(|i| match read(bytes, d, i) {
                    Either::I(x) => x,
                    Either::F(x) => x as i64,
                })
                .collect(),
        )
    }
}

/// Writes host data as elements of `d` from the start of `bytes`.
pub fn from_data(bytes: &mut [u8], d: DType, data: &Data) {
    match data {
        Data::Float(v) => v
            .iter()
            .enumerate()
            .for_each(|(i, &x)| write(bytes, d, i, Either::F(x))),
        Data::Int(v) => v
            .iter()
            .enumerate()
            .for_each(|(i, &x)| write(bytes, d, i, Either::I(x))),
    }
}

/// Steps `idx` to the next position of `sizes` in row-major order (wrapping to all zeros).
pub fn next_index(idx: &mut [i64], sizes: &[i64]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < sizes[d] {
            return;
        }
        idx[d] = 0;
    }
}

/// A caller's tensor against the graph's input: dtype, shape, strides that stay inside the bytes
/// given.
pub fn check_raw(t: &super::RawTensor, dtype: DType, sizes: &[i64]) -> Result<(), String> {
    if t.dtype != dtype {
        return Err(format!("dtype {}, the graph says {dtype}", t.dtype));
    }
    if t.shape.len() != sizes.len() || t.strides.len() != sizes.len() {
        return Err(format!(
            "{} dimensions ({} strides), the graph says {}",
            t.shape.len(),
            t.strides.len(),
            sizes.len()
        ));
    }
    if t.shape.iter().zip(sizes).any(|(&a, &b)| a as i64 != b) {
        return Err(format!("shape {:?}, the graph says {sizes:?}", t.shape));
    }
    let mut span = 1i64;
    for (&n, &s) in t.shape.iter().zip(&t.strides) {
        if s < 0 {
            return Err(format!("a negative stride {s}"));
        }
        span += (n as i64 - 1).max(0) * s;
    }
    let bytes = span as usize * dtype.size();
    if !t.shape.contains(&0) && (t.ptr.is_null() || bytes > t.bytes) {
        return Err(format!(
            "its strides {:?} reach {bytes} bytes, {} given",
            t.strides, t.bytes
        ));
    }
    Ok(())
}

/// A copy of a caller's tensor (checked with [`check_raw`]) as host data (the interpreter's input).
///
/// # Safety
/// `t.ptr` must point to `t.bytes` readable bytes.
#[cfg_attr(feature = "llvm", allow(dead_code))]
pub unsafe fn raw_to_host(t: &super::RawTensor) -> HostTensor {
    let numel: usize = t.shape.iter().product();
    let src: &[u8] = if numel == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(t.ptr, t.bytes) }
    };
    let mut fs = Vec::new();
    let mut is = Vec::new();
    let shape: Vec<i64> = t.shape.iter().map(|&n| n as i64).collect();
    let mut idx = vec![0i64; t.shape.len()];
    for _ in 0..numel {
        let at = idx
            .iter()
            .zip(&t.strides)
            .map(|(&i, &s)| i * s)
            .sum::<i64>() as usize;
        match read(src, t.dtype, at) {
            Either::F(x) => fs.push(x),
            Either::I(x) => is.push(x),
        }
        next_index(&mut idx, &shape);
    }
    let data = if t.dtype.is_float() {
        Data::Float(fs)
    } else {
        Data::Int(is)
    };
    HostTensor {
        dtype: t.dtype,
        shape: t.shape.clone(),
        data,
    }
}

/// Host tensors as native outputs: one contiguous storage each.
#[cfg_attr(feature = "llvm", allow(dead_code))]
pub fn host_to_native(outs: &[HostTensor], copied_input_bytes: usize) -> super::NativeOutputs {
    let mut native = super::NativeOutputs {
        copied_input_bytes,
        ..Default::default()
    };
    for t in outs {
        let mut words = vec![0u64; (t.numel() * t.dtype.size()).div_ceil(8)];
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, words.len() * 8)
        };
        from_data(bytes, t.dtype, &t.data);
        let mut strides = vec![1i64; t.shape.len()];
        for d in (0..t.shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * t.shape[d + 1] as i64;
        }
        native.outputs.push(super::OutputView {
            storage: super::OutputStorage::Owned(native.storages.len()),
            dtype: t.dtype,
            shape: t.shape.clone(),
            strides,
            offset: 0,
        });
        native.storages.push(words);
    }
    native
}
