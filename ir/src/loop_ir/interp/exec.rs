//! Running a program: buffer by buffer (`Program::run`), or as a schedule prescribes
//! (`Program::run_plan`): kernels whose buffers are computed row by row together, and buffers
//! placed in shared memory slots. A buffer's storage is poisoned (NaN, -1) when it is allocated, so
//! an element read before it is written, or a slot reused while its buffer is still read, shows in
//! the outputs.

use super::{store, RunError, V};
use crate::graph::DType;
use crate::loop_ir::{Buffer, BufferId, BufferKind, Program};
use crate::sym::{Bindings, Expr};
use crate::tensor::{Data, HostTensor};

/// How to run a program: the order of its steps and where its buffers live.
#[derive(Clone, Debug)]
pub struct ExecPlan {
    pub steps: Vec<ExecStep>,
    /// The memory slot of each buffer (`None`: storage of its own). A view always shares its
    /// base's storage.
    pub slot_of: Vec<Option<usize>>,
}

#[derive(Clone, Debug)]
pub enum ExecStep {
    /// Computed buffers run together: for each of `rows` rows, each member in order computes its
    /// elements of that row — its element count divided by `rows`, consecutive in its loop order.
    /// `lanes` > 1: reductions follow the schedule's reduction order (see `Program::run_plan`).
    Fused {
        members: Vec<BufferId>,
        rows: Expr,
        lanes: i64,
    },
    /// A buffer computed whole (inputs, views, library kernels, a computed buffer alone).
    Single(BufferId),
}

impl ExecPlan {
    /// Every buffer alone, in program order, each in storage of its own.
    pub fn unscheduled(p: &Program) -> ExecPlan {
        ExecPlan {
            steps: (0..p.buffers.len())
                .map(|i| ExecStep::Single(BufferId(i as u32)))
                .collect(),
            slot_of: vec![None; p.buffers.len()],
        }
    }
}

/// Buffer contents: one vector per buffer of its own and per shared slot; or, when sampling rows
/// (`Program::run_rows`), the elements computed so far and the caller's answer for the rest.
pub(in crate::loop_ir) struct Storage<'a> {
    data: Vec<Vec<V>>,
    home: Vec<usize>,
    sampled: Option<Sampled<'a>>,
}

/// A load that computed elements do not answer: the value in `buffer`'s storage (a storage root)
/// at `index`, or why there is none.
pub type ReadFn<'a> = &'a dyn Fn(BufferId, i64) -> Result<Scalar, String>;

struct Sampled<'a> {
    cells: rustc_hash::FxHashMap<(usize, i64), V>,
    read: ReadFn<'a>,
}

/// An element's value as the interpreter holds it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Scalar {
    Float(f64),
    Int(i64),
}

impl From<V> for Scalar {
    fn from(v: V) -> Scalar {
        match v {
            V::F(x) => Scalar::Float(x),
            V::I(x) => Scalar::Int(x),
        }
    }
}

impl From<Scalar> for V {
    fn from(v: Scalar) -> V {
        match v {
            Scalar::Float(x) => V::F(x),
            Scalar::Int(x) => V::I(x),
        }
    }
}

