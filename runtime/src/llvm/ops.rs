//! The loop-IR ops as LLVM instructions: unary and binary math with the interpreter's
//! semantics (NaN propagation, floor division, integer wrap), and the helpers both targets share.

use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Module;
use inkwell::values::{BasicValueEnum, FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BinaryOp, Body, BufferId, Constant, Op, UnaryOp};

use super::emit::{Emitter, Source, Val};

type R<T> = Result<T, inkwell::builder::BuilderError>;

impl<'a, 'c> Emitter<'a, 'c> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn op(
        &mut self,
        body: &Body,
        vals: &[Val<'c>],
        op: Op,
        d: DType,
        source: &dyn Fn(BufferId) -> Source<'c>,
        dtype_of: &dyn Fn(BufferId) -> DType,
    ) -> R<Val<'c>> {
        let b = self.b;
        let at = |v: guardless_ir::loop_ir::ValueId| vals[v.0 as usize];
        let dt = |v: guardless_ir::loop_ir::ValueId| body.dtype(v);
        Ok(match op {
            Op::Load {
                buffer,
                index,
                mask,
            } => match source(buffer) {
                Source::Register(v) => v,
                Source::Memory(ptr) => {
                    let bd = dtype_of(buffer);
                    match mask {
                        None => {
                            let i = self.int(index)?;
                            self.load(ptr, i, bd)?
                        }
                        Some(m) => {
                            let c = self.truth(at(m))?;
                            let here = b.get_insert_block().expect("positioned");
                            let then = self.cx.append_basic_block(self.function, "masked");
                            let join = self.cx.append_basic_block(self.function, "join");
                            b.build_conditional_branch(c, then, join)?;
                            b.position_at_end(then);
                            self.memo.clear();
                            let i = self.int(index)?;
                            let v = self.load(ptr, i, bd)?;
                            let v = self.convert(v, d)?;
                            let then_end = b.get_insert_block().expect("positioned");
                            b.build_unconditional_branch(join)?;
                            b.position_at_end(join);
                            self.memo.clear();
                            match v {
                                Val::F(f) => {
                                    let phi = b.build_phi(f.get_type(), "")?;
                                    phi.add_incoming(&[
                                        (&f, then_end),
                                        (&f.get_type().const_float(0.0), here),
                                    ]);
                                    Val::F(phi.as_basic_value().into_float_value())
                                }
                                Val::I(i) => {
                                    let phi = b.build_phi(i.get_type(), "")?;
                                    phi.add_incoming(&[(&i, then_end), (&self.const_i64(0), here)]);
                                    Val::I(phi.as_basic_value().into_int_value())
                                }
                            }
                        }
                    }
                }
            },
            Op::Constant(Constant::Float(bits)) => {
                let x = f64::from_bits(bits);
                Val::F(self.float_type(d).const_float(x))
            }
            Op::Constant(Constant::Int(i)) => Val::I(self.const_i64(i)),
            Op::Index(e, mask) => {
                let v = self.int(e)?;
                match mask {
                    None => Val::I(v),
                    Some(m) => {
                        let c = self.truth(at(m))?;
                        Val::I(
                            b.build_select(c, v, self.const_i64(0), "")?
                                .into_int_value(),
                        )
                    }
                }
            }
            Op::Cast(a) => at(a),
            Op::Bind {
                var,
                value,
                size,
                mask,
            } => {
                let v = self.as_int(at(value))?;
                let v = match mask {
                    None => v,
                    Some(m) => {
                        let c = self.truth(at(m))?;
                        b.build_select(c, v, self.const_i64(0), "")?
                            .into_int_value()
                    }
                };
                let n = self.int(size)?;
                let lo = b.build_int_compare(IntPredicate::SGE, v, self.const_i64(0), "")?;
                let hi = b.build_int_compare(IntPredicate::SLT, v, n, "")?;
                let mut ok = b.build_and(lo, hi, "")?;
                if let Some(m) = mask {
                    let c = self.truth(at(m))?;
                    let off = b.build_not(c, "")?;
                    ok = b.build_or(ok, off, "")?;
                }
                let message = match self.env.index_origin(var) {
                    Some(origin) => format!("{origin}: index {{0}} is out of range for size {{1}}"),
                    None => format!(
                        "index {{0}} is out of range [0, {{1}}) for {}",
                        self.env.text(var)
                    ),
                };
                self.require_with(ok, message, &[v, n])?;
                let id = self
                    .env
                    .pool()
                    .as_symbol(var)
                    .expect("bound variables are symbols");
                self.locals.insert(id, v);
                self.memo.clear();
                Val::I(v)
            }
            Op::Check { cond, check } => {
                let c = self.truth(at(cond))?;
                self.require(c, check.message().to_string())?;
                at(cond)
            }
            Op::Unary(u, a) => self.unary(u, at(a), dt(a), d)?,
            Op::Binary(o, x, y) => self.binary(o, at(x), at(y), dt(x), dt(y), d)?,
            Op::Where(c, x, y) => {
                let c = self.truth(at(c))?;
                let (x, y) = (self.convert(at(x), d)?, self.convert(at(y), d)?);
                match (x, y) {
                    (Val::F(x), Val::F(y)) => {
                        Val::F(b.build_select(c, x, y, "")?.into_float_value())
                    }
                    (Val::I(x), Val::I(y)) => Val::I(b.build_select(c, x, y, "")?.into_int_value()),
                    _ => unreachable!("converted to one dtype"),
                }
            }
        })
    }

    fn unary(&mut self, u: UnaryOp, a: Val<'c>, ad: DType, d: DType) -> R<Val<'c>> {
        let b = self.b;
        if !ad.is_float() && !matches!(u, UnaryOp::LogicalNot) && !d.is_float() {
            let i = self.as_int(a)?;
            return Ok(Val::I(match u {
                UnaryOp::Neg => b.build_int_neg(i, "")?,
                UnaryOp::Abs => {
                    let neg = b.build_int_compare(IntPredicate::SLT, i, self.const_i64(0), "")?;
                    let n = b.build_int_neg(i, "")?;
                    b.build_select(neg, n, i, "")?.into_int_value()
                }
                UnaryOp::Relu => {
                    let neg = b.build_int_compare(IntPredicate::SLT, i, self.const_i64(0), "")?;
                    b.build_select(neg, self.const_i64(0), i, "")?
                        .into_int_value()
                }
                UnaryOp::BitNot if ad == DType::Bool => {
                    let z = b.build_int_compare(IntPredicate::EQ, i, self.const_i64(0), "")?;
                    b.build_int_z_extend(z, self.i64(), "")?
                }
                UnaryOp::BitNot => b.build_not(i, "")?,
                UnaryOp::Sign => {
                    let pos = b.build_int_compare(IntPredicate::SGT, i, self.const_i64(0), "")?;
                    let neg = b.build_int_compare(IntPredicate::SLT, i, self.const_i64(0), "")?;
                    let p = b.build_int_z_extend(pos, self.i64(), "")?;
                    let n = b.build_int_z_extend(neg, self.i64(), "")?;
                    b.build_int_sub(p, n, "")?
                }
                UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => i,
                _ => return self.unary(u, a, DType::F64, DType::F64),
            }));
        }
        if u == UnaryOp::LogicalNot {
            let t = self.truth(a)?;
            let n = b.build_not(t, "")?;
            return self.bool_val(n);
        }
        let x = self.as_float(a, if d.is_float() { d } else { ad })?;
        let t = x.get_type();
        let f64_ = t == self.cx.f64_type();
        let one = t.const_float(1.0);
        let call =
            |s: &mut Self, name32: &str, name64: &str, x: FloatValue<'c>| -> R<FloatValue<'c>> {
                Ok(s.call(if f64_ { name64 } else { name32 }, &[x.into()])?
                    .into_float_value())
            };
        Ok(Val::F(match u {
            UnaryOp::Neg => b.build_float_neg(x, "")?,
            UnaryOp::Abs => self
                .intrinsic("llvm.fabs", t.into(), &[x.into()])?
                .into_float_value(),
            UnaryOp::Exp if !f64_ => self.exp_f32(x)?,
            UnaryOp::Exp => call(self, "gl_expf", "gl_exp", x)?,
            UnaryOp::Log => call(self, "gl_logf", "gl_log", x)?,
            UnaryOp::Log1p => call(self, "gl_log1pf", "gl_log1p", x)?,
            UnaryOp::Sqrt => self
                .intrinsic("llvm.sqrt", t.into(), &[x.into()])?
                .into_float_value(),
            UnaryOp::Rsqrt => {
                let s = self
                    .intrinsic("llvm.sqrt", t.into(), &[x.into()])?
                    .into_float_value();
                b.build_float_div(one, s, "")?
            }
            UnaryOp::Sin => call(self, "gl_sinf", "gl_sin", x)?,
            UnaryOp::Cos => call(self, "gl_cosf", "gl_cos", x)?,
            UnaryOp::Tanh => call(self, "gl_tanhf", "gl_tanh", x)?,
            UnaryOp::Erf => call(self, "gl_erff", "gl_erf", x)?,
            UnaryOp::Expm1 => call(self, "gl_expm1f", "gl_expm1", x)?,
            UnaryOp::Log2 => call(self, "gl_log2f", "gl_log2", x)?,
            UnaryOp::Log10 => call(self, "gl_log10f", "gl_log10", x)?,
            UnaryOp::Exp2 => call(self, "gl_exp2f", "gl_exp2", x)?,
            UnaryOp::Tan => call(self, "gl_tanf", "gl_tan", x)?,
            UnaryOp::Atan => call(self, "gl_atanf", "gl_atan", x)?,
            UnaryOp::Asin => call(self, "gl_asinf", "gl_asin", x)?,
            UnaryOp::Acos => call(self, "gl_acosf", "gl_acos", x)?,
            UnaryOp::Sinh => call(self, "gl_sinhf", "gl_sinh", x)?,
            UnaryOp::Cosh => call(self, "gl_coshf", "gl_cosh", x)?,
            UnaryOp::Asinh => call(self, "gl_asinhf", "gl_asinh", x)?,
            UnaryOp::Acosh => call(self, "gl_acoshf", "gl_acosh", x)?,
            UnaryOp::Atanh => call(self, "gl_atanhf", "gl_atanh", x)?,
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => {
                let name = match u {
                    UnaryOp::Floor => "llvm.floor",
                    UnaryOp::Ceil => "llvm.ceil",
                    UnaryOp::Round => "llvm.roundeven",
                    _ => "llvm.trunc",
                };
                self.intrinsic(name, t.into(), &[x.into()])?
                    .into_float_value()
            }
            UnaryOp::Sign => {
                let zero = t.const_float(0.0);
                let pos = b.build_float_compare(FloatPredicate::OGT, x, zero, "")?;
                let neg = b.build_float_compare(FloatPredicate::OLT, x, zero, "")?;
                let p = b.build_unsigned_int_to_float(pos, t, "")?;
                let n = b.build_unsigned_int_to_float(neg, t, "")?;
                b.build_float_sub(p, n, "")?
            }
            UnaryOp::Sigmoid => {
                let n = b.build_float_neg(x, "")?;
                let e = if f64_ {
                    call(self, "gl_expf", "gl_exp", n)?
                } else {
                    self.exp_f32(n)?
                };
                let den = b.build_float_add(one, e, "")?;
                b.build_float_div(one, den, "")?
            }
            UnaryOp::Relu => {
                let neg = b.build_float_compare(FloatPredicate::OLT, x, t.const_float(0.0), "")?;
                b.build_select(neg, t.const_float(0.0), x, "")?
                    .into_float_value()
            }
            UnaryOp::Reciprocal => b.build_float_div(one, x, "")?,
            UnaryOp::BitNot => t.const_float(f64::NAN),
            UnaryOp::LogicalNot => unreachable!("handled above"),
        }))
    }

    fn exp_f32(&mut self, x: FloatValue<'c>) -> R<FloatValue<'c>> {
        build_exp_f32(self.cx, self.module, self.b, x)
    }

    #[allow(clippy::too_many_arguments)]
    fn binary(
        &mut self,
        o: BinaryOp,
        x: Val<'c>,
        y: Val<'c>,
        xd: DType,
        yd: DType,
        d: DType,
    ) -> R<Val<'c>> {
        use BinaryOp::*;
        let b = self.b;
        if xd.is_float() || yd.is_float() || matches!(o, Div | Atan2 | Hypot | Copysign) {
            // Arithmetic in the result's type; comparisons in the operands' wider type.
            let work = if d.is_float() {
                d
            } else if xd == DType::F64 || yd == DType::F64 {
                DType::F64
            } else if xd.is_float() || yd.is_float() {
                DType::F32
            } else {
                DType::F64
            };
            let (fx, fy) = (self.as_float(x, work)?, self.as_float(y, work)?);
            let t = fx.get_type();
            let cmp = |s: &Self, p: FloatPredicate| -> R<Val<'c>> {
                let c = s.b.build_float_compare(p, fx, fy, "")?;
                s.bool_val(c)
            };
            return match o {
                Add => Ok(Val::F(b.build_float_add(fx, fy, "")?)),
                Sub => Ok(Val::F(b.build_float_sub(fx, fy, "")?)),
                Mul => Ok(Val::F(b.build_float_mul(fx, fy, "")?)),
                Div => Ok(Val::F(b.build_float_div(fx, fy, "")?)),
                FloorDiv | TruncDiv => {
                    let q = b.build_float_div(fx, fy, "")?;
                    let name = if o == FloorDiv {
                        "llvm.floor"
                    } else {
                        "llvm.trunc"
                    };
                    Ok(Val::F(
                        self.intrinsic(name, t.into(), &[q.into()])?
                            .into_float_value(),
                    ))
                }
                Rem => Ok(Val::F(b.build_float_rem(fx, fy, "")?)),
                Pow => {
                    let name = if t == self.cx.f64_type() {
                        "gl_pow"
                    } else {
                        "gl_powf"
                    };
                    Ok(Val::F(
                        self.call(name, &[fx.into(), fy.into()])?.into_float_value(),
                    ))
                }
                Max => Ok(Val::F(float_max_min(self.b, fx, fy, true)?)),
                Min => Ok(Val::F(float_max_min(self.b, fx, fy, false)?)),
                Eq => cmp(self, FloatPredicate::OEQ),
                Ne => cmp(self, FloatPredicate::UNE),
                Lt => cmp(self, FloatPredicate::OLT),
                Le => cmp(self, FloatPredicate::OLE),
                Gt => cmp(self, FloatPredicate::OGT),
                Ge => cmp(self, FloatPredicate::OGE),
                LogicalAnd | LogicalOr => {
                    let (a, c) = (self.truth(Val::F(fx))?, self.truth(Val::F(fy))?);
                    let r = if o == LogicalAnd {
                        b.build_and(a, c, "")?
                    } else {
                        b.build_or(a, c, "")?
                    };
                    self.bool_val(r)
                }
                Atan2 | Hypot => {
                    let wide = t == self.cx.f64_type();
                    let name = match (o, wide) {
                        (Atan2, true) => "gl_atan2",
                        (Atan2, false) => "gl_atan2f",
                        (_, true) => "gl_hypot",
                        (_, false) => "gl_hypotf",
                    };
                    Ok(Val::F(
                        self.call(name, &[fx.into(), fy.into()])?.into_float_value(),
                    ))
                }
                Copysign => Ok(Val::F(
                    self.intrinsic("llvm.copysign", t.into(), &[fx.into(), fy.into()])?
                        .into_float_value(),
                )),
                BitAnd | BitOr | BitXor | Shl | Shr => {
                    let fail = self.fail_block("bitwise op on floats".to_string());
                    b.build_unconditional_branch(fail)?;
                    let dead = self.cx.append_basic_block(self.function, "dead");
                    b.position_at_end(dead);
                    Ok(Val::F(t.const_float(0.0)))
                }
            };
        }
        let (ix, iy) = (self.as_int(x)?, self.as_int(y)?);
        let cmp = |s: &Self, p: IntPredicate| -> R<Val<'c>> {
            let c = s.b.build_int_compare(p, ix, iy, "")?;
            s.bool_val(c)
        };
        Ok(match o {
            Add => Val::I(b.build_int_add(ix, iy, "")?),
            Sub => Val::I(b.build_int_sub(ix, iy, "")?),
            Mul => Val::I(b.build_int_mul(ix, iy, "")?),
            Div => unreachable!("true division is float"),
            FloorDiv | TruncDiv => {
                let nz = b.build_int_compare(IntPredicate::NE, iy, self.const_i64(0), "")?;
                self.require(nz, "integer division by zero".to_string())?;
                if o == FloorDiv {
                    Val::I(self.floor_div(ix, iy)?)
                } else {
                    let y1 = self.safe_divisor(iy)?;
                    Val::I(b.build_int_signed_div(ix, y1, "")?)
                }
            }
            Rem => {
                let nz = b.build_int_compare(IntPredicate::NE, iy, self.const_i64(0), "")?;
                self.require(nz, "integer division by zero".to_string())?;
                let y1 = self.safe_divisor(iy)?;
                Val::I(b.build_int_signed_rem(ix, y1, "")?)
            }
            Pow => Val::I(
                self.call("gl_ipow", &[ix.into(), iy.into()])?
                    .into_int_value(),
            ),
            Max => {
                let c = b.build_int_compare(IntPredicate::SGT, ix, iy, "")?;
                Val::I(b.build_select(c, ix, iy, "")?.into_int_value())
            }
            Min => {
                let c = b.build_int_compare(IntPredicate::SLT, ix, iy, "")?;
                Val::I(b.build_select(c, ix, iy, "")?.into_int_value())
            }
            Eq => cmp(self, IntPredicate::EQ)?,
            Ne => cmp(self, IntPredicate::NE)?,
            Lt => cmp(self, IntPredicate::SLT)?,
            Le => cmp(self, IntPredicate::SLE)?,
            Gt => cmp(self, IntPredicate::SGT)?,
            Ge => cmp(self, IntPredicate::SGE)?,
            LogicalAnd | LogicalOr => {
                let (a, c) = (self.truth(Val::I(ix))?, self.truth(Val::I(iy))?);
                let r = if o == LogicalAnd {
                    b.build_and(a, c, "")?
                } else {
                    b.build_or(a, c, "")?
                };
                self.bool_val(r)?
            }
            BitAnd => Val::I(b.build_and(ix, iy, "")?),
            BitOr => Val::I(b.build_or(ix, iy, "")?),
            BitXor => Val::I(b.build_xor(ix, iy, "")?),
            Shl | Shr => {
                // LLVM's shifts by 64 or more are poison: shift by an amount in range, then
                // replace what an out-of-range amount gives (ATen's meaning).
                let lo = b.build_int_compare(IntPredicate::SGE, iy, self.const_i64(0), "")?;
                let hi = b.build_int_compare(IntPredicate::SLT, iy, self.const_i64(64), "")?;
                let ok = b.build_and(lo, hi, "")?;
                let amount = b
                    .build_select(ok, iy, self.const_i64(63), "")?
                    .into_int_value();
                Val::I(if o == Shl {
                    let r = b.build_left_shift(ix, amount, "")?;
                    b.build_select(ok, r, self.const_i64(0), "")?
                        .into_int_value()
                } else {
                    b.build_right_shift(ix, amount, true, "")?
                })
            }
            Atan2 | Hypot | Copysign => unreachable!("taken as floats above"),
        })
    }
}

