//! One scheduled kernel as an LLVM function `void k(ptr ptrs, ptr syms, i64 begin, i64 end,
//! ptr err)` over rows `[begin, end)`: per row, each pass initializes its row values and
//! accumulators, sweeps the row's elements (members in order, reductions into the schedule's
//! lanes), then finishes its reductions in the lanes' balanced tree — the order every backend
//! shares. A pointwise kernel's rows are all dimensions but the last, which the element loop
//! walks contiguously (so LLVM vectorizes it).

use inkwell::basic_block::BasicBlock;
use inkwell::values::{IntValue, PointerValue};
use inkwell::{FloatPredicate, IntPredicate};
use rustc_hash::FxHashMap;

use guardless_codegen::schedule::{member_map, Kernel, Residence, Role};
use guardless_ir::graph::DType;
use guardless_ir::loop_ir::{
    BinaryOp, BufferId, BufferKind, Constant, Op, Program, ReductionKind, UnaryOp,
};
use guardless_ir::sym::{Expr, SymbolId};

use super::emit::{Emitter, Source, Val};

type R<T> = Result<T, inkwell::builder::BuilderError>;

/// How a kernel's iteration space splits into rows (run in parallel) and elements of a row.
#[derive(Clone, Debug)]
pub struct KernelShape {
    pub row_dims: Vec<Expr>,
    pub row_vars: Vec<Expr>,
    pub elem_dims: Vec<Expr>,
    pub elem_vars: Vec<Expr>,
    /// Reduction lanes (1: in order).
    pub lanes: i64,
}

pub fn shape_of(k: &Kernel) -> KernelShape {
    let n = k.outer.len();
    let lanes = k.variants.first().map_or(1, |v| v.config.lanes).max(1);
    if k.inner.is_empty() {
        let split = n.saturating_sub(1);
        KernelShape {
            row_dims: k.outer[..split].to_vec(),
            row_vars: k.vars[..split].to_vec(),
            elem_dims: k.outer[split..].to_vec(),
            elem_vars: k.vars[split..n].to_vec(),
            lanes: 1,
        }
    } else {
        KernelShape {
            row_dims: k.outer.clone(),
            row_vars: k.vars[..n].to_vec(),
            elem_dims: k.inner.clone(),
            elem_vars: k.vars[n..].to_vec(),
            lanes,
        }
    }
}

/// What the emitter needs of each member, prepared with the environment mutable.
pub struct MemberPlan {
    pub buffer: BufferId,
    pub role: Role,
    pub pass: usize,
    pub stored: bool,
    pub vars: Vec<(SymbolId, Expr)>,
    pub store_index: Expr,
    pub dtype: DType,
    pub name: String,
    pub origins: String,
    /// Each op's value number across the kernel's members (equal numbers: equal values).
    pub keys: Vec<u32>,
    /// Ops kept in the row cache: op index → (slot, whether loaded instead of computed).
    pub cached: FxHashMap<usize, (usize, bool)>,
}

/// What identifies an op's value within one element of a kernel's row.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Load(BufferId, Expr, Option<u32>),
    RowValue(BufferId),
    Const(Constant, DType),
    Index(Expr, Option<u32>),
    Unary(UnaryOp, DType, u32),
    Binary(BinaryOp, DType, u32, u32),
    Where(DType, u32, u32, u32),
    Cast(DType, u32),
    Unique(usize, usize),
}