impl<'a> Storage<'a> {
    fn new(p: &Program, plan: &ExecPlan) -> Storage<'a> {
        let n = p.buffers.len();
        let mut home = Vec::with_capacity(n);
        for (i, b) in p.buffers.iter().enumerate() {
            home.push(match (&b.kind, plan.slot_of.get(i).copied().flatten()) {
                (BufferKind::View { base }, _) => home[base.index()],
                (_, Some(slot)) => n + slot,
                (_, None) => i,
            });
        }
        let slots = home.iter().copied().max().map_or(0, |m| m + 1);
        Storage {
            data: vec![Vec::new(); slots.max(n)],
            home,
            sampled: None,
        }
    }

    /// The whole storage of `id` (not while sampling rows: library steps only).
    pub(super) fn get(&self, id: BufferId) -> &Vec<V> {
        &self.data[self.home[id.index()]]
    }

    /// Element `at` of `id`'s storage.
    pub(super) fn load(&self, p: &Program, id: BufferId, at: i64) -> Result<V, String> {
        let home = self.home[id.index()];
        if let Some(s) = &self.sampled {
            if let Some(v) = s.cells.get(&(home, at)) {
                return Ok(*v);
            }
            return (s.read)(BufferId(home as u32), at).map(V::from);
        }
        let data = &self.data[home];
        data.get(at as usize)
            .filter(|_| at >= 0)
            .copied()
            .ok_or_else(|| {
                format!(
                    "load from {} at index {at} is out of bounds (size {})",
                    p.buffers[id.index()].name,
                    data.len()
                )
            })
    }

    /// Stores element `at` of `id`'s storage.
    fn store(&mut self, id: BufferId, at: i64, v: V) -> Result<(), String> {
        let home = self.home[id.index()];
        if let Some(s) = &mut self.sampled {
            s.cells.insert((home, at), v);
            return Ok(());
        }
        let slot = self.data[home]
            .get_mut(at as usize)
            .filter(|_| at >= 0)
            .ok_or_else(|| format!("store out of bounds at {at}"))?;
        *slot = v;
        Ok(())
    }

    fn put(&mut self, id: BufferId, v: Vec<V>) {
        self.data[self.home[id.index()]] = v;
    }

    /// Fresh storage for `id`, every element poisoned.
    fn alloc(&mut self, id: BufferId, numel: usize, dtype: DType) {
        if self.sampled.is_some() {
            return;
        }
        let poison = if dtype.is_float() {
            V::F(f64::NAN)
        } else {
            V::I(-1)
        };
        self.put(id, vec![poison; numel]);
    }
}

impl Program {
    /// Runs the program. `bindings` gives every graph symbol's value.
    pub fn run(
        &self,
        inputs: &[HostTensor],
        bindings: &Bindings,
    ) -> Result<Vec<HostTensor>, RunError> {
        self.run_plan(inputs, bindings, &ExecPlan::unscheduled(self))
    }

    /// Runs the program as `plan` orders it (see [`ExecPlan`]).
    pub fn run_plan(
        &self,
        inputs: &[HostTensor],
        bindings: &Bindings,
        plan: &ExecPlan,
    ) -> Result<Vec<HostTensor>, RunError> {
        self.env
            .check_bindings(bindings)
            .map_err(|e| RunError::Assert(e.to_string()))?;
        let mut st = Storage::new(self, plan);
        let mut b = bindings.clone();
        for step in &plan.steps {
            match step {
                ExecStep::Single(id) => self.exec_whole(*id, inputs, &mut st, &mut b)?,
                ExecStep::Fused {
                    members,
                    rows,
                    lanes,
                } => self.exec_fused(members, *rows, *lanes, &mut st, &mut b)?,
            }
        }
        let mut outs = Vec::new();
        for &o in &self.outputs {
            let buf = &self.buffers[o.index()];
            let fail = fail_for(buf);
            let shape: Vec<usize> = buf
                .layout
                .sizes
                .iter()
                .map(|&s| self.env.evaluate(s, &b).map(|v| v as usize))
                .collect::<Result<_, _>>()
                .map_err(|e| fail(e.to_string()))?;
            let numel: usize = shape.iter().product();
            // Read through the layout: an output may be a view.
            let mut vals = Vec::with_capacity(numel);
            let sizes: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
            let mut idx = vec![0i64; sizes.len()];
            for _ in 0..numel {
                let at = buf.layout.index_value(&self.env, &idx, &b).map_err(&fail)?;
                vals.push(
                    *st.get(o)
                        .get(at as usize)
                        .filter(|_| at >= 0)
                        .ok_or_else(|| fail(format!("output read out of bounds at {at}")))?,
                );
                super::library::next_index(&mut idx, &sizes);
            }
            let data = if buf.dtype.is_float() {
                Data::Float(vals.iter().map(|v| v.f()).collect())
            } else {
                Data::Int(vals.iter().map(|v| v.i()).collect())
            };
            outs.push(HostTensor {
                dtype: buf.dtype,
                shape,
                data,
            });
        }
        Ok(outs)
    }

