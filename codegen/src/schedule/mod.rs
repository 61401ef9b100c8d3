//! The scheduler: loop-IR program → kernels (fusion groups), their configurations and variants,
//! and a memory plan. Every size-dependent decision is proved from ranges, taken from optimization
//! hints (the kernel stays correct for every value), or left to a launch-time dispatch between
//! variants — never a guard — so a backed and an unbacked build with the same hints and ranges
//! get the same schedule.

pub(crate) mod config;
mod deps;
mod dot;
mod fusion;
mod manifest;
mod memory;
mod order;
mod print;

pub use config::{member_map, IndexType, KernelConfig, Strategy, Variant};
pub use manifest::Manifest;
pub use memory::{Allocation, MemoryPlan};

use guardless_ir::loop_ir::interp::{ExecPlan, ExecStep};
use guardless_ir::loop_ir::{BufferId, BufferKind, Program};
use guardless_ir::sym::Expr;

/// What a member contributes to its kernel's rows.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Role {
    /// One value per row, reduced over the row.
    Reduction,
    /// One value per row, computed pointwise (from other row values).
    RowValue,
    /// One value per element of the row (pointwise kernels: every member).
    Elementwise,
}

#[derive(Clone, Debug)]
pub struct Member {
    pub buffer: BufferId,
    pub role: Role,
    /// Reductions finish at the end of a pass over the row; what reads them runs in a later one.
    pub pass: usize,
    /// Written to memory (a graph output, read by another kernel, or read in a later pass);
    /// otherwise it lives in registers.
    pub stored: Option<&'static str>,
}

/// Where a member of a kernel finds a buffer it reads.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Residence {
    /// A row value of the kernel (a reduction or a row-level member), in a register.
    RowValue,
    /// An elementwise member of the same pass: this element's value, in a register.
    Element,
    /// Anything else: from memory (another kernel's buffer, or a member stored in an earlier
    /// pass).
    Memory,
}

/// A fused kernel: members computed together, row by row.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub name: String,
    pub members: Vec<Member>,
    /// The row dimensions and the dimensions within a row (empty for a pointwise kernel).
    pub outer: Vec<Expr>,
    pub inner: Vec<Expr>,
    pub rows: Expr,
    pub row_len: Expr,
    /// The graph nodes fused, in order.
    pub origins: Vec<String>,
    pub variants: Vec<Variant>,
    /// Why each configuration choice was made (range proofs, hints).
    pub reasons: Vec<String>,
    /// The kernel's loop variables: one per outer, then per inner dimension.
    pub vars: Vec<Expr>,
    /// Buffers the kernel accesses element by element even in its vector variants (a gather, a
    /// transposed read), while its other accesses move as vectors.
    pub scalar_buffers: Vec<BufferId>,
}

impl Kernel {
    /// What the kernel iterates over: `pointwise over 256*n elements`, `reduction: n rows × 256`.
    pub fn space(&self, env: &guardless_ir::sym::ShapeEnv) -> String {
        if self.inner.is_empty() {
            format!("pointwise over {} elements", env.text(self.rows))
        } else {
            format!(
                "reduction: {} rows × {}",
                env.text(self.rows),
                env.text(self.row_len)
            )
        }
    }

    /// Where a member computed in pass `pass` reads `buffer`.
    pub fn residence(&self, buffer: BufferId, pass: usize) -> Residence {
        match self.members.iter().find(|m| m.buffer == buffer) {
            Some(m) if m.role != Role::Elementwise => Residence::RowValue,
            Some(m) if m.pass == pass => Residence::Element,
            _ => Residence::Memory,
        }
    }
}

/// One step of the compiled program, in execution order.
#[derive(Clone, Debug)]
pub enum Step {
    /// A graph input (no work).
    Input(BufferId),
    /// A view of another buffer (no work).
    View(BufferId),
    /// A generated kernel.
    Kernel(usize),
    /// A library call: extern matmul, sort, scan, nonzero, scatter, `.item()`.
    Library(BufferId),
}

#[derive(Clone, Debug)]
pub struct Schedule {
    pub kernels: Vec<Kernel>,
    pub steps: Vec<Step>,
    pub memory: MemoryPlan,
    /// Library steps whose device functions are built with the registers of one block per
    /// multiprocessor (`__launch_bounds__(threads, 1)`): the spill fallback of `build::build`.
    pub relaxed_library: Vec<BufferId>,
}

/// Schedules a lowered program. The program's environment answers every size question; nothing
/// is guarded.
pub fn schedule(program: &mut Program) -> Schedule {
    let deps = deps::Deps::new(program);
    let groups = fusion::fuse(program, &deps);
    let steps = order::order(program, &deps, &groups);
    let mut kernels = Vec::new();
    let mut ordered_steps = Vec::new();
    let mut loop_symbols = config::LoopSymbols::default();
    for s in steps {
        match s {
            fusion::Planned::Group(g) => {
                let kernel = fusion::kernel_of(program, &deps, &groups[g], kernels.len());
                let kernel = config::configure(program, kernel, &mut loop_symbols);
                ordered_steps.push(Step::Kernel(kernels.len()));
                kernels.push(kernel);
            }
            fusion::Planned::Buffer(b) => {
                ordered_steps.push(match program.buffers[b.index()].kind {
                    BufferKind::Input(_) => Step::Input(b),
                    BufferKind::View { .. } => Step::View(b),
                    _ => Step::Library(b),
                })
            }
        }
    }
    let memory = memory::plan(program, &deps, &kernels, &ordered_steps);
    Schedule {
        kernels,
        steps: ordered_steps,
        memory,
        relaxed_library: Vec::new(),
    }
}

impl Schedule {
    /// How the loop-IR interpreter runs this schedule: kernels' members row by row, buffers in
    /// their planned slots.
    pub fn exec_plan(&self, program: &Program) -> ExecPlan {
        let steps = self
            .steps
            .iter()
            .map(|s| match s {
                Step::Input(b) | Step::View(b) | Step::Library(b) => ExecStep::Single(*b),
                Step::Kernel(k) => {
                    let k = &self.kernels[*k];
                    ExecStep::Fused {
                        members: k.members.iter().map(|m| m.buffer).collect(),
                        rows: k.rows,
                        lanes: k.variants.first().map_or(0, |v| v.config.lanes),
                    }
                }
            })
            .collect();
        let mut slot_of = vec![None; program.buffers.len()];
        for a in &self.memory.allocations {
            if let Some(slot) = a.slot {
                slot_of[a.buffer.index()] = Some(slot);
            }
        }
        ExecPlan { steps, slot_of }
    }
}
