//! Values of the loop IR as LLVM IR: size expressions (i64, Python floor semantics) and body ops
//! with the interpreter's semantics — floats computed in f32 (f64 for f64), every op's result
//! rounded or wrapped to its dtype, data-dependent failures branching to an error exit.

use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::module::Module;
use inkwell::values::{
    BasicValue, BasicValueEnum, FloatValue, FunctionValue, IntValue, PointerValue,
};
use inkwell::{FloatPredicate, IntPredicate};
use rustc_hash::FxHashMap;

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BinaryOp, Body, BufferId, Constant, Op, UnaryOp};
use guardless_ir::sym::{ArithOp, CmpOp, Expr, Node, ShapeEnv, SymbolId};

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
    fn i64(&self) -> inkwell::types::IntType<'c> {
        self.cx.i64_type()
    }

    pub fn const_i64(&self, v: i64) -> IntValue<'c> {
        self.i64().const_int(v as u64, true)
    }

    fn float_type(&self, d: DType) -> inkwell::types::FloatType<'c> {
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
        let at = self.const_i64(b.index() as i64);
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
    fn safe_divisor(&self, y: IntValue<'c>) -> R<IntValue<'c>> {
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

    fn intrinsic(
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

    fn as_float(&mut self, v: Val<'c>, d: DType) -> R<FloatValue<'c>> {
        let t = if d.is_float() { d } else { DType::F64 };
        match self.convert(v, t)? {
            Val::F(f) => Ok(f),
            Val::I(_) => unreachable!("a float dtype"),
        }
    }

    fn as_int(&mut self, v: Val<'c>) -> R<IntValue<'c>> {
        match v {
            Val::I(i) => Ok(i),
            Val::F(_) => match self.convert(v, DType::I64)? {
                Val::I(i) => Ok(i),
                Val::F(_) => unreachable!("an integer dtype"),
            },
        }
    }

    fn truth(&mut self, v: Val<'c>) -> R<IntValue<'c>> {
        let b = self.b;
        match v {
            Val::I(i) => b.build_int_compare(IntPredicate::NE, i, self.const_i64(0), ""),
            Val::F(f) => {
                b.build_float_compare(FloatPredicate::UNE, f, f.get_type().const_float(0.0), "")
            }
        }
    }

    fn bool_val(&self, c: IntValue<'c>) -> R<Val<'c>> {
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

    #[allow(clippy::too_many_arguments)]
    fn op(
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
                let message = format!(
                    "index {{0}} is out of range [0, {{1}}) for {}",
                    self.env.text(var)
                );
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