/// Numbers every op of the members' bodies so that ops computing the same value of an element
/// (after each member's variables are put in the kernel's terms) share a number. A transcendental
/// value computed per element in one pass and again in a later one goes to the row cache: stored
/// where first computed, loaded after. Bodies that bind data-dependent indices are left alone.
fn plan_row_cache(p: &mut Program, kernel: &Kernel, members: &mut [MemberPlan]) -> usize {
    let mut ids: FxHashMap<Key, u32> = FxHashMap::default();
    let mut result_of: FxHashMap<BufferId, u32> = FxHashMap::default();
    for (mi, member) in members.iter_mut().enumerate() {
        let BufferKind::Computed { body, .. } = p.buffers[member.buffer.index()].kind.clone()
        else {
            continue;
        };
        let binds = body.ops.iter().any(|(op, _)| matches!(op, Op::Bind { .. }));
        let mut keys: Vec<u32> = Vec::with_capacity(body.ops.len());
        for (oi, &(op, d)) in body.ops.iter().enumerate() {
            let k = |v: guardless_ir::loop_ir::ValueId| keys[v.0 as usize];
            let key = match op {
                _ if binds => Key::Unique(mi, oi),
                Op::Load {
                    buffer,
                    index,
                    mask,
                } => match kernel.residence(buffer, member.pass) {
                    Residence::RowValue => Key::RowValue(buffer),
                    Residence::Element => match result_of.get(&buffer) {
                        Some(&r) => {
                            keys.push(r);
                            continue;
                        }
                        None => Key::Unique(mi, oi),
                    },
                    Residence::Memory => {
                        let e = p.env.pool_mut().substitute_pairs(index, &member.vars);
                        Key::Load(buffer, p.env.simplify(e), mask.map(k))
                    }
                },
                Op::Constant(c) => Key::Const(c, d),
                Op::Index(e, mask) => {
                    let e = p.env.pool_mut().substitute_pairs(e, &member.vars);
                    Key::Index(p.env.simplify(e), mask.map(k))
                }
                Op::Unary(u, a) => Key::Unary(u, d, k(a)),
                Op::Binary(o, a, b) => Key::Binary(o, d, k(a), k(b)),
                Op::Where(c, a, b) => Key::Where(d, k(c), k(a), k(b)),
                Op::Cast(a) => Key::Cast(d, k(a)),
                Op::Bind { .. } | Op::Check { .. } => Key::Unique(mi, oi),
            };
            let n = ids.len() as u32;
            keys.push(*ids.entry(key).or_insert(n));
        }
        if let Some(r) = body.result {
            result_of.insert(member.buffer, keys[r.0 as usize]);
        }
        member.keys = keys;
    }
    // The first pass computing each transcendental per-element value, and where.
    let mut first: FxHashMap<u32, (usize, usize, usize)> = FxHashMap::default();
    let mut later: Vec<(u32, usize, usize)> = Vec::new();
    for (mi, m) in members.iter().enumerate() {
        if m.role == Role::RowValue {
            continue;
        }
        let BufferKind::Computed { body, .. } = &p.buffers[m.buffer.index()].kind else {
            continue;
        };
        for (oi, (op, _)) in body.ops.iter().enumerate() {
            if !op.is_transcendental() {
                continue;
            }
            let key = m.keys[oi];
            match first.get(&key) {
                None => {
                    first.insert(key, (m.pass, mi, oi));
                }
                Some(&(pass, _, _)) if pass < m.pass => later.push((key, mi, oi)),
                Some(_) => {}
            }
        }
    }
    let mut slots: FxHashMap<u32, usize> = FxHashMap::default();
    for (key, mi, oi) in later {
        let n = slots.len();
        let slot = *slots.entry(key).or_insert(n);
        members[mi].cached.insert(oi, (slot, true));
        let (_, fm, fo) = first[&key];
        members[fm].cached.insert(fo, (slot, false));
    }
    slots.len()
}

/// The members' plans, and the row cache's slots.
pub fn plan_members(p: &mut Program, k: &Kernel, row_cache: bool) -> (Vec<MemberPlan>, usize) {
    let mut members = member_plans(p, k);
    let slots = if row_cache {
        plan_row_cache(p, k, &mut members)
    } else {
        0
    };
    (members, slots)
}

fn member_plans(p: &mut Program, k: &Kernel) -> Vec<MemberPlan> {
    k.members
        .iter()
        .filter_map(|m| {
            let buf = p.buffers[m.buffer.index()].clone();
            let BufferKind::Computed { loops, .. } = &buf.kind else {
                return None;
            };
            let vars = member_map(&mut p.env, loops, k, m.role, &k.vars);
            let store_index = buf.layout.index(&mut p.env, &loops.vars);
            Some(MemberPlan {
                buffer: m.buffer,
                role: m.role,
                pass: m.pass,
                stored: m.stored.is_some(),
                vars,
                store_index,
                dtype: buf.dtype,
                name: buf.name.clone(),
                origins: buf.origins.join(", "),
                keys: Vec::new(),
                cached: FxHashMap::default(),
            })
        })
        .collect()
}

