//! Elements in their dtype's byte layout (little-endian; f16/bf16 as 16-bit words, bools as
//! bytes): the conversions between device or native storage and host data that every backend
//! shares.

use guardless_ir::graph::DType;
use guardless_ir::tensor::{Data, HostTensor};

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

/// A host tensor's elements, row-major, in its dtype's byte layout.
pub fn to_bytes(t: &guardless_ir::tensor::HostTensor) -> Vec<u8> {
    let mut bytes = vec![0u8; t.numel() * t.dtype.size()];
    from_data(&mut bytes, t.dtype, &t.data);
    bytes
}

/// Writes `src`'s elements (row-major) into `dst` at `off` + index · `strides` (elements of
/// `src.dtype`); an element outside `dst` is an error.
pub fn scatter(dst: &mut [u8], off: i64, strides: &[i64], src: &HostTensor) -> Result<(), String> {
    let size = src.dtype.size();
    let sizes: Vec<i64> = src.shape.iter().map(|&n| n as i64).collect();
    let mut idx = vec![0i64; sizes.len()];
    for e in 0..src.numel() {
        let at = off + idx.iter().zip(strides).map(|(&i, &s)| i * s).sum::<i64>();
        if at < 0 || (at as usize + 1) * size > dst.len() {
            return Err(format!("write out of bounds at element {at}"));
        }
        let v = match &src.data {
            Data::Float(v) => Either::F(v[e]),
            Data::Int(v) => Either::I(v[e]),
        };
        write(dst, src.dtype, at as usize, v);
        next_index(&mut idx, &sizes);
    }
    Ok(())
}
