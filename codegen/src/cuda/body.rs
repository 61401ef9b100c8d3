//! A member's body (the SSA DAG of the loop IR) as CUDA C statements: one `const` per value, in
//! the compute type (f32 for f16/bf16, rounded where the IR casts); loads through `gl_ld`,
//! data-dependent indices bound after a range check that reports an error code.

use std::fmt::Write;

use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{BinaryOp, Body, BufferId, Constant, Op, ReductionKind, UnaryOp};
use guardless_ir::sym::{CPrinter, Expr, ShapeEnv, SymbolId};

/// The C type values of `d` are computed in.
pub fn compute_type(d: DType) -> &'static str {
    match d {
        DType::F64 => "double",
        DType::F32 | DType::F16 | DType::BF16 => "float",
        DType::I64 => "long long",
        DType::I32 | DType::I8 | DType::U8 => "int",
        DType::Bool => "bool",
    }
}

/// The C type elements of `d` are stored as.
pub fn storage_type(d: DType) -> &'static str {
    match d {
        DType::F64 => "double",
        DType::F32 => "float",
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
        DType::I64 => "long long",
        DType::I32 => "int",
        DType::I8 => "signed char",
        DType::U8 => "unsigned char",
        DType::Bool => "bool",
    }
}

/// How a buffer is read inside the kernel being rendered.
#[derive(Clone, Debug)]
pub enum Read {
    /// Through a pointer parameter of this name.
    Memory(String),
    /// A value already computed in this kernel (same element, or the row's value).
    Register(String),
}

/// Everything a body needs to render: the shape environment, the index printer, how each buffer is
/// read, the member's variables in kernel terms, and the error codes raised so far.
pub struct Scope<'a> {
    pub env: &'a mut ShapeEnv,
    pub printer: &'a CPrinter,
    pub idx: &'static str,
    pub read: &'a dyn Fn(BufferId) -> Read,
    pub vars: &'a [(SymbolId, Expr)],
    pub errors: &'a mut Vec<String>,
    /// Where this function's errors start in `errors`, when its codes are relative to the
    /// `gl_err_base` parameter (a kernel's, so that the same code serves every kernel of the same
    /// structure); `None`: codes are the module's (library steps).
    pub errors_from: Option<usize>,
    /// Names errors: the buffer and its graph nodes.
    pub what: String,
    pub hoist: &'a mut super::hoist::Hoister,
    /// Indices already rendered, by member and expression (shared by a kernel's variants).
    pub memo: &'a mut rustc_hash::FxHashMap<(usize, Expr), Expr>,
    pub member: usize,
    /// Loads (by op index) already done as a 16-byte vector: what to read instead.
    pub vector_loads: &'a rustc_hash::FxHashMap<usize, String>,
}

impl Scope<'_> {
    pub(super) fn index(&mut self, e: Expr) -> String {
        let s = match self.memo.get(&(self.member, e)) {
            Some(&s) => s,
            None => {
                let vars = self.vars;
                let s = self.env.pool_mut().substitute_pairs(e, vars);
                let s = self.env.simplify(s);
                let s = self.hoist.hoist(self.env, s);
                self.memo.insert((self.member, e), s);
                s
            }
        };
        self.env.to_c(s, self.printer)
    }

    /// Records an error's message; the C expression of its code.
    fn error(&mut self, message: String) -> String {
        self.errors
            .push(guardless_ir::loop_ir::kernel_error(&self.what, &message));
        match self.errors_from {
            Some(start) => format!("gl_err_base + {}", self.errors.len() - start),
            None => self.errors.len().to_string(),
        }
    }
}

fn float_literal(v: f64, d: DType) -> String {
    if d == DType::F64 {
        format!("__longlong_as_double(0x{:016x}LL)", v.to_bits())
    } else {
        format!("__int_as_float(0x{:08x})", (v as f32).to_bits())
    }
}

/// The identity of a reduction over values of `d` (what an empty lane holds).
pub fn identity(kind: ReductionKind, d: DType) -> String {
    let t = compute_type(d);
    let inf = |neg: bool| {
        let s = float_literal(f64::INFINITY, d);
        if neg {
            format!("(-{s})")
        } else {
            s
        }
    };
    match (kind, d.is_float()) {
        (ReductionKind::Sum, _) => format!("(({t})0)"),
        (ReductionKind::Prod, _) => format!("(({t})1)"),
        (ReductionKind::Any, _) => "false".into(),
        (ReductionKind::Max | ReductionKind::ArgMax, true) => inf(true),
        (ReductionKind::Min | ReductionKind::ArgMin, true) => inf(false),
        (ReductionKind::Max | ReductionKind::ArgMax, false) if d == DType::Bool => "false".into(),
        (ReductionKind::Min | ReductionKind::ArgMin, false) if d == DType::Bool => "true".into(),
        (ReductionKind::Max | ReductionKind::ArgMax, false) => {
            if t == "int" {
                "(-2147483647 - 1)".into()
            } else {
                "(-9223372036854775807LL - 1)".into()
            }
        }
        (ReductionKind::Min | ReductionKind::ArgMin, false) => {
            if t == "int" {
                "2147483647".into()
            } else {
                "9223372036854775807LL".into()
            }
        }
    }
}

