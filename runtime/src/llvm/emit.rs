//! Values of the loop IR as LLVM IR: size expressions (i64, Python floor semantics), loads and
//! stores, and each value rounded or wrapped to its dtype (floats computed in f32, f64 for f64);
//! data-dependent failures branch to an error exit. The ops themselves are in `ops`.

use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::values::{
    BasicValue, BasicValueEnum, FloatValue, FunctionValue, IntValue, PointerValue,
};
use inkwell::{FloatPredicate, IntPredicate};
use rustc_hash::FxHashMap;

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{Body, BufferId};
use guardless_ir::sym::{ArithOp, CmpOp, Expr, Node, ShapeEnv, SymbolId};

use super::ops::call_intrinsic;

/// A value of the body: floats in their compute type, integers and bools as i64.
#[derive(Copy, Clone)]
pub enum Val<'c> {
    F(FloatValue<'c>),
    I(IntValue<'c>),
}

/// Values of a row kept from one pass for a later one (an `exp` a reduction needed and the
/// output needs again): per slot, the row's `len` elements of 8 bytes in `scratch` (per thread).
pub struct RowCache<'c> {
    pub scratch: PointerValue<'c>,
    pub len: IntValue<'c>,
    /// The element of the row being computed.
    pub r: IntValue<'c>,
    /// Op index of the body → (slot, whether it is loaded rather than computed and stored).
    pub ops: FxHashMap<usize, (usize, bool)>,
}