/// `exp` of an f32 inline, so that loops over it vectorize: Cody–Waite reduction by ln 2
/// and Cephes' degree-6 polynomial (within 2 ulp of the correctly rounded value over the
/// whole range), scaled by 2^n in two steps so that subnormal results stay accurate.
///
/// Special values need no selects: x is clamped to [-104, 89] (compares and selects that keep a
/// NaN, one min/max instruction each), beyond which exp is 0 or overflows to ∞ through the
/// scale itself; a NaN flows through the arithmetic (NaN times any scale is NaN).
pub fn build_exp_f32<'c>(
    cx: &'c Context,
    module: &Module<'c>,
    b: &Builder<'c>,
    x: FloatValue<'c>,
) -> R<FloatValue<'c>> {
    let f = cx.f32_type();
    let i32t = cx.i32_type();
    let intrinsic = |name: &str, args: &[BasicValueEnum<'c>]| -> R<FloatValue<'c>> {
        Ok(call_intrinsic(module, b, name, &[f.into()], args)?.into_float_value())
    };
    let c = |v: f64| f.const_float(v);
    // a·b + c, fused where the target has FMA (then more exact, and half the instructions).
    let fma = |a: FloatValue<'c>, m: FloatValue<'c>, k: FloatValue<'c>| -> R<FloatValue<'c>> {
        intrinsic("llvm.fmuladd", &[a.into(), m.into(), k.into()])
    };
    // `x < lo ? lo : x` is false for a NaN, which stays.
    let low = b.build_float_compare(FloatPredicate::OLT, x, c(-104.0), "")?;
    let x = b.build_select(low, c(-104.0), x, "")?.into_float_value();
    let high = b.build_float_compare(FloatPredicate::OGT, x, c(89.0), "")?;
    let x = b.build_select(high, c(89.0), x, "")?.into_float_value();
    // n = x·log2(e) rounded to nearest even by adding 1.5·2^23: the sum's low mantissa bits
    // are n in two's complement, so no float-to-int conversion is needed (none of a NaN).
    let shifter = c(12_582_912.0);
    let k = fma(x, c(std::f64::consts::LOG2_E), shifter)?;
    let n = b.build_float_sub(k, shifter, "")?;
    let r = fma(n, c(-0.693_359_375), x)?;
    let r = fma(n, c(2.121_944_4e-4), r)?;
    let mut p = c(1.987_569_150_0e-4);
    for k in [
        1.398_199_950_7e-3,
        8.333_451_907_3e-3,
        4.166_579_589_4e-2,
        1.666_666_545_9e-1,
        5.000_000_120_1e-1,
    ] {
        p = fma(p, r, c(k))?;
    }
    let r2 = b.build_float_mul(r, r, "")?;
    let y = fma(p, r2, r)?;
    let y = b.build_float_add(y, c(1.0), "")?;
    // n ∈ [-150, 129] after the clamp: two halves, each a normal power of two.
    let ki = b.build_bit_cast(k, i32t, "")?.into_int_value();
    let ni = b.build_int_sub(ki, i32t.const_int(0x4b40_0000, false), "")?;
    let half = b.build_right_shift(ni, i32t.const_int(1, false), true, "")?;
    let rest = b.build_int_sub(ni, half, "")?;
    let scale = |e: IntValue<'c>| -> R<FloatValue<'c>> {
        let e = b.build_left_shift(e, i32t.const_int(23, false), "")?;
        let e = b.build_int_add(e, i32t.const_int(127 << 23, false), "")?;
        Ok(b.build_bit_cast(e, f, "")?.into_float_value())
    };
    let y = b.build_float_mul(y, scale(half)?, "")?;
    b.build_float_mul(y, scale(rest)?, "")
}

