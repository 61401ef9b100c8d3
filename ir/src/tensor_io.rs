//! Host tensors on disk, as safetensors files (the format's tensors: inputs, outputs, weights).

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::graph::DType;
use crate::tensor::{Data, HostTensor};

fn to_st(d: DType) -> Dtype {
    match d {
        DType::F64 => Dtype::F64,
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        DType::Bool => Dtype::BOOL,
    }
}

fn from_st(d: Dtype) -> Option<DType> {
    DType::ALL.into_iter().find(|&x| to_st(x) == d)
}

/// The little-endian bytes of a tensor.
pub fn to_bytes(t: &HostTensor) -> Vec<u8> {
    let mut out = Vec::with_capacity(t.numel() * t.dtype.size());
    match &t.data {
        Data::Float(v) => {
            for &x in v {
                match t.dtype {
                    DType::F64 => out.extend_from_slice(&x.to_le_bytes()),
                    DType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
                    DType::F16 => out.extend_from_slice(&half::f16::from_f64(x).to_le_bytes()),
                    _ => out.extend_from_slice(&half::bf16::from_f64(x).to_le_bytes()),
                }
            }
        }
        Data::Int(v) => {
            for &x in v {
                match t.dtype {
                    DType::I64 => out.extend_from_slice(&x.to_le_bytes()),
                    DType::I32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
                    DType::I8 => out.extend_from_slice(&(x as i8).to_le_bytes()),
                    _ => out.push(x as u8),
                }
            }
        }
    }
    out
}

/// A tensor from little-endian bytes.
pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<HostTensor, String> {
    let n: usize = shape.iter().product();
    if bytes.len() != n * dtype.size() {
        return Err(format!("{} bytes for {n} elements of {dtype}", bytes.len()));
    }
    let chunks = bytes.chunks_exact(dtype.size());
    let data = match dtype {
        DType::F64 => Data::Float(
            chunks
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        ),
        DType::F32 => Data::Float(
            chunks
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")) as f64)
                .collect(),
        ),
        DType::F16 => Data::Float(
            chunks
                .map(|c| half::f16::from_le_bytes(c.try_into().expect("2 bytes")).to_f64())
                .collect(),
        ),
        DType::BF16 => Data::Float(
            chunks
                .map(|c| half::bf16::from_le_bytes(c.try_into().expect("2 bytes")).to_f64())
                .collect(),
        ),
        DType::I64 => Data::Int(
            chunks
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        ),
        DType::I32 => Data::Int(
            chunks
                .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as i64)
                .collect(),
        ),
        DType::I8 => Data::Int(chunks.map(|c| c[0] as i8 as i64).collect()),
        DType::U8 => Data::Int(chunks.map(|c| c[0] as i64).collect()),
        DType::Bool => Data::Int(chunks.map(|c| i64::from(c[0] != 0)).collect()),
    };
    Ok(HostTensor {
        dtype,
        shape: shape.to_vec(),
        data,
    })
}

/// Reads every tensor of a safetensors file, by name.
pub fn read(path: &Path) -> Result<HashMap<String, HostTensor>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{}: not a safetensors file: {e}", path.display()))?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let dtype = from_st(view.dtype()).ok_or_else(|| {
            format!(
                "{}: tensor '{name}' has dtype {:?}, which guardless does not read",
                path.display(),
                view.dtype()
            )
        })?;
        let t = from_bytes(dtype, view.shape(), view.data())
            .map_err(|e| format!("{}: tensor '{name}': {e}", path.display()))?;
        out.insert(name, t);
    }
    Ok(out)
}

/// Writes named tensors to a safetensors file.
pub fn write(path: &Path, tensors: &[(String, HostTensor)]) -> Result<(), String> {
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|(_, t)| to_bytes(t)).collect();
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, t), b)| {
            TensorView::new(to_st(t.dtype), t.shape.clone(), b)
                .map(|v| (name.clone(), v))
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    safetensors::serialize_to_file(views, None, path)
        .map_err(|e| format!("{}: {e}", path.display()))
}