struct Acc<'c> {
    buffer: BufferId,
    kind: ReductionKind,
    dtype: DType,
    values: PointerValue<'c>,
    positions: Option<PointerValue<'c>>,
}

pub struct KernelEmitter<'e, 'a, 'c> {
    pub e: &'e mut Emitter<'a, 'c>,
    pub p: &'a Program,
    kernel: &'a Kernel,
    pub shape: KernelShape,
    pub members: Vec<MemberPlan>,
    /// Row values (reductions finished, row-level members) and this element's values.
    row_vals: FxHashMap<BufferId, Val<'c>>,
    elem_vals: FxHashMap<BufferId, Val<'c>>,
    /// The row cache (see `plan_row_cache`) and the row's length.
    pub scratch: Option<PointerValue<'c>>,
    len: Option<IntValue<'c>>,
    current_r: Option<IntValue<'c>>,
    /// Lanes of the current pass's reductions: the schedule's, or fewer where every one is
    /// exact in any order (see [`ORDER_FREE_LANES`]).
    pass_lanes: i64,
}

/// Lanes for a pass whose reductions give the same bits in any order (max, min, any, integer
/// sums): eight AVX2 vectors of accumulators, in L1. The schedule's lane count (a GPU block's
/// threads, thousands) fixes the order of float sums, which every backend shares; for the
/// order-free kinds it only made the sweep slower (amax over [4096, 32000] f32: 30 → 21 ms).
const ORDER_FREE_LANES: i64 = 64;

fn order_free(a: &Acc) -> bool {
    match a.kind {
        ReductionKind::Max | ReductionKind::Min | ReductionKind::Any => true,
        ReductionKind::Sum | ReductionKind::Prod => !a.dtype.is_float(),
        _ => false,
    }
}

impl<'e, 'a, 'c> KernelEmitter<'e, 'a, 'c> {
    pub fn new(
        e: &'e mut Emitter<'a, 'c>,
        p: &'a Program,
        kernel: &'a Kernel,
        members: Vec<MemberPlan>,
    ) -> Self {
        KernelEmitter {
            e,
            p,
            kernel,
            shape: shape_of(kernel),
            members,
            row_vals: FxHashMap::default(),
            elem_vals: FxHashMap::default(),
            scratch: None,
            len: None,
            current_r: None,
            pass_lanes: 1,
        }
    }

    fn var_id(&self, v: Expr) -> SymbolId {
        self.p
            .env
            .pool()
            .as_symbol(v)
            .expect("loop variables are symbols")
    }

    /// `for i in [from, to)`: returns the induction value, positioned in the body; `close` ends it.
    fn open_loop(
        &mut self,
        from: IntValue<'c>,
        to: IntValue<'c>,
        name: &str,
    ) -> R<(IntValue<'c>, LoopEnd<'c>)> {
        let e = &mut *self.e;
        let pre = e.b.get_insert_block().expect("positioned");
        let head = e.cx.append_basic_block(e.function, name);
        let body = e.cx.append_basic_block(e.function, name);
        let exit = e.cx.append_basic_block(e.function, name);
        e.b.build_unconditional_branch(head)?;
        e.b.position_at_end(head);
        let phi = e.b.build_phi(e.cx.i64_type(), name)?;
        phi.add_incoming(&[(&from, pre)]);
        let i = phi.as_basic_value().into_int_value();
        let c = e.b.build_int_compare(IntPredicate::SLT, i, to, "")?;
        e.b.build_conditional_branch(c, body, exit)?;
        e.b.position_at_end(body);
        e.memo.clear();
        Ok((i, LoopEnd { phi, head, exit }))
    }

    fn close_loop(&mut self, i: IntValue<'c>, end: LoopEnd<'c>) -> R<()> {
        let e = &mut *self.e;
        let next = e.b.build_int_add(i, e.const_i64(1), "")?;
        let latch = e.b.get_insert_block().expect("positioned");
        e.b.build_unconditional_branch(end.head)?;
        end.phi.add_incoming(&[(&next, latch)]);
        e.b.position_at_end(end.exit);
        e.memo.clear();
        Ok(())
    }