    /// An input's elements (row-major, as a host tensor holds them) in the storage of its
    /// declared layout: a transposed or channels-last input is stored permuted.
    fn place(&self, buf: &Buffer, logical: Vec<V>, b: &Bindings) -> Result<Vec<V>, String> {
        let l = buf
            .layout
            .evaluate(&self.env, b)
            .map_err(|e| e.to_string())?;
        let mut row_major = true;
        let mut step = 1i64;
        for (&n, &s) in l.sizes.iter().zip(&l.strides).rev() {
            row_major &= n <= 1 || s == step;
            step = step.saturating_mul(n);
        }
        if row_major && l.offset == 0 {
            return Ok(logical);
        }
        let Some(fill) = logical.first().copied() else {
            return Ok(logical);
        };
        let mut storage = vec![fill; l.extent()?];
        let mut idx = vec![0i64; l.sizes.len()];
        for v in logical {
            let at = l.offset + idx.iter().zip(&l.strides).map(|(i, s)| i * s).sum::<i64>();
            storage[at as usize] = v;
            super::library::next_index(&mut idx, &l.sizes);
        }
        Ok(storage)
    }

    /// The elements of `buf` at `b`, checked as an allocation of the interpreter's 16-byte values
    /// (`crate::memory`).
    fn numel_of(&self, buf: &Buffer, b: &Bindings) -> Result<i64, RunError> {
        let fail = fail_for(buf);
        let n = self.numel_unchecked(buf, b)?;
        crate::memory::checked_bytes(n.max(0) as u128, 16, crate::memory::Place::Host, &|| {
            "its storage".to_string()
        })
        .map_err(fail)?;
        Ok(n)
    }

    /// The elements of `buf` at `b` (no allocation follows: sampled rows).
    fn numel_unchecked(&self, buf: &Buffer, b: &Bindings) -> Result<i64, RunError> {
        let fail = fail_for(buf);
        buf.layout.sizes.iter().try_fold(1i64, |acc, &s| {
            let s = self.env.evaluate(s, b).map_err(|e| fail(e.to_string()))?;
            acc.checked_mul(s)
                .ok_or_else(|| fail("size overflows".into()))
        })
    }

    fn exec_fused(
        &self,
        members: &[BufferId],
        rows: Expr,
        lanes: i64,
        st: &mut Storage,
        b: &mut Bindings,
    ) -> Result<(), RunError> {
        let first = &self.buffers[members[0].index()];
        let rows = self
            .env
            .evaluate(rows, b)
            .map_err(|e| fail_for(first)(e.to_string()))?;
        let mut per_row = Vec::with_capacity(members.len());
        let mut ranges = Vec::with_capacity(members.len());
        for &m in members {
            let buf = &self.buffers[m.index()];
            let numel = self.numel_of(buf, b)?;
            if rows > 0 && numel % rows != 0 || rows == 0 && numel != 0 {
                return Err(fail_for(buf)(format!(
                    "{numel} elements do not split into {rows} rows"
                )));
            }
            per_row.push(if rows == 0 { 0 } else { numel / rows });
            st.alloc(m, numel.max(0) as usize, buf.dtype);
            ranges.push(self.loop_ranges(buf, b)?);
        }
        for o in 0..rows.max(0) {
            for (k, &m) in members.iter().enumerate() {
                for f in o * per_row[k]..(o + 1) * per_row[k] {
                    self.compute_element(m, &ranges[k], f, lanes, st, b)?;
                }
            }
        }
        Ok(())
    }

