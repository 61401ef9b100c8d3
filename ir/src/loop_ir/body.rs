//! The body of a computed buffer: a small SSA DAG. Every value has a dtype; half-precision loads
//! are cast to f32 before arithmetic and results cast back when stored. Building deduplicates
//! identical ops, so a value loaded twice is loaded once.

use rustc_hash::FxHashMap;

use super::BufferId;
use crate::graph::DType;
use crate::sym::Expr;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub struct ValueId(pub u32);

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Log1p,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    Erf,
    Expm1,
    Log2,
    Log10,
    Exp2,
    Tan,
    Atan,
    Asin,
    Acos,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    /// Rounding of floats to an integral value (integers never reach these: lowering skips them).
    Floor,
    Ceil,
    /// To the nearest integer, ties to even (`torch.round`).
    Round,
    Trunc,
    /// -1, 0 or 1 (0 for NaN, as ATen).
    Sign,
    Reciprocal,
    LogicalNot,
    /// `~x`: bitwise complement of integers, logical not of bools.
    BitNot,
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// True division (floats).
    Div,
    /// Floor division (`rounding_mode='floor'`, and integer `//`).
    FloorDiv,
    /// Division rounded toward zero (`rounding_mode='trunc'`).
    TruncDiv,
    /// The remainder of `TruncDiv`, with the dividend's sign: C's `fmod` and integer `%`.
    Rem,
    Pow,
    Max,
    Min,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LogicalAnd,
    LogicalOr,
    BitAnd,
    BitOr,
    BitXor,
    /// `atan2(a, b)`, the angle of the point (b, a).
    Atan2,
    /// `hypot(a, b)`: √(a² + b²) without overflow or underflow in between.
    Hypot,
    /// `copysign(a, b)`: |a| with b's sign bit (−0.0 and a NaN's sign count).
    Copysign,
    /// Shifts of i64 as ATen defines them for every width: an amount outside 0..64 shifts
    /// everything out (0 to the left, the sign to the right).
    Shl,
    Shr,
}

/// A constant; floats keep their bits so that the op is hashable.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Constant {
    Float(u64),
    Int(i64),
}

impl Constant {
    pub fn float(v: f64) -> Constant {
        Constant::Float(v.to_bits())
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Op {
    /// A load; with a mask, it reads only where the mask holds and gives 0 elsewhere (the index
    /// need not be valid there: `cat`, padding).
    Load {
        buffer: BufferId,
        index: Expr,
        mask: Option<ValueId>,
    },
    Constant(Constant),
    /// An integer index value (`arange`, masks), as i64; 0 where its mask does not hold.
    Index(Expr, Option<ValueId>),
    Unary(UnaryOp, ValueId),
    Binary(BinaryOp, ValueId, ValueId),
    Where(ValueId, ValueId, ValueId),
    Cast(ValueId),
    /// Data-dependent indexing: binds the loop-level symbol `var` to the integer value `value` for
    /// the loads that follow, after checking `0 <= value < size` — an index out of range is a
    /// runtime error naming the buffer, never an out-of-bounds read.
    Bind {
        var: Expr,
        value: ValueId,
        size: Expr,
        mask: Option<ValueId>,
    },
    /// A data-dependent requirement: when `cond` (a bool) is false the program stops with the
    /// check's message, naming the buffer. Its value is `cond`; it is kept even when unused.
    Check {
        cond: ValueId,
        check: Check,
    },
}

/// What a [`Op::Check`] requires; each has the message ATen gives when it fails.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Check {
    /// `histc` with edges from the data: the range must be finite.
    FiniteHistogramRange,
    /// `repeat_interleave`: every repeat count is non-negative.
    NonNegativeRepeats,
    /// `_grouped_mm`: offsets are non-decreasing and within the grouped dimension.
    GroupOffsets,
}

impl Check {
    pub fn message(self) -> &'static str {
        match self {
            Check::FiniteHistogramRange => "histc: the range of the data is not finite",
            Check::NonNegativeRepeats => "repeat_interleave: repeats can not be negative",
            Check::GroupOffsets => {
                "_grouped_mm: offsets must be non-decreasing and within the grouped dimension"
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Check::FiniteHistogramRange => "finite_histogram_range",
            Check::NonNegativeRepeats => "non_negative_repeats",
            Check::GroupOffsets => "group_offsets",
        }
    }
}

impl Op {
    /// A transcendental function: recomputing it per reader costs more than a load.
    pub fn is_transcendental(&self) -> bool {
        use UnaryOp::*;
        matches!(
            self,
            Op::Unary(
                Exp | Log
                    | Log1p
                    | Sin
                    | Cos
                    | Tanh
                    | Sigmoid
                    | Erf
                    | Expm1
                    | Log2
                    | Log10
                    | Exp2
                    | Tan
                    | Atan
                    | Asin
                    | Acos
                    | Sinh
                    | Cosh
                    | Asinh
                    | Acosh
                    | Atanh,
                _
            ) | Op::Binary(BinaryOp::Pow | BinaryOp::Atan2 | BinaryOp::Hypot, _, _)
        )
    }
}

#[derive(Clone, Debug, Default)]
pub struct Body {
    /// Each op with the dtype of its value.
    pub ops: Vec<(Op, DType)>,
    pub result: Option<ValueId>,
}

impl Body {
    pub fn dtype(&self, v: ValueId) -> DType {
        self.ops[v.0 as usize].1
    }
}

#[derive(Default)]
pub struct BodyBuilder {
    body: Body,
    seen: FxHashMap<(Op, DType), ValueId>,
    /// Loads and index values emitted now are guarded by this mask.
    mask: Option<ValueId>,
}

impl BodyBuilder {
    pub fn push(&mut self, op: Op, dtype: DType) -> ValueId {
        if let Some(&v) = self.seen.get(&(op, dtype)) {
            return v;
        }
        let v = ValueId(self.body.ops.len() as u32);
        self.body.ops.push((op, dtype));
        self.seen.insert((op, dtype), v);
        v
    }