/// How a load of a buffer is served inside the kernel being emitted.
#[derive(Copy, Clone)]
pub enum Source<'c> {
    /// From memory, through the buffer's pointer.
    Memory(PointerValue<'c>),
    /// A value already computed for this element or row.
    Register(Val<'c>),
}

type R<T> = Result<T, inkwell::builder::BuilderError>;

/// Emits code into one function. Symbols are loop variables (in `locals`) or values read once
/// from the symbol table at entry.
pub struct Emitter<'a, 'c> {
    pub cx: &'c Context,
    pub module: &'a Module<'c>,
    pub b: &'a Builder<'c>,
    /// Positioned in the entry block: loads of symbols and buffer pointers, allocas.
    pub entry: &'a Builder<'c>,
    pub function: FunctionValue<'c>,
    pub env: &'a ShapeEnv,
    pub syms: PointerValue<'c>,
    pub ptrs: PointerValue<'c>,
    pub err: PointerValue<'c>,
    pub locals: FxHashMap<SymbolId, IntValue<'c>>,
    pub sym_cache: FxHashMap<SymbolId, IntValue<'c>>,
    pub ptr_cache: FxHashMap<BufferId, PointerValue<'c>>,
    /// Where the pointer table holds each buffer: `Some(buffers)` — the kernel's own table,
    /// slot `i` holding `buffers[i]` (in order of first use, so that kernels of the same
    /// structure read their tables alike); `None` — the program's table, indexed by buffer id.
    pub slots: Option<Vec<BufferId>>,
    /// Expressions already computed in the current straight-line region.
    pub memo: FxHashMap<Expr, IntValue<'c>>,
    /// Errors (buffer, its graph nodes, message); code `i + 1` is error `i`.
    pub errors: &'a mut Vec<(String, String, String)>,
    /// The buffer being emitted and its graph nodes, for error messages.
    pub current: (String, String),
    pub fail_blocks: FxHashMap<usize, inkwell::basic_block::BasicBlock<'c>>,
    pub helpers: &'a FxHashMap<&'static str, FunctionValue<'c>>,
}

pub fn compute_is_f64(d: DType) -> bool {
    d == DType::F64
}

impl<'a, 'c> Emitter<'a, 'c> {
    pub(super) fn i64(&self) -> inkwell::types::IntType<'c> {
        self.cx.i64_type()
    }

    pub fn const_i64(&self, v: i64) -> IntValue<'c> {
        self.i64().const_int(v as u64, true)
    }

    pub(super) fn float_type(&self, d: DType) -> inkwell::types::FloatType<'c> {
        if compute_is_f64(d) {
            self.cx.f64_type()
        } else {
            self.cx.f32_type()
        }
    }

    /// The value of graph symbol `s` (read once, at entry).
    fn symbol(&mut self, s: SymbolId) -> R<IntValue<'c>> {
        if let Some(&v) = self.locals.get(&s) {
            return Ok(v);
        }
        if let Some(&v) = self.sym_cache.get(&s) {
            return Ok(v);
        }
        let at = self.const_i64(s.index() as i64);
        let p = unsafe {
            self.entry
                .build_in_bounds_gep(self.i64(), self.syms, &[at], "")?
        };
        let v = self
            .entry
            .build_load(self.i64(), p, self.env.symbol_name(s))?
            .into_int_value();
        self.sym_cache.insert(s, v);
        Ok(v)
    }

    /// The base pointer of buffer `b` (read once, at entry).
    pub fn pointer(&mut self, b: BufferId) -> R<PointerValue<'c>> {
        if let Some(&p) = self.ptr_cache.get(&b) {
            return Ok(p);
        }
        let ptr_t = self.cx.ptr_type(inkwell::AddressSpace::default());
        let slot = match &mut self.slots {
            None => b.index(),
            Some(slots) => slots.iter().position(|&x| x == b).unwrap_or_else(|| {
                slots.push(b);
                slots.len() - 1
            }),
        };
        let at = self.const_i64(slot as i64);
        let p = unsafe {
            self.entry
                .build_in_bounds_gep(ptr_t, self.ptrs, &[at], "")?
        };
        let v = self.entry.build_load(ptr_t, p, "")?.into_pointer_value();
        self.ptr_cache.insert(b, v);
        Ok(v)
    }

    /// `e` as i64 (booleans as 0/1).
    pub fn int(&mut self, e: Expr) -> R<IntValue<'c>> {
        let v = self.expr(e)?;
        if v.get_type().get_bit_width() == 1 {
            return self.b.build_int_z_extend(v, self.i64(), "");
        }
        Ok(v)
    }

    /// `e` as i1.
    pub fn cond(&mut self, e: Expr) -> R<IntValue<'c>> {
        let v = self.expr(e)?;
        if v.get_type().get_bit_width() == 1 {
            return Ok(v);
        }
        self.b
            .build_int_compare(IntPredicate::NE, v, self.const_i64(0), "")
    }

    fn expr(&mut self, e: Expr) -> R<IntValue<'c>> {
        if let Some(&v) = self.memo.get(&e) {
            return Ok(v);
        }
        let node = self.env.pool().node(e).clone();
        let b = self.b;
        let v = match node {
            Node::Const(c) => self.const_i64(c),
            Node::Bool(x) => self.cx.bool_type().const_int(u64::from(x), false),
            Node::Sym(s) => self.symbol(s)?,
            Node::Add { terms, constant } => {
                let mut acc = self.const_i64(constant);
                for &(t, c) in terms.iter() {
                    let t = self.int(t)?;
                    let t = if c == 1 {
                        t
                    } else {
                        b.build_int_mul(t, self.const_i64(c), "")?
                    };
                    acc = b.build_int_add(acc, t, "")?;
                }
                acc
            }
            Node::Mul(factors) => {
                let mut acc = self.const_i64(1);
                for &(f, n) in factors.iter() {
                    let f = self.int(f)?;
                    for _ in 0..n {
                        acc = b.build_int_mul(acc, f, "")?;
                    }
                }
                acc
            }
            Node::FloorDiv(x, y) => {
                let (x, y) = (self.int(x)?, self.int(y)?);
                self.floor_div(x, y)?
            }
            Node::CeilDiv(x, y) => {
                let (x, y) = (self.int(x)?, self.int(y)?);
                let nx = b.build_int_neg(x, "")?;
                let q = self.floor_div(nx, y)?;
                b.build_int_neg(q, "")?
            }
            Node::Mod(x, y) => {
                let (x, y) = (self.int(x)?, self.int(y)?);
                self.floor_mod(x, y)?
            }
            Node::Min(args) | Node::Max(args) => {
                let pred = if matches!(self.env.pool().node(e), Node::Min(_)) {
                    IntPredicate::SLT
                } else {
                    IntPredicate::SGT
                };
                let mut acc = self.int(args[0])?;
                for &a in args.iter().skip(1) {
                    let a = self.int(a)?;
                    let c = b.build_int_compare(pred, a, acc, "")?;
                    acc = b.build_select(c, a, acc, "")?.into_int_value();
                }
                acc
            }
            Node::Where(c, x, y) => {
                let c = self.cond(c)?;
                let (x, y) = (self.expr(x)?, self.expr(y)?);
                let (x, y) = if x.get_type() == y.get_type() {
                    (x, y)
                } else {
                    (self.widen(x)?, self.widen(y)?)
                };
                b.build_select(c, x, y, "")?.into_int_value()
            }
            Node::Cmp(op, x, y) => {
                let (x, y) = (self.int(x)?, self.int(y)?);
                let p = match op {
                    CmpOp::Eq => IntPredicate::EQ,
                    CmpOp::Ne => IntPredicate::NE,
                    CmpOp::Lt => IntPredicate::SLT,
                    CmpOp::Le => IntPredicate::SLE,
                    CmpOp::Gt => IntPredicate::SGT,
                    CmpOp::Ge => IntPredicate::SGE,
                };
                b.build_int_compare(p, x, y, "")?
            }
            Node::And(args) | Node::Or(args) => {
                let and = matches!(self.env.pool().node(e), Node::And(_));
                let mut acc = self.cond(args[0])?;
                for &a in args.iter().skip(1) {
                    let a = self.cond(a)?;
                    acc = if and {
                        b.build_and(acc, a, "")?
                    } else {
                        b.build_or(acc, a, "")?
                    };
                }
                acc
            }
            Node::Not(x) => {
                let x = self.cond(x)?;
                b.build_not(x, "")?
            }
            Node::Unfolded(op, x, y) => {
                let (x, y) = (self.int(x)?, self.int(y)?);
                match op {
                    ArithOp::Add => b.build_int_add(x, y, "")?,
                    ArithOp::Mul => b.build_int_mul(x, y, "")?,
                }
            }
        };
        self.memo.insert(e, v);
        Ok(v)
    }

    fn widen(&self, v: IntValue<'c>) -> R<IntValue<'c>> {
        if v.get_type().get_bit_width() == 1 {
            self.b.build_int_z_extend(v, self.i64(), "")
        } else {
            Ok(v)
        }
    }

    /// A divisor that is never zero (size expressions are proved safe; this keeps the division
    /// free of undefined behaviour where it is speculated).
    pub(super) fn safe_divisor(&self, y: IntValue<'c>) -> R<IntValue<'c>> {
        let zero = self
            .b
            .build_int_compare(IntPredicate::EQ, y, self.const_i64(0), "")?;
        Ok(self
            .b
            .build_select(zero, self.const_i64(1), y, "")?
            .into_int_value())
    }

    pub fn floor_div(&self, x: IntValue<'c>, y: IntValue<'c>) -> R<IntValue<'c>> {
        let b = self.b;
        let y = self.safe_divisor(y)?;
        let q = b.build_int_signed_div(x, y, "")?;
        let r = b.build_int_signed_rem(x, y, "")?;
        let nonzero = b.build_int_compare(IntPredicate::NE, r, self.const_i64(0), "")?;
        let signs = b.build_xor(r, y, "")?;
        let differ = b.build_int_compare(IntPredicate::SLT, signs, self.const_i64(0), "")?;
        let adjust = b.build_and(nonzero, differ, "")?;
        let q1 = b.build_int_sub(q, self.const_i64(1), "")?;
        Ok(b.build_select(adjust, q1, q, "")?.into_int_value())
    }

    fn floor_mod(&self, x: IntValue<'c>, y: IntValue<'c>) -> R<IntValue<'c>> {
        let b = self.b;
        let y = self.safe_divisor(y)?;
        let r = b.build_int_signed_rem(x, y, "")?;
        let nonzero = b.build_int_compare(IntPredicate::NE, r, self.const_i64(0), "")?;
        let signs = b.build_xor(r, y, "")?;
        let differ = b.build_int_compare(IntPredicate::SLT, signs, self.const_i64(0), "")?;
        let adjust = b.build_and(nonzero, differ, "")?;
        let r1 = b.build_int_add(r, y, "")?;
        Ok(b.build_select(adjust, r1, r, "")?.into_int_value())
    }

    /// The index of error `message` of the current buffer (code = index + 1), added if new.
    fn error_code(&mut self, message: String) -> usize {
        let key = (self.current.0.clone(), self.current.1.clone(), message);
        match self.errors.iter().position(|m| *m == key) {
            Some(i) => i,
            None => {
                self.errors.push(key);
                self.errors.len() - 1
            }
        }
    }

    /// The block that records error `message` and returns.
    pub fn fail_block(&mut self, message: String) -> inkwell::basic_block::BasicBlock<'c> {
        let code = self.error_code(message);
        if let Some(&bb) = self.fail_blocks.get(&code) {
            return bb;
        }
        let bb = self.cx.append_basic_block(self.function, "fail");
        let here = self.b.get_insert_block();
        self.b.position_at_end(bb);
        let v = self.const_i64(code as i64 + 1);
        self.b.build_store(self.err, v).expect("positioned");
        self.b.build_return(None).expect("positioned");
        if let Some(h) = here {
            self.b.position_at_end(h);
        }
        self.fail_blocks.insert(code, bb);
        bb
    }

    /// As [`Emitter::require`], also recording `values` (shown in the message at `{0}`, `{1}`, …).
    pub fn require_with(
        &mut self,
        ok: IntValue<'c>,
        message: String,
        values: &[IntValue<'c>],
    ) -> R<()> {
        let code = self.error_code(message);
        let fail = self.cx.append_basic_block(self.function, "fail");
        let next = self.cx.append_basic_block(self.function, "ok");
        self.b.build_conditional_branch(ok, next, fail)?;
        self.b.position_at_end(fail);
        let v = self.const_i64(code as i64 + 1);
        self.b.build_store(self.err, v)?;
        for (k, &x) in values.iter().enumerate() {
            let at = self.const_i64(k as i64 + 1);
            let p = unsafe {
                self.b
                    .build_in_bounds_gep(self.i64(), self.err, &[at], "")?
            };
            self.b.build_store(p, x)?;
        }
        self.b.build_return(None)?;
        self.b.position_at_end(next);
        self.memo.clear();
        Ok(())
    }

    /// Continues only where `ok` holds; otherwise the kernel stops with `message`.
    pub fn require(&mut self, ok: IntValue<'c>, message: String) -> R<()> {
        let fail = self.fail_block(message);
        let next = self.cx.append_basic_block(self.function, "ok");
        self.b.build_conditional_branch(ok, next, fail)?;
        self.b.position_at_end(next);
        self.memo.clear();
        Ok(())
    }

    pub fn call(&self, name: &str, args: &[BasicValueEnum<'c>]) -> R<BasicValueEnum<'c>> {
        let f = self.helpers[name];
        let args: Vec<_> = args.iter().map(|&a| a.into()).collect();
        Ok(self
            .b
            .build_call(f, &args, "")?
            .try_as_basic_value()
            .basic()
            .expect("helpers return a value"))
    }

    pub(super) fn intrinsic(
        &self,
        name: &str,
        t: inkwell::types::BasicTypeEnum<'c>,
        args: &[BasicValueEnum<'c>],
    ) -> R<BasicValueEnum<'c>> {
        call_intrinsic(self.module, self.b, name, &[t], args)
    }

    /// Loads element `index` of a buffer of `d` and widens it to its compute type.
    pub fn load(&mut self, ptr: PointerValue<'c>, index: IntValue<'c>, d: DType) -> R<Val<'c>> {
        let b = self.b;
        let cx = self.cx;
        let (t, size): (inkwell::types::BasicTypeEnum, u32) = match d {
            DType::F64 => (cx.f64_type().into(), 8),
            DType::F32 => (cx.f32_type().into(), 4),
            DType::F16 => (cx.f16_type().into(), 2),
            DType::BF16 => (cx.i16_type().into(), 2),
            DType::I64 => (cx.i64_type().into(), 8),
            DType::I32 => (cx.i32_type().into(), 4),
            DType::I8 | DType::U8 | DType::Bool => (cx.i8_type().into(), 1),
        };
        let p = unsafe { b.build_in_bounds_gep(t, ptr, &[index], "")? };
        let v = b.build_load(t, p, "")?;
        v.as_instruction_value()
            .expect("a load")
            .set_alignment(size)
            .expect("alignment");
        Ok(match d {
            DType::F64 | DType::F32 => Val::F(v.into_float_value()),
            DType::F16 => Val::F(b.build_float_ext(v.into_float_value(), cx.f32_type(), "")?),
            DType::BF16 => {
                let w = b.build_int_z_extend(v.into_int_value(), cx.i32_type(), "")?;
                let w = b.build_left_shift(w, cx.i32_type().const_int(16, false), "")?;
                Val::F(b.build_bit_cast(w, cx.f32_type(), "")?.into_float_value())
            }
            DType::I64 => Val::I(v.into_int_value()),
            DType::I32 | DType::I8 => {
                Val::I(b.build_int_s_extend(v.into_int_value(), self.i64(), "")?)
            }
            DType::U8 | DType::Bool => {
                Val::I(b.build_int_z_extend(v.into_int_value(), self.i64(), "")?)
            }
        })
    }

    /// Stores `v` (already of dtype `d`'s values) at element `index`.
    pub fn store(
        &mut self,
        ptr: PointerValue<'c>,
        index: IntValue<'c>,
        d: DType,
        v: Val<'c>,
    ) -> R<()> {
        let b = self.b;
        let cx = self.cx;
        let v = self.convert(v, d)?;
        let (t, x, size): (inkwell::types::BasicTypeEnum, BasicValueEnum, u32) = match (d, v) {
            (DType::F64, Val::F(f)) => (cx.f64_type().into(), f.into(), 8),
            (DType::F32, Val::F(f)) => (cx.f32_type().into(), f.into(), 4),
            (DType::F16, Val::F(f)) => (
                cx.f16_type().into(),
                b.build_float_trunc(f, cx.f16_type(), "")?.into(),
                2,
            ),
            (DType::BF16, Val::F(f)) => {
                let w = b.build_bit_cast(f, cx.i32_type(), "")?.into_int_value();
                let w = b.build_right_shift(w, cx.i32_type().const_int(16, false), false, "")?;
                (
                    cx.i16_type().into(),
                    b.build_int_truncate(w, cx.i16_type(), "")?.into(),
                    2,
                )
            }
            (DType::I64, Val::I(i)) => (cx.i64_type().into(), i.into(), 8),
            (DType::I32, Val::I(i)) => (
                cx.i32_type().into(),
                b.build_int_truncate(i, cx.i32_type(), "")?.into(),
                4,
            ),
            (_, Val::I(i)) => (
                cx.i8_type().into(),
                b.build_int_truncate(i, cx.i8_type(), "")?.into(),
                1,
            ),
            (_, Val::F(_)) => unreachable!("converted to the stored dtype"),
        };
        let p = unsafe { b.build_in_bounds_gep(t, ptr, &[index], "")? };
        let s = b.build_store(p, x)?;
        s.set_alignment(size).expect("alignment");
        Ok(())
    }

    /// `v` as a value of dtype `d`: converted (C casts, saturating float → int, float → bool is
    /// non-zero), then rounded or wrapped to `d`.
    pub fn convert(&mut self, v: Val<'c>, d: DType) -> R<Val<'c>> {
        let b = self.b;
        let v = match (v, d.is_float()) {
            (Val::F(f), true) => {
                let t = self.float_type(d);
                Val::F(if f.get_type() == t {
                    f
                } else if t == self.cx.f64_type() {
                    b.build_float_ext(f, t, "")?
                } else {
                    b.build_float_trunc(f, t, "")?
                })
            }
            (Val::I(i), true) => {
                // As the interpreter: through f64.
                let x = b.build_signed_int_to_float(i, self.cx.f64_type(), "")?;
                let t = self.float_type(d);
                Val::F(if t == self.cx.f64_type() {
                    x
                } else {
                    b.build_float_trunc(x, t, "")?
                })
            }
            (Val::F(f), false) if d == DType::Bool => {
                let zero = f.get_type().const_float(0.0);
                let c = b.build_float_compare(FloatPredicate::UNE, f, zero, "")?;
                Val::I(b.build_int_z_extend(c, self.i64(), "")?)
            }
            (Val::F(f), false) => {
                let t = f.get_type();
                let x = call_intrinsic(
                    self.module,
                    b,
                    "llvm.fptosi.sat",
                    &[self.i64().into(), t.into()],
                    &[f.into()],
                )?
                .into_int_value();
                Val::I(x)
            }
            (Val::I(i), false) => Val::I(i),
        };
        self.round(v, d)
    }

    /// Rounds a float to `d`'s precision or wraps an integer to `d`'s range.
    pub fn round(&mut self, v: Val<'c>, d: DType) -> R<Val<'c>> {
        let b = self.b;
        let cx = self.cx;
        Ok(match (v, d) {
            (Val::F(f), DType::F16) => {
                let h = b.build_float_trunc(f, cx.f16_type(), "")?;
                Val::F(b.build_float_ext(h, cx.f32_type(), "")?)
            }
            (Val::F(f), DType::BF16) => {
                // Round to nearest even on the upper 16 bits; NaN stays NaN.
                let i32t = cx.i32_type();
                let w = b.build_bit_cast(f, i32t, "")?.into_int_value();
                let lsb = b.build_right_shift(w, i32t.const_int(16, false), false, "")?;
                let lsb = b.build_and(lsb, i32t.const_int(1, false), "")?;
                let bias = b.build_int_add(lsb, i32t.const_int(0x7fff, false), "")?;
                let r = b.build_int_add(w, bias, "")?;
                let r = b.build_and(r, i32t.const_int(0xffff_0000, false), "")?;
                let r = b.build_bit_cast(r, cx.f32_type(), "")?.into_float_value();
                let nan = b.build_float_compare(FloatPredicate::UNO, f, f, "")?;
                Val::F(b.build_select(nan, f, r, "")?.into_float_value())
            }
            (Val::I(i), DType::I32) => {
                let t = b.build_int_truncate(i, cx.i32_type(), "")?;
                Val::I(b.build_int_s_extend(t, self.i64(), "")?)
            }
            (Val::I(i), DType::I8) => {
                let t = b.build_int_truncate(i, cx.i8_type(), "")?;
                Val::I(b.build_int_s_extend(t, self.i64(), "")?)
            }
            (Val::I(i), DType::U8) => {
                let t = b.build_int_truncate(i, cx.i8_type(), "")?;
                Val::I(b.build_int_z_extend(t, self.i64(), "")?)
            }
            (Val::I(i), DType::Bool) => {
                let c = b.build_int_compare(IntPredicate::NE, i, self.const_i64(0), "")?;
                Val::I(b.build_int_z_extend(c, self.i64(), "")?)
            }
            (v, _) => v,
        })
    }

    pub(super) fn as_float(&mut self, v: Val<'c>, d: DType) -> R<FloatValue<'c>> {
        let t = if d.is_float() { d } else { DType::F64 };
        match self.convert(v, t)? {
            Val::F(f) => Ok(f),
            Val::I(_) => unreachable!("a float dtype"),
        }
    }

    pub(super) fn as_int(&mut self, v: Val<'c>) -> R<IntValue<'c>> {
        match v {
            Val::I(i) => Ok(i),
            Val::F(_) => match self.convert(v, DType::I64)? {
                Val::I(i) => Ok(i),
                Val::F(_) => unreachable!("an integer dtype"),
            },
        }
    }

    pub(super) fn truth(&mut self, v: Val<'c>) -> R<IntValue<'c>> {
        let b = self.b;
        match v {
            Val::I(i) => b.build_int_compare(IntPredicate::NE, i, self.const_i64(0), ""),
            Val::F(f) => {
                b.build_float_compare(FloatPredicate::UNE, f, f.get_type().const_float(0.0), "")
            }
        }
    }

    pub(super) fn bool_val(&self, c: IntValue<'c>) -> R<Val<'c>> {
        Ok(Val::I(self.b.build_int_z_extend(c, self.i64(), "")?))
    }

    /// Emits `body` for the current element. `source` says how each load is served. Returns the
    /// body's result value.
    pub fn body(
        &mut self,
        body: &Body,
        source: &dyn Fn(BufferId) -> Source<'c>,
        dtype_of: &dyn Fn(BufferId) -> DType,
        cache: Option<&RowCache<'c>>,
    ) -> R<Val<'c>> {
        let mut vals: Vec<Val<'c>> = Vec::with_capacity(body.ops.len());
        for (i, &(op, d)) in body.ops.iter().enumerate() {
            let slot = cache.and_then(|c| c.ops.get(&i).map(|&(slot, load)| (c, slot, load)));
            if let Some((c, slot, true)) = slot {
                let v = self.scratch(c, slot, d, None)?;
                vals.push(v);
                continue;
            }
            let v = self.op(body, &vals, op, d, source, dtype_of)?;
            let v = self.convert(v, d)?;
            if let Some((c, slot, false)) = slot {
                self.scratch(c, slot, d, Some(v))?;
            }
            vals.push(v);
        }
        Ok(vals[body.result.expect("a result").0 as usize])
    }

    /// Stores `v` into, or (`None`) loads from, element `r` of a row-cache slot.
    fn scratch(
        &mut self,
        c: &RowCache<'c>,
        slot: usize,
        d: DType,
        v: Option<Val<'c>>,
    ) -> R<Val<'c>> {
        let b = self.b;
        let t: inkwell::types::BasicTypeEnum = if d.is_float() {
            self.float_type(d).into()
        } else {
            self.i64().into()
        };
        // Slot `s` starts at byte 8·s·len.
        let start = b.build_int_mul(c.len, self.const_i64(8 * slot as i64), "")?;
        let base = unsafe { b.build_in_bounds_gep(self.cx.i8_type(), c.scratch, &[start], "")? };
        let p = unsafe { b.build_in_bounds_gep(t, base, &[c.r], "")? };
        match v {
            Some(v) => {
                match v {
                    Val::F(f) => b.build_store(p, f)?,
                    Val::I(i) => b.build_store(p, i)?,
                };
                Ok(v)
            }
            None => {
                let x = b.build_load(t, p, "")?;
                Ok(if d.is_float() {
                    Val::F(x.into_float_value())
                } else {
                    Val::I(x.into_int_value())
                })
            }
        }
    }
}