    /// Computes the members of a fused step (as [`ExecStep::Fused`] describes it) at rows
    /// `sample` only, each load of anything they did not compute answered by `read`: a sampled
    /// check of a kernel's rows, however large the whole step. Returns each member's elements
    /// computed, as (storage index, value), in the order computed.
    #[allow(clippy::type_complexity)]
    pub fn run_rows(
        &self,
        members: &[BufferId],
        rows: Expr,
        lanes: i64,
        sample: &[i64],
        bindings: &Bindings,
        read: ReadFn<'_>,
    ) -> Result<Vec<Vec<(i64, Scalar)>>, RunError> {
        let mut st = Storage::new(self, &ExecPlan::unscheduled(self));
        st.sampled = Some(Sampled {
            cells: rustc_hash::FxHashMap::default(),
            read,
        });
        let mut b = bindings.clone();
        let first = &self.buffers[members[0].index()];
        let rows = self
            .env
            .evaluate(rows, &b)
            .map_err(|e| fail_for(first)(e.to_string()))?;
        let mut per_row = Vec::with_capacity(members.len());
        let mut ranges = Vec::with_capacity(members.len());
        for &m in members {
            let buf = &self.buffers[m.index()];
            let numel = self.numel_unchecked(buf, &b)?;
            if rows > 0 && numel % rows != 0 || rows == 0 && numel != 0 {
                return Err(fail_for(buf)(format!(
                    "{numel} elements do not split into {rows} rows"
                )));
            }
            per_row.push(if rows == 0 { 0 } else { numel / rows });
            ranges.push(self.loop_ranges(buf, &b)?);
        }
        let mut out: Vec<Vec<(i64, Scalar)>> = vec![Vec::new(); members.len()];
        for &o in sample.iter().filter(|&&o| (0..rows).contains(&o)) {
            for (k, &m) in members.iter().enumerate() {
                let buf = &self.buffers[m.index()];
                for f in o * per_row[k]..(o + 1) * per_row[k] {
                    self.compute_element(m, &ranges[k], f, lanes, &mut st, &mut b)?;
                    let idx = element_index(&ranges[k], f);
                    let at = buf
                        .layout
                        .index_value(&self.env, &idx, &b)
                        .map_err(fail_for(buf))?;
                    let v = st.load(self, m, at).map_err(fail_for(buf))?;
                    out[k].push((at, v.into()));
                }
            }
        }
        Ok(out)
    }

    /// The evaluated output ranges of a computed buffer.
    fn loop_ranges(&self, buf: &Buffer, b: &Bindings) -> Result<Vec<i64>, RunError> {
        let BufferKind::Computed { loops, .. } = &buf.kind else {
            return Err(fail_for(buf)("only computed buffers run row by row".into()));
        };
        loops
            .ranges
            .iter()
            .map(|&r| {
                self.env
                    .evaluate(r, b)
                    .map_err(|e| fail_for(buf)(e.to_string()))
            })
            .collect()
    }

    /// Computes element `f` (row-major over the loop ranges) of a computed buffer.
    fn compute_element(
        &self,
        id: BufferId,
        ranges: &[i64],
        f: i64,
        lanes: i64,
        st: &mut Storage,
        b: &mut Bindings,
    ) -> Result<(), RunError> {
        let buf = &self.buffers[id.index()];
        let fail = fail_for(buf);
        let BufferKind::Computed { loops, body } = &buf.kind else {
            unreachable!("checked by loop_ranges")
        };
        let idx = element_index(ranges, f);
        for (var, &v) in loops.vars.iter().zip(&idx) {
            b.set(
                self.env
                    .pool()
                    .as_symbol(*var)
                    .expect("loop vars are symbols"),
                v,
            );
        }
        let value = match &loops.reduction {
            None => self.eval_body(body, b, st).map_err(&fail)?,
            Some((kind, rranges, rvars)) => {
                let rr: Vec<i64> = rranges
                    .iter()
                    .map(|&r| self.env.evaluate(r, b).map_err(|e| fail(e.to_string())))
                    .collect::<Result<_, _>>()?;
                self.reduce(*kind, body, rvars, &rr, b, st, lanes)
                    .map_err(&fail)?
            }
        };
        let at = buf.layout.index_value(&self.env, &idx, b).map_err(&fail)?;
        st.store(id, at, store(buf.dtype, value)).map_err(fail)
    }