    pub fn dtype(&self, v: ValueId) -> DType {
        self.body.dtype(v)
    }

    pub fn load(&mut self, buffer: BufferId, index: Expr, dtype: DType) -> ValueId {
        let mask = self.mask;
        self.push(
            Op::Load {
                buffer,
                index,
                mask,
            },
            dtype,
        )
    }

    /// An index expression's value (i64).
    pub fn index(&mut self, e: Expr) -> ValueId {
        let mask = self.mask;
        self.push(Op::Index(e, mask), DType::I64)
    }

    /// From now on, loads are masked by `mask` (and by any enclosing mask); returns the enclosing
    /// mask, to give back to [`exit_mask`](Self::exit_mask).
    pub fn enter_mask(&mut self, mask: ValueId) -> Option<ValueId> {
        let outer = self.mask;
        let combined = match outer {
            Some(m) => self.binary(BinaryOp::LogicalAnd, m, mask),
            None => mask,
        };
        self.mask = Some(combined);
        outer
    }

    pub fn exit_mask(&mut self, outer: Option<ValueId>) {
        self.mask = outer;
    }

    pub fn constant(&mut self, c: Constant, dtype: DType) -> ValueId {
        self.push(Op::Constant(c), dtype)
    }

    pub fn cast(&mut self, v: ValueId, dtype: DType) -> ValueId {
        if self.dtype(v) == dtype {
            return v;
        }
        // A constant is converted now, rounded or wrapped as the cast would at run time.
        if let (Op::Constant(c), _) = self.body.ops[v.0 as usize] {
            let c = match (c, dtype.is_float()) {
                (Constant::Float(bits), true) => {
                    Constant::float(crate::tensor::round_to(dtype, f64::from_bits(bits)))
                }
                (Constant::Int(i), true) => {
                    Constant::float(crate::tensor::round_to(dtype, i as f64))
                }
                (Constant::Float(bits), false) if dtype == DType::Bool => {
                    Constant::Int(i64::from(f64::from_bits(bits) != 0.0))
                }
                (Constant::Float(bits), false) => {
                    Constant::Int(crate::tensor::wrap_to(dtype, f64::from_bits(bits) as i64))
                }
                (Constant::Int(i), false) => Constant::Int(crate::tensor::wrap_to(dtype, i)),
            };
            return self.constant(c, dtype);
        }
        self.push(Op::Cast(v), dtype)
    }

