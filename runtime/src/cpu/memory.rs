//! Native host storage: each buffer's elements in its dtype's layout (f16/bf16 as 16-bit words,
//! bools as bytes), blocks 8-byte aligned, placed as the schedule's memory plan says.

use guardless_ir::graph::DType;
use guardless_ir::tensor::{Data, HostTensor};

/// One allocation: a slot of the memory plan, or a buffer's own storage; or an input read in
/// place from the caller's memory (written only when an output mutates that input).
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

    /// The bytes of the caller's memory behind a borrowed block, for writing an output back
    /// into it (the one write a borrowed block takes); `None` for an owned block.
    ///
    /// # Safety
    /// The caller's memory must be writable and unused by anything else during the call.
    pub unsafe fn borrowed_mut(&mut self) -> Option<&mut [u8]> {
        match self.borrowed {
            Some((_, 0)) => Some(&mut []),
            Some((p, n)) => Some(unsafe { std::slice::from_raw_parts_mut(p, n) }),
            None => None,
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

use crate::elements::{from_data, next_index, read, Either};

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
        written_back_bytes: 0,
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

/// Writes `src` into the caller's tensor `t` through its strides (an output written back into
/// an input the caller passed in place).
///
/// # Safety
/// `t` must point to `t.bytes` writable bytes that nothing else uses during the call.
pub unsafe fn write_raw(t: &super::RawTensor, src: &HostTensor) -> Result<(), String> {
    if src.numel() == 0 {
        return Ok(());
    }
    let dst = unsafe { std::slice::from_raw_parts_mut(t.ptr as *mut u8, t.bytes) };
    crate::elements::scatter(dst, 0, &t.strides, src)
}