    fn exec_whole(
        &self,
        id: BufferId,
        inputs: &[HostTensor],
        st: &mut Storage,
        b: &mut Bindings,
    ) -> Result<(), RunError> {
        let buf = &self.buffers[id.index()];
        let fail = fail_for(buf);
        let out = match &buf.kind {
            BufferKind::Input(n) => {
                let numel = self.numel_of(buf, b)?;
                let t = inputs.get(*n).ok_or(RunError::Input {
                    index: *n,
                    message: "missing".into(),
                })?;
                if t.numel() as i64 != numel {
                    return Err(RunError::Input {
                        index: *n,
                        message: format!("{} elements, expected {numel}", t.numel()),
                    });
                }
                let logical: Vec<V> = match &t.data {
                    Data::Float(v) => v.iter().map(|&x| V::F(x)).collect(),
                    Data::Int(v) => v.iter().map(|&x| V::I(x)).collect(),
                };
                self.place(buf, logical, b).map_err(fail)?
            }
            BufferKind::View { .. } => return Ok(()),
            BufferKind::Select { input, mask, count } => {
                self.select(st, b, *input, *mask, *count).map_err(fail)?
            }
            BufferKind::Sort {
                input,
                dim,
                descending,
                take,
                indices,
            } => self
                .sort(st, b, *input, *dim, *descending, *take, *indices)
                .map_err(fail)?,
            BufferKind::Scan { input, dim, kind } => {
                self.scan(buf, st, b, (*input, *dim, *kind)).map_err(fail)?
            }
            BufferKind::Scatter { .. } => self.scatter(buf, st, b).map_err(fail)?,
            BufferKind::Item { input, symbol } => {
                let v = st
                    .get(*input)
                    .first()
                    .copied()
                    .ok_or_else(|| fail("item() of an empty tensor".into()))?
                    .i();
                self.bind_produced(b, *symbol, v).map_err(fail)?;
                Vec::new()
            }
            BufferKind::Extern {
                kernel,
                inputs: args,
            } => {
                // Values in row-major order of the shape, stored through the layout (an
                // attention's output may be laid out as its consumer reads it).
                let logical = self
                    .extern_kernel(buf, *kernel, args, st, b)
                    .map_err(&fail)?;
                self.place(buf, logical, b).map_err(fail)?
            }
            BufferKind::Computed { .. } => {
                let numel = self.numel_of(buf, b)?;
                st.alloc(id, numel.max(0) as usize, buf.dtype);
                let ranges = self.loop_ranges(buf, b)?;
                for f in 0..numel.max(0) {
                    self.compute_element(id, &ranges, f, 0, st, b)?;
                }
                return Ok(());
            }
        };
        st.put(id, out);
        Ok(())
    }
}

/// The index of element `f` (row-major) over loop ranges `ranges`.
fn element_index(ranges: &[i64], f: i64) -> Vec<i64> {
    let mut idx = vec![0i64; ranges.len()];
    let mut rest = f;
    for k in (0..ranges.len()).rev() {
        let n = ranges[k].max(1);
        idx[k] = rest % n;
        rest /= n;
    }
    idx
}

/// An error of buffer `buf`, naming it and its graph nodes.
fn fail_for(buf: &Buffer) -> impl Fn(String) -> RunError + '_ {
    move |message| RunError::Buffer {
        buffer: buf.name.clone(),
        origins: buf.origins.join(", "),
        message,
    }
}

impl Program {
    /// The buffers a library step (anything but a computed buffer) reads, views resolved to the
    /// buffers that hold their storage.
    pub fn library_reads(&self, id: BufferId) -> Vec<BufferId> {
        let mut out = self.library_inputs(id);
        for b in &mut out {
            *b = self.storage_root(*b);
        }
        out.sort_by_key(|b| b.0);
        out.dedup();
        out
    }

