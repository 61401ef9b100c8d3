//! Element types of the graph format.

use std::fmt;

/// A tensor element type. fp8 comes later.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I8,
    U8,
    Bool,
}

impl DType {
    pub const ALL: [DType; 9] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];

    /// The name in the graph format (`f32`, `bf16`, `bool`, …).
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// The smallest and largest value of an integer dtype (bool: 0 and 1); `None` for floats.
    pub fn int_range(self) -> Option<(i64, i64)> {
        match self {
            DType::I64 => Some((i64::MIN, i64::MAX)),
            DType::I32 => Some((i32::MIN.into(), i32::MAX.into())),
            DType::I8 => Some((i8::MIN.into(), i8::MAX.into())),
            DType::U8 => Some((0, u8::MAX.into())),
            DType::Bool => Some((0, 1)),
            _ => None,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