/// `a ⊕ b` for a value reduction.
pub fn combine(kind: ReductionKind, a: &str, b: &str) -> String {
    match kind {
        ReductionKind::Sum => format!("({a} + {b})"),
        ReductionKind::Prod => format!("({a} * {b})"),
        ReductionKind::Max => format!("gl_max({a}, {b})"),
        ReductionKind::Min => format!("gl_min({a}, {b})"),
        ReductionKind::Any => format!("({a} || {b})"),
        ReductionKind::ArgMax | ReductionKind::ArgMin => {
            unreachable!("arg-reductions keep positions")
        }
    }
}

/// Renders `body` as statements defining `{prefix}{i}` for each value; returns the statements and
/// the name of the result.
pub fn render(body: &Body, prefix: &str, sc: &mut Scope, indent: &str) -> (String, String) {
    let mut out = String::new();
    // Every value's name, built once: operands are named many times.
    let names: Vec<String> = (0..body.ops.len())
        .map(|i| format!("{prefix}{i}"))
        .collect();
    let name = |v: guardless_ir::loop_ir::ValueId| names[v.0 as usize].as_str();
    for (i, &(op, d)) in body.ops.iter().enumerate() {
        let t = compute_type(d);
        let dt = |v: guardless_ir::loop_ir::ValueId| body.dtype(v);
        let masked = |m: Option<guardless_ir::loop_ir::ValueId>, e: String| match m {
            Some(m) => format!("({} ? {e} : ({t})0)", name(m)),
            None => e,
        };
        let rhs = match op {
            Op::Load { .. } if sc.vector_loads.contains_key(&i) => sc.vector_loads[&i].clone(),
            Op::Load {
                buffer,
                index,
                mask,
            } => {
                let e = match (sc.read)(buffer) {
                    Read::Register(v) => v,
                    Read::Memory(p) => format!("gl_ld({p}, (long long)({}))", sc.index(index)),
                };
                masked(mask, e)
            }
            Op::Constant(Constant::Float(bits)) => {
                let v = f64::from_bits(bits);
                if d.is_float() {
                    float_literal(v, d)
                } else {
                    format!("(({t}){})", v as i64)
                }
            }
            Op::Constant(Constant::Int(v)) => match d {
                DType::Bool => (if v != 0 { "true" } else { "false" }).into(),
                _ if d.is_float() => float_literal(v as f64, d),
                _ => format!("(({t}){v}LL)"),
            },
            Op::Index(e, mask) => masked(mask, format!("((long long)({}))", sc.index(e))),
            Op::Unary(u, a) => unary(u, name(a), d),
            Op::Binary(b, x, y) => {
                let (a, c) = (name(x), name(y));
                match b {
                    BinaryOp::FloorDiv | BinaryOp::TruncDiv | BinaryOp::Rem
                        if !dt(x).is_float() =>
                    {
                        let code = sc.error("integer division by zero".into());
                        let q = match b {
                            BinaryOp::FloorDiv => {
                                let s = if t == "int" { "i32" } else { "i64" };
                                format!("gl_floordiv_{s}({a}, {c})")
                            }
                            BinaryOp::Rem => format!("({a} % {c})"),
                            _ => format!("({a} / {c})"),
                        };
                        format!("({c} == 0 ? (gl_fail(gl_error, {code}), ({t})0) : ({t}){q})")
                    }
                    _ => binary(b, a, c, dt(x), d),
                }
            }
            Op::Where(c, a, b) => format!("({} ? {} : {})", name(c), name(a), name(b)),
            Op::Cast(a) => cast(name(a), dt(a), d),
            Op::Bind {
                var,
                value,
                size,
                mask,
            } => {
                let v = guardless_ir::sym::cuda_symbol(&sc.env.text(var));
                let size = sc.index(size);
                let code = sc.error(match sc.env.index_origin(var) {
                    Some(origin) => format!("{origin}: an index is out of range"),
                    None => format!("an index of {v} is out of range"),
                });
                let idx = sc.idx;
                let _ = writeln!(out, "{indent}{idx} {v} = ({idx}){};", name(value));
                let guard = mask.map(|m| format!("{} && ", name(m))).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{indent}if ({guard}!({v} >= 0 && {v} < {size})) {{ gl_fail(gl_error, {code}); {v} = 0; }}"
                );
                if let Some(m) = mask {
                    let _ = writeln!(out, "{indent}if (!{}) {v} = 0;", name(m));
                }
                format!("((long long){v})")
            }
            Op::Check { cond, check } => {
                let code = sc.error(check.message().into());
                let _ = writeln!(
                    out,
                    "{indent}if (!{}) gl_fail(gl_error, {code});",
                    name(cond)
                );
                name(cond).to_string()
            }
        };
        out.push_str(indent);
        out.push_str("const ");
        out.push_str(t);
        out.push(' ');
        out.push_str(prefix);
        let _ = write!(out, "{i} = ");
        out.push_str(&rhs);
        out.push_str(";\n");
    }
    let result = name(body.result.expect("a body has a result")).to_string();
    (out, result)
}