    pub fn unary(&mut self, op: UnaryOp, v: ValueId) -> ValueId {
        let dtype = match op {
            UnaryOp::LogicalNot => DType::Bool,
            _ => self.dtype(v),
        };
        self.push(Op::Unary(op, v), dtype)
    }

    /// `a op b`; both operands must already have the computation dtype.
    pub fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> ValueId {
        // x ** 2 is x * x, exactly as ATen computes it.
        if op == BinaryOp::Pow && self.dtype(a).is_float() {
            if let (Op::Constant(Constant::Float(bits)), _) = self.body.ops[b.0 as usize] {
                if f64::from_bits(bits) == 2.0 {
                    return self.binary(BinaryOp::Mul, a, a);
                }
            }
        }
        let dtype = match op {
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge
            | BinaryOp::LogicalAnd
            | BinaryOp::LogicalOr => DType::Bool,
            _ => self.dtype(a),
        };
        self.push(Op::Binary(op, a, b), dtype)
    }

    pub fn where_(&mut self, c: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let dtype = self.dtype(a);
        self.push(Op::Where(c, a, b), dtype)
    }

    /// Binds `var` to `value` (checked against `0..size`); its own value is `value`.
    pub fn bind(&mut self, var: Expr, value: ValueId, size: Expr) -> ValueId {
        let mask = self.mask;
        self.push(
            Op::Bind {
                var,
                value,
                size,
                mask,
            },
            DType::I64,
        )
    }

    /// Requires `cond` at run time (see [`Op::Check`]); returns it.
    pub fn check(&mut self, cond: ValueId, check: Check) -> ValueId {
        self.push(Op::Check { cond, check }, DType::Bool)
    }

    /// The body computing `result`, without the ops nothing needs (binds and checks are kept:
    /// they act by themselves).
    pub fn finish(self, result: ValueId) -> Body {
        let ops = self.body.ops;
        let mut live = vec![false; ops.len()];
        live[result.0 as usize] = true;
        for (i, (op, _)) in ops.iter().enumerate() {
            if matches!(op, Op::Bind { .. } | Op::Check { .. }) {
                live[i] = true;
            }
        }
        for i in (0..ops.len()).rev() {
            if live[i] {
                ops[i].0.for_each_operand(|v| live[v.0 as usize] = true);
            }
        }
        let mut new_id = vec![ValueId(u32::MAX); ops.len()];
        let mut kept = Vec::with_capacity(ops.len());
        for (i, (mut op, dtype)) in ops.into_iter().enumerate() {
            if live[i] {
                op.map_operands(|v| new_id[v.0 as usize]);
                new_id[i] = ValueId(kept.len() as u32);
                kept.push((op, dtype));
            }
        }
        Body {
            ops: kept,
            result: Some(new_id[result.0 as usize]),
        }
    }
}

impl Op {
    /// Calls `f` on every value this op reads.
    pub fn for_each_operand(&self, mut f: impl FnMut(ValueId)) {
        match *self {
            Op::Load { mask, .. } | Op::Index(_, mask) => mask.into_iter().for_each(f),
            Op::Constant(_) => {}
            Op::Unary(_, a) | Op::Cast(a) => f(a),
            Op::Binary(_, a, b) => {
                f(a);
                f(b)
            }
            Op::Where(c, a, b) => {
                f(c);
                f(a);
                f(b)
            }
            Op::Bind { value, mask, .. } => {
                f(value);
                mask.into_iter().for_each(f)
            }
            Op::Check { cond, .. } => f(cond),
        }
    }

    /// Replaces every value this op reads by `f(value)`.
    pub fn map_operands(&mut self, f: impl Fn(ValueId) -> ValueId) {
        match self {
            Op::Load { mask, .. } | Op::Index(_, mask) => *mask = mask.map(&f),
            Op::Constant(_) => {}
            Op::Unary(_, a) | Op::Cast(a) => *a = f(*a),
            Op::Binary(_, a, b) => {
                *a = f(*a);
                *b = f(*b)
            }
            Op::Where(c, a, b) => {
                *c = f(*c);
                *a = f(*a);
                *b = f(*b)
            }
            Op::Bind { value, mask, .. } => {
                *value = f(*value);
                *mask = mask.map(&f)
            }
            Op::Check { cond, .. } => *cond = f(*cond),
        }
    }
}
