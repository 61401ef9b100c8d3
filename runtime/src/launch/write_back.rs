//! Outputs that mutate an input, written back into it after the call's kernels.

use super::{dev, download_strided, Device, DeviceTensor, LaunchError, Session, Storage};
use crate::elements;

impl<D: Device> Session<'_, D> {
    /// Outputs that mutate an input, copied into it after every kernel (in stream order): into
    /// the session's storage of the input (the caller's memory when it was read in place; a
    /// later `execute` reads the new values) and, for a device input that was copied in, into
    /// the caller's tensor too.
    pub(super) fn write_back(&mut self, dev_: &mut D) -> Result<(), LaunchError> {
        let p = &self.exe.program;
        for w in &p.writes_back {
            let Some(input) = p.input_buffer(w.input) else {
                continue;
            };
            let src = self.view(dev_, p.outputs[w.output])?;
            let dst = self.view(dev_, input)?;
            copy_tensor(dev_, &src, &dst)?;
            let borrowed = matches!(
                self.storage[self.home[input.index()]],
                Storage::Borrowed(..)
            );
            if let (false, Some(t)) = (borrowed, self.device_inputs.get(w.input)) {
                copy_tensor(dev_, &src, t)?;
            }
        }
        Ok(())
    }
}

/// Copies `src`'s elements into `dst` (same dtype and shape): nothing when they are the same
/// elements, one device copy when both are dense in the same order and do not overlap, else
/// through the host (reading `dst` first so
/// the bytes between its elements stay).
fn copy_tensor<D: Device>(
    dev_: &mut D,
    src: &DeviceTensor,
    dst: &DeviceTensor,
) -> Result<(), LaunchError> {
    let size = src.dtype.size();
    let numel: usize = src.shape.iter().product();
    // Nothing to copy: empty, or the output already lies in the input (a scatter in place).
    if numel == 0 || (src.address == dst.address && src.strides == dst.strides) {
        return Ok(());
    }
    let dense = |t: &DeviceTensor| {
        let mut want = 1i64;
        t.shape.iter().zip(&t.strides).rev().all(|(&n, &s)| {
            let ok = n == 1 || s == want;
            want *= n as i64;
            ok
        })
    };
    let bytes = (numel * size) as u64;
    let apart = src.address + bytes <= dst.address || dst.address + bytes <= src.address;
    if dense(src) && dense(dst) && apart {
        return dev(dev_.copy(dst.address, src.address, bytes as usize));
    }
    let value = download_strided(dev_, src)?;
    let mut out = vec![0u8; dst.extent().map_err(LaunchError::Device)? * size];
    dev(dev_.download(dst.address, &mut out))?;
    elements::scatter(&mut out, 0, &dst.strides, &value).map_err(LaunchError::Device)?;
    dev(dev_.upload(dst.address, &out))
}