/// IEEE 754-2019 maximum or minimum (what `llvm.maximum`/`llvm.minimum` compute: NaN if either
/// operand is NaN, -0 below +0) from compares and selects. x86 has no instruction for it and
/// LLVM's expansion branches on signs, which kept reduction loops (softmax's max) scalar; this
/// form vectorizes.
pub fn float_max_min<'c>(
    b: &Builder<'c>,
    x: FloatValue<'c>,
    y: FloatValue<'c>,
    max: bool,
) -> R<FloatValue<'c>> {
    let t = x.get_type();
    let cx = t.get_context();
    let it = if t == cx.f64_type() {
        cx.i64_type()
    } else {
        cx.i32_type()
    };
    let order = if max {
        FloatPredicate::OGT
    } else {
        FloatPredicate::OLT
    };
    let first = b.build_float_compare(order, x, y, "")?;
    let pick = b.build_select(first, x, y, "")?.into_float_value();
    // Equal operands are the same value, or +0 and -0: the AND of their bits is +0 (max), the
    // OR is -0 (min).
    let xi = b.build_bit_cast(x, it, "")?.into_int_value();
    let yi = b.build_bit_cast(y, it, "")?.into_int_value();
    let bits = if max {
        b.build_and(xi, yi, "")?
    } else {
        b.build_or(xi, yi, "")?
    };
    let zero = b.build_bit_cast(bits, t, "")?.into_float_value();
    let eq = b.build_float_compare(FloatPredicate::OEQ, x, y, "")?;
    let r = b.build_select(eq, zero, pick, "")?.into_float_value();
    let nan = b.build_float_compare(FloatPredicate::UNO, x, y, "")?;
    let quiet = b.build_float_add(x, y, "")?;
    Ok(b.build_select(nan, quiet, r, "")?.into_float_value())
}

/// Calls LLVM intrinsic `name`, overloaded on `types` (empty for one that is not), with `args`.
pub fn call_intrinsic<'c>(
    module: &Module<'c>,
    b: &Builder<'c>,
    name: &str,
    types: &[inkwell::types::BasicTypeEnum<'c>],
    args: &[BasicValueEnum<'c>],
) -> R<BasicValueEnum<'c>> {
    let f = Intrinsic::find(name)
        .unwrap_or_else(|| panic!("LLVM has no intrinsic {name}"))
        .get_declaration(module, types)
        .unwrap_or_else(|| panic!("{name} is not overloaded on {types:?}"));
    let args: Vec<_> = args.iter().map(|&a| a.into()).collect();
    Ok(b.build_call(f, &args, "")?
        .try_as_basic_value()
        .basic()
        .expect("intrinsics called here return a value"))
}
