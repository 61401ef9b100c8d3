//! The schedule as text: every kernel with the nodes it fuses, its iteration space, members,
//! variants with their dispatch predicates and the reason for each choice; then the library calls,
//! the memory plan and the guards. Golden tests compare it.

use std::fmt::Write;

use guardless_ir::loop_ir::{BufferKind, Program, ScatterCombine};

use super::config::Strategy;
use super::{Role, Schedule, Step};

impl Schedule {
    pub fn to_text(&self, p: &Program) -> String {
        let env = &p.env;
        let name = |b: guardless_ir::loop_ir::BufferId| p.buffers[b.index()].name.as_str();
        let mut out = String::new();
        let kernels = self.kernels.len();
        let library = self
            .steps
            .iter()
            .filter(|s| matches!(s, Step::Library(_)))
            .count();
        let _ = writeln!(out, "schedule: {kernels} kernels, {library} library calls");
        for (i, step) in self.steps.iter().enumerate() {
            match step {
                Step::Input(_) => {}
                Step::View(b) => {
                    let _ = writeln!(out, "step {i}: view {}", name(*b));
                }
                Step::Library(b) => {
                    let buf = &p.buffers[b.index()];
                    let what = match &buf.kind {
                        BufferKind::Extern { kernel, inputs } => {
                            let args: Vec<&str> = inputs.iter().map(|&x| name(x)).collect();
                            format!("extern {}({})", kernel.describe(), args.join(", "))
                        }
                        BufferKind::Sort { .. } => "sort".into(),
                        BufferKind::Scan { kind, .. } => kind.name().into(),
                        BufferKind::Select { mask: None, .. } => "nonzero".into(),
                        BufferKind::Select { .. } => "masked_select".into(),
                        BufferKind::Scatter { combine, .. } => match combine {
                            ScatterCombine::Write => "scatter",
                            ScatterCombine::Add => "scatter_add",
                            ScatterCombine::Mul => "scatter_mul",
                            ScatterCombine::Max => "scatter_max",
                            ScatterCombine::Min => "scatter_min",
                        }
                        .into(),
                        BufferKind::Item { symbol, .. } => {
                            format!("item → {}", env.symbol_name(*symbol))
                        }
                        _ => "library".into(),
                    };
                    let _ = writeln!(
                        out,
                        "step {i}: {what} → {}  # {}",
                        buf.name,
                        buf.origins.join(", ")
                    );
                }
                Step::Kernel(k) => {
                    let k = &self.kernels[*k];
                    let _ = writeln!(out, "step {i}: kernel {}: {}", k.name, k.space(env));
                    let _ = writeln!(out, "  nodes: {}", k.origins.join(", "));
                    for m in &k.members {
                        let buf = &p.buffers[m.buffer.index()];
                        let role = match m.role {
                            Role::Reduction => match &buf.kind {
                                BufferKind::Computed { loops, .. } => {
                                    loops.reduction.as_ref().map_or("reduction", |r| r.0.name())
                                }
                                _ => "reduction",
                            },
                            Role::RowValue => "row value",
                            Role::Elementwise => "elementwise",
                        };
                        let stored = m
                            .stored
                            .map_or("registers".to_string(), |w| format!("stored: {w}"));
                        let shape: Vec<String> =
                            buf.layout.sizes.iter().map(|&s| env.text(s)).collect();
                        let _ = writeln!(
                            out,
                            "  {} {}[{}]: {role}, pass {}, {stored}",
                            buf.name,
                            buf.dtype,
                            shape.join(", "),
                            m.pass
                        );
                    }
                    for r in &k.reasons {
                        let _ = writeln!(out, "  why {r}");
                    }
                    let _ = writeln!(out, "  variants: {}", k.variants.len());
                    for (j, v) in k.variants.iter().enumerate() {
                        let c = &v.config;
                        let shape = if k.inner.is_empty() {
                            format!("{} threads × {} elements", c.threads, c.elements_per_thread)
                        } else if c.strategy == Strategy::Persistent {
                            format!(
                                "{} threads ({} per row), {} lanes, row cache {} registers",
                                c.threads, c.threads_per_row, c.lanes, c.row_cache
                            )
                        } else {
                            format!(
                                "{} threads ({} per row), {} lanes",
                                c.threads, c.threads_per_row, c.lanes
                            )
                        };
                        let relaxed = if c.registers_relaxed {
                            ", registers of one block per SM"
                        } else {
                            ""
                        };
                        let _ = writeln!(
                            out,
                            "    v{j} (tuned for {}): {}, {shape}{relaxed}, vector {}, {}, grid {}; when {}{}",
                            v.tuned_for,
                            c.strategy,
                            c.vector,
                            c.index,
                            env.text(v.grid),
                            env.text(v.predicate),
                            v.aligned_text(p)
                        );
                    }
                }
            }
        }
        let m = &self.memory;
        let _ = writeln!(out, "memory:");
        for (s, bytes) in m.slots.iter().enumerate() {
            let users: Vec<String> = m
                .allocations
                .iter()
                .filter(|a| a.slot == Some(s))
                .map(|a| format!("{} (steps {}–{})", name(a.buffer), a.first, a.last))
                .collect();
            let _ = writeln!(
                out,
                "  slot {s}: {} bytes: {}",
                env.text(*bytes),
                users.join(", ")
            );
        }
        for a in m.allocations.iter().filter(|a| a.slot.is_none()) {
            let _ = writeln!(
                out,
                "  output {}: {} bytes (step {})",
                name(a.buffer),
                env.text(a.bytes),
                a.first
            );
        }
        let _ = writeln!(
            out,
            "  peak: {} bytes ({} at the hints)",
            env.text(m.peak),
            m.peak_at_hints
        );
        // Runtime asserts are the program's (the manifest lists them): where a backed build guards,
        // an unbacked one asserts the same condition, and the schedules must not differ for it.
        for g in env.guards() {
            let _ = writeln!(out, "guard {}", env.text(g.cond));
        }
        out
    }
}