fn unary(u: UnaryOp, a: &str, d: DType) -> String {
    let f = d == DType::F32 || d == DType::F16 || d == DType::BF16;
    let fun = |single: &str, double: &str| {
        if f {
            format!("{single}({a})")
        } else {
            format!("{double}({a})")
        }
    };
    if !d.is_float() {
        return match u {
            UnaryOp::Neg => format!("(-{a})"),
            UnaryOp::Abs => format!("({a} < 0 ? -{a} : {a})"),
            UnaryOp::Relu => format!("({a} > 0 ? {a} : 0)"),
            UnaryOp::LogicalNot => format!("(!{a})"),
            UnaryOp::BitNot if d == DType::Bool => format!("(!{a})"),
            UnaryOp::BitNot => format!("(~{a})"),
            UnaryOp::Sign => format!("(({a} > 0) - ({a} < 0))"),
            // Transcendental functions of integers give floats; lowering casts first.
            _ => format!("({a})"),
        };
    }
    match u {
        UnaryOp::Neg => format!("(-{a})"),
        UnaryOp::Abs => fun("fabsf", "fabs"),
        UnaryOp::Exp => fun("expf", "exp"),
        UnaryOp::Log => fun("logf", "log"),
        UnaryOp::Log1p => fun("log1pf", "log1p"),
        UnaryOp::Sqrt => fun("sqrtf", "sqrt"),
        UnaryOp::Rsqrt => fun("rsqrtf", "rsqrt"),
        UnaryOp::Sin => fun("sinf", "sin"),
        UnaryOp::Cos => fun("cosf", "cos"),
        UnaryOp::Tanh => fun("tanhf", "tanh"),
        UnaryOp::Sigmoid if f => format!("(1.0f / (1.0f + expf(-{a})))"),
        UnaryOp::Sigmoid => format!("(1.0 / (1.0 + exp(-{a})))"),
        UnaryOp::Relu => format!("(({a} != {a} || {a} > 0) ? {a} : 0)"),
        UnaryOp::Erf => fun("erff", "erf"),
        UnaryOp::Expm1 => fun("expm1f", "expm1"),
        UnaryOp::Log2 => fun("log2f", "log2"),
        UnaryOp::Log10 => fun("log10f", "log10"),
        UnaryOp::Exp2 => fun("exp2f", "exp2"),
        UnaryOp::Tan => fun("tanf", "tan"),
        UnaryOp::Atan => fun("atanf", "atan"),
        UnaryOp::Asin => fun("asinf", "asin"),
        UnaryOp::Acos => fun("acosf", "acos"),
        UnaryOp::Sinh => fun("sinhf", "sinh"),
        UnaryOp::Cosh => fun("coshf", "cosh"),
        UnaryOp::Asinh => fun("asinhf", "asinh"),
        UnaryOp::Acosh => fun("acoshf", "acosh"),
        UnaryOp::Atanh => fun("atanhf", "atanh"),
        UnaryOp::Floor => fun("floorf", "floor"),
        UnaryOp::Ceil => fun("ceilf", "ceil"),
        // rint rounds ties to even in the default rounding mode, as torch.round.
        UnaryOp::Round => fun("rintf", "rint"),
        UnaryOp::Trunc => fun("truncf", "trunc"),
        UnaryOp::Sign if f => format!("((float)(({a} > 0) - ({a} < 0)))"),
        UnaryOp::Sign => format!("((double)(({a} > 0) - ({a} < 0)))"),
        UnaryOp::Reciprocal if f => format!("(1.0f / {a})"),
        UnaryOp::Reciprocal => format!("(1.0 / {a})"),
        UnaryOp::LogicalNot => format!("({a} == 0)"),
        UnaryOp::BitNot => format!("({a})"),
    }
}