    /// Binds `vars` to the row-major decomposition of `lin` over `dims`.
    fn decompose(&mut self, lin: IntValue<'c>, dims: &[Expr], vars: &[Expr]) -> R<()> {
        let mut rest = lin;
        for j in (0..vars.len()).rev() {
            let id = self.var_id(vars[j]);
            if j == 0 {
                self.e.locals.insert(id, rest);
            } else {
                let d = self.e.int(dims[j])?;
                let d = {
                    let z =
                        self.e
                            .b
                            .build_int_compare(IntPredicate::EQ, d, self.e.const_i64(0), "")?;
                    self.e
                        .b
                        .build_select(z, self.e.const_i64(1), d, "")?
                        .into_int_value()
                };
                let v = self.e.b.build_int_unsigned_rem(rest, d, "")?;
                rest = self.e.b.build_int_unsigned_div(rest, d, "")?;
                self.e.locals.insert(id, v);
            }
        }
        self.e.memo.clear();
        Ok(())
    }

    fn product(&mut self, dims: &[Expr]) -> R<IntValue<'c>> {
        let mut n = self.e.const_i64(1);
        for &d in dims {
            let v = self.e.int(d)?;
            n = self.e.b.build_int_mul(n, v, "")?;
        }
        Ok(n)
    }

    fn bind_member_vars(&mut self, mi: usize) -> R<()> {
        let vars = self.members[mi].vars.clone();
        for (id, x) in vars {
            let v = self.e.int(x)?;
            self.e.locals.insert(id, v);
        }
        self.e.memo.clear();
        Ok(())
    }

    /// Emits member `mi`'s body at the current point, returning its value.
    fn member_value(&mut self, mi: usize) -> R<Val<'c>> {
        self.bind_member_vars(mi)?;
        let m = &self.members[mi];
        let BufferKind::Computed { body, .. } = &self.p.buffers[m.buffer.index()].kind else {
            unreachable!("members are computed buffers")
        };
        let pass = m.pass;
        self.e.current = (m.name.clone(), m.origins.clone());
        // Loads of members: row values and this element's values from registers; an
        // elementwise member of an earlier pass from memory.
        let mut sources: FxHashMap<BufferId, Source<'c>> = FxHashMap::default();
        for (op, _) in &body.ops {
            if let guardless_ir::loop_ir::Op::Load { buffer, .. } = op {
                let s = match self.kernel.residence(*buffer, pass) {
                    Residence::RowValue => Source::Register(self.row_vals[buffer]),
                    Residence::Element => Source::Register(self.elem_vals[buffer]),
                    Residence::Memory => Source::Memory(self.e.pointer(*buffer)?),
                };
                sources.insert(*buffer, s);
            }
        }
        let p = self.p;
        let cache = match (self.scratch, self.len, self.current_r) {
            (Some(scratch), Some(len), Some(r)) if !self.members[mi].cached.is_empty() => {
                Some(super::emit::RowCache {
                    scratch,
                    len,
                    r,
                    ops: self.members[mi].cached.clone(),
                })
            }
            _ => None,
        };
        self.e.body(
            body,
            &|b| sources[&b],
            &|b| p.buffers[b.index()].dtype,
            cache.as_ref(),
        )
    }

    fn store_member(&mut self, mi: usize, v: Val<'c>) -> R<()> {
        let (buffer, index, dtype) = {
            let m = &self.members[mi];
            (m.buffer, m.store_index, m.dtype)
        };
        let ptr = self.e.pointer(buffer)?;
        let i = self.e.int(index)?;
        self.e.store(ptr, i, dtype, v)
    }

    pub fn emit(&mut self, begin: IntValue<'c>, end: IntValue<'c>) -> R<()> {
        let passes = self.members.iter().map(|m| m.pass).max().unwrap_or(0) + 1;
        let shape = self.shape.clone();
        // Accumulators live in the entry block's frame.
        let mut accs: Vec<Acc<'c>> = Vec::new();
        for m in &self.members {
            if m.role != Role::Reduction {
                continue;
            }
            let BufferKind::Computed { loops, body } = &self.p.buffers[m.buffer.index()].kind
            else {
                continue;
            };
            let (kind, _, _) = loops.reduction.clone().expect("a reduction");
            let d = body.dtype(body.result.expect("a result"));
            let t: inkwell::types::BasicTypeEnum = if d.is_float() {
                if d == DType::F64 {
                    self.e.cx.f64_type().into()
                } else {
                    self.e.cx.f32_type().into()
                }
            } else {
                self.e.cx.i64_type().into()
            };
            let n = self.e.const_i64(shape.lanes);
            let values = self.e.entry.build_array_alloca(t, n, "acc")?;
            let arg = matches!(kind, ReductionKind::ArgMax | ReductionKind::ArgMin);
            let positions = if arg {
                Some(
                    self.e
                        .entry
                        .build_array_alloca(self.e.cx.i64_type(), n, "pos")?,
                )
            } else {
                None
            };
            accs.push(Acc {
                buffer: m.buffer,
                kind,
                dtype: d,
                values,
                positions,
            });
        }

        let rows_end = end;
        let (row, row_loop) = self.open_loop(begin, rows_end, "row")?;
        self.decompose(row, &shape.row_dims, &shape.row_vars)?;
        let len = self.product(&shape.elem_dims)?;
        self.len = Some(len);
        self.row_vals.clear();
        for pass in 0..passes {
            // Row values of this pass.
            for mi in 0..self.members.len() {
                let m = &self.members[mi];
                if m.pass != pass || m.role != Role::RowValue {
                    continue;
                }
                let v = self.member_value(mi)?;
                if self.members[mi].stored {
                    self.store_member(mi, v)?;
                }
                self.row_vals.insert(self.members[mi].buffer, v);
            }
            let pass_accs: Vec<usize> = (0..accs.len())
                .filter(|&a| {
                    self.members
                        .iter()
                        .any(|m| m.buffer == accs[a].buffer && m.pass == pass)
                })
                .collect();
            self.pass_lanes = if pass_accs.is_empty() {
                1
            } else if pass_accs.iter().all(|&a| order_free(&accs[a])) {
                shape.lanes.min(ORDER_FREE_LANES)
            } else {
                shape.lanes
            };
            for &a in &pass_accs {
                self.init_acc(&accs[a])?;
            }
            let sweeps = self
                .members
                .iter()
                .any(|m| m.pass == pass && m.role != Role::RowValue);
            if sweeps {
                let lanes = self.pass_lanes;
                if lanes > 1 {
                    let l = self.e.const_i64(lanes);
                    let full = self.e.b.build_int_signed_div(len, l, "")?;
                    let zero = self.e.const_i64(0);
                    let (c, chunk_loop) = self.open_loop(zero, full, "chunk")?;
                    let base = self.e.b.build_int_mul(c, l, "")?;
                    let (lane, lane_loop) = self.open_loop(zero, l, "lane")?;
                    let r = self.e.b.build_int_add(base, lane, "")?;
                    self.element(pass, r, lane, &accs, &pass_accs)?;
                    self.close_loop(lane, lane_loop)?;
                    self.close_loop(c, chunk_loop)?;
                    let base = self.e.b.build_int_mul(full, l, "")?;
                    let tail = self.e.b.build_int_sub(len, base, "")?;
                    let (lane, tail_loop) = self.open_loop(zero, tail, "tail")?;
                    let r = self.e.b.build_int_add(base, lane, "")?;
                    self.element(pass, r, lane, &accs, &pass_accs)?;
                    self.close_loop(lane, tail_loop)?;
                } else {
                    let zero = self.e.const_i64(0);
                    let (r, el) = self.open_loop(zero, len, "elem")?;
                    self.element(pass, r, zero, &accs, &pass_accs)?;
                    self.close_loop(r, el)?;
                }
            }
            for &a in &pass_accs {
                let v = self.finish_acc(&accs[a])?;
                let mi = self
                    .members
                    .iter()
                    .position(|m| m.buffer == accs[a].buffer)
                    .expect("a member");
                // The row's variables for the store (the element loop changed nothing of them).
                if self.members[mi].stored {
                    self.bind_member_vars(mi)?;
                    let d = self.members[mi].dtype;
                    let v = self.e.convert(v, d)?;
                    self.store_member(mi, v)?;
                }
                self.row_vals.insert(accs[a].buffer, v);
            }
        }
        self.close_loop(row, row_loop)?;
        Ok(())
    }

    fn element(
        &mut self,
        pass: usize,
        r: IntValue<'c>,
        lane: IntValue<'c>,
        accs: &[Acc<'c>],
        pass_accs: &[usize],
    ) -> R<()> {
        let shape = self.shape.clone();
        self.decompose(r, &shape.elem_dims, &shape.elem_vars)?;
        self.elem_vals.clear();
        self.current_r = Some(r);
        for mi in 0..self.members.len() {
            let m = &self.members[mi];
            if m.pass != pass {
                continue;
            }
            match m.role {
                Role::RowValue => {}
                Role::Elementwise => {
                    let v = self.member_value(mi)?;
                    if self.members[mi].stored {
                        self.store_member(mi, v)?;
                    }
                    self.elem_vals.insert(self.members[mi].buffer, v);
                }
                Role::Reduction => {
                    let v = self.member_value(mi)?;
                    let a = pass_accs
                        .iter()
                        .map(|&a| &accs[a])
                        .find(|a| a.buffer == self.members[mi].buffer)
                        .expect("an accumulator");
                    self.accumulate(a, lane, v, r)?;
                }
            }
        }
        self.current_r = None;
        Ok(())
    }

    fn acc_type(&self, a: &Acc<'c>) -> inkwell::types::BasicTypeEnum<'c> {
        if a.dtype.is_float() {
            if a.dtype == DType::F64 {
                self.e.cx.f64_type().into()
            } else {
                self.e.cx.f32_type().into()
            }
        } else {
            self.e.cx.i64_type().into()
        }
    }

    fn identity(&self, a: &Acc<'c>) -> inkwell::values::BasicValueEnum<'c> {
        let t = self.acc_type(a);
        if a.dtype.is_float() {
            let v = match a.kind {
                ReductionKind::Sum | ReductionKind::Any => 0.0,
                ReductionKind::Prod => 1.0,
                ReductionKind::Max | ReductionKind::ArgMax => f64::NEG_INFINITY,
                ReductionKind::Min | ReductionKind::ArgMin => f64::INFINITY,
            };
            t.into_float_type().const_float(v).into()
        } else {
            let v = match a.kind {
                ReductionKind::Sum | ReductionKind::Any => 0,
                ReductionKind::Prod => 1,
                ReductionKind::Max | ReductionKind::ArgMax => i64::MIN,
                ReductionKind::Min | ReductionKind::ArgMin => i64::MAX,
            };
            self.e.const_i64(v).into()
        }
    }

    fn slot(
        &self,
        base: PointerValue<'c>,
        t: inkwell::types::BasicTypeEnum<'c>,
        i: IntValue<'c>,
    ) -> R<PointerValue<'c>> {
        unsafe { self.e.b.build_in_bounds_gep(t, base, &[i], "") }
    }

    fn init_acc(&mut self, a: &Acc<'c>) -> R<()> {
        let zero = self.e.const_i64(0);
        let l = self.e.const_i64(self.pass_lanes);
        let (i, lp) = self.open_loop(zero, l, "init")?;
        let t = self.acc_type(a);
        let p = self.slot(a.values, t, i)?;
        self.e.b.build_store(p, self.identity(a))?;
        if let Some(pos) = a.positions {
            let p = self.slot(pos, self.e.cx.i64_type().into(), i)?;
            self.e.b.build_store(p, self.e.const_i64(i64::MAX))?;
        }
        self.close_loop(i, lp)
    }

    /// `v` beats `b` in an arg-reduction (NaN beats every number; the first NaN stays).
    fn better(&mut self, kind: ReductionKind, v: Val<'c>, b: Val<'c>) -> R<IntValue<'c>> {
        let bld = self.e.b;
        let max = kind == ReductionKind::ArgMax;
        match (v, b) {
            (Val::F(v), Val::F(b)) => {
                let b_nan = bld.build_float_compare(FloatPredicate::UNO, b, b, "")?;
                let v_nan = bld.build_float_compare(FloatPredicate::UNO, v, v, "")?;
                let p = if max {
                    FloatPredicate::OGT
                } else {
                    FloatPredicate::OLT
                };
                let gt = bld.build_float_compare(p, v, b, "")?;
                let either = bld.build_or(v_nan, gt, "")?;
                let not_b = bld.build_not(b_nan, "")?;
                bld.build_and(not_b, either, "")
            }
            (Val::I(v), Val::I(b)) => {
                let p = if max {
                    IntPredicate::SGT
                } else {
                    IntPredicate::SLT
                };
                bld.build_int_compare(p, v, b, "")
            }
            _ => unreachable!("one accumulator type"),
        }
    }

    fn combine(&mut self, kind: ReductionKind, d: DType, a: Val<'c>, v: Val<'c>) -> R<Val<'c>> {
        let b = self.e.b;
        let r = match (a, v) {
            (Val::F(a), Val::F(v)) => {
                let t = a.get_type();
                Val::F(match kind {
                    ReductionKind::Sum => b.build_float_add(a, v, "")?,
                    ReductionKind::Prod => b.build_float_mul(a, v, "")?,
                    ReductionKind::Max | ReductionKind::Min => {
                        super::ops::float_max_min(b, a, v, kind == ReductionKind::Max)?
                    }
                    ReductionKind::Any => {
                        let z = t.const_float(0.0);
                        let x = b.build_float_compare(FloatPredicate::UNE, a, z, "")?;
                        let y = b.build_float_compare(FloatPredicate::UNE, v, z, "")?;
                        let o = b.build_or(x, y, "")?;
                        b.build_unsigned_int_to_float(o, t, "")?
                    }
                    ReductionKind::ArgMax | ReductionKind::ArgMin => unreachable!("positions"),
                })
            }
            (Val::I(a), Val::I(v)) => Val::I(match kind {
                ReductionKind::Sum => b.build_int_add(a, v, "")?,
                ReductionKind::Prod => b.build_int_mul(a, v, "")?,
                ReductionKind::Max | ReductionKind::Min => {
                    let p = if kind == ReductionKind::Max {
                        IntPredicate::SGT
                    } else {
                        IntPredicate::SLT
                    };
                    let c = b.build_int_compare(p, a, v, "")?;
                    b.build_select(c, a, v, "")?.into_int_value()
                }
                ReductionKind::Any => {
                    let o = b.build_or(a, v, "")?;
                    let c = b.build_int_compare(IntPredicate::NE, o, self.e.const_i64(0), "")?;
                    b.build_int_z_extend(c, self.e.cx.i64_type(), "")?
                }
                ReductionKind::ArgMax | ReductionKind::ArgMin => unreachable!("positions"),
            }),
            _ => unreachable!("one accumulator type"),
        };
        self.e.round(r, d)
    }

    fn load_acc(&mut self, a: &Acc<'c>, i: IntValue<'c>) -> R<(Val<'c>, Option<IntValue<'c>>)> {
        let t = self.acc_type(a);
        let p = self.slot(a.values, t, i)?;
        let v = self.e.b.build_load(t, p, "")?;
        let v = if a.dtype.is_float() {
            Val::F(v.into_float_value())
        } else {
            Val::I(v.into_int_value())
        };
        let pos = match a.positions {
            Some(pp) => {
                let p = self.slot(pp, self.e.cx.i64_type().into(), i)?;
                Some(
                    self.e
                        .b
                        .build_load(self.e.cx.i64_type(), p, "")?
                        .into_int_value(),
                )
            }
            None => None,
        };
        Ok((v, pos))
    }

    fn store_acc(
        &mut self,
        a: &Acc<'c>,
        i: IntValue<'c>,
        v: Val<'c>,
        pos: Option<IntValue<'c>>,
    ) -> R<()> {
        let t = self.acc_type(a);
        let p = self.slot(a.values, t, i)?;
        match v {
            Val::F(f) => self.e.b.build_store(p, f)?,
            Val::I(x) => self.e.b.build_store(p, x)?,
        };
        if let (Some(pp), Some(pos)) = (a.positions, pos) {
            let p = self.slot(pp, self.e.cx.i64_type().into(), i)?;
            self.e.b.build_store(p, pos)?;
        }
        Ok(())
    }

    fn select(&self, c: IntValue<'c>, x: Val<'c>, y: Val<'c>) -> R<Val<'c>> {
        let b = self.e.b;
        Ok(match (x, y) {
            (Val::F(x), Val::F(y)) => Val::F(b.build_select(c, x, y, "")?.into_float_value()),
            (Val::I(x), Val::I(y)) => Val::I(b.build_select(c, x, y, "")?.into_int_value()),
            _ => unreachable!("one type"),
        })
    }

    fn accumulate(
        &mut self,
        a: &Acc<'c>,
        lane: IntValue<'c>,
        v: Val<'c>,
        r: IntValue<'c>,
    ) -> R<()> {
        let v = self.e.convert(v, a.dtype)?;
        let (cur, pos) = self.load_acc(a, lane)?;
        match pos {
            None => {
                let n = self.combine(a.kind, a.dtype, cur, v)?;
                self.store_acc(a, lane, n, None)
            }
            Some(pos) => {
                let empty = self.e.b.build_int_compare(
                    IntPredicate::EQ,
                    pos,
                    self.e.const_i64(i64::MAX),
                    "",
                )?;
                let better = self.better(a.kind, v, cur)?;
                let take = self.e.b.build_or(empty, better, "")?;
                let nv = self.select(take, v, cur)?;
                let np = self.e.b.build_select(take, r, pos, "")?.into_int_value();
                self.store_acc(a, lane, nv, Some(np))
            }
        }
    }

    /// Combines the lanes pairwise (`2i`, `2i + 1`) until one is left; the row's value.
    fn finish_acc(&mut self, a: &Acc<'c>) -> R<Val<'c>> {
        let mut n = self.pass_lanes;
        while n > 1 {
            let w = (n + 1) / 2;
            let zero = self.e.const_i64(0);
            let pairs = self.e.const_i64(n / 2);
            let (i, lp) = self.open_loop(zero, pairs, "tree")?;
            let two = self.e.const_i64(2);
            let i0 = self.e.b.build_int_mul(i, two, "")?;
            let i1 = self.e.b.build_int_add(i0, self.e.const_i64(1), "")?;
            let (av, ap) = self.load_acc(a, i0)?;
            let (cv, cp) = self.load_acc(a, i1)?;
            match (ap, cp) {
                (Some(ap), Some(cp)) => {
                    let b = self.e.b;
                    let max = self.e.const_i64(i64::MAX);
                    let a_empty = b.build_int_compare(IntPredicate::EQ, ap, max, "")?;
                    let c_full = b.build_int_compare(IntPredicate::NE, cp, max, "")?;
                    let cb = self.better(a.kind, cv, av)?;
                    let ab = self.better(a.kind, av, cv)?;
                    let b = self.e.b;
                    let not_ab = b.build_not(ab, "")?;
                    let earlier = b.build_int_compare(IntPredicate::SLT, cp, ap, "")?;
                    let tie = b.build_and(not_ab, earlier, "")?;
                    let wins = b.build_or(cb, tie, "")?;
                    let wins = b.build_or(a_empty, wins, "")?;
                    let take = b.build_and(c_full, wins, "")?;
                    let v = self.select(take, cv, av)?;
                    let p = self.e.b.build_select(take, cp, ap, "")?.into_int_value();
                    self.store_acc(a, i, v, Some(p))?;
                }
                _ => {
                    let v = self.combine(a.kind, a.dtype, av, cv)?;
                    self.store_acc(a, i, v, None)?;
                }
            }
            self.close_loop(i, lp)?;
            if n % 2 == 1 {
                // The odd lane moves up unchanged.
                let from = self.e.const_i64(n - 1);
                let to = self.e.const_i64(w - 1);
                let (v, p) = self.load_acc(a, from)?;
                self.store_acc(a, to, v, p)?;
            }
            n = w;
        }
        let zero = self.e.const_i64(0);
        let (v, pos) = self.load_acc(a, zero)?;
        // An empty range leaves the identity (lowering asserts the extrema of user ops non-empty).
        Ok(match pos {
            Some(p) => Val::I(p),
            None => v,
        })
    }
}

pub struct LoopEnd<'c> {
    phi: inkwell::values::PhiValue<'c>,
    head: BasicBlock<'c>,
    exit: BasicBlock<'c>,
}