    /// The buffers a library step names as its operands (views as themselves), in its order.
    pub fn library_inputs(&self, id: BufferId) -> Vec<BufferId> {
        let mut out = Vec::new();
        match &self.buffers[id.index()].kind {
            BufferKind::Input(_) | BufferKind::Computed { .. } => {}
            BufferKind::View { base } => out.push(*base),
            BufferKind::Select { input, mask, .. } => out.extend([*input].into_iter().chain(*mask)),
            BufferKind::Sort { input, .. }
            | BufferKind::Scan { input, .. }
            | BufferKind::Item { input, .. } => out.push(*input),
            BufferKind::Extern { inputs, .. } => out.extend(inputs.iter().copied()),
            BufferKind::Scatter { base, body, .. } => {
                out.push(*base);
                for (op, _) in &body.ops {
                    if let crate::loop_ir::Op::Load { buffer, .. } = op {
                        out.push(*buffer);
                    }
                }
            }
        }
        out
    }

    /// The buffer of graph input `k` (none when the lowering dropped it).
    pub fn input_buffer(&self, k: usize) -> Option<BufferId> {
        self.buffers
            .iter()
            .position(|b| matches!(b.kind, BufferKind::Input(i) if i == k))
            .map(|i| BufferId(i as u32))
    }

    /// The buffer whose storage `id` uses (itself unless it is a view).
    pub fn storage_root(&self, mut id: BufferId) -> BufferId {
        while let BufferKind::View { base } = self.buffers[id.index()].kind {
            id = base;
        }
        id
    }

    /// A `write` scatter's updates, without its base: `values` holds the storage of every buffer
    /// its body loads (by storage root, as [`Program::library_reads`] names them). Returns each
    /// target (a row-major index into the base's shape) and its value rounded to the scatter's
    /// dtype, in order (a later update of the same target wins). A backend that copies the base
    /// itself — or computes the result in the base's storage — runs only these.
    pub fn scatter_updates(
        &self,
        id: BufferId,
        values: &[(BufferId, Data)],
        b: &mut Bindings,
    ) -> Result<(Vec<i64>, Data), RunError> {
        let buf = &self.buffers[id.index()];
        if !matches!(buf.kind, BufferKind::Scatter { .. }) {
            return Err(fail_for(buf)("not a scatter".into()));
        }
        let mut st = Storage::new(self, &ExecPlan::unscheduled(self));
        for (r, d) in values {
            let v = match d {
                Data::Float(v) => v.iter().map(|&x| V::F(x)).collect(),
                Data::Int(v) => v.iter().map(|&x| V::I(x)).collect(),
            };
            st.put(*r, v);
        }
        let updates = self
            .updates_of_scatter(buf, &st, b)
            .map_err(fail_for(buf))?;
        let targets = updates.iter().map(|u| u.0).collect();
        let values = updates.into_iter().map(|u| super::store(buf.dtype, u.1));
        Ok((
            targets,
            if buf.dtype.is_float() {
                Data::Float(values.map(V::f).collect())
            } else {
                Data::Int(values.map(V::i).collect())
            },
        ))
    }

    /// Runs one library step on host values, for a backend that runs its kernels itself:
    /// `values` holds the storage of every buffer of [`Program::library_reads`]. Returns the
    /// step's storage (empty for `.item()`); symbols it produces are bound in `b`.
    pub fn run_library_step(
        &self,
        id: BufferId,
        values: &[(BufferId, Data)],
        b: &mut Bindings,
    ) -> Result<Data, RunError> {
        let buf = &self.buffers[id.index()];
        if matches!(buf.kind, BufferKind::Input(_) | BufferKind::Computed { .. }) {
            return Err(fail_for(buf)("not a library step".into()));
        }
        let mut st = Storage::new(self, &ExecPlan::unscheduled(self));
        for (r, d) in values {
            let v = match d {
                Data::Float(v) => v.iter().map(|&x| V::F(x)).collect(),
                Data::Int(v) => v.iter().map(|&x| V::I(x)).collect(),
            };
            st.put(*r, v);
        }
        self.exec_whole(id, &[], &mut st, b)?;
        let out = st.get(id);
        Ok(if buf.dtype.is_float() {
            Data::Float(out.iter().map(|v| v.f()).collect())
        } else {
            Data::Int(out.iter().map(|v| v.i()).collect())
        })
    }
}