fn binary(b: BinaryOp, a: &str, c: &str, operand: DType, d: DType) -> String {
    let f = operand == DType::F32 || operand == DType::F16 || operand == DType::BF16;
    match b {
        BinaryOp::Add => format!("({a} + {c})"),
        BinaryOp::Sub => format!("({a} - {c})"),
        BinaryOp::Mul => format!("({a} * {c})"),
        BinaryOp::Div if operand.is_float() => format!("({a} / {c})"),
        BinaryOp::Div => format!("(({})((double){a} / (double){c}))", compute_type(d)),
        BinaryOp::FloorDiv if f => format!("floorf({a} / {c})"),
        BinaryOp::FloorDiv => format!("floor({a} / {c})"),
        BinaryOp::TruncDiv if f => format!("truncf({a} / {c})"),
        BinaryOp::TruncDiv => format!("trunc({a} / {c})"),
        BinaryOp::Rem if f => format!("fmodf({a}, {c})"),
        BinaryOp::Rem => format!("fmod({a}, {c})"),
        BinaryOp::Pow if f => format!("powf({a}, {c})"),
        BinaryOp::Pow if operand.is_float() => format!("pow({a}, {c})"),
        BinaryOp::Pow => format!(
            "(({t})({c} < 0 ? 0 : (long long)pow((double){a}, (double){c})))",
            t = compute_type(d)
        ),
        BinaryOp::Max => format!("gl_max({a}, {c})"),
        BinaryOp::Min => format!("gl_min({a}, {c})"),
        BinaryOp::Eq => format!("({a} == {c})"),
        BinaryOp::Ne => format!("({a} != {c})"),
        BinaryOp::Lt => format!("({a} < {c})"),
        BinaryOp::Le => format!("({a} <= {c})"),
        BinaryOp::Gt => format!("({a} > {c})"),
        BinaryOp::Ge => format!("({a} >= {c})"),
        BinaryOp::LogicalAnd => format!("({a} && {c})"),
        BinaryOp::LogicalOr => format!("({a} || {c})"),
        BinaryOp::BitAnd => format!("({a} & {c})"),
        BinaryOp::BitOr => format!("({a} | {c})"),
        BinaryOp::BitXor => format!("({a} ^ {c})"),
        BinaryOp::Atan2 if f => format!("atan2f({a}, {c})"),
        BinaryOp::Atan2 => format!("atan2({a}, {c})"),
        BinaryOp::Hypot if f => format!("hypotf({a}, {c})"),
        BinaryOp::Hypot => format!("hypot({a}, {c})"),
        BinaryOp::Copysign if f => format!("copysignf({a}, {c})"),
        BinaryOp::Copysign => format!("copysign({a}, {c})"),
        // Operands are i64 (lowering widens them); C leaves shifts by 64 or more undefined.
        BinaryOp::Shl => {
            format!("(({c} >= 0 && {c} < 64) ? (long long)((unsigned long long){a} << {c}) : 0LL)")
        }
        BinaryOp::Shr => format!("({a} >> (({c} >= 0 && {c} < 64) ? {c} : 63))"),
    }
}

/// A cast with ATen's meaning: floats round to f16/bf16, non-zero is true, integers wrap.
pub fn cast(a: &str, from: DType, to: DType) -> String {
    match to {
        DType::BF16 if from != DType::BF16 => format!("gl_round_bf16((float){a})"),
        DType::F16 if from != DType::F16 => format!("gl_round_f16((float){a})"),
        DType::BF16 | DType::F16 | DType::F32 => format!("((float){a})"),
        DType::F64 => format!("((double){a})"),
        DType::Bool => format!("({a} != 0)"),
        DType::I8 => format!("((int)(signed char)(long long){a})"),
        DType::U8 => format!("((int)(unsigned char)(long long){a})"),
        DType::I32 => format!("((int)(long long){a})"),
        DType::I64 => format!("((long long){a})"),
    }
}

/// The unmasked loads of `body`: each op's position, buffer, index and dtype.
pub(super) fn unmasked_loads(
    body: &Body,
) -> impl Iterator<Item = (usize, BufferId, Expr, DType)> + '_ {
    body.ops
        .iter()
        .enumerate()
        .filter_map(|(i, &(op, d))| match op {
            Op::Load {
                buffer,
                index,
                mask: None,
            } => Some((i, buffer, index, d)),
            _ => None,
        })
}
